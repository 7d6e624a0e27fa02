"""``dtype-lint verify``: prove that the fix changes nothing but the crash (KERNELS_SPEC.md §4).

The harness copies the pre-fix fixture (``fixtures/verify/mla_prefill.py``) into a fresh temp
package as ``pre.py``, lets dtype-lint's own fixer write ``post.py`` and the helper module,
imports both, and runs four variants over every backend of the matrix:

* ``pre``      0.27.1's main path     (``_compute_prefill_context``, unfixed)
* ``pre_cp``   0.27.1's cp path       (``_context_parallel_compute_prefill_context``, unfixed)
* ``post``     the fixer's main path
* ``post_cp``  the fixer's cp path

and checks §4's assertions:

1. exactly the expected backends crash in ``pre`` / ``pre_cp``, with the expected exception
   type and message;
2. ``post`` (and ``post_cp``) never raise, the helper picks the expected dtype, and ``post``
   meets the §5 error bounds against the dense reference (fp64, unquantized fp32 ``W``);
3. wherever ``pre`` / ``pre_cp`` ran, output and LSE are bit-identical to ``post``
   (``post_cp`` too);
4. query tokens of requests without context come out exactly 0 with LSE exactly -inf;
5. negative control: with the empty-context mask disabled, NaNs appear (so 4 is not vacuous).
"""

from __future__ import annotations

import argparse
import difflib
import hashlib
import importlib
import importlib.resources
import json
import shutil
import sys
import tempfile
import time
import traceback
import uuid
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Callable, Iterator

import torch

from .backends import BACKENDS, Backend, Crash, expected_crash_sets
from .chunking import plan_chunked_context
from .prefill_context import SCENARIOS, ScenarioData, make_data, prepare_inputs, run_variant, store_cache
from .reference import (
    bit_identical,
    empty_context_violations,
    error_metrics,
    reference_context_attention,
)

FIXTURE = "verify/mla_prefill.py"
HELPER_MODULE = "layer_input_dtype"
HELPER_FUNC = "get_layer_input_dtype"

#: (variant, module, path): which module and which of its two context loops each variant runs.
VARIANTS = (("pre", "pre", "main"), ("pre_cp", "pre", "cp"), ("post", "post", "main"), ("post_cp", "post", "cp"))

DEFAULT_SCENARIOS = ("A", "B")
DEFAULT_SEEDS = (0, 1)
NEGATIVE_CONTROL_BACKEND = "bf16"


# ----------------------------------------------------------------------------- variants


@dataclass
class VariantPackage:
    """The temp package holding ``pre``, the fixer's ``post`` and its helper module."""

    name: str
    pre: ModuleType
    post: ModuleType
    helper: Callable[[torch.nn.Module, bool], "torch.dtype | None"]
    settings: dict
    diff: str
    origin: str  # "dtype_lint.api", or where its saved output was loaded from
    unsafe_fixes: bool


@dataclass(frozen=True)
class VariantSources:
    """The texts of the package: ``pre.py`` (the fixture), ``post.py`` and the helper module."""

    name: str
    settings: dict
    unsafe_fixes: bool
    pre: str
    post: str
    helper: str

    @property
    def diff(self) -> str:
        return "".join(
            difflib.unified_diff(self.pre.splitlines(True), self.post.splitlines(True), "pre.py", "post.py")
        )


def fixture_source() -> str:
    return importlib.resources.files("dtype_lint.fixtures").joinpath(FIXTURE).read_text()


