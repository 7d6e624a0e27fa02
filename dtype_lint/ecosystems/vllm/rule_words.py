"""vLLM's passages in the rules' pages: the backends a page names where it explains the bug class
by example (Marlin's int32 repack, NVFP4's uint8, AWQ/GPTQ's missing `.weight`), and the attribute its
"Use instead" code reads the model dtype from.

A rule module's docstring is its page (`dtype-lint rule CODE`, docs/rules/CODE.md, the SARIF
report's help); where it would name an ecosystem's backends it holds a slot, `{{name}}`, which
reporters/rule_metadata.py fills with the first ecosystem's passage of that name (the registry's
`rule_words` role, analysis layer: a rule's message reads a passage too, `registry.passages()`).
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
    # DTL004: a container dtype several formats share; how a hand copy drifted in vLLM; what a hand
    # copy misses as backends change (in its message).
    "shared_container": "`uint8` holding NVFP4 and MXFP4 alike",
    "DTL004.drift": ("vLLM 0.27.1's MLA prefill guarded its cast with\n`(use_fp8_prefill or w != "
                     "current_platform.fp8_dtype()) and w != torch.uint8`: it knew NVFP4 and\nfp8 but not "
                     "Marlin's int32 repack, and crashed (vLLM issue #38658); it still casts to int8 under\n"
                     "W8A8-INT8 today wherever the copy survives."),
    "backends_change": "int32 under Marlin, int8 under W8A8, no `.weight` under AWQ",
    # DTL003's summary: the best-known layers without `.weight`.
    "no_weight_short": "AWQ/GPTQ",
    # DTL003's message where its evidence names no backend: the storages without `.weight`.
    "no_weight": "AWQ/GPTQ (`qweight`), compressed-tensors WNA16 (`weight_packed`) and GGUF layers have no `.weight`",
    # DTL003's known limits: a backend a backend check trusts although some of its layers have no `.weight`.
    "no_weight_checked": "compressed-tensors (whose WNA16 layers have no `.weight`)",
    # DTL003's "Why is this bad?": what the best-known backends store instead of `.weight`, and
    # vLLM's own crash of this shape.
    "DTL003.storages": ("AWQ and GPTQ layers store `qweight`, `qzeros` and\n`scales`; compressed-tensors WNA16 "
                        "stores `weight_packed` (linear layers and embeddings); GGUF\nstores `qweight`. On those, "
                        "`layer.weight` raises `AttributeError` (`nn.Module.__getattr__`).\nvLLM's MLA crashed that "
                        "way on AWQ/GPTQ DeepSeek checkpoints (PR #34695), in code that read\n"
                        "`self.kv_b_proj.weight.dtype` to choose a cast."),
    # DTL005's "Why is this bad?": vLLM's own unsound helper, and where the docs trace it.
    "DTL005.upstream": ("vLLM 0.28.0's `_get_kv_b_proj_input_dtype` (PR #38771) maps int32 to\n`params_dtype`, "
                        "uint8 to None and fp8 to None without fp8 prefill, then falls through to\n`return "
                        "weight_dtype`: a `kv_b_proj` with `torch.int8` storage (compressed-tensors or Quark\n"
                        "W8A8-INT8) gets its latent cast to int8, truncating it.\n\nIt also keeps an fp8 activation "
                        "for an NVFP4 (uint8) `kv_b_proj` during fp8 prefill, a path that\nis reachable upstream; "
                        "docs/mla-fp8-prefill.md traces it through vLLM 0.28.0 and 0.33.0 line by\nline, and lists "
                        "what this rule finds in vLLM 0.27.1, 0.28.0 and 0.33.0."),
    # DTL005's known limits: the int4-in-int32 layouts the helper evaluator does not model.
    "unevaluated_int4": "int4 in int32 words other than Marlin's",
    # DTL002's "Why is this bad?": what the weight is under the best-known backends.
    "DTL002.storages": ("Under Marlin FP8 the weight is `torch.int32`, under NVFP4 `torch.uint8`, and AWQ/GPTQ "
                        "layers have\nno `.weight` at all"),
}
