"""DTL001 weight-dtype-cast beyond its examples: where the finding is (scope, kind), the one
storage phrase, and the guard engine's *storage proven unpacked* question as DTL001 asks it."""

from __future__ import annotations

from dtype_lint.api import check_source
from dtype_lint.rule import storage_dtypes

HEAD = """\
import torch
from vllm.model_executor.layers.linear import ColumnParallelLinear, UnquantizedLinearMethod


class Attn(torch.nn.Module):
    def __init__(self, kv_b_proj: ColumnParallelLinear):
        super().__init__()
        self.kv_b_proj = kv_b_proj
"""


def _dtl001(code: str):
    return check_source(code, filename="attn.py", settings={"select": ["DTL001"]})


def test_a_cast_in_a_nested_function_is_in_that_functions_scope():
    code = HEAD + ("    def forward(self, xs):\n"
                   "        def cast(x):\n"
                   "            return x.to(self.kv_b_proj.weight.dtype)\n"
                   "        return [cast(x) for x in xs]\n")
    (finding,) = _dtl001(code)
    assert (finding.scope, finding.kind, finding.span.line) == ("Attn.forward.cast", "site", 11)
    assert storage_dtypes(finding.evidence) in finding.message and finding.fix is not None  # names the backends


def test_a_dtype_getter_returning_the_storage_dtype_is_reported_without_a_fix():
    code = HEAD + "    @property\n    def dtype(self):\n        return self.kv_b_proj.weight.dtype\n"
    (finding,) = _dtl001(code)
    assert finding.scope == "Attn.dtype" and finding.fix is None and "params_dtype" in finding.message


def test_an_unquantized_type_check_proves_the_storage_unpacked():
    guarded = HEAD + ("    def forward(self, x):\n"
                      "        if type(self.kv_b_proj.quant_method) is UnquantizedLinearMethod:\n"
                      "            x = x.to(self.kv_b_proj.weight.dtype)\n"
                      "        return x\n")
    assert _dtl001(guarded) == []
    # The check must name the very layer cast to.
    other = guarded.replace("type(self.kv_b_proj.quant_method)", "type(self.other.quant_method)")
    assert [f.code for f in _dtl001(other)] == ["DTL001"]


def test_hasattr_does_not_prove_the_storage_unpacked():
    code = HEAD + ("    def forward(self, x):\n"
                   "        if hasattr(self.kv_b_proj, 'weight'):\n"
                   "            x = x.to(self.kv_b_proj.weight.dtype)\n"
                   "        return x\n")
    assert [f.code for f in _dtl001(code)] == ["DTL001"]