def _sha256(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


def fix_fixture(*, unsafe_fixes: bool = False) -> VariantSources:
    """Run dtype-lint's own fixer on the fixture: ``post.py`` and the helper are its output."""
    from dtype_lint.api import fix_source, helper_module_source

    name = f"dtl_verify_{uuid.uuid4().hex[:12]}"
    settings = {"preset": "vllm", "helper": f"{name}.{HELPER_MODULE}:{HELPER_FUNC}", "helper-template": "torch"}
    pre = fixture_source()
    # A filename that does not exist: the fix must depend on the text and settings alone
    # (with the file on disk the engine also derives a module name from its path).
    filename = str(Path(tempfile.gettempdir()) / f"{name}.absent" / name / "pre.py")
    post = fix_source(pre, filename=filename, settings=settings, unsafe_fixes=unsafe_fixes)
    return VariantSources(name, settings, unsafe_fixes, pre, post, helper_module_source(settings))


def write_variants(directory: str | Path, *, unsafe_fixes: bool = False) -> Path:
    """Fix the fixture here and save the package for a machine without libcst (the GPU one).

    Writes ``<directory>/variants.json`` and ``<directory>/<package>/*.py``; load them with
    ``run_matrix(..., variants_dir=directory)`` or ``--variants DIR``.
    """
    src = fix_fixture(unsafe_fixes=unsafe_fixes)
    out = Path(directory)
    _write_package(out, src)
    meta = {
        "package": src.name,
        "settings": src.settings,
        "unsafe_fixes": unsafe_fixes,
        "fixture_sha256": _sha256(src.pre),
    }
    (out / "variants.json").write_text(json.dumps(meta, indent=2) + "\n")
    return out


def load_variants(directory: str | Path) -> VariantSources:
    """Read what :func:`write_variants` saved; refuse it if the fixture changed since."""
    base = Path(directory)
    meta = json.loads((base / "variants.json").read_text())
    pkg = base / meta["package"]
    pre = (pkg / "pre.py").read_text()
    if _sha256(pre) != meta["fixture_sha256"] or pre != fixture_source():
        raise ValueError(f"{base}: pre.py is not the current fixture; regenerate with --emit-variants")
    return VariantSources(
        meta["package"], meta["settings"], meta["unsafe_fixes"], pre,
        (pkg / "post.py").read_text(), (pkg / f"{HELPER_MODULE}.py").read_text(),
    )


def _write_package(root: Path, src: VariantSources) -> Path:
    pkg = root / src.name
    pkg.mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "pre.py").write_text(src.pre)
    (pkg / "post.py").write_text(src.post)
    (pkg / f"{HELPER_MODULE}.py").write_text(src.helper)
    return pkg


@contextmanager
def variant_package(*, unsafe_fixes: bool = False, variants_dir: str | Path | None = None) -> Iterator[VariantPackage]:
    """Write and import ``<tmp>/dtl_verify_<hex>/{pre,post,layer_input_dtype}.py``; clean up after.

    ``post.py`` and the helper module are exactly what ``dtype_lint.api`` produces, now or
    (``variants_dir``) earlier on a machine with libcst: the harness never hand-writes the fixed
    code it proves.
    """
    src = fix_fixture(unsafe_fixes=unsafe_fixes) if variants_dir is None else load_variants(variants_dir)
    root = Path(tempfile.mkdtemp(prefix="dtl_verify_"))
    name = src.name
    try:
        _write_package(root, src)
        sys.path.insert(0, str(root))
        try:
            pre = importlib.import_module(f"{name}.pre")
            post = importlib.import_module(f"{name}.post")
            helper = getattr(importlib.import_module(f"{name}.{HELPER_MODULE}"), HELPER_FUNC)
        finally:
            sys.path.remove(str(root))
        origin = "dtype_lint.api" if variants_dir is None else f"dtype_lint.api, saved in {variants_dir}"
        yield VariantPackage(name, pre, post, helper, src.settings, src.diff, origin, src.unsafe_fixes)
    finally:
        for mod in [m for m in sys.modules if m == name or m.startswith(name + ".")]:
            del sys.modules[mod]
        shutil.rmtree(root, ignore_errors=True)


# ----------------------------------------------------------------------------- one run


def dtype_name(dtype: torch.dtype | None) -> str:
    return "None" if dtype is None else str(dtype).removeprefix("torch.")


def _outcome(fn: Callable[[], tuple[torch.Tensor, torch.Tensor]], module_file: str):
    """Run a variant; on an exception record type, message, the frames and the fixture line."""
    try:
        return fn(), {"outcome": "ok"}
    except Exception as exc:  # noqa: BLE001 — the crash is the data under test
        frames = traceback.extract_tb(exc.__traceback__)
        in_fixture = [f for f in frames if Path(f.filename) == Path(module_file)]
        return None, {
            "outcome": "crash",
            "error_type": type(exc).__name__,
            "message": str(exc),
            "frames": [f.name for f in frames],
            "raised_at": f"{frames[-1].name} ({Path(frames[-1].filename).name}:{frames[-1].lineno})",
            "fixture_line": (in_fixture[-1].line or "").strip() if in_fixture else None,
        }


