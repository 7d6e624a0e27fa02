"""Tiny Hugging Face models built from a config class's defaults, for the run-time oracle
(scripts/oracle_sweep.py): no weights are downloaded; every model is built with seeded random
weights from its config class with the sizes shrunk.

The shrinker is generic: it reads the default config as a dict (sub-configs are nested dicts),
and replaces every integer whose key names a size (hidden, intermediate, layers, heads,
vocabulary, experts, image and patch sizes, ...) with a small value, recursively. The small values
are chosen for bitsandbytes' CPU 4-bit, which needs each replaced linear's `in_features >= 64` and
`out_features % 32 == 0`: hidden 64, intermediate 128, heads 4 of 16 dims. Lists whose length was
the layer count (`layer_types`, ...) are cut to the new count. Token ids past the new vocabulary
are moved inside it, at its top, so dummy inputs (drawn from the bottom) never hit them.

What cannot be built this way (a config whose __init__ rejects the small sizes, a model that needs
a processor's inputs, ...) is recorded with the first line of its error by the sweep, not fixed
here class by class: the point is a wide generic sweep, and its failures are counted and named.
"""

from __future__ import annotations

import re
from typing import Any

HIDDEN = 64
INTERMEDIATE = 128
LAYERS = 2
HEADS = 4
HEAD_DIM = 16
VOCAB = 512
POSITIONS = 512
EXPERTS = 4
IMAGE_SIZE = 32
PATCH_SIZE = 8
SEQUENCE = 8  # dummy text length
INPUT_ID_RANGE = 100  # dummy ids are drawn below this; special tokens are moved above it

# key (exact, lower case) -> the small value. Exact names first: the patterns below are broader.
EXACT: dict[str, int] = {
    "vocab_size": VOCAB, "n_vocab": VOCAB, "text_vocab_size": VOCAB, "vision_vocab_size": VOCAB,
    "num_key_value_heads": HEADS, "num_kv_heads": HEADS, "n_kv_heads": HEADS, "multi_query_group_num": HEADS,
    "head_dim": HEAD_DIM, "d_kv": HEAD_DIM, "attention_head_dim": HEAD_DIM, "kv_channels": HEAD_DIM,
    "qk_nope_head_dim": HEAD_DIM, "qk_rope_head_dim": 32, "v_head_dim": HEAD_DIM, "qk_head_dim": HEAD_DIM,
    "kv_lora_rank": HIDDEN, "q_lora_rank": HIDDEN,
    "num_experts_per_tok": 2, "num_experts_per_token": 2, "moe_topk": 2, "top_k": 2, "n_group": 1, "topk_group": 1,
    "first_k_dense_replace": 1, "num_shared_experts": 1, "n_shared_experts": 1,
    "image_size": IMAGE_SIZE, "img_size": IMAGE_SIZE, "patch_size": PATCH_SIZE,
    "max_position_embeddings": POSITIONS, "n_positions": POSITIONS, "max_positions": POSITIONS,
    "n_ctx": POSITIONS, "max_source_positions": 64, "max_target_positions": POSITIONS,
    "sliding_window": 4, "attention_window": 4, "num_mel_bins": 16, "num_codebooks": 2,
    "conv_kernel_size": 3, "linear_conv_kernel_dim": 3, "state_size": 16, "ssm_state_size": 16,
    "time_step_rank": 8, "mamba_d_state": 16, "mamba_d_conv": 4, "mamba_n_heads": 8, "mamba_head_dim": 16,
    "linear_num_key_heads": HEADS, "linear_num_value_heads": HEADS, "linear_key_head_dim": HEAD_DIM,
    "linear_value_head_dim": HEAD_DIM, "num_labels": 2, "num_queries": 8, "num_query_tokens": 8,
}
# (pattern on the lower-case key, value): the first that matches wins.
PATTERNS: list[tuple[re.Pattern[str], int]] = [(re.compile(p), v) for p, v in [
    (r"(^|_)(num|n)_?(hidden_)?layers?$|_layers$|^n_layer$|^num_blocks$|^depth$", LAYERS),
    (r"(^|_)(num_)?(attention_)?heads$|^n_heads?$|_attention_heads$", HEADS),
    (r"(intermediate|ffn|inner|d_ff|mlp_dim|feed_forward)", INTERMEDIATE),
    (r"(^|_)(hidden_size|d_model|n_embd|embed_dim|hidden_dim|model_dim|dim|projection_dim|embedding_size|"
     r"embedding_dim|hidden_channels|proj_dim|width)$|_hidden_size$|_embed_dim$|_dim$", HIDDEN),
    (r"(^|_)(num_)?(local_|routed_)?experts$|^n_routed_experts$|^moe_num_experts$", EXPERTS),
    (r"_vocab$|_vocab_size$", VOCAB),
    (r"^hidden_size_|_window_len$", HIDDEN),
]]
LAYER_COUNT_KEYS = re.compile(r"(^|_)(num|n)_?(hidden_)?layers?$|^n_layer$|^num_blocks$")
TOKEN_KEY = re.compile(r"_token_id$|_token_index$|^image_token_id$|_token_ids?$")
# Keys whose integers must stay as they are (flags, ratios held as ints, ids handled apart).
KEEP = re.compile(r"(feat_extract_layers|token|_id$|_ids$|^id2label|label2id|^num_channels$|channels?$|seed|"
                  r"^torch_dtype|"
                  r"_ratio$|factor|^type_vocab_size$|stride|dilation|^pad_|groups?$|bins?$|_every|interval|"
                  r"_index$|^layer_types$|freq|theta|^max_window_layers$|^(rope|partial)_)")


