"""The megatron helper: the dtype a layer built from a module spec computes in.

nvidia-modelopt's `mtq.compress` replaces a reached layer's `.weight` with a `QTensorWrapper` of the
packed data (modelopt_catalogue.py): `.weight.dtype` is then uint8 (NVFP4, INT4, NF4, MXFP4), int8
(INT8) or float8_e4m3fn (FP8, MXFP8), while the layer still computes in the model's dtype, which
the wrapper keeps in `metadata["dtype"]`. megatron-core layers also know it as
`config.params_dtype` (Transformer Engine's as `params_dtype`). The helper answers, in order:

  a floating-point or complex weight wider than a byte (unquantized, TE's fp8 tensors, which
  report their nominal dtype)                                 -> the weight dtype
  modelopt's wrapper (`weight.metadata["dtype"]`)              -> that dtype
  the layer's `params_dtype`, else its `config.params_dtype`  -> that dtype
  nothing says (no `.weight`, no config)                      -> torch's default dtype, what an
                                                                 allocation without `dtype=` gets

It never returns None and never a packed dtype: a state allocated in it (the Mamba state) and an
activation cast to it are the compute dtype. Its home is the fixed file's top-level package.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:  # the fix layer imports this module lazily; only the annotations name its class
    from dtype_lint.fix.helper_template import HelperLocation

HELPER_NAME = "get_layer_compute_dtype"
# The helper's module in the fixed file's top-level package (a wheel of that package ships it).
HELPER_MODULE = "layer_compute_dtype"
HELPER_LABEL = "megatron helper"  # as messages name it

HELPER_SOURCE = '''\
def get_layer_compute_dtype(layer: "torch.nn.Module") -> "torch.dtype":
    """The dtype `layer` computes in: the dtype of an activation entering it or of a state
    allocated beside it.

    nvidia-modelopt's real quantization (`mtq.compress`) replaces `layer.weight` with packed
    storage (uint8 under NVFP4/INT4, int8 under INT8, float8_e4m3fn under FP8), so
    `layer.weight.dtype` is not the compute dtype there; the wrapper keeps it in `metadata`.
    """
    import torch

    weight = getattr(layer, "weight", None)
    if isinstance(weight, torch.Tensor) and weight.dtype.itemsize > 1 and (
        weight.dtype.is_floating_point or weight.dtype.is_complex
    ):
        return weight.dtype
    metadata = getattr(weight, "metadata", None)
    if isinstance(metadata, dict) and isinstance(metadata.get("dtype"), torch.dtype):
        return metadata["dtype"]
    for owner in (layer, getattr(layer, "config", None)):
        params_dtype = getattr(owner, "params_dtype", None)
        if isinstance(params_dtype, torch.dtype):
            return params_dtype
    return torch.get_default_dtype()
'''
NEW_HELPER_TEXT = "import torch\n\n\n" + HELPER_SOURCE


def default_helper_module(source_module: str, path: str) -> str:
    """Where the helper goes for a file of a project that did not pin it: its top-level package's
    `layer_compute_dtype` (each package of a monorepo gets its own; below a namespace folder such
    as megatron-core's `megatron/`, its first regular package), or a module of that name beside a
    top-level module."""
    from dtype_lint.core.discovery import top_package

    package = top_package(source_module, path)
    return f"{package}.{HELPER_MODULE}" if package else HELPER_MODULE


def location_of(module: str, index, root) -> HelperLocation:
    """Where the helper `module` is, or is to be created, judged as the shared helper's home is."""
    from pathlib import Path

    from dtype_lint.ecosystems.hf.helper import fitted, new_helper_path
    from dtype_lint.fix.helper_template import HelperLocation

    header = index.modules.get(module) if index is not None else None
    if header is not None:
        return HelperLocation(module, HELPER_NAME, Path(header.path), True)
    return HelperLocation(module, HELPER_NAME, new_helper_path(module, index, root), False,
                          fitted(NEW_HELPER_TEXT, root))


# ---- the helper protocol (ecosystems/registry.py) ----------------------------------------------


def owns_fix(finding) -> bool:
    """Does this finding's fix route through the megatron helper?"""
    return finding.fix is not None and any(func == HELPER_NAME for _module, func in finding.fix.imports)


def helper_location(finding, index, root) -> HelperLocation:
    module = next(module for module, name in finding.fix.imports if name == HELPER_NAME)
    return location_of(module, index, root)


def settle_helper(outcomes, index, root) -> list[tuple[str, bytes, bytes | None]]:
    """(path, new bytes, the bytes it must still hold or None to create it) for each home of the
    helper that an applied fix imports from and that does not define it yet."""
    import ast
    from pathlib import Path

    from dtype_lint.ecosystems.hf.helper import fitted, new_helper_path

    homes = sorted({module for outcome in outcomes if outcome.changed for finding in outcome.applied
                    if finding.fix is not None for module, func in finding.fix.imports if func == HELPER_NAME})
    out: list[tuple[str, bytes, bytes | None]] = []
    for module in homes:
        header = index.modules.get(module)
        if header is None:
            out.append((str(new_helper_path(module, index, root)), fitted(NEW_HELPER_TEXT, root).encode("utf-8"), None))
            continue
        data = Path(header.path).read_bytes()
        text = data.decode("utf-8")
        if any(isinstance(node, ast.FunctionDef) and node.name == HELPER_NAME for node in ast.parse(text).body):
            continue
        out.append((header.path, (text.rstrip("\n") + "\n\n\n" + fitted(HELPER_SOURCE, root)).encode("utf-8"), data))
    return out


def doctor_lines(findings, index, root) -> list[str]:
    """`doctor`'s paragraph on this family where the run found its sites: how many, its quantizable
    roots, and where its helper lives (or would be created)."""
    from dtype_lint.ecosystems.hf.helper import helper_homes
    from dtype_lint.ecosystems.megatron.family import FAMILY_EVIDENCE
    from dtype_lint.ecosystems.megatron.modelopt_catalogue import RELEASE

    ours = [f for f in findings if owns_fix(f) or any(FAMILY_EVIDENCE in e.message for e in f.evidence)]
    if not ours:
        return []
    low = sum(1 for f in ours if f.confidence == "low")
    lines = [f"family: megatron module specs ({len(ours)} site{'s' if len(ours) != 1 else ''}"
             + (f", {low} with low confidence: the spec that builds the layer cannot be read" if low else "") + ")",
             "  quantizable roots: layers built through `build_module(spec, ...)` whose spec names a megatron-core "
             f"linear that nvidia-modelopt quantizes ({RELEASE}); `mtq.compress` packs their weights"]
    return lines + helper_homes([finding for finding in ours if owns_fix(finding)], helper_location, HELPER_NAME,
                                index, root)