def _describe(result: dict) -> str:
    return "ok" if result["outcome"] == "ok" else f"{result['error_type']}: {result['message']}"


def _expected(crash: Crash | None) -> str:
    return "ok" if crash is None else crash.describe()


def _crash_violation(variant: str, result: dict, expected: Crash | None) -> str | None:
    if _describe(result) != _expected(expected):
        return f"{variant}: expected {_expected(expected)!r}, got {_describe(result)!r}"
    if expected is not None and expected.raised_in not in result["frames"]:
        return f"{variant}: {expected.error_type} was expected from {expected.raised_in}, raised at {result['raised_at']}"
    return None


def run_backend(
    pkg: VariantPackage, data: ScenarioData, backend: Backend, device: str, references: dict, caches: dict
) -> dict:
    """Run all four variants of one backend on one (scenario, seed) and check assertions 1–4."""
    s = data.scenario
    qsl = s.query_start_loc
    ctx = list(s.context_lens)
    if backend.cache_dtype not in caches:
        caches[backend.cache_dtype] = store_cache(data, backend.cache_dtype)
    inputs = prepare_inputs(data, backend, device, cache=caches[backend.cache_dtype])
    ref_key = (backend.cache_dtype, backend.model_dtype)
    if ref_key not in references:
        references[ref_key] = reference_context_attention(
            q=inputs.q, cache=inputs.cache, block_table=inputs.block_table, context_lens=ctx,
            query_start_loc=qsl, w=data.w.to(device), kv_lora_rank=s.kv_lora_rank,
            qk_nope_head_dim=s.qk_nope_head_dim, v_head_dim=s.v_head_dim, scale=s.softmax_scale,
        )
    ref_out, ref_lse = references[ref_key]

    results, outputs, violations = {}, {}, []
    for variant, module_name, path in VARIANTS:
        module = pkg.pre if module_name == "pre" else pkg.post
        out, results[variant] = _outcome(lambda: run_variant(module, path, s, inputs), module.__file__)
        if out is not None:
            outputs[variant] = out

    # 1. crash sets, types and messages
    for variant, expected in (("pre", backend.pre), ("pre_cp", backend.pre_cp)):
        problem = _crash_violation(variant, results[variant], expected)
        if problem:
            violations.append(problem)

    # 2. post never raises, picks the expected dtype, meets §5
    helper_cast = pkg.helper(inputs.layer, backend.fp8_prefill)
    if helper_cast != backend.post_cast:
        violations.append(f"helper returned {dtype_name(helper_cast)}, expected {dtype_name(backend.post_cast)}")
    metrics = None
    for variant in ("post", "post_cp"):
        if results[variant]["outcome"] != "ok":
            violations.append(f"{variant} raised {_describe(results[variant])!r}")
    if "post" in outputs:
        out, lse = outputs["post"]
        m = error_metrics(out, lse, ref_out, ref_lse, ctx, qsl)
        violations += [f"post: {v}" for v in m.violations(backend.rel_bound, backend.lse_bound)]
        metrics = {
            "rel": m.rel, "rel_per_request": m.rel_per_request, "lse": m.lse,
            "max_abs_over_rms": m.max_abs_over_rms, "finite": m.finite,
        }

    # 3. bit identity with post wherever the other variant ran
    identical = {}
    if "post" in outputs:
        for variant in ("pre", "pre_cp", "post_cp"):
            if variant in outputs:
                same = all(bit_identical(a, b) for a, b in zip(outputs[variant], outputs["post"]))
                identical[variant] = same
                if not same:
                    violations.append(f"{variant} ran but its output/LSE bits differ from post")

    # 4. tokens without context: exactly 0 and -inf, in every variant that ran
    for variant, (out, lse) in outputs.items():
        violations += [f"{variant}: {v}" for v in empty_context_violations(out, lse, ctx, qsl)]

    return {
        "scenario": s.name,
        "seed": data.seed,
        "backend": backend.id,
        "variants": results,
        "helper_cast": dtype_name(helper_cast),
        "post_metrics": metrics,
        "bit_identical": identical,
        "violations": violations,
    }


