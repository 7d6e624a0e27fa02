"""Executable proof for a patch of a migration series, on the reference kernels (kernels_ref/).

A patch that routes casts through the helper is shown working the way the reviewer will ask
about: one layer per storage a backend gives it (bf16, fp8, Marlin FP8's int32, NVFP4's uint8,
AWQ's missing `.weight`, W8A8's int8), an activation cast the old way (`x.to(L.weight.dtype)`)
and the new way (the helper the patch adds, executed), and what the layer does with each. A patch
to an MLA prefill function, or to an input-dtype helper MLA calls, gets the rows of
`dtype-lint verify` that differ between the old and new helper; a patch to vLLM's MLA module, the
release's own prefill run before and after. Needs torch (`dtype-lint[verify]`); without it the
commit message says that no executable proof was run.

Plugged in by the registry's `proofs` role (consumers layer): migrate/series.py and
migrate/migration.py ask the proofs that speak for every convention (`CONVENTIONS` None), as the
reference kernels are the helper template's storages whatever the project.
"""

from __future__ import annotations

import sys
import types
from functools import lru_cache
from pathlib import Path

# None: these proofs speak for every convention (the helper template's storages).
CONVENTIONS: tuple[str, ...] | None = None

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
    # A module made here: mypy cannot know its attributes, and setattr with a constant name is B010.
    stub = types.SimpleNamespace(fp8_dtype=lambda: torch.float8_e4m3fn)
    platforms.current_platform = stub  # type: ignore[attr-defined]
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
    except Exception as error:  # noqa: BLE001 - the crash is the finding
        return _cell(f"{type(error).__name__}: {str(error).splitlines()[0]}")
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
    rows = [f"{'backend':<20} {'weight storage':<16} {'before: x.to(L.weight.dtype)':<44} "
            f"after: {func}(L, {fp8_input})"]
    for row_id, name in LAYER_ROWS:
        backend = BACKENDS[row_id]
        layer = backend.build(w, backend.model_dtype, float(x.float().abs().max()))
        weight = getattr(layer, "weight", None)
        storage = "no .weight" if weight is None else str(weight.dtype).removeprefix("torch.")

        def before(layer=layer):
            return layer(x.to(layer.weight.dtype))[0]

        def after(layer=layer):
            dt = helper(layer, fp8_input)
            return layer(x if dt is None else x.to(dt))[0]

        rows.append(f"{name:<20} {storage:<16} {_outcome(before):<44} {_outcome(after)}")
    return "\n".join(rows)


@lru_cache(maxsize=2)
def mla_demo(reused=None) -> str:
    """What `dtype-lint verify` shows on vLLM's own MLA prefill functions (scenario S, seed 0):
    per storage, what 0.27.1's casts, ours and vLLM 0.28.0's helper do. `reused`
    (kernels_ref.harness.variants.ReusedFix): the series' own rewrite of 0.27.1's MLA module and
    its helper, run as "ours" instead of verify running the fixer on the release again (the
    migration already did, on the same text); verify uses it only when its `before` is the
    release's text, and judges it by what it does on every storage like its own rewrite."""
    import json
    import tempfile
    from pathlib import Path

    from dtype_lint.kernels_ref.harness.verify import main

    with tempfile.TemporaryDirectory() as tmp:
        report = Path(tmp) / "verify.json"
        # vLLM's functions only: the message shows their rows, and running the fixer on verify's own
        # fixture for rows nobody reads was a tenth of a series run (benchmarks/results/series/).
        rc = main(["--scenarios", "S", "--seeds", "0", "--backends", ",".join(r for r, _ in LAYER_ROWS),
                   "--json", str(report), "--no-table"], reused=reused, fixture=False)
        data = json.loads(report.read_text())
    rows = data.get("summary", {}).get("vllm", {})
    lines = [f"`dtype-lint verify` on vLLM's own `_compute_prefill_context` (exit {rc}; all assertions "
             f"{'hold' if data.get('ok') else 'do NOT hold'}), scenario S, per kv_b_proj storage:",
             f"    {'backend':<20} {'0.27.1':<26} {'0.28.0 helper':<26} ours"]
    names = dict(LAYER_ROWS)
    for row_id, row in rows.items():
        out = row.get("outcomes", {})
        casts = row.get("casts", {})

        def cell(key: str, out=out, casts=casts) -> str:
            o = (out.get(key) or ["?"])[0]
            c = (casts.get(key) or [None])[0]
            return _cell(o if o != "ok" else f"ok (cast {c})", 26)

        lines.append(f"    {names.get(row_id, row_id):<20} {cell('0.27.1'):<26} {cell('0.28.0'):<26} {cell('ours')}")
    return "\n".join(lines)


