"""The adapter family's helper role: its sites are fixed through the Hugging Face helper
(`get_module_input_dtype`, ecosystems/hf/helper.py), which that ecosystem's helper role creates
and settles, so this one owns no fix; it speaks for the family in `doctor`, in its own words (an
adapter's base layer, the quantizers that replace it before the adapter is attached)."""

from __future__ import annotations

from dtype_lint.ecosystems.hf.helper import ROUTED_HELPER_LABEL as HELPER_LABEL
from dtype_lint.ecosystems.hf.helper import helper_location
from dtype_lint.ecosystems.hf.helper import routed_owns_fix as owns_fix
from dtype_lint.ecosystems.hf.helper import routed_settle_helper as settle_helper
from dtype_lint.ecosystems.peft.family import FAMILY_EVIDENCE

__all__ = ["FAMILY_EVIDENCE", "HELPER_LABEL", "doctor_lines", "helper_location", "owns_fix", "settle_helper"]


def doctor_lines(findings, index, root) -> list[str]:
    """`doctor`'s paragraph on this family: its sites, what makes a layer quantizable here (the
    base layer an adapter wraps), and where the helper its fixes import lives (or would be created)."""
    from dtype_lint.ecosystems.hf.helper import HF_HELPER_NAME, helper_homes, is_hf_fix

    ours = [f for f in findings if any(FAMILY_EVIDENCE in e.message for e in f.evidence)]
    if not ours:
        return []
    lines = [f"family: an adapter library ({len(ours)} site{'s' if len(ours) != 1 else ''})",
             "  quantizable roots: the base layer each adapter wraps (`get_base_layer()`, `self.base_layer`, "
             "a `base_layer` parameter): the loaded model's layer, which bitsandbytes, GPTQ, AWQ, HQQ, FP8 or "
             "GGUF replaced before the adapter was attached; the adapters' own layers are never quantized"]
    fixed = [finding for finding in ours if finding.fix is not None and is_hf_fix(finding)]
    return lines + helper_homes(fixed, helper_location, HF_HELPER_NAME, index, root)
