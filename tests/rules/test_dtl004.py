"""DTL004 beside DTL001: one hand-written guard, one cast, one fix carried by both findings; and
why a branch gets no fix."""

from __future__ import annotations

import json

from dtype_lint.api import check_source, make_config
from dtype_lint.run.pipeline import fix_one_text

HEAD = """\
import torch
from vllm.model_executor.layers.linear import ColumnParallelLinear


class Attn:
    def __init__(self, kv_b_proj: ColumnParallelLinear):
        self.kv_b_proj = kv_b_proj
"""
ALIAS = "        w = self.kv_b_proj.weight.dtype if hasattr(self.kv_b_proj, 'weight') else self.kv_b_proj.params_dtype\n"
GUARDED = HEAD + "    def prefill(self, kv, use_fp8):\n" + ALIAS + (
    "        if (use_fp8 or w != torch.float8_e4m3fn) and w != torch.uint8:\n"
    "            kv = kv.to(w)\n        return kv\n")


def test_the_guard_and_its_cast_share_one_fix_and_both_are_fixed():
    on = {"select": ["DTL", "DTL004"]}  # DTL004 is opt-in
    assert sorted(f.code for f in check_source(GUARDED)) == ["DTL001"]
    findings = check_source(GUARDED, settings=on)
    assert sorted(f.code for f in findings) == ["DTL001", "DTL004"]
    fixes = {f.code: f.fix for f in findings}
    assert fixes["DTL001"].edits == fixes["DTL004"].edits and fixes["DTL004"].safe
    outcome = fix_one_text(GUARDED, "<string>", make_config(on), False)
    assert sorted(f.code for f in outcome.applied) == ["DTL001", "DTL004"]
    assert "get_layer_input_dtype(self.kv_b_proj, use_fp8)" in outcome.text
    assert check_source(outcome.text, settings=on) == []


def test_a_branch_that_casts_nothing_says_why_it_has_no_fix():
    (f,) = check_source(HEAD + "    def f(self, x):\n        if self.kv_b_proj.weight.dtype == torch.int8:\n"
                        "            return int8_gemm(x)\n        return torch.mm(x, self.kv_b_proj.weight.t())\n",
                        settings={"select": ["DTL004"]})
    assert f.fix is None and "does not guard a cast" in f.no_fix_reason and f.severity == "warning"


def test_a_guard_that_disagrees_with_the_helper_is_not_rewritten():
    (f,) = check_source(HEAD + "    def f(self, kv):\n" + ALIAS
                        + "        if w != torch.uint8 and w != torch.float16:\n            kv = kv.to(w)\n        return kv\n",
                        settings={"select": ["DTL004"]})
    assert f.fix is None and "disagrees with the helper for a float16 weight" in f.no_fix_reason


def test_test_modules_are_not_checked(tmp_path):
    """A unit test asserting a backend's storage dtype asks the storage question on purpose."""
    from cli_runner import dtl

    body = HEAD + ("    def f(self, x):\n        if self.kv_b_proj.weight.dtype == torch.int8:\n            return int8_gemm(x)\n"
                   "        return torch.mm(x, self.kv_b_proj.weight.t())\n")
    (tmp_path / "tests").mkdir()
    (tmp_path / "tests" / "check_storage.py").write_text(body)
    (tmp_path / "model.py").write_text(body)
    proc = dtl(tmp_path, "check", ".", "--select", "DTL004", "--no-cache", "--output-format", "json")
    assert [f["path"] for f in json.loads(proc.stdout)["findings"]] == ["model.py"]
