"""Tiny diffusers models for the run-time oracle (scripts/oracle_diffusers.py): each `ModelMixin`
class built from its `__init__` defaults with the sizes shrunk by the same shrinker as the
transformers configs (dtype_lint/ecosystems/hf/tiny_models.py), plus the keys diffusers names its own way
(`block_out_channels`, `layers_per_block`, ...), and dummy inputs read from the forward signature.

What cannot be built or run this way is recorded by the sweep with the first line of its error:
the point is a wide generic sweep whose failures are counted, not a recipe per class.
"""

from __future__ import annotations

import inspect
import itertools
from typing import Any

from dtype_lint.ecosystems.hf.tiny_models import HIDDEN, LAYERS, SEQUENCE, shrink_dict

# diffusers-only size keys: channel lists stay 64-wide (a multiple of the default 32 norm groups,
# and bitsandbytes' CPU 4-bit needs in_features >= 64); one layer per block is enough to run each.
CHANNEL_LISTS = ("block_out_channels", "down_block_out_channels", "up_block_out_channels", "channels")
ONE = ("layers_per_block", "transformer_layers_per_block", "num_res_blocks", "num_single_layers",
       "num_refiner_layers", "num_layers_per_block")
SPATIAL = 8  # the dummy latent's height and width
FRAMES = 2


def init_defaults(model_cls) -> dict[str, Any]:
    """The keyword defaults of `model_cls.__init__` (what `register_to_config` would record)."""
    signature = inspect.signature(model_cls.__init__)
    return {name: parameter.default for name, parameter in signature.parameters.items()
            if name != "self" and parameter.default is not inspect.Parameter.empty
            and parameter.kind in (parameter.POSITIONAL_OR_KEYWORD, parameter.KEYWORD_ONLY)}


def tiny_kwargs(model_cls) -> dict[str, Any]:
    """`model_cls.__init__`'s defaults with the sizes shrunk."""
    kwargs = shrink_dict(init_defaults(model_cls))
    for key, value in list(kwargs.items()):
        if key in CHANNEL_LISTS and isinstance(value, (list, tuple)) and value and \
                all(isinstance(v, int) for v in value):
            kwargs[key] = type(value)(HIDDEN for _ in value)
        elif key in ONE and isinstance(value, int) and not isinstance(value, bool):
            kwargs[key] = min(value, 1)
        elif key in ONE and isinstance(value, (list, tuple)) and all(isinstance(v, int) for v in value):
            kwargs[key] = type(value)(min(v, 1) for v in value)
        elif key == "num_layers" and isinstance(value, int):
            kwargs[key] = min(value, LAYERS)
    return kwargs


def _width(kwargs: dict[str, Any], *names: str, default: int = HIDDEN) -> int:
    for name in names:
        value = kwargs.get(name)
        if isinstance(value, int) and not isinstance(value, bool) and value > 0:
            return value
    return default


def input_candidates(model, kwargs: dict[str, Any], limit: int = 12) -> list[dict[str, Any]]:
    """Inputs to try for `model.forward`, in order: every required parameter gets a few shapes
    (a latent as 2-D image, video, or token sequence; a scalar or batched timestep; text states
    of the config's text width), and the combinations are tried until one runs unquantized."""
    import torch

    generator = torch.Generator().manual_seed(1)
    channels = _width(kwargs, "in_channels", "latent_channels", "num_channels", "in_dim", default=4)
    text = _width(kwargs, "cross_attention_dim", "joint_attention_dim", "text_dim", "text_embed_dim",
                  "caption_channels", "encoder_hid_dim", "text_hidden_dim", "context_dim")
    parameters = inspect.signature(model.forward).parameters
    required = [name for name, parameter in parameters.items()
                if parameter.default is inspect.Parameter.empty
                and parameter.kind in (parameter.POSITIONAL_OR_KEYWORD, parameter.KEYWORD_ONLY)]

    def rand(*shape):
        return torch.randn(*shape, generator=generator)

    options: dict[str, list[Any]] = {}
    for name in required:
        lowered = name.lower()
        if "timestep" in lowered or lowered in ("t", "time", "sigma", "sigmas"):
            options[name] = [torch.tensor([500.0]), torch.tensor(500.0), torch.tensor([0.5])]
        elif "encoder_hidden" in lowered or "context" in lowered or "text" in lowered or "prompt" in lowered:
            options[name] = [rand(1, SEQUENCE, text), rand(1, SEQUENCE, HIDDEN)]
        elif lowered in ("sample", "hidden_states", "x", "latents", "z", "latent", "hidden_state"):
            options[name] = [rand(1, channels, SPATIAL, SPATIAL), rand(1, channels, FRAMES, SPATIAL, SPATIAL),
                             rand(1, SEQUENCE, channels), rand(1, channels, SEQUENCE * 4)]
        elif "pooled" in lowered:
            options[name] = [rand(1, _width(kwargs, "pooled_projection_dim", "projection_dim"))]
        elif "ids" in lowered:
            options[name] = [torch.zeros(SEQUENCE, 3), torch.zeros(1, SEQUENCE, 3)]
        elif "mask" in lowered:
            options[name] = [torch.ones(1, SEQUENCE, dtype=torch.bool)]
        elif "image" in lowered or "pixel" in lowered or "cond" in lowered:
            options[name] = [rand(1, channels, SPATIAL, SPATIAL), rand(1, 3, SPATIAL, SPATIAL)]
        else:
            options[name] = [rand(1, SEQUENCE, HIDDEN)]
    names = list(options)
    combos = itertools.islice(itertools.product(*(options[n] for n in names)), limit)
    return [dict(zip(names, combo)) for combo in combos]
