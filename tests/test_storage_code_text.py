"""Storage code is decided without parsing a base class whose text defines no storage method
(`ProjectFacts.may_hold`): a model's base classes are rarely quant methods, and parsing each
for its signatures was a tenth of a cold check of vLLM. A base that does define one still makes
its subclasses storage code."""

from __future__ import annotations

from pathlib import Path

from tiny_project import json_findings, record_class_parses, write_tree

LAYER = "from vllm.model_executor.layers.linear import ColumnParallelLinear\n"

FILES = {
    "pyproject.toml": '[tool.dtype-lint]\nhelper = "proj.dtypes:get_layer_input_dtype"\n',
    "proj/__init__.py": "",
    # A base class with methods but no storage method: its text tells, no parse needed.
    # It names `apply` (a call, a docstring) but defines no method of that name.
    "proj/base.py": "import torch\n\n\nclass Base(torch.nn.Module):\n    def extra_repr(self):\n"
                    "        return 'base'\n\n    def reset(self):\n        \"\"\"Apply the init: apply it.\"\"\"\n"
                    "        self.apply(torch.nn.init.zeros_)\n        self.flag = True\n",
    # A quant method's base: `apply(self, layer, x)` owns the layer's storage.
    "proj/quant_base.py": "class MethodBase:\n    def apply(self, layer, x):\n        raise NotImplementedError\n",
    "proj/model.py": LAYER + "from proj.base import Base\n\n\nclass Attn(Base):\n"
                     "    def __init__(self):\n        super().__init__()\n"
                     "        self.kv_b_proj = ColumnParallelLinear(8, 8, quant_config=object())\n\n"
                     "    def forward(self, x):\n        return self.kv_b_proj(x.to(self.kv_b_proj.weight.dtype))\n",
    "proj/quant.py": LAYER + "from proj.quant_base import MethodBase\n\n\nclass Method(MethodBase):\n"
                     "    def __init__(self):\n        self.kv_b_proj = ColumnParallelLinear(8, 8, quant_config=object())\n\n"
                     "    def run(self, x):\n        return x.to(self.kv_b_proj.weight.dtype)\n",
}


def test_a_base_without_storage_methods_is_not_parsed_and_storage_code_still_exempt(tmp_path: Path,
                                                                                      monkeypatch):
    root = write_tree(tmp_path / "p", FILES)
    parsed = record_class_parses(monkeypatch)
    findings = json_findings(root)
    assert [(Path(f["path"]).name, f["code"]) for f in findings] == [("model.py", "DTL001")]
    assert "Base" not in parsed  # decided from its text
    assert "MethodBase" in parsed  # its `apply(self, layer, ...)` is read: Method is storage code


BASES = {
    # `async def`, and a `def` whose name follows a line continuation: both define the method.
    "proj/quant_base.py": "class MethodBase:\n    async def create_weights(self, layer):\n        pass\n\n\n"
                          "class OtherBase:\n    def \\\n    apply(self, layer, x):\n        pass\n",
    # A name in other characters that the parser normalises to `apply` (NFKC: a fullwidth `ａ`).
    "proj/wide_base.py": "class WideBase:\n    def \uff41pply(self, layer, x):\n        pass\n",
}


def test_every_spelling_of_a_storage_method_definition_makes_storage_code(tmp_path: Path, monkeypatch):
    quant = "".join(LAYER + f"from proj.{module} import {base}\n\n\nclass M{base}({base}):\n"
                    "    def __init__(self):\n        self.kv_b_proj = ColumnParallelLinear(8, 8, quant_config=object())\n\n"
                    "    def run(self, x):\n        return x.to(self.kv_b_proj.weight.dtype)\n\n\n"
                    for module, base in [("quant_base", "MethodBase"), ("quant_base", "OtherBase"),
                                         ("wide_base", "WideBase")])
    root = write_tree(tmp_path / "p", {**FILES, **BASES, "proj/quant.py": quant})
    parsed = record_class_parses(monkeypatch)
    findings = json_findings(root)
    assert [(Path(f["path"]).name, f["code"]) for f in findings] == [("model.py", "DTL001")], findings
    assert {"MethodBase", "OtherBase", "WideBase"} <= set(parsed), parsed
