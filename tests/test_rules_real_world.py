"""DTL003-DTL005 on real vLLM releases: whole trees without an internal error, and what they must
find there (benchmarks/accuracy/triage/rules-dtl003-005.md judges every finding).

- 0.28.0 and 0.33.0: `_get_kv_b_proj_input_dtype` (PR #38771) returns `torch.int8` for int8
  storage and keeps an fp8 activation for NVFP4 storage during fp8 prefill (DTL005), and each
  call that feeds the `kv_c_normed` cast is a lower-severity finding, in `mla_attention.py` and
  in Kimi-K3's `mla.py`, which imports it.
- 0.27.1: the two hand-written MLA guards compare `kv_b_proj`'s storage dtype with uint8 and the
  platform's fp8 (DTL004), and the rewrite to the helper is proven and offered.

Lines are located in the fetched files' text, not hard-coded.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from conftest import full_only
from release_runs import check_all, only

from dtype_lint.api import check_paths, make_config

# With test_triage.py on one worker: both read release_runs.check_all's `--select ALL` run of vLLM
# 0.27.1 and 0.33.0, made once per worker process (tens of seconds each).
pytestmark = [pytest.mark.network, pytest.mark.xdist_group("release-runs")]

MLA = "vllm/model_executor/layers/attention/mla_attention.py"
KIMI_MLA = "vllm/models/kimi_k3/nvidia/mla.py"
HELPER = "_get_kv_b_proj_input_dtype"


def run(tree: Path, codes: str):
    config = make_config({"select": codes.split(",")}, root=tree)
    return check_paths([str(tree)], config, use_cache=False)


def lines_matching(path: Path, pattern: str) -> list[int]:
    rx = re.compile(pattern)
    return [i for i, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1) if rx.search(line)]


def findings_in(result, tree: Path, rel: str, code: str) -> list:
    want = (tree / rel).resolve()
    return [f for f in result.findings if f.code == code and Path(f.path).resolve() == want]


# The `--select ALL` run test_triage.py judges, shared (tests/release_runs.py): what DTL003-DTL005
# report does not depend on which other rules run.
@pytest.fixture(scope="module")
def rules_0330(vllm_0330: Path):
    return only(check_all(vllm_0330), "DTL003,DTL004,DTL005,DTL900")


@pytest.fixture(scope="module")
def rules_0271(vllm_0271: Path):
    return only(check_all(vllm_0271), "DTL003,DTL004,DTL005,DTL900")


@pytest.mark.network
@pytest.mark.parametrize("release", ["rules_0271", full_only("rules_0330", "vLLM 0.27.1's whole tree; 0.33.0's DTL005 sites below")])
def test_whole_tree_without_internal_error(release, request):
    result = request.getfixturevalue(release)
    assert result.analyzed > 0
    for f in result.findings:
        if f.code == "DTL900":  # only for a file Python itself rejects
            with pytest.raises(SyntaxError):
                compile(Path(f.path).read_bytes(), f.path, "exec", dont_inherit=True)
        assert "gave up" not in f.message and "internal error" not in f.message, f


def _check_dtl005(tree: Path, result):
    path = tree / MLA
    (def_line,) = lines_matching(path, rf"^def {HELPER}\(")
    defs = [f for f in findings_in(result, tree, MLA, "DTL005") if f.span.line == def_line]
    assert len(defs) == 1, [(f.span.line, f.message) for f in findings_in(result, tree, MLA, "DTL005")]
    assert "int8 storage → returns torch.int8" in defs[0].message
    assert "uint8 storage, fp8_input=True → returns None" in defs[0].message
    assert defs[0].severity == "error"
    for rel in (MLA, KIMI_MLA):
        calls = lines_matching(tree / rel, rf"=\s*{HELPER}\(")
        assert calls, rel
        got = {f.span.line for f in findings_in(result, tree, rel, "DTL005") if f.span.line != def_line or rel != MLA}
        assert got == set(calls), (rel, got, calls)
        for f in findings_in(result, tree, rel, "DTL005"):
            if f.expression.startswith(HELPER):
                assert f.severity == "warning" and "feeds the cast at line" in f.message


@pytest.mark.network
def test_0330_unsound_helper_and_its_call_sites(vllm_0330: Path, rules_0330):
    _check_dtl005(vllm_0330, rules_0330)
    # 0.33.0's helper returns ModelOpt FP8_PB_WO's own input dtype for fp8 storage: unknown to the
    # evaluator, so rewriting its callers to the template is not proven.
    calls = [f for f in findings_in(rules_0330, vllm_0330, MLA, "DTL005") if f.expression.startswith(HELPER)]
    assert calls and all(f.fix is None and "decide" in f.no_fix_reason for f in calls)
    # So the helper itself gets the missing branch, safe and proven, where it is defined.
    (definition,) = [f for f in findings_in(rules_0330, vllm_0330, MLA, "DTL005") if f.kind == "definition"]
    assert definition.fix is not None and definition.fix.safe
    assert [e.text for e in definition.fix.edits] == [
        "    if (weight_dtype == torch.uint8 and use_fp8_prefill) or weight_dtype == torch.int8:\n"
        "        return kv_b_proj.params_dtype\n"]


@pytest.mark.network
def test_0280_unsound_helper_and_its_call_sites(vllm_0280: Path):
    result = run(vllm_0280, "DTL005")
    _check_dtl005(vllm_0280, result)
    # 0.28.0's helper agrees with the template everywhere it is right: callers are rewritten safely.
    calls = [f for f in result.findings if f.expression.startswith(HELPER)]
    assert len(calls) == 3 and all(f.fix is not None and f.fix.safe for f in calls)
    # ... and the helper is left to its callers' routing, not patched as well.
    (definition,) = [f for f in result.findings if f.kind == "definition"]
    assert definition.fix is None


@pytest.mark.network
def test_0271_hand_written_mla_guards(vllm_0271: Path, rules_0271):
    path = vllm_0271 / MLA
    guards = lines_matching(path, r"use_fp8_prefill or _?kv_b_proj_w_dtype != current_platform\.fp8_dtype\(\)")
    assert len(guards) == 2
    got = findings_in(rules_0271, vllm_0271, MLA, "DTL004")
    assert sorted(f.span.line for f in got) == [g - 1 for g in guards]  # the `if (` line above
    for f in got:
        assert f.severity == "warning"
        assert "torch.uint8" in f.message and "current_platform.fp8_dtype()" in f.message
        assert f.fix is not None and f.fix.safe, f.no_fix_reason
