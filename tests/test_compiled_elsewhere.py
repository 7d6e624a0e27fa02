"""Code another file of the project scripts or traces keeps its finding and gets no fix
(analysis/compiled_elsewhere.py), and so do the ways a file compiles its own code that the first
reading missed (a tracer held in a variable, torch.ao's quantize_fx entry points, `getattr(torch.jit,
"script")`, a scripted subclass whose base holds the site).

Each project is judged by running it: `proj/export.py` compiles the model `proj/model.py` defines
(`export(model)` scripts or traces it, or what holds it), before and after `check --fix`; the fixed
project must still compile and give what it gave. Until this census a fix was applied as safe in
each of them: the scripted export then failed to compile the helper, and the traced one traced it
with the weight as a proxy (the HF helper's `isinstance(weight, torch.Tensor)` is False there, and
the graph silently lost the cast). Where nothing compiles the model, the fix is applied.
"""

from __future__ import annotations

import ast
import sys
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")

from cli_runner import dtl  # noqa: E402
from tiny_project import STUB_MODEL, files_passed, fresh_import, stub_project, write_tree  # noqa: E402

# A second module class like Attn, that nothing compiles where Attn's class is known.
MODEL = STUB_MODEL + "\n\n" + STUB_MODEL.split("\n\n\n", 1)[1].replace("class Attn(", "class Plain(")

DECODER = """\
class Decoder(torch.nn.Module):
    def __init__(self, layer):
        super().__init__()
        self.attn = Attn(layer)

    def forward(self, x):
        return self.attn(x)
"""

QCONFIG = "from torch.ao.quantization import get_default_qconfig_mapping\n"

# export.py (and other files) -> whether `Plain`, which nothing here compiles, keeps its fix: a
# compiled argument whose class is known compiles that class and what it reaches, one that cannot be
# told (a parameter) any object of the modules the file imports from.
COMPILED = {
    "script-built": ({"proj/export.py": "import torch\nfrom proj.model import Attn\n\n\ndef export(model):\n"
                                        "    return torch.jit.script(Attn(model.o_proj))\n"}, True, "TorchScript"),
    "trace-annotated": ({"proj/export.py": "import torch\nimport torch.fx\nfrom proj.model import Attn, Plain\n\n\n"
                                           "def export(block: Attn) -> torch.fx.GraphModule:\n"
                                           "    return torch.fx.symbolic_trace(block)\n"}, True, "torch.fx"),
    "script-module-import": ({"proj/export.py": "import torch\nfrom proj import model as modeling\n\n\n"
                                                "def export(model):\n    return torch.jit.script(model)\n"},
                             False, "TorchScript"),
    # The file imports another class of the module only: what `model` is cannot be told.
    "script-other-class-imported": ({"proj/export.py": "import torch\nfrom proj.model import Plain\n\n\n"
                                                       "def export(model):\n    return torch.jit.script(model)\n"},
                                    False, "TorchScript"),
    "script-star-import": ({"proj/export.py": "import torch\nfrom proj.model import *  # noqa: F403\n\n\n"
                                              "def export(model):\n    return torch.jit.script(model)\n"},
                           False, "TorchScript"),
    # A parent built here whose `__init__` builds the model's class as a submodule (plug/engine.py's shape).
    "script-parent-here": ({"proj/export.py": "import torch\nfrom proj.model import Attn\n\n\n" + DECODER +
                                              "\n\ndef export(model):\n    return torch.jit.script(Decoder(model.o_proj))\n"},
                           True, "TorchScript"),
    # ... and in a third file that names no compiler.
    "trace-parent-elsewhere": ({"proj/decoder.py": "import torch\nfrom proj.model import Attn\n\n\n" + DECODER,
                                "proj/export.py": "import torch\nimport torch.fx\nfrom proj.decoder import Decoder\n\n\n"
                                                  "def export(model):\n"
                                                  "    return torch.fx.symbolic_trace(Decoder(model.o_proj))\n"},
                               True, "torch.fx"),
    # A subclass in another file: the base's forward runs on the scripted instance.
    "script-subclass-elsewhere": ({"proj/child.py": "from proj.model import Attn\n\n\nclass Child(Attn):\n    pass\n",
                                   "proj/export.py": "import torch\nfrom proj.child import Child\n\n\n"
                                                     "def export(model):\n    return torch.jit.script(Child(model.o_proj))\n"},
                                  True, "TorchScript"),
    "script-re-exported": ({"proj/__init__.py": "from proj.model import Attn\n",
                            "proj/export.py": "import torch\nfrom proj import Attn\n\n\n"
                                              "def export(model):\n    return torch.jit.script(Attn(model.o_proj))\n"},
                           True, "TorchScript"),
    "trace-tracer-variable": ({"proj/export.py": "import torch\nimport torch.fx\nfrom proj.model import Attn\n\n\n"
                                                 "def export(model):\n    tracer = torch.fx.Tracer()\n"
                                                 "    graph = tracer.trace(Attn(model.o_proj))\n"
                                                 "    return torch.fx.GraphModule(tracer.root, graph)\n"},
                              True, "torch.fx"),
    "prepare-fx": ({"proj/export.py": "import torch\nfrom torch.ao.quantization.quantize_fx import prepare_fx\n"
                                      + QCONFIG + "from proj.model import Attn\n\n\ndef export(model):\n"
                                      "    return prepare_fx(Attn(model.o_proj), get_default_qconfig_mapping(), "
                                      "(torch.zeros(2),))\n"}, True, "torch.fx"),
    "prepare-fx-older-path": ({"proj/export.py": "import torch\nimport torch.quantization.quantize_fx as qfx\n" + QCONFIG
                                                 + "from proj.model import Attn\n\n\ndef export(model):\n"
                                                 "    return qfx.prepare_fx(Attn(model.o_proj), get_default_qconfig_mapping(), "
                                                 "(torch.zeros(2),))\n"}, True, "torch.fx"),
    "fuse-fx": ({"proj/export.py": "import torch\nfrom torch.ao.quantization import quantize_fx\n"
                                   "from proj.model import Attn\n\n\ndef export(model):\n"
                                   "    return quantize_fx.fuse_fx(Attn(model.o_proj).eval())\n"}, True, "torch.fx"),
    "script-getattr": ({"proj/export.py": "import torch\nfrom proj.model import Attn\n\n\ndef export(model):\n"
                                          "    return getattr(torch.jit, 'script')(Attn(model.o_proj))\n"},
                       True, "TorchScript"),
}

