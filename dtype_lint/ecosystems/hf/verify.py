"""Proof with the real quantizers on CPU: Hugging Face model classes whose code dtype-lint reports,
before and after the fix, under bitsandbytes 4-bit and 8-bit (the `hf` extra), and under the
quantizers whose layers report a float `.dtype` (optimum-quanto int8, torchao int8 weight-only:
the `hf` extra too), where the release's cast is harmless and the fix must change nothing.

For each case: the real release's model file (transformers 5.23.0 as installed, the same text as
the cached `.py` tree) and its fixed version (that file with the reported site routed through the
HF helper template, `get_module_input_dtype`, loaded as a module of the same package so its
relative imports resolve). A tiny model is built from a config with seeded random weights (no
weights downloaded), saved, and reloaded three ways: unquantized (the twin), quantized with the
release's code, quantized with the fixed code. The release's code must crash or change its output
far beyond the quantizer's own error; the fixed code must run and match the twin within it.

The quantizer's own error is measured, not assumed: the same fixed model quantized, against the
twin, is what the quantizer costs; the release's code is "changed" when its error is more than
`CHANGED_FACTOR` times that, or not finite, or its output dtype is not the twin's.

Usage: `python -m dtype_lint.ecosystems.hf.verify` prints the table (markdown); exit 1 if a case fails.
"""

from __future__ import annotations

import importlib
import importlib.util
import sys
import tempfile
import traceback
from collections.abc import Callable
from typing import Any

from dtype_lint.core.records import record
from dtype_lint.ecosystems.hf.helper import HF_HELPER_SOURCE

CHANGED_FACTOR = 3.0
# bitsandbytes' own error on these random tiny models stays well under this (measured per case).
MAX_OWN_ERROR = {"bnb-4bit": 0.5, "bnb-8bit": 0.2, "quanto-int8": 0.2, "torchao-int8": 0.2}
BNB = ("bnb-4bit", "bnb-8bit")
# Layers whose `.weight.dtype` is the float dtype (quanto's QLinear keeps a float-typed
# QTensor, torchao an AffineQuantizedTensor subclass): the release's cast is safe under them.
FLOAT_DTYPE = ("quanto-int8", "torchao-int8")
# torchao's loader asks every model for `get_input_embeddings` (integrations/torchao.py 91):
# the speech and vision encoders here have none, so it runs on the T5 family only.
TORCHAO_MODELS = ("LongT5Model", "SwitchTransformersModel")


def quantizers_for(case: "Case") -> tuple[str, ...]:
    """The quantizers a case runs under: bitsandbytes always, quanto and torchao where their
    packages are installed (and torchao's loader accepts the model)."""
    out = list(BNB)
    if importlib.util.find_spec("optimum") is not None and importlib.util.find_spec("optimum.quanto") is not None:
        out.append("quanto-int8")
    if importlib.util.find_spec("torchao") is not None and case.model in TORCHAO_MODELS:
        out.append("torchao-int8")
    return tuple(out)


def quantization_config(quantizer: str):
    import torch
    from transformers import BitsAndBytesConfig

    if quantizer == "bnb-4bit":
        return BitsAndBytesConfig(load_in_4bit=True, bnb_4bit_compute_dtype=torch.float32)
    if quantizer == "bnb-8bit":
        return BitsAndBytesConfig(load_in_8bit=True)
    if quantizer == "quanto-int8":
        from transformers import QuantoConfig

        return QuantoConfig(weights="int8")
    if quantizer == "torchao-int8":
        from torchao.quantization import Int8WeightOnlyConfig
        from transformers import TorchAoConfig

        return TorchAoConfig(Int8WeightOnlyConfig())
    raise ValueError(f"unknown quantizer {quantizer!r}")


@record
class Case:
    model: str  # the model class
    module: str  # its modeling module
    site: str  # the reported line's text in the release
    fixed: str  # the same line routed through the helper
    config: Callable[[], object]
    inputs: Callable[[object], dict]
    output: Callable[[Any], object]  # the tensor compared (from a model output mypy cannot type)
    # The quantizers whose storage the release's code breaks on; on the others its own guard holds
    # (T5-style `!= torch.int8` handles bitsandbytes 8-bit), and the row shows that it does.
    breaks: tuple[str, ...] = ("bnb-4bit", "bnb-8bit")


def _tensor(out, name):
    return getattr(out, name)


