"""The verify matrix: every variant of the MLA context prefill on every kv_b_proj row.

Variants (each a source, a cast rule and a path, ``main`` = ``_compute_prefill_context``,
``cp`` = ``_context_parallel_compute_prefill_context``):

============  =========  ===========  ==============================================
variant       source     cast rule    what runs
============  =========  ===========  ==============================================
pre, pre_cp   fixture    0.27.1       our fixture, unfixed (offline, fast)
post, _cp     fixture    ours         the fixer's rewrite of the fixture
0.27.1, _cp   vLLM       0.27.1       vLLM 0.27.1's own functions, unfixed
ours, _cp     vLLM       ours         the fixer's rewrite of 0.27.1's functions
0.28.0, _cp   vLLM       0.28.0       vLLM 0.28.0's own fixed functions
============  =========  ===========  ==============================================

Checks per (scenario, seed, row); each failure is a violation, ``report["ok"]`` is their absence:

1. every variant raises exactly what its cast rule and the layer's input contract predict
   (:mod:`.backends`): type, message and the function it is raised in; a fixed variant (``post``,
   ``ours``) predicted to fail is a *known failure*, reported with its reason;
2. a fixed variant never fails where 0.28.0 runs;
3. every variant that ran meets the row's bounds against the dense reference (``post``, ``ours``
   and ``0.28.0``; the unfixed ones are compared bitwise instead);
4. bit identity: unfixed vs fixed wherever the unfixed one ran, the fixture's two paths, ours vs
   0.28.0 wherever both helpers pick the same dtype and both releases cut the same chunks, and,
   on the crash rows (Marlin, AWQ), the fixed variant vs the same variant through an unquantized
   twin holding the dequantized weight (the exact check where no unfixed output exists);
5. query tokens of requests without context come out exactly 0 with LSE exactly -inf;
6. negative control: the fixture's ``post`` with the empty-context mask hidden must leak NaNs.
"""

from __future__ import annotations

import dataclasses
import time
import traceback
from contextlib import contextmanager, nullcontext
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Iterator

import torch

from ..formats import FP8
from . import upstream_runtime as ur
from .backends import BACKENDS, SPEC_ROWS, Backend, Expectation, cast_0271, expect
from .chunking import plan_chunked_context
from .prefill_context import SCENARIOS, ScenarioData, build_layer, make_data, run_variant, store_cache
from .reference import bit_identical, empty_context_violations, error_metrics, reference_context_attention
from .variants import FixturePackage, ReusedFix, UpstreamSources, fixture_package, sources

DEFAULT_SCENARIOS = ("A", "B", "S", "P")
DEFAULT_SEEDS = (0,)
NEGATIVE_CONTROL_BACKEND = "bf16"
KERNEL_ROUTES = ("reference", "auto", "torch", "cuda")
DECIDING_FRAME = "_compute_prefill_context"  # where 0.27.1's main cast reads .weight


@dataclass(frozen=True)
class Variant:
    name: str
    source: str  # "fixture" or "vllm"
    rule: str  # "0.27.1", "ours", "0.28.0"
    path: str  # "main" or "cp"
    twin: bool = False

    @property
    def fixed(self) -> bool:
        return self.rule != "0.27.1"


FIXTURE_VARIANTS = (
    Variant("pre", "fixture", "0.27.1", "main"),
    Variant("pre_cp", "fixture", "0.27.1", "cp"),
    Variant("post", "fixture", "ours", "main"),
    Variant("post_cp", "fixture", "ours", "cp"),
)
UPSTREAM_VARIANTS = (
    Variant("0.27.1", "vllm", "0.27.1", "main"),
    Variant("0.27.1_cp", "vllm", "0.27.1", "cp"),
    Variant("ours", "vllm", "ours", "main"),
    Variant("ours_cp", "vllm", "ours", "cp"),
    Variant("0.28.0", "vllm", "0.28.0", "main"),
    Variant("0.28.0_cp", "vllm", "0.28.0", "cp"),
)
_RELEASE_OF_RULE = {"0.27.1": "0.27.1", "ours": "0.27.1+dtype-lint", "0.28.0": "0.28.0"}


def _twin(v: Variant) -> Variant:
    return dataclasses.replace(v, name=v.name + "_twin", twin=True)


# ----------------------------------------------------------------------------- outcomes


