"""The quantizer family's helper role: its sites are fixed through the Hugging Face helper
(`get_module_input_dtype`, ecosystems/hf/helper.py), which that ecosystem's helper role creates
and settles, so this one owns no fix; it speaks for the family in `doctor`."""

from __future__ import annotations

from dtype_lint.ecosystems.hf.helper import ROUTED_HELPER_LABEL as HELPER_LABEL
from dtype_lint.ecosystems.hf.helper import helper_location
from dtype_lint.ecosystems.hf.helper import routed_owns_fix as owns_fix
from dtype_lint.ecosystems.hf.helper import routed_settle_helper as settle_helper

__all__ = ["HELPER_LABEL", "doctor_lines", "helper_location", "owns_fix", "settle_helper"]


def doctor_lines(findings, index, root) -> list[str]:
    """`doctor`'s paragraph on this family: its sites, what makes a layer quantizable here, and
    where the helper its fixes import lives (or would be created)."""
    from dtype_lint.ecosystems.hf.helper import HF_HELPER_NAME, helper_homes, is_hf_fix
    from dtype_lint.ecosystems.quantizers.family import FAMILY_EVIDENCE

    ours = [f for f in findings if any(FAMILY_EVIDENCE in e.message for e in f.evidence)]
    if not ours:
        return []
    lines = [f"family: a project that quantizes its own modules ({len(ours)} site{'s' if len(ours) != 1 else ''})",
             "  quantizable roots: `nn.Linear` and its subclasses in a model the project hands to bitsandbytes "
             "(`replace_with_bnb_linear`, a swap to `bnb.nn.Linear4bit`/`Linear8bitLt`, Lightning Fabric's "
             "`BitsandbytesPrecision` plugin) or `mtq.compress`; "
             "torchao, optimum-quanto and `mtq.quantize` keep a float `.dtype`"]
    fixed = [finding for finding in ours if finding.fix is not None and is_hf_fix(finding)]
    return lines + helper_homes(fixed, helper_location, HF_HELPER_NAME, index, root, with_path=False)