def reused_mla_fix(changes, helper_source: str, func: str):
    """The series' rewrite of vLLM's MLA module among `changes` (series.FileChange), as the
    `ReusedFix` mla_demo runs instead of fixing the release again: the bytes the patch writes, and
    the helper its fixes import. None when no change rewrites that module from a text, or its
    fixes import the helper from more than one module (then verify runs its own fixer)."""
    from dtype_lint.kernels_ref.harness.variants import ReusedFix

    for change in changes:
        if change.path != MLA_MODULE or change.before is None or change.test:
            continue
        modules = {module for f in change.findings if f.fix is not None for module, name in f.fix.imports
                   if name == func}
        if len(modules) != 1:
            return None
        try:
            before, after = change.before.decode("utf-8"), change.after.decode("utf-8")
        except UnicodeDecodeError:
            return None
        return ReusedFix(before, after, modules.pop(), helper_source, func)
    return None


def for_changes(helper_source: str, func: str):
    """A proof function for series.plan: text for a patch's commit message, or None."""

    def proof(changes) -> str | None:
        if not available():
            return None
        scopes = {f.scope.rsplit(".", 1)[-1] for ch in changes for f in ch.findings}
        codes = {f.code for ch in changes for f in ch.findings}
        parts = []
        if codes & {"DTL001", "DTL004"}:  # DTL004's fix is DTL001's rewrite of the cast its branch guards
            parts.append("An activation entering a reference CPU implementation of each backend's\n"
                         "linear layer, cast as before and as after this patch:\n\n" +
                         "\n".join("    " + line for line in layer_demo(helper_source, func).splitlines()))
        if scopes & set(MLA_SCOPES):
            parts.append(mla_demo(reused_mla_fix(changes, helper_source, func)))
        return "\n".join(parts) if parts else None

    return proof


# ---- the release's own code, before and after a patch -------------------------------------------


def _outcome_of(fn) -> str:
    try:
        fn()
    except Exception as error:  # noqa: BLE001 - the crash is the result
        return _cell(f"{type(error).__name__}: {str(error).splitlines()[0] if str(error) else ''}", 52)
    return "ok"


def _tree(files: dict[str, bytes], tmp) -> Path:
    from dtype_lint.core.writer import write_scratch_files

    root = Path(tmp)
    write_scratch_files(root, files)
    return root


def unit_cases(before: dict[str, bytes], after: dict[str, bytes], module: str, func: str, cases,
               package: str = "vllm") -> list[str]:
    """The helper's own code run on real torch dtypes, before and after the patch, on the cases
    its regression test asserts: one line per case, and a count. `before`/`after`: the files the
    module needs, relative to the directory holding the package."""
    import importlib
    import tempfile

    import torch

    from dtype_lint.migrate.release_stubs import installed

    fp8 = torch.float8_e4m3fn
    storages = {"fp16": torch.float16, "bf16": torch.bfloat16, "fp32": torch.float32, "fp8": fp8,
                "int32": torch.int32, "uint8": torch.uint8, "int8": torch.int8, "no_weight": None}

    class Layer(torch.nn.Module):
        def __init__(self, storage):
            super().__init__()
            self.params_dtype = torch.bfloat16
            if storage is not None:
                self.weight = torch.nn.Parameter(torch.empty(4, 4, dtype=storage), requires_grad=False)

    def results(files):
        with tempfile.TemporaryDirectory() as tmp, installed(_tree(files, tmp), package):
            try:
                helper = getattr(importlib.import_module(module), func)
            except (ImportError, AttributeError) as error:
                return None, f"{type(error).__name__}: {error}"
            out = {}
            for sid, flag, want in cases:
                expected = {"weight": storages[sid], "params": torch.bfloat16, "keep": None}[want]
                try:
                    got = helper(Layer(storages[sid]), flag)
                except Exception as error:  # noqa: BLE001
                    got = f"{type(error).__name__}"
                out[(sid, flag)] = (got, got == expected, expected)
            return out, ""

    old, old_error = results(before)
    new, new_error = results(after)
    name = lambda d: "None" if d is None else str(d).removeprefix("torch.")  # noqa: E731
    rows = [f"    {'weight storage':<15} {'fp8 input':<10} {'expected':<13} {'before':<26} after"]
    passed = {"before": 0, "after": 0}
    for sid, flag, _want in cases:
        cells = []
        for label, res, _err in (("before", old, old_error), ("after", new, new_error)):
            if res is None:
                cells.append("(cannot import)")
                continue
            got, ok, expected = res[(sid, flag)]
            passed[label] += ok
            cells.append(f"{name(got)} ({'pass' if ok else 'FAIL'})")
        expected = {"weight": sid, "params": "params_dtype", "keep": "None"}[_want]
        rows.append(f"    {sid:<15} {str(flag):<10} {expected:<13} {cells[0]:<26} {cells[1]}")
    total = len(cases)
    head = [f"{func}() run on real torch dtypes (params_dtype bfloat16), the cases the test asserts:", ""]
    tail = ["", f"Before: {passed['before']}/{total} pass" + (f" ({old_error})" if old_error else "")
            + f"; after: {passed['after']}/{total} pass" + (f" ({new_error})" if new_error else "") + "."]
    return head + rows + tail