def _cases() -> list[Case]:
    import torch
    from transformers import (
        LongT5Config,
        Siglip2VisionConfig,
        SwitchTransformersConfig,
        UniSpeechConfig,
        Wav2Vec2Config,
        Wav2Vec2ConformerConfig,
    )

    def t5_inputs(_cfg):
        g = torch.Generator().manual_seed(1)
        ids = torch.randint(0, 128, (2, 8), generator=g)
        return {"input_ids": ids, "decoder_input_ids": ids}

    t5_like: dict[str, Any] = dict(vocab_size=128, d_model=64, d_kv=16, d_ff=128, num_layers=1, num_heads=4,
                   decoder_start_token_id=0, pad_token_id=0)
    # Every replaced linear: in_features >= 64, out_features a multiple of 32 (bitsandbytes' CPU 4-bit).
    speech: dict[str, Any] = dict(hidden_size=64, num_hidden_layers=1, num_attention_heads=4, intermediate_size=128,
                  conv_dim=(64, 64), conv_stride=(5, 2), conv_kernel=(10, 3), num_conv_pos_embeddings=16,
                  num_conv_pos_embedding_groups=4, codevector_dim=64, proj_codevector_dim=64,
                  num_codevector_groups=2, num_codevectors_per_group=32, do_stable_layer_norm=True,
                  feat_extract_norm="layer", mask_time_prob=0.0)
    wo_site = "hidden_states = hidden_states.to(self.wo.weight.dtype)"
    wo_fixed = "hidden_states = hidden_states.to(get_module_input_dtype(self.wo) or hidden_states.dtype)"
    cases = [
        Case("LongT5Model", "transformers.models.longt5.modeling_longt5", wo_site, wo_fixed,
             lambda: LongT5Config(**t5_like, num_decoder_layers=1, encoder_attention_type="local"),
             t5_inputs, lambda out: out.last_hidden_state, ("bnb-4bit",)),
        Case("SwitchTransformersModel", "transformers.models.switch_transformers.modeling_switch_transformers",
             wo_site, wo_fixed,
             lambda: SwitchTransformersConfig(**t5_like, num_decoder_layers=1, num_sparse_encoder_layers=0,
                                              num_sparse_decoder_layers=0, num_experts=32),
             t5_inputs, lambda out: out.last_hidden_state, ("bnb-4bit",)),
        Case("Siglip2VisionModel", "transformers.models.siglip2.modeling_siglip2",
             "patch_embeds = self.patch_embedding(pixel_values.to(dtype=target_dtype))",
             "patch_embeds = self.patch_embedding(pixel_values.to(dtype=get_module_input_dtype(self.patch_embedding) "
             "or pixel_values.dtype))",
             lambda: Siglip2VisionConfig(hidden_size=64, intermediate_size=128, num_hidden_layers=1,
                                         num_attention_heads=4, num_channels=3, patch_size=8, num_patches=16,
                                         vision_use_head=False),
             lambda _c: {"pixel_values": torch.rand(1, 16, 192, generator=torch.Generator().manual_seed(1)),
                         "pixel_attention_mask": torch.ones(1, 16, dtype=torch.long),
                         "spatial_shapes": torch.tensor([[4, 4]])},
             lambda out: out.last_hidden_state),
        Case("Wav2Vec2ForPreTraining", "transformers.models.wav2vec2.modeling_wav2vec2",
             "quantized_features = quantized_features.to(self.project_q.weight.dtype)",
             "quantized_features = quantized_features.to(get_module_input_dtype(self.project_q) "
             "or quantized_features.dtype)",
             lambda: Wav2Vec2Config(**speech),
             lambda _c: {"input_values": torch.randn(1, 1600, generator=torch.Generator().manual_seed(1))},
             lambda out: out.projected_quantized_states),
        Case("Wav2Vec2ConformerForPreTraining", "transformers.models.wav2vec2_conformer.modeling_wav2vec2_conformer",
             "quantized_features = quantized_features.to(self.project_q.weight.dtype)",
             "quantized_features = quantized_features.to(get_module_input_dtype(self.project_q) "
             "or quantized_features.dtype)",
             lambda: Wav2Vec2ConformerConfig(**speech),
             lambda _c: {"input_values": torch.randn(1, 1600, generator=torch.Generator().manual_seed(1))},
             lambda out: out.projected_quantized_states),
        Case("UniSpeechForPreTraining", "transformers.models.unispeech.modeling_unispeech",
             "quantized_features = self.project_q(quantized_features.to(self.project_q.weight.dtype))",
             "quantized_features = self.project_q(quantized_features.to(get_module_input_dtype(self.project_q) "
             "or quantized_features.dtype))",
             lambda: UniSpeechConfig(**speech, num_ctc_classes=64),
             lambda _c: {"input_values": torch.randn(1, 1600, generator=torch.Generator().manual_seed(1))},
             lambda out: out.projected_quantized_states),
    ]
    return cases