def _outcome(fn: Callable[[], tuple[torch.Tensor, torch.Tensor]]):
    """Run a variant; on an exception record its type, message and frames."""
    try:
        return fn(), {"outcome": "ok"}
    except Exception as exc:  # noqa: BLE001 — the crash is the data under test
        frames = traceback.extract_tb(exc.__traceback__)
        last = frames[-1]
        return None, {
            "outcome": "crash",
            "error_type": type(exc).__name__,
            "message": str(exc),
            "frames": [f.name for f in frames],
            "raised_at": f"{last.name} ({Path(last.filename).name}:{last.lineno})",
        }


def describe(result: dict) -> str:
    return "ok" if result["outcome"] == "ok" else f"{result['error_type']}: {result['message']}"


def _mismatch(result: dict, expected: Expectation) -> str | None:
    if describe(result) != expected.describe():
        return f"expected {expected.describe()!r}, got {describe(result)!r}"
    if expected.crash is not None and expected.crash.raised_in not in result["frames"]:
        return f"{expected.crash.error_type} was expected from {expected.crash.raised_in}, raised at {result['raised_at']}"
    return None


def dtype_name(dtype: torch.dtype | None) -> str:
    return "None" if dtype is None else str(dtype).removeprefix("torch.")


# ----------------------------------------------------------------------------- per scenario


class ScenarioRun:
    """Data, caches, layers and references shared by every row of one (scenario, seed)."""

    def __init__(self, scenario: str, seed: int, device: str) -> None:
        self.data: ScenarioData = make_data(SCENARIOS[scenario], seed)
        self.device = device
        self._caches: dict[tuple, torch.Tensor] = {}
        self._layers: dict[tuple, torch.nn.Module] = {}
        self._refs: dict[tuple, tuple[torch.Tensor, torch.Tensor]] = {}

    @property
    def scenario(self):
        return self.data.scenario

    def k_scale(self, backend: Backend) -> float:
        """The row's fp8 KV-cache scale: 1, or calibrated on this data as a checkpoint's is
        (``amax / 448`` over the stored rows, so the fp8 range is used; never a power of two, so a
        gather that drops it cannot stay exact)."""
        if backend.k_scale == "unit" or backend.cache_dtype != FP8:
            return 1.0
        rows = torch.cat((self.data.latent, self.data.k_pe), dim=1)
        # (1 + 2^-10) keeps the largest |x| / k_scale just under 448 after fp32 rounding: no clamp.
        return float(torch.tensor(float(rows.abs().max()) / 448.0 * (1 + 2**-10), dtype=torch.float32))

    def cache(self, dtype: torch.dtype, rank: int = 0, world: int = 1, k_scale: float = 1.0) -> torch.Tensor:
        key = (dtype, rank, world, k_scale)
        if key not in self._caches:
            self._caches[key] = store_cache(self.data, dtype, rank=rank, world=world, k_scale=k_scale).to(self.device)
        return self._caches[key]

    def row_cache(self, backend: Backend, rank: int = 0, world: int = 1) -> torch.Tensor:
        return self.cache(backend.cache_dtype, rank, world, self.k_scale(backend))

    def layer(self, backend: Backend, twin: bool = False) -> torch.nn.Module:
        key = (backend.id, twin)
        if key not in self._layers:
            cache = self.row_cache(backend)
            # NVFP4's static input scale is calibrated on what it will see: the stored latent.
            amax = float(cache[..., : self.scenario.kv_lora_rank].float().abs().max()) * self.k_scale(backend)
            self._layers[key] = build_layer(backend, self.data, amax, twin=twin).to(self.device)
        return self._layers[key]

    def reference(self, backend: Backend) -> tuple[torch.Tensor, torch.Tensor]:
        key = (backend.cache_dtype, backend.model_dtype, self.k_scale(backend))
        if key not in self._refs:
            s = self.scenario
            self._refs[key] = reference_context_attention(
                q=self.data.q.to(backend.model_dtype).to(self.device), cache=self.row_cache(backend),
                block_table=self.data.block_table.to(self.device), context_lens=list(s.context_lens),
                query_start_loc=s.query_start_loc, w=self.data.w.to(self.device), kv_lora_rank=s.kv_lora_rank,
                qk_nope_head_dim=s.qk_nope_head_dim, v_head_dim=s.v_head_dim, scale=s.softmax_scale,
                k_scale=self.k_scale(backend),
            )
        return self._refs[key]

    def fixture_inputs(self, backend: Backend, layer: torch.nn.Module):
        from .prefill_context import DeviceInputs

        return DeviceInputs(
            cache=self.row_cache(backend), q=self.data.q.to(backend.model_dtype).to(self.device),
            block_table=self.data.block_table.to(self.device), layer=layer, cache_dtype=backend.cache_dtype,
            q_data_type=backend.q_data_type, model_dtype=backend.model_dtype, k_scale=self.k_scale(backend),
        )

    def upstream_inputs(self, backend: Backend, layer: torch.nn.Module, path: str) -> ur.UpstreamInputs:
        world = ur.DCP_WORLD_SIZE if path == "cp" else 1
        caches = [self.row_cache(backend, rank=r, world=world) if world > 1 else self.row_cache(backend)
                  for r in range(world)]
        return ur.UpstreamInputs(
            q=self.data.q.to(backend.model_dtype).to(self.device), caches=caches,
            block_table=self.data.block_table.to(self.device), layer=layer, kv_cache_dtype=backend.kv_cache,
            q_data_type=backend.q_data_type, model_dtype=backend.model_dtype, k_scale=self.k_scale(backend),
        )