# (backend row in the harness's matrix, what a reviewer calls it, its kv_b_proj storage)
PREFILL_ROWS = (("bf16", "unquantized bf16"), ("fp8", "FP8"), ("marlin", "Marlin FP8 (W8A16)"),
                ("nvfp4", "NVFP4"), ("nvfp4_p", "NVFP4, fp8 prefill"), ("awq", "AWQ/GPTQ"),
                ("int8", "W8A8-INT8"))


def release_prefill(version: str, before_text: str, after_text: str, read, scenario: str = "S") -> list[str]:
    """The release's own `_compute_prefill_context`, cut out of its MLA module before and after
    the patch (kernels_ref/harness/upstream_source.py), run on the reference kernels over every
    kv_b_proj storage: one line per backend. Raises the harness's ExtractionError when the
    release needs more than the harness supplies."""
    from dtype_lint.kernels_ref.harness import upstream_runtime as ur
    from dtype_lint.kernels_ref.harness.backends import BACKENDS
    from dtype_lint.kernels_ref.harness.matrix import ScenarioRun
    from dtype_lint.kernels_ref.harness.upstream_source import extract
    from dtype_lint.migrate.release_stubs import installed

    releases = {label: ur.CompiledRelease(extract(text, version, label, read=read))
                for label, text in (("before", before_text), ("after", after_text))}
    run = ScenarioRun(scenario, 0, "cpu")
    rows = [f"    {'kv_b_proj backend':<20} {'storage':<14} {'before':<54} after"]
    import tempfile

    # The fp8 branch of 0.33.0's helper imports two vLLM modules at call time: stand-ins serve them.
    with tempfile.TemporaryDirectory() as empty, installed(empty):
        for row_id, name in PREFILL_ROWS:
            backend = BACKENDS[row_id]
            layer = run.layer(backend)
            weight = getattr(layer, "weight", None)
            storage = "no .weight" if weight is None else str(weight.dtype).removeprefix("torch.")
            cells = [_outcome_of(lambda rel=rel, backend=backend, layer=layer: ur.run(
                rel, "main", run.scenario, run.upstream_inputs(backend, layer, "main")))
                     for rel in releases.values()]
            rows.append(f"    {name:<20} {storage:<14} {cells[0]:<54} {cells[1]}")
    return [f"vLLM {version}'s own _compute_prefill_context (cut out of mla_attention.py before and after "
            f"this patch), run on reference CPU kernels of each backend, scenario {scenario}:", ""] + rows


# The release module whose own prefill `release_proof` runs before and after a patch.
MLA_MODULE = "vllm/model_executor/layers/attention/mla_attention.py"


def release_proof(path: str, label: str, before_text: str, after_text: str, root: Path) -> list[str]:
    """The release's own code run before and after a patch to the file at `path` (relative to the
    series root `root`; `label` names the release): its MLA prefill, or nothing for another file.
    A release the harness cannot reach gets a line saying so."""
    if path != MLA_MODULE:
        return []
    try:
        from dtype_lint.kernels_ref.harness.upstream_source import read_release

        return release_prefill(label, before_text, after_text, read_release(root)) + [""]
    except Exception as error:  # noqa: BLE001 - the harness cannot reach this release: say so
        return [f"The release's own prefill could not be run here: {type(error).__name__}: {error}", ""]