# Code another file runs the model through that runs it as Python: the fix applies.
EAGER = {
    "compile": "import torch\nfrom proj.model import Attn\n\n\ndef export(model):\n"
               "    return torch.compile(Attn(model.o_proj), backend='eager')\n",
    "make-fx": "import torch\nfrom torch.fx.experimental.proxy_tensor import make_fx\nfrom proj.model import Attn\n\n\n"
               "def export(model):\n    return make_fx(Attn(model.o_proj))(torch.zeros(2))\n",
    "jit-trace": "import torch\nfrom proj.model import Attn\n\n\ndef export(model):\n"
                 "    return torch.jit.trace(Attn(model.o_proj), (torch.zeros(2),))\n",
    # A file that scripts something of its own, and imports nothing of the model's module.
    "script-unrelated": "import torch\nfrom proj.layers import QLinear\n\n\n" "class Scale(torch.nn.Module):\n"
                        "    def forward(self, x):\n        return x * 2\n\n\n"
                        "def export(model):\n    torch.jit.script(Scale())(torch.zeros(2))\n    return model\n",
}


def fix(root: Path, *paths: str):
    return dtl(root, "check", *(paths or (".",)), "--fix", "--no-cache", "--output-format", "text")


def exported(root: Path, storage=torch.float16) -> str:
    """What the project's export gives when run: its compiled model's output dtype, or `Error`."""
    fresh_import(root, "proj.model")
    sys.path.insert(0, str(root))
    try:
        export = __import__("proj.export", fromlist=["export"]).export
        model = sys.modules["proj.model"].Attn(sys.modules["proj.layers"].QLinear(storage))
        return str(export(model)(torch.zeros(2)).dtype)
    except Exception as error:  # noqa: BLE001 - failing to compile is the outcome compared
        return f"Error: {type(error).__name__}"
    finally:
        sys.path.remove(str(root))


@pytest.mark.parametrize("case", sorted(COMPILED))
def test_a_model_another_file_compiles_keeps_its_finding_without_a_fix(tmp_path: Path, case: str):
    files, plain_fixed, compiler = COMPILED[case]
    root = stub_project(tmp_path, MODEL, files)
    assert exported(root) == "torch.float16"  # the original compiles and runs
    proc = fix(root)
    model = (root / "proj/model.py").read_text()
    attn = model.split("class Plain")[0]
    assert "x = x.to(self.o_proj.weight.dtype)" in attn, (case, model)
    export = "proj/export.py"
    line = next(number for number, text in enumerate((root / export).read_text().splitlines(), 1)
                if any(word in text for word in ("script(", "trace(", "prepare_fx(", "fuse_fx(", "'script')(")))
    assert f"no fix: this code may be compiled by {compiler} (`" in proc.stdout, (case, proc.stdout)
    assert f"in {export}:{line} may compile `Attn`)" in proc.stdout, (case, proc.stdout)
    assert ("get_layer_input_dtype(self.o_proj" in model) == plain_fixed, (case, model)
    assert exported(root) == "torch.float16", case  # and still does