def negative_control(pkg: VariantPackage, data: ScenarioData, device: str) -> dict | None:
    """Assertion 5: ``post`` with the empty-context mask hidden must leak NaNs.

    Without it, assertion 4 could pass because no empty span ever reached the merge. Only
    meaningful where some chunk has an empty span; returns None otherwise.
    """
    s = data.scenario
    plan = plan_chunked_context(
        context_lens=torch.tensor(s.context_lens),
        query_start_loc=torch.tensor(s.query_start_loc),
        workspace=torch.empty(s.workspace_size, 1),
        block_size=s.block_size,
    )
    if not any(plan.has_empty_context):
        return None
    backend = BACKENDS[NEGATIVE_CONTROL_BACKEND]
    inputs = prepare_inputs(data, backend, device)
    result, outcome = _outcome(
        lambda: run_variant(pkg.post, "main", s, inputs, mask_empty_context=False), pkg.post.__file__
    )
    control = {"scenario": s.name, "seed": data.seed, "backend": backend.id, "nan_tokens": None}
    if result is None:
        return control | {"violations": [f"negative control raised {_describe(outcome)!r}"]}
    nan_tokens = int(torch.isnan(result[0]).flatten(1).any(dim=1).sum())
    control["nan_tokens"] = nan_tokens
    return control | {
        "violations": [] if nan_tokens else ["negative control: no NaN with the empty-context mask disabled"]
    }


# ----------------------------------------------------------------------------- matrix


KERNEL_ROUTES = ("reference", "auto", "torch", "cuda")


@contextmanager
def _kernel_route(kernels: str | None) -> Iterator[str]:
    """Route the layers' and the fixture's kernel calls; yields a label for the report.

    ``None``: leave the routing as the caller set it (``gpu_check.py`` wraps the matrix in its
    own ``ops.installed``/``ops.use_backend``); ``"reference"``: the PyTorch reference modules,
    called directly; otherwise :func:`kernels_ref.ops.installed` with that ops backend
    (``"cuda"`` forces the CUDA builds). Entered before the fixture is imported: the fixture
    binds the attention functions at import time.
    """
    from .. import attention

    if kernels is None:
        routed = hasattr(attention.mla_prefill_attention, "__wrapped__")
        yield "ops (routed by the caller)" if routed else "reference"
        return
    if kernels == "reference":
        if hasattr(attention.mla_prefill_attention, "__wrapped__"):
            raise RuntimeError("kernels='reference' but kernels_ref.ops.installed() is active")
        yield "reference"
        return
    from .. import ops

    with ops.installed(kernels):
        yield f"ops backend={kernels}"


@contextmanager
def _cpu_threads(n: int | None) -> Iterator[None]:
    """Run with ``n`` intra-op threads, then restore.

    The CPU matrix is thousands of ops on tensors of at most a few hundred KiB: intra-op
    threading gains nothing there, and on a shared 2-core machine its barriers made the run
    5–7× slower (measured: 20–28 s with 2 threads vs 3–5 s with 1 under the same load).
    """
    if n is None:
        yield
        return
    before = torch.get_num_threads()
    torch.set_num_threads(n)
    try:
        yield
    finally:
        torch.set_num_threads(before)


