"""Sites in code that never runs are not findings (dtype_lint/analysis/guard_engine/never_runs.py)."""

from __future__ import annotations

from dtype_lint.api import check_source

HEAD = (
    "from typing import TYPE_CHECKING\n"
    "import typing\n"
    "from vllm.model_executor.layers.linear import RowParallelLinear\n\n\n"
    "class M:\n"
    "    def __init__(self, o_proj: RowParallelLinear):\n"
    "        self.o_proj = o_proj\n\n"
    "    def f(self, x):\n"
)
ON = {"select": ["DTL001", "DTL003"]}


def test_a_read_under_type_checking_is_not_reported():
    body = ("        if TYPE_CHECKING:\n"
            "            assert self.o_proj.weight is not None\n"
            "        if typing.TYPE_CHECKING:\n"
            "            x = x.to(self.o_proj.weight.dtype)\n"
            "        return x\n")
    assert check_source(HEAD + body, settings=ON) == []


def test_the_else_of_type_checking_runs():
    body = ("        if TYPE_CHECKING:\n"
            "            pass\n"
            "        else:\n"
            "            x = x.to(self.o_proj.weight.dtype)\n"
            "        return x\n")
    assert [f.code for f in check_source(HEAD + body, settings=ON)] == ["DTL001"]
