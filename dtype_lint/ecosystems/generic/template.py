"""The `torch` helper template: vLLM's helper without vLLM's platform module, for a project whose
layers follow vLLM's shape (a model dtype attribute beside a possibly packed `.weight`) but that
does not import vLLM. It needs only torch: fp8 is any torch float8 dtype. Its docstring and body
are vLLM's (ecosystems/vllm/template.py), so the two templates decide alike but for fp8.
"""

from __future__ import annotations

from dtype_lint.ecosystems.vllm.template import BODY, DOC

# Template name -> (its imports, its test of an fp8 weight, docstring, body with `{is_fp8}`).
TEMPLATES: dict[str, tuple[str, str, str, str]] = {
    "torch": (('import torch\n\n_FP8_DTYPES = frozenset(\n    getattr(torch, name)\n'
               '    for name in (\n        "float8_e4m3fn",\n        "float8_e4m3fnuz",\n        "float8_e5m2",\n'
               '        "float8_e5m2fnuz",\n    )\n    if hasattr(torch, name)\n)\n'),
              "weight_dtype in _FP8_DTYPES", DOC, BODY),
}