def run_matrix(
    device: str = "cpu",
    scenarios: tuple[str, ...] | list[str] = DEFAULT_SCENARIOS,
    seeds: tuple[int, ...] | list[int] = DEFAULT_SEEDS,
    *,
    backends: tuple[str, ...] | list[str] | None = None,
    kernels: str | None = None,
    unsafe_fixes: bool = False,
    variants_dir: str | Path | None = None,
    progress: Callable[[str], None] | None = None,
) -> dict:
    """Run the backend matrix and return the JSON-ready report; ``report["ok"]`` is the verdict.

    ``kernels`` (see :func:`_kernel_route`): None leaves the kernel routing to the caller (the
    PyTorch reference unless an ``ops.installed`` block is active); ``"cuda"`` runs every op on
    the CUDA builds or fails. Raises ValueError for unknown names and RuntimeError when the
    device cannot run.
    """
    if device not in ("cpu", "cuda"):
        raise ValueError(f"device must be cpu or cuda, got {device!r}")
    if kernels is not None and kernels not in KERNEL_ROUTES:
        raise ValueError(f"kernels must be one of {KERNEL_ROUTES}, got {kernels!r}")
    if not seeds:
        raise ValueError("no seeds given")
    unknown = [s for s in scenarios if s not in SCENARIOS]
    if unknown:
        raise ValueError(f"unknown scenario(s) {unknown}; known: {sorted(SCENARIOS)}")
    backend_ids = list(backends) if backends is not None else list(BACKENDS)
    unknown = [b for b in backend_ids if b not in BACKENDS]
    if unknown:
        raise ValueError(f"unknown backend(s) {unknown}; known: {sorted(BACKENDS)}")
    if device == "cuda" and not torch.cuda.is_available():
        raise RuntimeError("--device cuda: torch.cuda.is_available() is False")
    if kernels == "cuda":
        from ..build import cuda_available

        if device != "cuda" or not cuda_available():
            raise RuntimeError("kernels='cuda' needs --device cuda and a working CuPy/NVRTC")

    started = time.perf_counter()
    rows, controls, violations, timings = [], [], [], {}
    with (
        _kernel_route(kernels) as kernel_label,
        variant_package(unsafe_fixes=unsafe_fixes, variants_dir=variants_dir) as pkg,
        _cpu_threads(1 if device == "cpu" else None),
    ):
        if not pkg.diff:
            violations.append("fixer: post.py is identical to pre.py (no site was rewritten)")
        for name in scenarios:
            for seed in seeds:
                t0 = time.perf_counter()
                data = make_data(SCENARIOS[name], seed)
                references, caches = {}, {}
                for backend_id in backend_ids:
                    row = run_backend(pkg, data, BACKENDS[backend_id], device, references, caches)
                    rows.append(row)
                    violations += [f"{name}/seed {seed}/{backend_id}: {v}" for v in row["violations"]]
                if seed == seeds[0]:
                    control = negative_control(pkg, data, device)
                    if control is not None:
                        controls.append(control)
                        violations += [f"{name}/seed {seed}: {v}" for v in control["violations"]]
                timings[f"{name}/{seed}"] = round(time.perf_counter() - t0, 3)
                if progress:
                    progress(f"scenario {name} seed {seed}: {timings[f'{name}/{seed}']:.1f} s")
        fixer = {"origin": pkg.origin, "settings": pkg.settings, "unsafe_fixes": pkg.unsafe_fixes, "diff": pkg.diff}

    # Assertion 1 again, as sets over the whole run (a row-level check cannot see a backend
    # missing from the run, a set can say which crashed where).
    observed = {v: sorted({r["backend"] for r in rows if r["variants"][v]["outcome"] != "ok"}) for v in ("pre", "pre_cp")}
    expected = {v: sorted(ids & set(backend_ids)) for v, ids in expected_crash_sets().items()}
    for v in ("pre", "pre_cp"):
        if observed[v] != expected[v]:
            violations.append(f"crash set of {v}: expected {expected[v]}, observed {observed[v]}")
    if any(0 in SCENARIOS[s].context_lens for s in scenarios) and not controls:
        violations.append("negative control did not run although a scenario has a request without context")

    return {
        "device": device,
        "kernels": kernel_label,
        "torch": torch.__version__,
        "scenarios": list(scenarios),
        "seeds": list(seeds),
        "fixer": fixer,
        "backends": {
            b: {
                "model_dtype": dtype_name(BACKENDS[b].model_dtype),
                "layer": BACKENDS[b].layer_kind,
                "fp8_prefill": BACKENDS[b].fp8_prefill,
                "expected_pre": _expected(BACKENDS[b].pre),
                "expected_pre_cp": _expected(BACKENDS[b].pre_cp),
                "expected_post_cast": dtype_name(BACKENDS[b].post_cast),
                "rel_bound": BACKENDS[b].rel_bound,
                "lse_bound": BACKENDS[b].lse_bound,
            }
            for b in backend_ids
        },
        "crash_sets": {"expected": expected, "observed": observed},
        "runs": rows,
        "negative_control": controls,
        "summary": summarize(rows, backend_ids),
        "timings_s": timings,
        "elapsed_s": round(time.perf_counter() - started, 3),
        "violations": violations,
        "ok": not violations,
    }


