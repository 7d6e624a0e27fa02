"""The HF proof with the real quantizers on CPU (the `hf` extra): release code breaks under
bitsandbytes, the fixed code matches an unquantized twin within the quantizer's own error.

The CI budget (tests/conftest.py, docs/testing.md) runs one model class of each site shape under
both bitsandbytes quantizers: LongT5 (`self.wo.weight.dtype`, broken by 4-bit only), Siglip2
(`dtype=` of the patch embedding), Wav2Vec2 (`self.project_q.weight.dtype`), and one class per
float-dtype quantizer; DTL_FULL=1 runs every class.
"""

from __future__ import annotations

import pytest
from conftest import FULL, budget

pytest.importorskip("bitsandbytes", reason="the `hf` extra (pip install -e '.[hf]') is not installed")
pytest.importorskip("transformers", reason="the `hf` extra (pip install -e '.[hf]') is not installed")

CI_MODELS = ("LongT5Model", "Siglip2VisionModel", "Wav2Vec2ForPreTraining")


@pytest.mark.slow
def test_real_models_under_bitsandbytes():
    from dtype_lint.ecosystems.hf import verify as hf_verify

    cases = [case for case in hf_verify._cases() if FULL or case.model in CI_MODELS]
    rows = [hf_verify.verify_case(case, quantizer) for case in cases for quantizer in ("bnb-4bit", "bnb-8bit")]
    assert all(r["proven"] for r in rows), [r for r in rows if not r["proven"]]
    assert len({r["model"] for r in rows}) >= budget(len(CI_MODELS), 5)


@pytest.mark.slow
def test_float_dtype_quantizers_leave_the_cast_harmless_and_the_fix_changes_nothing():
    """optimum-quanto int8 and torchao int8 weight-only report the float dtype in `.weight.dtype`:
    the release's cast is safe under them, and the fixed code must give the same output. CI runs
    one model class per quantizer; DTL_FULL=1 (the long local run) every class each accepts."""
    from dtype_lint.ecosystems.hf import verify as hf_verify

    pytest.importorskip("optimum.quanto", reason="optimum-quanto is not installed")
    pytest.importorskip("torchao", reason="torchao is not installed")
    cases = hf_verify._cases()
    if not FULL:
        cases = [c for c in cases if c.model == "LongT5Model"]
    rows = [hf_verify.verify_case(case, quantizer) for case in cases
            for quantizer in hf_verify.quantizers_for(case) if quantizer in hf_verify.FLOAT_DTYPE]
    assert {r["quantizer"] for r in rows} == set(hf_verify.FLOAT_DTYPE)
    assert all(r["proven"] and r["expected"] == "safe (float `.dtype`)" for r in rows), \
        [r for r in rows if not r["proven"]]