# ----------------------------------------------------------------------------- one row


@dataclass
class Releases:
    """The compiled upstream sources and their helpers, plus which scenarios' plans agree."""

    compiled: dict[str, ur.CompiledRelease]
    helpers: dict[str, Callable]  # rule -> function(layer, fp8) -> dtype | None
    plans_agree: dict[tuple[str, str], bool]  # (scenario, path) -> 0.27.1 and 0.28.0 cut alike


def _expectation(v: Variant, backend: Backend, layer, helpers: dict[str, Callable]) -> Expectation:
    if v.rule == "0.27.1":
        decide = lambda: cast_0271(layer, backend.fp8_prefill, v.path)  # noqa: E731
    else:
        decide = lambda: helpers[v.rule](layer, backend.fp8_prefill)  # noqa: E731
    if v.source == "fixture":
        workspace = backend.q_data_type
    else:
        workspace = ur.workspace_dtype(v.path, backend.q_data_type, backend.model_dtype)
    return expect(decide, layer, workspace, DECIDING_FRAME)


#: The checks a violation can belong to; all but "fixer" are decided by running code.
CHECKS = ("outcome", "ours-vs-0.28.0", "bounds", "bit-identity", "empty-context", "negative-control", "helper",
          "cache", "fixer")
RUNTIME_CHECKS = tuple(c for c in CHECKS if c != "fixer")
HELPER_SAMPLE_ROWS = 16


def _workspace(source: str, path: str, backend: Backend) -> torch.dtype:
    if source == "fixture":
        return backend.q_data_type
    return ur.workspace_dtype(path, backend.q_data_type, backend.model_dtype)


def helper_check(run: ScenarioRun, backend: Backend, helper: Callable, source: str) -> list[tuple[str, str]]:
    """Check 7: the helper the rewrite calls, evaluated on this row's layer and run through it.

    On each path: call ``helper(kv_b_proj, fp8_prefill)``; cast the first rows of the latent,
    as the workspace holds them, as it says; run kv_b_proj on them for real. It must run (unless
    the row declares a known failure), and where vLLM 0.27.1's cast runs, feed the very dtype
    0.27.1 feeds (the fix changes nothing but the crash); where 0.27.1 crashes, feed the model
    dtype or leave the workspace's. This runs whether or not the fixer rewrote anything, so a
    helper the fixer refuses to route sites through still fails here, at run time.
    """
    found: list[tuple[str, str]] = []
    layer = run.layer(backend)
    s = run.scenario
    stored = run.row_cache(backend).reshape(-1, s.kv_lora_rank + s.qk_rope_head_dim)[:HELPER_SAMPLE_ROWS, : s.kv_lora_rank]
    for path in ("main", "cp"):
        workspace = _workspace(source, path, backend)
        latent = stored if stored.dtype == workspace else (stored.float() * run.k_scale(backend)).to(workspace)
        pre = expect(lambda: cast_0271(layer, backend.fp8_prefill, path), layer, workspace, DECIDING_FRAME)
        try:
            cast = helper(layer, backend.fp8_prefill)
        except Exception as exc:  # noqa: BLE001 - the helper's failure is the finding
            found.append(("helper", f"{source} helper on the {path} path raises {type(exc).__name__}: {exc}"))
            continue
        fed = workspace if cast is None else cast
        try:
            layer(latent if cast is None else latent.to(cast))
        except Exception as exc:  # noqa: BLE001
            if not backend.known_failure:
                found.append(("helper", f"{source} helper casts to {dtype_name(cast)} on the {path} path and kv_b_proj "
                                        f"raises {type(exc).__name__}: {exc}"))
        if pre.crash is None and fed != pre.fed:
            found.append(("helper", f"{source} helper feeds {dtype_name(fed)} on the {path} path where 0.27.1 feeds "
                                    f"{dtype_name(pre.fed)} and runs (the fix may change nothing but the crash)"))
        elif pre.crash is not None and fed not in (layer.params_dtype, workspace):
            found.append(("helper", f"{source} helper feeds {dtype_name(fed)} on the {path} path, neither the model "
                                    f"dtype {dtype_name(layer.params_dtype)} nor the workspace's {dtype_name(workspace)}"))
    return found


