"""The HF proof with the real quantizers on CPU (the `hf` extra): release code breaks under
bitsandbytes, the fixed code matches an unquantized twin within the quantizer's own error.

The CI budget (tests/conftest.py, docs/testing.md) runs one model class of each site shape under
both quantizers: LongT5 (`self.wo.weight.dtype`, broken by 4-bit only), Siglip2 (`dtype=` of the
patch embedding), Wav2Vec2 (`self.project_q.weight.dtype`); DTL_FULL=1 runs every class.
"""

from __future__ import annotations

import pytest
from conftest import FULL, budget

pytest.importorskip("bitsandbytes", reason="the `hf` extra (pip install -e '.[hf]') is not installed")
pytest.importorskip("transformers", reason="the `hf` extra (pip install -e '.[hf]') is not installed")

CI_MODELS = ("LongT5Model", "Siglip2VisionModel", "Wav2Vec2ForPreTraining")


@pytest.mark.slow
def test_real_models_under_bitsandbytes():
    from dtype_lint import hf_verify

    cases = [case for case in hf_verify._cases() if FULL or case.model in CI_MODELS]
    rows = [hf_verify.verify_case(case, quantizer) for case in cases for quantizer in ("bnb-4bit", "bnb-8bit")]
    assert all(r["proven"] for r in rows), [r for r in rows if not r["proven"]]
    assert len({r["model"] for r in rows}) >= budget(len(CI_MODELS), 5)