def summarize(rows: list[dict], backend_ids: list[str]) -> dict:
    """Per backend: distinct outcomes, worst post errors, bit identity over all runs."""
    summary = {}
    for b in backend_ids:
        mine = [r for r in rows if r["backend"] == b]
        metrics = [r["post_metrics"] for r in mine if r["post_metrics"]]
        compared = [v for v in ("pre", "pre_cp", "post_cp") if any(v in r["bit_identical"] for r in mine)]
        summary[b] = {
            # Markup-free: the messages contain backticks and quotes, never rich tags.
            "pre": sorted({_describe(r["variants"]["pre"]) for r in mine}),
            "pre_cp": sorted({_describe(r["variants"]["pre_cp"]) for r in mine}),
            "post": sorted({_describe(r["variants"]["post"]) for r in mine}),
            "helper_cast": sorted({r["helper_cast"] for r in mine}),
            "post_rel_max": max((m["rel"] for m in metrics), default=None),
            "post_lse_max": max((m["lse"] for m in metrics), default=None),
            "bit_identical": {v: all(r["bit_identical"].get(v, True) for r in mine) for v in compared},
            "ok": not any(r["violations"] for r in mine),
        }
    return summary


# ----------------------------------------------------------------------------- output


_SHORT_DTYPE = {"bfloat16": "bf16", "float16": "fp16", "float8_e4m3fn": "fp8", "None": "None"}


def render_table(report: dict, console=None) -> None:
    """The per-backend summary: worst case over every scenario and seed of the run."""
    from rich.console import Console
    from rich.table import Table

    console = console or Console(width=None if sys.stdout.isatty() else 140)
    table = Table(
        title=f"dtype-lint verify · device {report['device']} · kernels {report['kernels']} · scenarios {','.join(report['scenarios'])}"
        f" · seeds {','.join(map(str, report['seeds']))}",
    )
    table.add_column("backend", no_wrap=True)
    table.add_column("pre", ratio=1)
    table.add_column("pre_cp", ratio=1)
    for col in ("post cast", "post rel / bound", "post lse / bound", "bit-identical to post", ""):
        table.add_column(col, no_wrap=True)
    for b, s in report["summary"].items():
        spec = report["backends"][b]
        rel = "raised" if s["post_rel_max"] is None else f"{s['post_rel_max']:.2e} / {spec['rel_bound']:.1e}"
        lse = "raised" if s["post_lse_max"] is None else f"{s['post_lse_max']:.2e} / {spec['lse_bound']:.1e}"
        ident = s["bit_identical"]
        differing = [v for v, same in ident.items() if not same]
        ident_txt = f"NO: {' '.join(differing)}" if differing else ("yes: " + " ".join(ident) if ident else "n/a")
        table.add_row(
            b,
            "\n".join(s["pre"]),
            "\n".join(s["pre_cp"]),
            ", ".join(_SHORT_DTYPE.get(d, d) for d in s["helper_cast"]),
            rel,
            lse,
            ident_txt,
            "[green]✓[/]" if s["ok"] else "[red]✗[/]",
        )
    console.print(table)
    for c in report["negative_control"]:
        found = "raised" if c["nan_tokens"] is None else f"{c['nan_tokens']} token(s) with NaN"
        console.print(
            f"negative control (scenario {c['scenario']}, seed {c['seed']}, {c['backend']} post, "
            f"empty-context mask disabled): {found}"
        )
    if report["ok"]:
        console.print(f"[green]verify: all assertions hold[/] ({report['elapsed_s']:.1f} s)")
    else:
        console.print(f"[red]verify: {len(report['violations'])} violation(s)[/]")
        for v in report["violations"]:
            console.print(f"  - {v}", markup=False)