def cache_check(run: ScenarioRun, backend: Backend) -> list[tuple[str, str]]:
    """Check 8: an fp8 KV cache holds the ground truth. The reference reads the stored cache (so
    that the cache's own rounding is not charged to the cast), which makes a store that forgot
    ``k_scale`` self-consistent; here every stored row, dequantized with the row's ``k_scale``,
    must be the latent and ``k_pe`` to within e4m3's rounding (relative 2^-4, and half the
    smallest sub-normal step, ``k_scale · 2^-10``, absolute)."""
    if backend.cache_dtype != FP8:
        return []
    s, data, k = run.scenario, run.data, run.k_scale(backend)
    truth = torch.cat((data.latent, data.k_pe), dim=1)
    cache = run.row_cache(backend).cpu()
    found, start = [], 0
    for r, ctx in enumerate(s.context_lens):
        pos = torch.arange(ctx)
        stored = cache[data.block_table[r].long()[pos // s.block_size], pos % s.block_size].float() * k
        want = truth[start : start + ctx]
        start += ctx
        bad = ((stored - want).abs() > want.abs() * 2.0**-4 + k * 2.0**-10).sum()
        if int(bad):
            found.append(("cache", f"request {r}: {int(bad)} stored fp8 value(s) times k_scale {k:.4g} are not the data "
                                   "to within e4m3 rounding"))
    return found


def run_row(
    run: ScenarioRun, backend: Backend, variants: tuple[Variant, ...], runner: Callable[[Variant, torch.nn.Module], tuple],
    helpers: dict[str, Callable], identity: list[tuple[str, str, str]], extra_notes: list[str] | None = None,
    source: str = "fixture",
) -> dict:
    """Run ``variants`` (plus twins on crash rows) on one row and check 1–5 and 7."""
    s = run.scenario
    ctx, qsl = list(s.context_lens), s.query_start_loc
    layer = run.layer(backend)
    all_variants = list(variants)
    if backend.twin is not None:
        all_variants += [_twin(v) for v in variants if v.rule == "ours"]
    results, outputs, expected, violations, known = {}, {}, {}, [], []
    checks: list[str] = []  # the check each violation belongs to (CHECKS)

    def add(check: str, text: str) -> None:
        checks.append(check)
        violations.append(text)

    for variant in all_variants:
        vlayer = run.layer(backend, twin=True) if variant.twin else layer
        out, results[variant.name] = _outcome(lambda: runner(variant, vlayer))
        if out is not None:
            outputs[variant.name] = out
        if variant.twin:
            continue
        exp = _expectation(variant, backend, layer, helpers)
        expected[variant.name] = exp
        problem = _mismatch(results[variant.name], exp)
        if problem:
            add("outcome", f"{variant.name}: {problem}")
        if variant.rule == "ours" and exp.crash is not None:
            if not backend.known_failure:
                add("outcome", f"{variant.name} fails on this row: the helper casts to {dtype_name(exp.cast)}, "
                                  f"kv_b_proj gets {dtype_name(exp.fed)} and raises {exp.describe()}")
            elif not problem:
                known.append({"variant": variant.name, "failure": exp.describe(), "reason": backend.known_failure,
                              "cast": dtype_name(exp.cast), "fed": dtype_name(exp.fed)})

    # 2. ours never fails where 0.28.0 runs
    for variant in variants:
        if variant.rule == "ours":
            other = variant.name.replace("ours", "0.28.0")
            if other in results and results[variant.name]["outcome"] != "ok" and results[other]["outcome"] == "ok":
                add("ours-vs-0.28.0", f"{variant.name} fails where {other} runs: {describe(results[variant.name])}")

    # 3. bounds for every variant that ran
    ref_out, ref_lse = run.reference(backend)
    metrics = {}
    for variant in variants:
        if variant.name in outputs:
            out, lse = outputs[variant.name]
            m = error_metrics(out, lse, ref_out, ref_lse, ctx, qsl)
            metrics[variant.name] = {"rel": m.rel, "rel_per_request": m.rel_per_request, "lse": m.lse,
                               "max_abs_over_rms": m.max_abs_over_rms, "finite": m.finite}
            if variant.fixed:
                for x in m.violations(backend.rel_bound, backend.lse_bound):
                    add("bounds", f"{variant.name}: {x}")

    # 4. bit identity
    identical, notes = {}, list(extra_notes or [])
    pairs = list(identity)
    if backend.twin is not None:
        pairs += [(v.name, v.name + "_twin", "twin") for v in variants if v.rule == "ours"]
    for a, b, why in pairs:
        if why == "helpers":  # ours vs 0.28.0: only where both pick one dtype and the plans agree
            ea, eb = expected.get(a), expected.get(b)
            if ea is None or eb is None:
                continue
            if ea.cast != eb.cast:
                notes.append(f"{a} vs {b}: helpers differ ({dtype_name(ea.cast)} vs {dtype_name(eb.cast)})")
                continue
        if why.startswith("plans differ"):
            notes.append(f"{a} vs {b}: not compared, {why}")
            continue
        if a in outputs and b in outputs:
            same = all(bit_identical(x, y) for x, y in zip(outputs[a], outputs[b]))
            identical[f"{a}={b}"] = same
            if not same:
                add("bit-identity", f"{a} and {b} ran but their output/LSE bits differ ({why})")
        elif why == "twin" and a in outputs:
            add("bit-identity", f"{b} did not run: {describe(results[b])}")

    # 5. empty-context tokens
    for name, (out, lse) in outputs.items():
        for x in empty_context_violations(out, lse, ctx, qsl):
            add("empty-context", f"{name}: {x}")

    # 7. the helper itself, on this row
    for check, text in helper_check(run, backend, helpers["ours"], source):
        add(check, text)

    return {
        "scenario": s.name,
        "seed": run.data.seed,
        "backend": backend.id,
        "variants": results,
        "expected": {k: {"outcome": e.describe(), "cast": dtype_name(e.cast), "fed": dtype_name(e.fed)} for k, e in expected.items()},
        "known_failures": known,
        "metrics": metrics,
        "bit_identical": identical,
        "notes": notes,
        "violations": violations,
        "violation_checks": checks,
    }


def fixture_row(run: ScenarioRun, pkg: FixturePackage, backend: Backend) -> dict:
    def runner(v: Variant, layer):
        module = pkg.pre if v.rule == "0.27.1" else pkg.post
        return run_variant(module, v.path, run.scenario, run.fixture_inputs(backend, layer))

    identity = [("pre", "post", "unfixed vs fixed"), ("pre_cp", "post_cp", "unfixed vs fixed"), ("post_cp", "post", "paths")]
    return run_row(run, backend, FIXTURE_VARIANTS, runner, {"ours": pkg.helper}, identity) | {"source": "fixture"}


def upstream_row(run: ScenarioRun, rel: Releases, backend: Backend) -> dict:
    def runner(v: Variant, layer):
        release = rel.compiled[_RELEASE_OF_RULE[v.rule]]
        return ur.run(release, v.path, run.scenario, run.upstream_inputs(backend, layer, v.path))

    identity = [("0.27.1", "ours", "unfixed vs fixed"), ("0.27.1_cp", "ours_cp", "unfixed vs fixed")]
    for path, suffix in (("main", ""), ("cp", "_cp")):
        if rel.plans_agree[(run.scenario.name, path)]:
            identity.append((f"ours{suffix}", f"0.28.0{suffix}", "helpers"))
        else:
            identity.append((f"ours{suffix}", f"0.28.0{suffix}", "plans differ: the releases cut the context into different chunks"))
    return run_row(run, backend, UPSTREAM_VARIANTS, runner, rel.helpers, identity, source="vllm") | {"source": "vllm"}


def masking_matters(scenario) -> bool:
    """Whether some request *with* context has an empty span in some chunk. Only there does an
    unmasked FA2 NaN row survive the merges (a request that never has context merges its NaN rows
    with NaN rows, and a both-empty merge writes 0), so only there is the negative control real."""
    s = scenario
    plan = plan_chunked_context(
        context_lens=torch.tensor(s.context_lens), query_start_loc=torch.tensor(s.query_start_loc),
        workspace=torch.empty(s.workspace_size, 1), block_size=s.block_size,
    )
    if plan is None:  # no request has context (every scenario has some)
        return False
    with_context = torch.tensor(s.context_lens) > 0
    return bool(((plan.seq_lens == 0) & with_context).any())


def negative_control(pkg: FixturePackage, run: ScenarioRun) -> dict | None:
    """``post`` with the empty-context mask hidden must leak NaNs (else check 5 could pass
    because no empty span ever reached the merge); None where that cannot happen."""
    s = run.scenario
    if not masking_matters(s):
        return None
    backend = BACKENDS[NEGATIVE_CONTROL_BACKEND]
    inputs = run.fixture_inputs(backend, run.layer(backend))
    result, outcome = _outcome(lambda: run_variant(pkg.post, "main", s, inputs, mask_empty_context=False))
    control = {"scenario": s.name, "seed": run.data.seed, "backend": backend.id, "nan_tokens": None}
    if result is None:
        return control | {"violations": [f"negative control raised {describe(outcome)!r}"]}
    nan_tokens = int(torch.isnan(result[0]).flatten(1).any(dim=1).sum())
    control["nan_tokens"] = nan_tokens
    return control | {"violations": [] if nan_tokens else ["negative control: no NaN with the empty-context mask disabled"]}


# ----------------------------------------------------------------------------- the matrix


@contextmanager
def _kernel_route(kernels: str | None) -> Iterator[str]:
    """Route the layers' and the prefills' kernel calls; yields a label for the report.

    ``None``: leave the routing as the caller set it (``gpu_check.py`` wraps the matrix in its own
    ``ops.installed``/``ops.use_backend``); ``"reference"``: the PyTorch reference modules, called
    directly; otherwise :func:`kernels_ref.ops.installed` with that ops backend. Entered before the
    fixture is imported: the fixture binds the attention functions at import time.
    """
    from .. import attention

    routed = hasattr(attention.mla_prefill_attention, "__wrapped__")
    if kernels is None:
        yield "ops (routed by the caller)" if routed else "reference"
        return
    if kernels == "reference":
        if routed:
            raise RuntimeError("kernels='reference' but kernels_ref.ops.installed() is active")
        yield "reference"
        return
    from .. import ops

    with ops.installed(kernels):
        yield f"ops backend={kernels}"


@contextmanager
def _cpu_threads(n: int | None) -> Iterator[None]:
    """Run with ``n`` intra-op threads, then restore: the CPU matrix is thousands of small ops,
    and on a shared 2-core machine intra-op barriers made it 5–7× slower."""
    if n is None:
        yield
        return
    before = torch.get_num_threads()
    torch.set_num_threads(n)
    try:
        yield
    finally:
        torch.set_num_threads(before)


def _releases(upstream: UpstreamSources, scenarios) -> Releases:
    compiled = {label: ur.CompiledRelease(ext) for label, ext in upstream.releases.items()}
    helpers = {"ours": compiled["0.27.1+dtype-lint"].fixed_helper(), "0.28.0": compiled["0.28.0"].fixed_helper()}
    agree = {}
    for name in scenarios:
        for path in ("main", "cp"):
            agree[(name, path)] = (ur.chunk_plan(compiled["0.27.1"], SCENARIOS[name], path)
                                   == ur.chunk_plan(compiled["0.28.0"], SCENARIOS[name], path))
    return Releases(compiled, helpers, agree)


def run_matrix(
    device: str = "cpu",
    scenarios=DEFAULT_SCENARIOS,
    seeds=DEFAULT_SEEDS,
    *,
    backends=None,
    kernels: str | None = None,
    unsafe_fixes: bool = False,
    variants_dir: str | Path | None = None,
    upstream: bool = True,
    progress: Callable[[str], None] | None = None,
    reused: ReusedFix | None = None,
    fixture: bool = True,
) -> dict:
    """Run the matrix and return the JSON-ready report; ``report["ok"]`` is the verdict.

    ``reused``: vLLM 0.27.1's MLA module as a migration already rewrote it, run as "ours" instead
    of the fixer's rewrite (``variants.upstream_sources``; `migrate --series` passes its patch).

    ``upstream=False`` runs the fixture alone (offline: no release tree needed); ``fixture=False``
    vLLM's functions alone (``migrate --series``' proof, whose message shows their rows only: the
    fixer is not run on the fixture, and no scenario may need the fixture's negative control). Raises
    ValueError for unknown names, RuntimeError when the device cannot run, and
    ``variants.VariantsError``/``ReleaseFetchError`` when the code to run cannot be produced.
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

    if not fixture and (not upstream or variants_dir is not None):
        raise ValueError("fixture=False runs vLLM's functions, from the release trees: upstream, no saved variants")
    if not fixture and any(masking_matters(SCENARIOS[s]) for s in scenarios):
        raise ValueError("fixture=False: a scenario with an empty span needs the fixture's negative control")
    started = time.perf_counter()
    src = sources(unsafe_fixes=unsafe_fixes, variants_dir=variants_dir, upstream=upstream, reused=reused,
                  fixture=fixture)
    rows, controls, violations, timings = [], [], [], {}
    violation_checks: list[str] = []

    def add(check: str, text: str) -> None:
        violation_checks.append(check)
        violations.append(f"[{check}] {text}")

    not_applicable: dict[str, dict[str, str]] = {}
    for problem in src.fixer_problems:
        add("fixer", problem)
    if src.fixture is not None and src.fixture.post == src.fixture.pre:
        add("fixer", "fixer: post.py is identical to pre.py (no site was rewritten)")
    with (
        _kernel_route(kernels) as kernel_label,
        (fixture_package(src.fixture, src.fixture_origin) if src.fixture is not None else nullcontext()) as pkg,
        _cpu_threads(1 if device == "cpu" else None),
    ):
        rel = _releases(src.upstream, scenarios) if src.upstream else None
        # Where the fixer rewrote nothing in vLLM 0.27.1 there is no "ours" to run, but the helper
        # it would have called still runs through every row (check 7).
        lone_helper = ur.load_helper(*src.upstream_helper) if src.upstream is None and src.upstream_helper else None
        for name in scenarios:
            for seed in seeds:
                t0 = time.perf_counter()
                run = ScenarioRun(name, seed, device)
                for backend_id in backend_ids:
                    backend = BACKENDS[backend_id]
                    shape_problem = backend.shape_problem(run.scenario)
                    if shape_problem:
                        not_applicable.setdefault(name, {})[backend_id] = shape_problem
                        continue
                    for check, v in cache_check(run, backend):
                        add(check, f"{name}/seed {seed}/{backend_id}: {v}")
                    for row in ([fixture_row(run, pkg, backend)] if pkg is not None else []) + \
                            ([upstream_row(run, rel, backend)] if rel else []):
                        rows.append(row)
                        for check, v in zip(row["violation_checks"], row["violations"]):
                            add(check, f"{row['source']} {name}/seed {seed}/{backend_id}: {v}")
                    if lone_helper is not None:
                        for check, v in helper_check(run, backend, lone_helper, "vllm"):
                            add(check, f"vllm {name}/seed {seed}/{backend_id}: {v}")
                if seed == seeds[0] and pkg is not None:
                    control = negative_control(pkg, run)
                    if control is not None:
                        controls.append(control)
                        for v in control["violations"]:
                            add("negative-control", f"{name}/seed {seed}: {v}")
                timings[f"{name}/{seed}"] = round(time.perf_counter() - t0, 3)
                if progress:
                    progress(f"scenario {name} seed {seed}: {timings[f'{name}/{seed}']:.1f} s")
        fixer = {"origin": pkg.origin, "settings": pkg.settings, "unsafe_fixes": pkg.unsafe_fixes, "diff": pkg.diff} \
            if pkg is not None else None
    if any(masking_matters(SCENARIOS[s]) for s in scenarios) and not controls:
        add("negative-control", "negative control did not run although a scenario has an empty span to mask")

    upstream_info = None
    if src.upstream and rel is not None:  # rel is None exactly when src.upstream is
        upstream_info = {
            "origin": src.upstream_origin,
            "settings": src.upstream.settings,
            "diff": src.upstream.diff,
            "units": {label: [f"{u.origin}:{u.line} {u.name}" for u in ext.units] for label, ext in src.upstream.releases.items()},
            "provided": {label: ext.provided for label, ext in src.upstream.releases.items()},
            "plans_agree": {f"{s}/{p}": v for (s, p), v in rel.plans_agree.items()},
        }
    return {
        "device": device,
        "kernels": kernel_label,
        "torch": torch.__version__,
        "scenarios": list(scenarios),
        "seeds": list(seeds),
        "fixer": fixer,
        "sources_notes": list(src.notes),
        "upstream": upstream_info,
        "backends": {
            b: {
                "model_dtype": dtype_name(BACKENDS[b].model_dtype),
                "layer": BACKENDS[b].layer_kind,
                "fp8_prefill": BACKENDS[b].fp8_prefill,
                "kv_cache": BACKENDS[b].kv_cache,
                "rel_bound": BACKENDS[b].rel_bound,
                "lse_bound": BACKENDS[b].lse_bound,
                "predicted_rel": BACKENDS[b].precision.predicted_rel(),
                "predicted_lse": BACKENDS[b].precision.predicted_lse(),
                "exact_twin": BACKENDS[b].twin is not None,
                "spec_row": b in SPEC_ROWS,
                "known_failure": BACKENDS[b].known_failure,
            }
            for b in backend_ids
        },
        "not_applicable": not_applicable,
        "crash_sets": crash_sets(rows),
        "runs": rows,
        "negative_control": controls,
        "summary": summarize(rows, backend_ids),
        "timings_s": timings,
        "elapsed_s": round(time.perf_counter() - started, 3),
        "violations": violations,
        "violations_by_check": {c: violation_checks.count(c) for c in CHECKS if c in violation_checks},
        "runtime_violations": sum(c in RUNTIME_CHECKS for c in violation_checks),
        "ok": not violations,
    }


def crash_sets(rows: list[dict]) -> dict:
    """Per variant, the rows on which it failed (observed) and was predicted to (expected)."""
    out: dict[str, dict[str, set[str]]] = {}
    for row in rows:
        for v, res in row["variants"].items():
            entry = out.setdefault(v, {"observed": set(), "expected": set()})
            if res["outcome"] != "ok":
                entry["observed"].add(row["backend"])
            if row["expected"].get(v, {}).get("outcome", "ok") != "ok":
                entry["expected"].add(row["backend"])
    return {v: {k: sorted(s) for k, s in e.items()} for v, e in out.items()}


def summarize(rows: list[dict], backend_ids: list[str]) -> dict:
    """Per source and backend: outcomes, casts, worst errors, identities, known failures."""
    summary: dict[str, dict] = {}
    for source in sorted({r["source"] for r in rows}):
        per = summary.setdefault(source, {})
        for backend_id in backend_ids:
            mine = [r for r in rows if r["backend"] == backend_id and r["source"] == source]
            if not mine:
                continue
            variants = list(mine[0]["variants"])
            idents = sorted({k for r in mine for k in r["bit_identical"]})
            per[backend_id] = {
                "outcomes": {v: sorted({describe(r["variants"][v]) for r in mine}) for v in variants},
                "casts": {v: sorted({r["expected"][v]["cast"] for r in mine if v in r["expected"]}) for v in variants
                          if v in mine[0]["expected"]},
                "rel_max": {v: max((r["metrics"][v]["rel"] for r in mine if v in r["metrics"]), default=None) for v in variants},
                "lse_max": {v: max((r["metrics"][v]["lse"] for r in mine if v in r["metrics"]), default=None) for v in variants},
                "bit_identical": {k: all(r["bit_identical"].get(k, True) for r in mine) for k in idents},
                "known_failures": sorted({(k["variant"], k["failure"]) for r in mine for k in r["known_failures"]}),
                "notes": sorted({n for r in mine for n in r["notes"]}),
                "ok": not any(r["violations"] for r in mine),
            }
    return summary
