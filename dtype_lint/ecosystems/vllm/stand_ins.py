"""What a vLLM release's code imports that the release tree cannot serve here: the stand-ins
migrate/release_stubs.py's finder gives for `vllm.*` modules, where vLLM itself cannot be installed
(CUDA extensions, a GPU stack).

`current_platform` is the reference kernels' platform (fp8 is `float8_e4m3fn`); the two modules
0.33.0's MLA input-dtype helper imports inside its fp8 branch are stand-ins whose classes nothing
is an instance of (its FP8_PB_WO case needs a ModelOpt linear method, which no unit test here
builds).

Plugged in by the registry's `stand_ins` role (consumers layer).
"""

from __future__ import annotations

# The top-level package the stand-ins serve (and a release's tests import).
PACKAGE = "vllm"


def stand_ins() -> dict[str, dict[str, object]]:
    """Module name -> the names it serves."""
    from dtype_lint.kernels_ref.harness.reference_platform import current_platform

    class ModelOptLinearMethod:
        """Stand-in: no layer built by a test has a ModelOpt linear method."""

    return {
        "vllm.platforms": {"current_platform": current_platform},
        "vllm.model_executor.layers.quantization.modelopt": {"ModelOptLinearMethod": ModelOptLinearMethod},
        "vllm.model_executor.layers.quantization.utils.quant_utils": {"kFp8Static128BlockSym": object()},
    }