@pytest.mark.parametrize("case", sorted(EAGER))
def test_a_model_another_file_runs_as_python_is_fixed(tmp_path: Path, case: str):
    root = stub_project(tmp_path, MODEL, {"proj/export.py": EAGER[case]})
    proc = fix(root)
    assert "2 fixed, 0 remaining" in proc.stdout, (case, proc.stdout)
    assert exported(root) == "torch.float16", case


def test_the_fix_kept_out_would_break_the_compile(tmp_path: Path):
    """What the refusals spare: fixed where nothing compiles it, the model no longer scripts, and
    fx cannot trace it (the helper branches on the weight's dtype, a proxy there)."""
    root = stub_project(tmp_path, MODEL)
    assert "2 fixed" in fix(root).stdout
    mod = fresh_import(root)
    model = mod.Attn(sys.modules["proj.layers"].QLinear(torch.float16))
    assert model(torch.zeros(2)).dtype == torch.float16
    with pytest.raises(Exception):  # noqa: B017 - TorchScript's frontend errors have no common type
        torch.jit.script(model)
    with pytest.raises(torch.fx.proxy.TraceError):
        torch.fx.symbolic_trace(model)


def test_a_named_file_run_sees_the_other_file(tmp_path: Path):
    """pre-commit runs on the staged files: the model's file alone still sees what scripts it."""
    root = stub_project(tmp_path, MODEL, COMPILED["script-parent-here"][0])
    proc = fix(root, "proj/model.py")
    line = (root / "proj/export.py").read_text().splitlines().index("    return torch.jit.script(Decoder(model.o_proj))") + 1
    assert f"in proj/export.py:{line} may compile `Attn`)" in proc.stdout, proc.stdout
    assert "1 fixed, 1 remaining" in proc.stdout, proc.stdout
    assert exported(root) == "torch.float16"


def test_a_cached_fix_goes_when_another_file_starts_to_compile_it(tmp_path: Path):
    """A finding cached with its fix depends on every file that might script it: one written
    later takes the fix away, and removing it brings it back."""
    root = stub_project(tmp_path, MODEL)
    check = ("check", ".", "--output-format", "concise")
    assert "2 fixable" in dtl(root, *check).stdout
    write_tree(root, COMPILED["script-built"][0])
    assert "1 fixable" in dtl(root, *check).stdout
    (root / "proj/export.py").write_text("import torch\nfrom proj.model import Attn\n")
    assert "2 fixable" in dtl(root, *check).stdout


def test_the_census_parses_only_files_that_can_compile(tmp_path: Path, monkeypatch):
    """A file whose text names no compiler (`torch.jit.is_scripting()` is no compiler) is not read
    again for the census, let alone parsed: the scan tested its text; one that compiles is, and so
    is a module its compiled code reaches (decoder.py names none)."""
    from dtype_lint.analysis import compiled_elsewhere

    files = dict(COMPILED["trace-parent-elsewhere"][0])
    files.update({f"proj/plain{i}.py": f"import torch\n\nSIZE = {i}\n" for i in range(5)})
    files["proj/jit_words.py"] = "import torch\n\n\ndef traced():\n    return torch.jit.is_scripting()\n"
    root = stub_project(tmp_path, MODEL, files)
    read = files_passed(monkeypatch, compiled_elsewhere, "read_file")
    parsed = files_passed(monkeypatch, compiled_elsewhere.trees, "parse")
    assert "1 fixed, 1 remaining" in fix(root).stdout
    assert sorted(set(read)) == ["decoder.py", "export.py", "model.py"], read
    assert sorted(set(parsed)) == ["decoder.py", "export.py", "model.py"], parsed


# The HF journey's own model file (a block casting to its projection's weight dtype).
HF_MODELING = (Path(__file__).resolve().parents[1] / "fixtures" / "journeys" / "hf_package" / "src" / "mypkg"
               / "modeling_foo.py").read_text(encoding="utf-8")

HF_PROJECT = {
    "pyproject.toml": '[project]\nname = "mypkg"\nversion = "0.1.0"\n',
    "src/mypkg/__init__.py": "from .modeling_foo import FooModel\nfrom .configuration_foo import FooConfig\n",
    "src/mypkg/configuration_foo.py": "from transformers import PretrainedConfig\n\n\n"
                                      "class FooConfig(PretrainedConfig):\n    model_type = 'foo'\n",
    "src/mypkg/modeling_foo.py": HF_MODELING,
}
HF_EXPORT = ('"""Export helpers: a graph of the block for deployment."""\nimport torch\nimport torch.fx\n\n'
             "from .modeling_foo import FooBlock\n\n\ndef trace_block(block: FooBlock) -> torch.fx.GraphModule:\n"
             "    return torch.fx.symbolic_trace(block)\n")


