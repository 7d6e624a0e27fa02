"""Issue #39, recall where the bug goes next: each site counted once, messages that name the sink
truthfully, fixes of pure receivers, storage code known by what it does, dtypes kept on `self`.

Every fixture here is our own small code shaped like the real sites the issue cites."""

from __future__ import annotations

import json
import textwrap

from cli_runner import dtl
from tiny_project import PYPROJECT, write_tree

from dtype_lint.api import check_source

# A site inside a nested `def` whose layer the nested function builds itself: both the walk of
# `run` (a `def` statement of its body is entered) and the nested function's own walk meet it.
NESTED = textwrap.dedent("""\
    import torch
    from vllm.model_executor.layers.linear import ColumnParallelLinear


    def run(xs, quant_config):
        def cast(x):
            inner = ColumnParallelLinear(4, 4, quant_config=quant_config)
            return x.to(inner.weight.dtype)

        def cast_typed(x, layer: ColumnParallelLinear):
            return x.to(layer.weight.dtype)

        return [cast(x) for x in xs]
""")


def test_a_site_in_a_nested_function_is_reported_once():
    findings = check_source(NESTED, filename="nested.py", settings={"select": ["ALL"]})
    assert [(f.code, f.span.line, f.scope) for f in findings] == [
        ("DTL001", 8, "run.cast"), ("DTL001", 11, "run.cast_typed")]


def test_a_site_in_a_nested_function_is_fixed_and_counted_once(tmp_path):
    write_tree(tmp_path, {"pyproject.toml": PYPROJECT, "proj/__init__.py": "", "proj/nested.py": NESTED})
    run = dtl(tmp_path, "check", ".", "--no-cache", "--fix", "--show-fixes")
    assert run.returncode == 0, run.stderr
    assert "2 × DTL001" in run.stdout and "(2 fixed, 0 remaining)" in run.stdout, run.stdout
    fixed = (tmp_path / "proj/nested.py").read_text()
    assert fixed.count("get_layer_input_dtype(inner, True) or x.dtype") == 1
    assert fixed.count("get_layer_input_dtype(layer, True) or x.dtype") == 1


def test_json_lists_a_nested_site_once(tmp_path):
    write_tree(tmp_path, {"pyproject.toml": PYPROJECT, "proj/__init__.py": "", "proj/nested.py": NESTED})
    run = dtl(tmp_path, "check", ".", "--no-cache", "--output-format", "json", "--exit-zero")
    report = json.loads(run.stdout)
    lines = [(f["path"], f["line"], f["col"]) for f in report["findings"]]
    assert len(lines) == len(set(lines)) == 2 and report["summary"]["fixable"] == 2


# A weight rewrite in a quantizer-adjacent helper, and an activation cast, both handed the
# storage dtype of a quantizable layer.
SINKS = textwrap.dedent("""\
    import torch
    from vllm.model_executor.layers.linear import ColumnParallelLinear


    def requantize(weight, dtype):
        weight = weight.to(dtype)
        return weight


    def rescale(hidden, dtype):
        return hidden.to(dtype)


    class Block(torch.nn.Module):
        def __init__(self, proj: ColumnParallelLinear, gate: ColumnParallelLinear):
            super().__init__()
            self.proj = proj
            self.gate = gate

        def load(self, loaded):
            return requantize(loaded, self.proj.weight.dtype)

        def forward(self, x):
            return rescale(x, self.proj.weight.dtype)

        def rewrite(self):
            stored = self.gate.weight
            return stored.t().to(self.proj.weight.dtype)

        def route(self, topk_weights):
            return topk_weights.t().to(self.proj.weight.dtype)
""")


def _dtl001_messages(code: str) -> dict[int, str]:
    return {f.span.line: f.message for f in check_source(code, filename="sinks.py", settings={"select": ["DTL001"]})}


def test_a_weight_rewrite_is_not_called_an_activation_cast():
    messages = _dtl001_messages(SINKS)
    assert "which casts a weight to it" in messages[21] and "activation" not in messages[21]
    assert "which casts an activation to it" in messages[24]
    assert messages[28].startswith("weight cast to `self.proj.weight.dtype`")
    # Plural `*_weights` are routing or attention weights: activations.
    assert messages[31].startswith("activation cast to `self.proj.weight.dtype`")
