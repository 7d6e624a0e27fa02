"""vLLM's passages in the rules' pages: the backends a page names where it explains the bug class
by example (Marlin's int32 repack, NVFP4's uint8, AWQ/GPTQ's missing `.weight`), and the attribute its
"Use instead" code reads the model dtype from.

A rule module's docstring is its page (`dtype-lint rule CODE`, docs/rules/CODE.md, the SARIF
report's help); where it would name an ecosystem's backends it holds a slot, `{{name}}`, which
reporters/rule_metadata.py fills with the first ecosystem's passage of that name (the registry's
`rule_words` role, analysis layer: a passage is data a rule's message may use too).
"""

from __future__ import annotations

from dtype_lint.ecosystems.vllm.layer_attributes import MODEL_DTYPE_ATTRIBUTES

PASSAGES: dict[str, str] = {
    # The attribute a layer states its model (compute) dtype under, as example code reads it.
    "model_dtype": MODEL_DTYPE_ATTRIBUTES[0],
    # A storage the storage model reads from a backend's code (a "Which backends" section).
    "repack": "a Marlin repack",
    # The storage a layer has only after loading, not in a serialized checkpoint.
    "after_loading": "Marlin's int32",
    # DTL001's "Why is this bad?": what the weight is under the best-known backends, and vLLM's own
    # crashes of this shape.
    "DTL001.storages": ("Marlin stores FP8 weights as\n`torch.int32`, NVFP4 as `torch.uint8`, FP8 as "
                        "`float8_e4m3fn`, and AWQ/GPTQ layers have no\n`.weight` at all. The storage dtype of "
                        "a weight is not the compute dtype of its input. vLLM's MLA\nprefill did "
                        "`kv_c_normed.to(self.kv_b_proj.weight.dtype)` and crashed with\n``unsupported `a` "
                        "scalar_type`` on Marlin FP8 (vLLM issue #38658, fixed by PR #38771); the same\nshape "
                        "raised `AttributeError: ... no attribute 'weight'` on AWQ (PR #34695)."),
    # DTL002's "Why is this bad?": what the weight is under the best-known backends.
    "DTL002.storages": ("Under Marlin FP8 the weight is `torch.int32`, under NVFP4 `torch.uint8`, and AWQ/GPTQ "
                        "layers have\nno `.weight` at all"),
}