def _int_list(text: str) -> list[int]:
    out = []
    for part in text.split(","):
        if "-" in part:
            lo, hi = part.split("-")
            out += range(int(lo), int(hi) + 1)
        elif part:
            out.append(int(part))
    return out


def _str_list(text: str) -> list[str]:
    return [p for p in text.split(",") if p]


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="dtype-lint verify",
        description="Rewrite the pre-fix MLA prefill fixture with dtype-lint's fixer and prove, over "
        "the kv_b_proj backend matrix, that the rewrite changes nothing but the crash.",
    )
    p.add_argument("--device", choices=("cpu", "cuda"), default="cpu")
    p.add_argument("--scenarios", type=_str_list, default=list(DEFAULT_SCENARIOS), help=f"comma list of {','.join(SCENARIOS)} (default A,B)")
    p.add_argument("--seeds", type=_int_list, default=list(DEFAULT_SEEDS), help="comma list or range, e.g. 0,1 or 0-7 (default 0,1)")
    p.add_argument("--backends", type=_str_list, default=None, help=f"comma list of {','.join(BACKENDS)} (default all)")
    p.add_argument(
        "--kernels", choices=KERNEL_ROUTES, default=None,
        help="how kernels are called: the PyTorch reference directly (default on cpu), or through "
        "kernels_ref.ops with backend auto/torch/cuda (cuda: the CUDA builds; default on --device cuda)",
    )
    p.add_argument("--unsafe-fixes", action="store_true", help="let the fixer apply fixes it marks unsafe")
    p.add_argument(
        "--emit-variants", metavar="DIR",
        help="only run the fixer and save pre/post/helper under DIR (for a machine without libcst)",
    )
    p.add_argument("--variants", metavar="DIR", help="use the package saved by --emit-variants instead of running the fixer")
    p.add_argument("--json", metavar="PATH", help="write the full report as JSON")
    p.add_argument("--no-table", action="store_true", help="do not print the summary table")
    p.add_argument("--show-diff", action="store_true", help="print the fixer's pre → post diff")
    p.add_argument(
        "--matrix-only", action="store_true",
        help="with --device cuda: run only the backend matrix; by default --device cuda runs the whole "
        "GPU check (harness/gpu_check.py: build the CUDA kernels with NVRTC, cross-check each against "
        "the PyTorch reference, then the matrix at the spec's GPU sizes G1/G2)",
    )
    return p


def main(argv: list[str] | None = None) -> int:
    """Exit 0: every assertion holds; 1: a violation; 2: the harness itself could not run."""
    args = build_parser().parse_args(argv)
    if args.emit_variants:
        try:
            out = write_variants(args.emit_variants, unsafe_fixes=args.unsafe_fixes)
        except (ImportError, ValueError, OSError) as exc:
            print(f"dtype-lint verify: error: {exc}", file=sys.stderr)
            return 2
        print(f"wrote {out / 'variants.json'}")
        return 0
    if args.device == "cuda" and not args.matrix_only:
        from . import gpu_check

        out = str(Path(args.json).resolve().parent) if args.json else tempfile.mkdtemp(prefix="dtl-gpu-check-")
        print(f"dtype-lint verify: running the full GPU check; report in {out}/gpu_check.json", file=sys.stderr)
        return gpu_check.main(["--out", out, "--device", "cuda"])

    def progress(message: str) -> None:
        if sys.stderr.isatty():
            print(f"dtype-lint verify: {message}", file=sys.stderr)

    try:
        report = run_matrix(
            args.device, args.scenarios, args.seeds, backends=args.backends,
            kernels=args.kernels or ("cuda" if args.device == "cuda" else "reference"),
            unsafe_fixes=args.unsafe_fixes, variants_dir=args.variants, progress=progress,
        )
    except (ImportError, ValueError, RuntimeError, OSError) as exc:
        print(f"dtype-lint verify: error: {exc}", file=sys.stderr)
        return 2
    if args.json:
        Path(args.json).write_text(json.dumps(report, indent=2) + "\n")
    if args.show_diff:
        print(report["fixer"]["diff"])
    if not args.no_table:
        render_table(report)
    return 0 if report["ok"] else 1


if __name__ == "__main__":
    sys.exit(main())