def test_hugging_face_code_traced_from_another_file_keeps_its_cast(tmp_path: Path):
    """The adversarial round's `mypkg/export.py`: the HF helper under fx returns None (the weight is
    a proxy, not a `torch.Tensor`), so the traced block lost its cast silently, and the bf16 layer
    then met an fp32 activation. Now the site keeps its finding, without a fix."""
    root = write_tree(tmp_path / "hf", {**HF_PROJECT, "src/mypkg/export.py": HF_EXPORT})
    proc = fix(root)
    assert (root / "src/mypkg/modeling_foo.py").read_text() == HF_MODELING
    assert ("no fix: this code may be compiled by torch.fx (`torch.fx.symbolic_trace(block)` in "
            "src/mypkg/export.py:9 may compile `FooBlock`)") in proc.stdout, proc.stdout
    assert "`get_module_input_dtype`" in proc.stdout

    # Without export.py the site is fixed; the block that fix writes, traced, loses the cast.
    control = write_tree(tmp_path / "control", HF_PROJECT)
    assert "1 fixed" in fix(control).stdout
    fixed = (control / "src/mypkg/modeling_foo.py").read_text()
    assert "proj_input_dtype = get_module_input_dtype(self.proj)" in fixed, fixed
    helper: dict = {}
    exec(compile((control / "src/mypkg/module_input_dtype.py").read_text(), "module_input_dtype.py", "exec"), helper)

    class FixedBlock(torch.nn.Module):  # FooBlock as the fix wrote it, without transformers
        def __init__(self):
            super().__init__()
            self.proj = torch.nn.Linear(4, 4).to(torch.bfloat16)

        def forward(self, x):
            proj_input_dtype = helper["get_module_input_dtype"](self.proj)
            if proj_input_dtype is not None:
                x = x.to(proj_input_dtype)
            return self.proj(x)

    x = torch.zeros(2, 4)
    assert FixedBlock()(x).dtype == torch.bfloat16
    with pytest.raises(RuntimeError, match="same dtype"):
        torch.fx.symbolic_trace(FixedBlock())(x)


def test_every_compiling_form_passes_the_census_text_test():
    """The census parses only what `might_compile` passes (the scan asks it of every file): each
    way of compiling that CompiledCode reads must pass it, and the words that only look like
    one (vLLM's 687 files saying `jit` are Triton's and FlashInfer's) need not."""
    from test_trust_round3_compiled import SCRIPTED, TRACED

    from dtype_lint.analysis.compiled_code import CompiledCode
    from dtype_lint.core.compile_text import might_compile

    texts = {**SCRIPTED, **TRACED, **{case: "\n".join(files.values()) for case, (files, _, _) in COMPILED.items()}}
    for case, text in texts.items():
        assert might_compile(text), case
    for case, (files, _, _) in COMPILED.items():
        assert CompiledCode(ast.parse(files["proj/export.py"])).compile_calls, case
    for text in ("torch.jit.is_scripting()", "@triton.jit\ndef kernel(x):\n    pass\n", "from flashinfer.jit import env\n",
                 "compiled = compile_fx(graph)\n", "Tracer = Any\n", "@torch.jit.script_if_tracing\ndef f(x):\n    return x\n"):
        assert not might_compile(text), text


def test_a_warm_run_asks_the_scan_summary_what_may_compile(tmp_path: Path, monkeypatch):
    """The scan keeps each file's answers to the censuses' tests in its summary: after an edit, the
    edited file is read and analysed, and the census reads again only what may compile; the files
    the summary answers for are not read for it (at first the census read every file of the tree
    once more on each warm run that analysed a file with a fix)."""
    from dtype_lint.run import pipeline

    files = dict(COMPILED["script-built"][0])
    files.update({f"proj/plain{i}.py": f"import torch\n\nSIZE = {i}\n" for i in range(5)})
    root = stub_project(tmp_path, MODEL, files)
    check = ("check", ".", "--output-format", "concise")
    assert "1 fixable" in dtl(root, *check).stdout
    (root / "proj/model.py").write_text(MODEL + "\n# edited\n")
    read = files_passed(monkeypatch, pipeline, "read_bytes")
    assert "1 fixable" in dtl(root, *check).stdout
    assert sorted(name for name in read if name.endswith(".py")) == ["export.py", "model.py"], read