def load_fixed_module(module_name: str, fixed_text: str):
    """`module_name` as a second module whose source is `fixed_text` with the HF helper appended,
    in the same package (so its relative imports resolve) and under the same file name plus
    ` (fixed)` (so its frames name the release's file): (the original module, the fixed one)."""
    original = importlib.import_module(module_name)
    spec = importlib.util.spec_from_loader(module_name + "_dtype_lint_fixed", loader=None)
    assert spec is not None  # a name and no loader always make a spec
    assert original.__file__ is not None  # a transformers module is a file
    module = importlib.util.module_from_spec(spec)
    module.__package__ = module_name.rpartition(".")[0]
    module.__file__ = original.__file__
    sys.modules[spec.name] = module
    exec(compile(fixed_text + "\n\n" + HF_HELPER_SOURCE, original.__file__ + " (fixed)", "exec"), module.__dict__)
    return original, module


def _fixed_module(case: Case):
    """The release's module with the site fixed and the helper appended, under the same package."""
    original = importlib.import_module(case.module)
    assert original.__file__ is not None  # a transformers module is a file
    with open(original.__file__, encoding="utf-8") as handle:
        text = handle.read()
    if text.count(case.site) < 1:
        raise AssertionError(f"{case.module}: the reported site `{case.site}` is not in the release's file")
    return load_fixed_module(case.module, text.replace(case.site, case.fixed))


def _run(model_cls, path, config, inputs, output, quant):
    import torch

    kwargs = {"quantization_config": quant} if quant is not None else {}
    model = model_cls.from_pretrained(path, config=config, **kwargs).eval()
    with torch.no_grad():
        return output(model(**inputs))


def relative_error(a, b) -> float:
    """|a - b| / |b| (inf where the shapes differ or `a` is not finite)."""
    import torch

    if a.shape != b.shape:
        return float("inf")
    a, b = a.float(), b.float()
    if not torch.isfinite(a).all():
        return float("inf")
    return float((a - b).norm() / b.norm().clamp_min(1e-12))


def verify_case(case: Case, quantizer: str) -> dict:
    import torch

    quant = quantization_config(quantizer)
    original, fixed = _fixed_module(case)
    torch.manual_seed(0)
    config = case.config()
    with tempfile.TemporaryDirectory() as tmp:
        getattr(original, case.model)(config).save_pretrained(tmp)
        inputs = case.inputs(config)
        twin = _run(getattr(fixed, case.model), tmp, config, inputs, case.output, None)
        after = _run(getattr(fixed, case.model), tmp, config, inputs, case.output, quant)
        own = relative_error(after, twin)
        try:
            before = _run(getattr(original, case.model), tmp, config, inputs, case.output, quant)
            before_err = relative_error(before, twin)
            before_text = f"runs, rel. error {before_err:.3g}, dtype {str(before.dtype).removeprefix('torch.')}"
            broken = before_err > CHANGED_FACTOR * max(own, 1e-3) or before.dtype != twin.dtype
            if quantizer not in case.breaks:  # the release's own guard holds here: it must match too
                broken = before_err <= MAX_OWN_ERROR[quantizer] and before.dtype == twin.dtype
        except Exception as error:  # noqa: BLE001 - the crash is the finding
            before_text = f"{type(error).__name__}: {str(error).splitlines()[0][:80]}"
            broken = quantizer in case.breaks
    ok_after = after.dtype == twin.dtype and own <= MAX_OWN_ERROR[quantizer]
    return {"model": case.model, "quantizer": quantizer, "before": before_text,
            "after": f"rel. error {own:.3g} (the quantizer's own)", "proven": broken and ok_after,
            "expected": "breaks" if quantizer in case.breaks else
            ("safe (float `.dtype`)" if quantizer in FLOAT_DTYPE else "its guard holds")}


def main() -> int:
    rows = []
    for case in _cases():
        for quantizer in quantizers_for(case):
            try:
                rows.append(verify_case(case, quantizer))
            except Exception as error:  # noqa: BLE001 - a harness failure is a failed row, with why
                rows.append({"model": case.model, "quantizer": quantizer, "before": "-",
                             "after": f"harness error: {type(error).__name__}: {str(error).splitlines()[0][:100]}",
                             "proven": False})
                traceback.print_exc(file=sys.stderr)
    print("| model class | quantizer | release's code (expected) | release's code | fixed code | proven |")
    print("|---|---|---|---|---|---|")
    for row in rows:
        print(f"| {row['model']} | {row['quantizer']} | {row.get('expected', '-')} | {row['before']} | "
              f"{row['after']} | {'yes' if row['proven'] else 'NO'} |")
    return 0 if all(r["proven"] for r in rows) else 1


if __name__ == "__main__":
    raise SystemExit(main())
