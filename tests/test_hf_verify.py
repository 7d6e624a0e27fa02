"""The HF proof with the real quantizers on CPU (the `hf` extra): release code breaks under
bitsandbytes, the fixed code matches an unquantized twin within the quantizer's own error."""

from __future__ import annotations

import pytest

pytest.importorskip("bitsandbytes", reason="the `hf` extra (pip install -e '.[hf]') is not installed")
pytest.importorskip("transformers", reason="the `hf` extra (pip install -e '.[hf]') is not installed")


@pytest.mark.slow
def test_real_models_under_bitsandbytes():
    from dtype_lint import hf_verify

    rows = [hf_verify.verify_case(case, quantizer) for case in hf_verify._cases()
            for quantizer in ("bnb-4bit", "bnb-8bit")]
    assert all(r["proven"] for r in rows), [r for r in rows if not r["proven"]]
    assert len({r["model"] for r in rows}) >= 5