def _small(key: str, value: int) -> int | None:
    lowered = key.lower()
    if lowered in EXACT:
        return min(value, EXACT[lowered]) if value > 0 else value
    if KEEP.search(lowered):
        return None
    for pattern, small in PATTERNS:
        if pattern.search(lowered):
            return min(value, small) if value > 0 else value
    return None


def shrink_dict(config: dict[str, Any]) -> dict[str, Any]:
    """The config dict with its sizes shrunk, nested configs too (see the module's docstring)."""
    out: dict[str, Any] = {}
    old_layers = next((v for k, v in config.items() if LAYER_COUNT_KEYS.search(k.lower()) and isinstance(v, int)), None)
    for key, value in config.items():
        if isinstance(value, bool) or value is None:
            out[key] = value
        elif isinstance(value, dict) and not key.startswith(("id2label", "label2id", "rope_")):
            out[key] = shrink_dict(value)
        elif isinstance(value, int):
            small = _small(key, value)
            out[key] = value if small is None else small
        elif isinstance(value, list) and old_layers and len(value) == old_layers and old_layers > LAYERS:
            out[key] = value[:LAYERS]  # per-layer lists (layer_types, ...) follow the new count
        elif isinstance(value, list) and value and all(isinstance(v, int) and not isinstance(v, bool) for v in value):
            smaller = [_small(key, v) for v in value]
            out[key] = [v if s is None else s for v, s in zip(value, smaller)]
        else:
            out[key] = value
    _move_token_ids(out)
    return out


def _move_token_ids(config: dict[str, Any]) -> None:
    """Token ids beyond the new vocabulary go to its top (distinct ids, none below the dummy range).
    A composite config's ids (`image_token_id` beside a `text_config`) index the text vocabulary."""
    vocab = config.get("vocab_size")
    if not isinstance(vocab, int):
        text = config.get("text_config")
        vocab = text.get("vocab_size") if isinstance(text, dict) else None
    if not isinstance(vocab, int):
        return
    next_free = vocab - 1
    for key, value in config.items():
        if not TOKEN_KEY.search(key.lower()):
            continue
        if isinstance(value, int) and not isinstance(value, bool) and value >= vocab:
            config[key] = next_free
            next_free -= 1
        elif isinstance(value, list) and any(isinstance(v, int) and v >= vocab for v in value):
            config[key] = [next_free - i if isinstance(v, int) and v >= vocab else v for i, v in enumerate(value)]
            next_free -= len(value)


def tiny_config(config_cls):
    """An instance of `config_cls` with its defaults shrunk."""
    defaults = config_cls().to_dict()
    defaults.pop("transformers_version", None)
    return config_cls.from_dict(shrink_dict(defaults))


def input_candidates(model, config) -> list[dict[str, Any]]:
    """The inputs to try, in order: the main input alone, then (for a text model whose forward also
    takes images, as CLIP-style dual encoders do) with `pixel_values` added."""
    import inspect

    first = dummy_inputs(model, config)
    out = [first]
    try:
        parameters = inspect.signature(model.forward).parameters
    except (TypeError, ValueError):
        return out
    if "input_ids" in first and "pixel_values" in parameters:
        vision = getattr(config, "vision_config", None) or config
        both = dict(first)
        both.update(dummy_inputs(_Named("pixel_values"), vision))
        out.append(both)
    if "attention_mask" in parameters and "input_ids" in first:
        out.append(first | {"attention_mask": _ones_like(first["input_ids"])})
    return out


class _Named:
    def __init__(self, name: str) -> None:
        self.main_input_name = name


def _ones_like(tensor):
    import torch

    return torch.ones_like(tensor)


def dummy_inputs(model, config) -> dict[str, Any]:
    """Inputs for one forward, from the model's main input name (seeded)."""
    import torch

    generator = torch.Generator().manual_seed(1)
    name = getattr(model, "main_input_name", "input_ids")
    inputs: dict[str, Any] = {}
    if name in ("input_ids", "decoder_input_ids"):
        inputs["input_ids"] = torch.randint(1, INPUT_ID_RANGE, (1, SEQUENCE), generator=generator)
    elif name in ("pixel_values", "pixel_values_videos"):
        channels = _find(config, "num_channels", 3)
        size = _find(config, "image_size", IMAGE_SIZE)
        size = size[0] if isinstance(size, (list, tuple)) else size
        inputs[name] = torch.rand(1, channels, size, size, generator=generator)
    elif name == "input_values":
        inputs[name] = torch.randn(1, 1600, generator=generator)
    elif name == "input_features":
        bins = _find(config, "num_mel_bins", _find(config, "feature_size", 16))
        frames = 2 * _find(config, "max_source_positions", 32)
        inputs[name] = torch.randn(1, bins, frames, generator=generator)
    elif name == "inputs_embeds":
        inputs[name] = torch.randn(1, SEQUENCE, _find(config, "hidden_size", HIDDEN), generator=generator)
    else:
        raise ValueError(f"no dummy input for main input `{name}`")
    if getattr(config, "is_encoder_decoder", False) and "input_ids" in inputs:
        inputs["decoder_input_ids"] = inputs["input_ids"].clone()
    return inputs


def _find(config, attribute: str, default):
    """`config.attribute`, or the first sub-config's."""
    if hasattr(config, attribute) and getattr(config, attribute) is not None:
        return getattr(config, attribute)
    for sub in getattr(config, "sub_configs", {}) or {}:
        value = getattr(getattr(config, sub, None), attribute, None)
        if value is not None:
            return value
    return default
