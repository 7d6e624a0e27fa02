"""DTL002 weight-dtype-allocation beyond its examples: no fix is ever offered (its declared fix
availability), allocations under a check that proves the layer unquantized are not reported, and
a weight dtype handed to a function that allocates with it is reported at the call."""

from __future__ import annotations

import ast

from hypothesis import given, settings
from hypothesis import strategies as st

from dtype_lint.api import check_source
from dtype_lint.core.source import split_lines
from dtype_lint.rule import FixAvailability, storage_dtypes
from dtype_lint.rules import RULES_BY_CODE

HEAD = """\
import torch
from vllm.model_executor.layers.linear import ColumnParallelLinear, UnquantizedLinearMethod


def scratch(n, dtype):
    return torch.empty(n, dtype=dtype)


class Attn(torch.nn.Module):
    def __init__(self, kv_b_proj: ColumnParallelLinear):
        super().__init__()
        self.kv_b_proj = kv_b_proj
"""


def _dtl002(code: str):
    return check_source(code, filename="attn.py", settings={"select": ["DTL002"]})


def test_an_allocation_in_the_storage_dtype_is_reported_without_a_fix():
    assert RULES_BY_CODE["DTL002"].fix_availability is FixAvailability.NONE
    code = HEAD + "    def forward(self, n):\n        return torch.empty(n, dtype=self.kv_b_proj.weight.dtype)\n"
    (finding,) = _dtl002(code)
    assert finding.scope == "Attn.forward" and finding.fix is None and finding.no_fix_reason
    assert storage_dtypes(finding.evidence) in finding.message  # the backends the storage model found


def test_an_allocation_under_an_unquantized_check_is_not_reported():
    code = HEAD + ("    def forward(self, n):\n"
                   "        if isinstance(self.kv_b_proj.quant_method, UnquantizedLinearMethod):\n"
                   "            return torch.empty(n, dtype=self.kv_b_proj.weight.dtype)\n"
                   "        return None\n")
    assert _dtl002(code) == []


def test_a_weight_dtype_handed_to_an_allocating_function_is_reported_at_the_call():
    code = HEAD + "    def forward(self, n):\n        return scratch(n, self.kv_b_proj.weight.dtype)\n"
    (finding,) = _dtl002(code)
    assert "`scratch`" in finding.message and finding.expression == "self.kv_b_proj.weight.dtype"


def test_registered_and_replaced_storage_read_only_calls_and_assignments(monkeypatch):
    # Both tests read a function's calls and assignments: DTL002 hands them its walk's events of
    # those classes, not every node of the function, and still spares the registered weight.
    from dtype_lint.analysis.flow import recognisers
    from dtype_lint.analysis.storage import weight_registration
    from dtype_lint.rules import dtl002_weight_dtype_allocation as dtl002

    given: set[type] = set()

    def recording(real):
        def wrapped(nodes, *args):
            nodes = list(nodes)
            given.update(type(n) for n in nodes)
            return real(nodes, *args)
        return wrapped

    monkeypatch.setattr(dtl002, "weight_allocations", recording(weight_registration.weight_allocations))
    monkeypatch.setattr(dtl002, "storage_replacements", recording(recognisers.storage_replacements))
    code = HEAD + ("    def grow(self, n):\n"
                   "        w = torch.nn.Parameter(torch.empty(n, dtype=self.kv_b_proj.weight.dtype))\n"
                   "        self.kv_b_proj.weight.data = w.data\n"
                   "        self.kv_b_proj.register_parameter('weight', w)\n")
    assert _dtl002(code) == []
    assert given == {ast.Call, ast.Assign}, given


# Pieces with every line break `split_lines` knows, and parts of the two words around them.
REPLACE_PIECES = st.sampled_from(["set_(", "set_", "(", ".data", ".dat", "a", "x = ", "\n", "\r", "\r\n", "\v", "\f",
                                  "\x1c", "\x85", "\u2028", " "])


@settings(max_examples=400, deadline=None)
@given(st.lists(REPLACE_PIECES, max_size=30).map("".join))
def test_a_storage_replacement_is_looked_for_in_the_text_as_in_its_lines(text):
    # DTL002 tests the text for `set_(`/`.data`, no longer each line: neither word holds a line
    # break, so some line holds one exactly when the text does.
    by_line = any("set_(" in line or ".data" in line for line in split_lines(text))
    assert by_line == ("set_(" in text or ".data" in text)
