"""Executable proof for a patch of a migration series, on the reference kernels (kernels_ref/).

A patch that routes casts through the helper is shown working the way the reviewer will ask
about: one layer per storage a backend gives it (bf16, fp8, Marlin FP8's int32, NVFP4's uint8,
AWQ's missing `.weight`, W8A8's int8), an activation cast the old way (`x.to(L.weight.dtype)`)
and the new way (the helper the patch adds, executed), and what the layer does with each. A patch
to an MLA prefill function, or to an input-dtype helper MLA calls, gets the rows of
`dtype-lint verify` that differ between the old and new helper. Needs torch (`dtype-lint[verify]`);
without it the commit message says that no executable proof was run.
"""

from __future__ import annotations

import sys
import types
from functools import lru_cache

# (row id in kernels_ref's backend matrix, what a reviewer calls it)
LAYER_ROWS = (("bf16", "unquantized bf16"), ("fp8", "FP8"), ("marlin", "Marlin FP8 (W8A16)"),
              ("nvfp4", "NVFP4"), ("awq", "AWQ/GPTQ"), ("int8", "W8A8-INT8"))
MLA_SCOPES = ("_compute_prefill_context", "_context_parallel_compute_prefill_context")


def available() -> bool:
    try:
        import torch  # noqa: F401

        from dtype_lint.kernels_ref.harness.backends import BACKENDS  # noqa: F401
    except ImportError:
        return False
    return True


def _helper(source: str, func: str):
    """Execute the helper's text (vLLM's `current_platform` stubbed with fp8 = e4m3fn)."""
    import torch

    platforms = types.ModuleType("vllm.platforms")
    platforms.current_platform = types.SimpleNamespace(fp8_dtype=lambda: torch.float8_e4m3fn)
    saved = {k: sys.modules.get(k) for k in ("vllm", "vllm.platforms")}
    sys.modules.setdefault("vllm", types.ModuleType("vllm"))
    sys.modules["vllm.platforms"] = platforms
    try:
        ns: dict = {}
        exec(compile(source, "<helper>", "exec"), ns)  # noqa: S102 - our own template text
        return ns[func]
    finally:
        for k, v in saved.items():
            if v is None:
                sys.modules.pop(k, None)
            else:
                sys.modules[k] = v


def _cell(text: str, width: int = 44) -> str:
    return text if len(text) <= width else text[: width - 3] + "..."


def _outcome(fn) -> str:
    try:
        y = fn()
    except Exception as e:  # noqa: BLE001 - the crash is the finding
        return _cell(f"{type(e).__name__}: {str(e).splitlines()[0]}")
    return f"ok ({str(y.dtype).removeprefix('torch.')} out)"


@lru_cache(maxsize=4)
def layer_demo(helper_source: str, func: str, fp8_input: bool = True) -> str:
    """The table: per backend, the cast the old code makes and the one the helper makes, and
    what the reference layer does with the activation."""
    import torch

    from dtype_lint.kernels_ref.harness.backends import BACKENDS

    helper = _helper(helper_source, func)
    gen = torch.Generator().manual_seed(0)
    w = torch.randn(128, 256, generator=gen) / 16  # N=128 (two Marlin tiles), K=256 (two groups of 128)
    x = torch.randn(4, 256, generator=gen).to(torch.bfloat16)
    rows = [f"{'backend':<20} {'weight storage':<16} {'before: x.to(L.weight.dtype)':<44} after: {func}(L, {fp8_input})"]
    for row_id, name in LAYER_ROWS:
        backend = BACKENDS[row_id]
        layer = backend.build(w, backend.model_dtype, float(x.float().abs().max()))
        weight = getattr(layer, "weight", None)
        storage = "no .weight" if weight is None else str(weight.dtype).removeprefix("torch.")

        def before():
            return layer(x.to(layer.weight.dtype))[0]

        def after():
            dt = helper(layer, fp8_input)
            return layer(x if dt is None else x.to(dt))[0]

        rows.append(f"{name:<20} {storage:<16} {_outcome(before):<44} {_outcome(after)}")
    return "\n".join(rows)


@lru_cache(maxsize=2)
def mla_demo() -> str:
    """What `dtype-lint verify` shows on vLLM's own MLA prefill functions (scenario S, seed 0):
    per storage, what 0.27.1's casts, ours and vLLM 0.28.0's helper do."""
    import json
    import tempfile
    from pathlib import Path

    from dtype_lint.kernels_ref.harness.verify import main

    with tempfile.TemporaryDirectory() as tmp:
        report = Path(tmp) / "verify.json"
        rc = main(["--scenarios", "S", "--seeds", "0", "--backends", ",".join(r for r, _ in LAYER_ROWS),
                   "--json", str(report), "--no-table"])
        data = json.loads(report.read_text())
    rows = data.get("summary", {}).get("vllm", {})
    lines = [f"`dtype-lint verify` on vLLM's own `_compute_prefill_context` (exit {rc}; all assertions "
             f"{'hold' if data.get('ok') else 'do NOT hold'}), scenario S, per kv_b_proj storage:",
             f"    {'backend':<20} {'0.27.1':<26} {'0.28.0 helper':<26} ours"]
    names = dict(LAYER_ROWS)
    for row_id, row in rows.items():
        out = row.get("outcomes", {})
        casts = row.get("casts", {})

        def cell(key: str) -> str:
            o = (out.get(key) or ["?"])[0]
            c = (casts.get(key) or [None])[0]
            return _cell(o if o != "ok" else f"ok (cast {c})", 26)

        lines.append(f"    {names.get(row_id, row_id):<20} {cell('0.27.1'):<26} {cell('0.28.0'):<26} {cell('ours')}")
    return "\n".join(lines)


def for_changes(helper_source: str, func: str):
    """A proof function for series.plan: text for a patch's commit message, or None."""

    def proof(changes) -> str | None:
        if not available():
            return None
        scopes = {f.scope.rsplit(".", 1)[-1] for ch in changes for f in ch.findings}
        codes = {f.code for ch in changes for f in ch.findings}
        parts = []
        if codes & {"DTL001", "DTL004"}:  # DTL004's fix is DTL001's rewrite of the cast its branch guards
            parts.append("- on dtype-lint's reference kernels (CPU), an activation entering a\n"
                         "  layer of each storage, cast as before and as after this patch:\n\n" +
                         "\n".join("    " + line for line in layer_demo(helper_source, func).splitlines()))
        if scopes & set(MLA_SCOPES):
            parts.append("- " + mla_demo().replace("\n", "\n  "))
        return "\n".join(parts) if parts else None

    return proof
