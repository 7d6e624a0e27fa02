"""The first patch of a Hugging Face migration series: the HF helper added to the project's torch
utilities (ecosystems/hf/helper.py), and each site patch's proof where hf_verify runs its model class.

Plugged in by the registry's `series` role (consumers layer): migrate/migration.py asks every
ecosystem's `series_patch` for a first patch, and takes the first one's `patch_proof`."""

from __future__ import annotations

from dtype_lint.ecosystems.hf.helper import HF_HELPER_NAME, settle_hf_helper


def series_patch(result, root, rel):
    """The first patch of an HF migration series: the helper added to its home, or None when no
    fix of the run routes through it (or the home already defines it)."""
    from dtype_lint.migrate import messages, series

    changes = [series.FileChange(rel(path), expect, data)
               for path, data, expect in settle_hf_helper(result.outcomes, _Locator(root), root)]
    if not changes:
        return None
    homes = ", ".join(f"`{c.path}`" for c in changes)
    body = "\n".join([
        messages.wrap("Hugging Face quantizers replace a model's modules at load time, so "
                     "`module.weight.dtype` is a storage dtype there (uint8 under bitsandbytes 4-bit and "
                     "GGUF, int8 under bitsandbytes 8-bit, float8 under FP8 layers and diffusers' layerwise "
                     "casting) or `.weight` is absent (GPTQ, AWQ, HQQ). Activations cast to it crash or "
                     "silently lose their values."), "",
        messages.wrap(f"This adds `{HF_HELPER_NAME}(module)` to {homes}: the dtype the module's forward "
                     "expects of its input, or None to keep the activation's dtype:"), "",
        "    a float weight that is not fp8 (unquantized,",
        "      quanto, torchao)                                -> the weight dtype",
        "    otherwise the module's compute_dtype",
        "      (bitsandbytes 4-bit)                            -> that dtype",
        "    int8/uint8/fp8 storage, or no .weight             -> None",
        "",
        messages.wrap("Verified: `python -m dtype_lint.ecosystems.hf.verify` runs real bitsandbytes 4-bit and 8-bit "
                     "on CPU over tiny models built from configs; the table is in docs/hf.md of dtype-lint."),
    ])
    return series.Patch(f"Add {HF_HELPER_NAME}: one helper decides a module's input dtype", body, changes)


class _Locator:
    """index.modules for settle_hf_helper, from the series root's files."""

    def __init__(self, root):
        from pathlib import Path

        self.root = Path(root)
        self.modules = self

    def get(self, module):
        path = self.root.joinpath(*module.split(".")).with_suffix(".py")
        return type("Header", (), {"path": str(path)}) if path.is_file() else None


# The rows `python -m dtype_lint.ecosystems.hf.verify` printed for each model file (docs/hf.md's table), for
# the commit messages of a series.
VERIFIED = {
    "transformers/models/longt5/modeling_longt5.py": "LongT5Model",
    "transformers/models/switch_transformers/modeling_switch_transformers.py": "SwitchTransformersModel",
    "transformers/models/siglip2/modeling_siglip2.py": "Siglip2VisionModel",
    "transformers/models/wav2vec2/modeling_wav2vec2.py": "Wav2Vec2ForPreTraining",
    "transformers/models/wav2vec2_conformer/modeling_wav2vec2_conformer.py": "Wav2Vec2ConformerForPreTraining",
    "transformers/models/unispeech/modeling_unispeech.py": "UniSpeechForPreTraining",
}


# The command that proves a patch (ecosystems/hf/verify.py), as the messages name it: the
# regression tests keep a message's proof paragraph by it (regression.py).
PROOF_COMMAND = "python -m dtype_lint.ecosystems.hf.verify"


def patch_proof(changes) -> str | None:
    """A patch's executable proof, where hf_verify runs its model class under bitsandbytes."""
    models = sorted({VERIFIED[c.path] for c in changes if c.path in VERIFIED})
    if not models:
        return None
    return (f"- with real bitsandbytes 4-bit and 8-bit on CPU (`{PROOF_COMMAND}`),\n"
            f"  a tiny {', '.join(models)} built from a config: the release's code\n"
            "  crashes or returns an unrelated output (uint8, or an error of about\n"
            "  100%); the patched code matches an unquantized twin within the\n"
            "  quantizer's own error.")
