"""``dtype-lint verify`` end to end on the CPU: the fixer's rewrite changes nothing but the crash.

The expectations below are written out from KERNELS_SPEC.md §4–§6 rather than read back from
``backends.py``, so that a wrong row in the harness's own table fails here.
"""

from __future__ import annotations

import json
import sys

import pytest
import torch

from dtype_lint.kernels_ref.harness import verify
from dtype_lint.kernels_ref.harness.backends import BACKENDS
from dtype_lint.kernels_ref.harness.chunking import gather_cache, plan_chunked_context
from dtype_lint.kernels_ref.harness.prefill_context import (
    SCENARIOS,
    make_data,
    prepare_inputs,
    run_variant,
    store_cache,
)

MARLIN_MSG = "unsupported `a` scalar_type"
AWQ_MSG = "'AwqLikeLinear' object has no attribute 'weight'"
MARLINS = {"marlin", "marlin_g128", "marlin_fp16"}

# §5: (rel bound, lse bound) of post against the dense fp32 reference; extras as Marlin.
BOUNDS = {
    "fp16": (1.5e-3, 5e-4),
    "bf16": (1.2e-2, 3e-3),
    "marlin": (8e-2, 3e-2),
    "marlin_g128": (8e-2, 3e-2),
    "marlin_fp16": (8e-2, 3e-2),
    "fp8": (0.10, 4e-2),
    "fp8_p": (0.13, 6e-2),
    "awq": (0.25, 0.10),
    "nvfp4": (0.35, 0.12),
}
# §4: what the helper must return for post (None: keep the model dtype).
POST_CAST = {
    "bf16": "bfloat16", "fp16": "float16", "fp8": "None", "fp8_p": "float8_e4m3fn",
    "marlin": "bfloat16", "marlin_g128": "bfloat16", "marlin_fp16": "float16",
    "nvfp4": "None", "awq": "bfloat16",
}


@pytest.fixture(scope="module", autouse=True)
def one_cpu_thread():
    # As run_matrix does on the CPU: tiny ops, and intra-op barriers stall on a busy machine.
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


@pytest.fixture(scope="module")
def report() -> dict:
    return verify.run_matrix("cpu", ("A", "B"), (0,))


# ----------------------------------------------------------------------------- §4 assertions


def test_matrix_holds_and_covers_every_backend(report):
    assert report["violations"] == []
    assert report["ok"]
    assert set(report["summary"]) == set(BOUNDS)
    assert len(report["runs"]) == 2 * len(BOUNDS)


def test_fixer_rewrote_both_cast_sites(report):
    diff = report["fixer"]["diff"]
    removed = [l[1:].strip() for l in diff.splitlines() if l.startswith("-") and not l.startswith("---")]
    added = [l[1:].strip() for l in diff.splitlines() if l.startswith("+") and not l.startswith("+++")]
    assert "kv_c_normed = kv_c_normed.to(self.kv_b_proj.weight.dtype)" in removed
    assert "kv_c_normed = kv_c_normed.to(kv_b_proj_w_dtype)" in removed
    assert sum("get_layer_input_dtype(self.kv_b_proj, use_fp8_prefill)" in l for l in added) == 2


def test_crash_sets_are_exact(report):
    # Assertion 1: pre = {marlin, awq} (+ Marlin extras), pre_cp = {marlin} (+ extras).
    assert set(report["crash_sets"]["observed"]["pre"]) == MARLINS | {"awq"}
    assert set(report["crash_sets"]["observed"]["pre_cp"]) == MARLINS
    crashed = {
        (r["backend"], v) for r in report["runs"] for v, res in r["variants"].items() if res["outcome"] != "ok"
    }
    assert crashed == {(b, "pre") for b in MARLINS | {"awq"}} | {(b, "pre_cp") for b in MARLINS}


def test_crash_types_messages_and_sites(report):
    for r in report["runs"]:
        for variant in ("pre", "pre_cp"):
            res = r["variants"][variant]
            if r["backend"] in MARLINS:
                assert (res["error_type"], res["message"]) == ("RuntimeError", MARLIN_MSG)
                assert "marlin_gemm" in res["frames"]
                # The int32 activation reaches the GEMM: the crash is in kv_b_proj's call.
                assert res["fixture_line"].startswith("kv_nope = self.kv_b_proj(kv_c_normed)[0]")
            elif r["backend"] == "awq" and variant == "pre":
                assert (res["error_type"], res["message"]) == ("AttributeError", AWQ_MSG)
                assert res["fixture_line"] == "kv_c_normed = kv_c_normed.to(self.kv_b_proj.weight.dtype)"
            else:
                assert res == {"outcome": "ok"}


def test_post_never_raises_and_is_within_bounds(report):
    # Assertion 2.
    for r in report["runs"]:
        assert r["variants"]["post"] == {"outcome": "ok"}
        assert r["variants"]["post_cp"] == {"outcome": "ok"}
        assert r["helper_cast"] == POST_CAST[r["backend"]]
        rel_bound, lse_bound = BOUNDS[r["backend"]]
        m = r["post_metrics"]
        assert m["finite"]
        assert m["rel"] <= rel_bound, r
        assert m["lse"] <= lse_bound, r
        assert max(m["rel_per_request"]) <= rel_bound
        assert m["max_abs_over_rms"] <= 12 * rel_bound


def test_bit_identical_wherever_pre_ran(report):
    # Assertion 3: compared exactly where pre / pre_cp did not crash, and post_cp always.
    for r in report["runs"]:
        ran = {v for v in ("pre", "pre_cp") if r["variants"][v]["outcome"] == "ok"}
        assert r["bit_identical"] == {v: True for v in ran | {"post_cp"}}, r["backend"]
    assert report["summary"]["bf16"]["bit_identical"] == {"pre": True, "pre_cp": True, "post_cp": True}
    assert report["summary"]["awq"]["bit_identical"] == {"pre_cp": True, "post_cp": True}
    assert report["summary"]["marlin"]["bit_identical"] == {"post_cp": True}


def test_negative_control_leaks_nan(report):
    # Assertion 5, recorded for scenario A (B has no empty span, so no control there).
    (control,) = report["negative_control"]
    assert control["scenario"] == "A"
    assert control["nan_tokens"] > 0


# ----------------------------------------------------------------------------- direct runs


@pytest.fixture(scope="module")
def variants():
    with verify.variant_package() as pkg:
        yield pkg


@pytest.mark.parametrize("backend_id", ["marlin", "awq"])
def test_empty_context_tokens_are_exactly_zero_and_minus_inf(variants, backend_id):
    # Assertion 4 on the tensors themselves: request 2 of A (tokens 12..15) has no context.
    s = SCENARIOS["A"]
    inputs = prepare_inputs(make_data(s, 3), BACKENDS[backend_id], "cpu")
    for path in ("main", "cp"):
        out, lse = run_variant(variants.post, path, s, inputs)
        assert bool((out[12:] == 0).all())
        assert bool((lse[:, 12:] == float("-inf")).all())
        assert bool(torch.isfinite(out[:12]).all()) and bool(torch.isfinite(lse[:, :12]).all())


def test_unmasked_empty_spans_poison_the_output(variants):
    # Assertion 5 on the tensors: request 1 of A (130 tokens) has empty spans in chunks 3 and 4;
    # unmasked, fa2's NaN rows survive the merge (request 2's both-empty merges give 0).
    s = SCENARIOS["A"]
    inputs = prepare_inputs(make_data(s, 0), BACKENDS["bf16"], "cpu")
    out, _ = run_variant(variants.post, "main", s, inputs, mask_empty_context=False)
    assert bool(torch.isnan(out[5:12]).all())
    assert not bool(torch.isnan(out[:5]).any())


def test_a_do_nothing_fixer_is_caught(monkeypatch):
    # The harness must not be vacuous: if post were pre, Marlin and AWQ would crash in post.
    import dtype_lint.api

    monkeypatch.setattr(dtype_lint.api, "fix_source", lambda source, **kwargs: source)
    rep = verify.run_matrix("cpu", ("B",), (0,), backends=("bf16", "marlin", "awq"))
    assert not rep["ok"]
    assert any("post.py is identical to pre.py" in v for v in rep["violations"])
    assert any("B/seed 0/marlin: post raised" in v for v in rep["violations"])
    assert any("B/seed 0/awq: post raised" in v for v in rep["violations"])
    assert not any("/bf16:" in v for v in rep["violations"])


def test_the_matrix_runs_the_kernels_the_caller_routed():
    # gpu_check wraps run_matrix in ops.installed("cuda"); on CPU tensors that route refuses.
    from dtype_lint.kernels_ref import ops

    with ops.installed("cuda"):
        rep = verify.run_matrix("cpu", ("B",), (0,), backends=("bf16",))
    assert rep["kernels"] == "ops (routed by the caller)"
    post = rep["runs"][0]["variants"]["post"]
    assert post["error_type"] == "CudaUnavailable"
    assert "backend='cuda' needs CUDA tensors" in post["message"]
    assert not rep["ok"]


def test_the_fixture_binds_the_routed_attention():
    # The fixture imports the attention functions by name, so it must be imported inside the
    # ops.installed block (variant_package does the import).
    from dtype_lint.kernels_ref import ops

    with ops.installed("cuda"), verify.variant_package() as pkg:
        for name in ("mla_prefill_attention", "mask_empty_context", "merge_attn_states"):
            assert getattr(pkg.post, name).__wrapped__ is getattr(ops, name)
            assert getattr(pkg.pre, name).__wrapped__ is getattr(ops, name)
    with verify.variant_package() as pkg:
        assert not hasattr(pkg.post.mla_prefill_attention, "__wrapped__")


def test_matrix_through_ops_matches_the_direct_reference(report):
    routed = verify.run_matrix("cpu", ("B",), (0,), backends=("fp16", "marlin", "awq", "nvfp4"), kernels="auto")
    assert routed["ok"], routed["violations"]
    direct = {(r["scenario"], r["backend"]): r["post_metrics"] for r in report["runs"]}
    for r in routed["runs"]:
        assert r["post_metrics"] == direct[("B", r["backend"])]


def test_saved_variants_run_without_libcst(tmp_path, monkeypatch):
    # The GPU machine has no libcst: the fix is made here and carried (--emit-variants).
    assert verify.main(["--emit-variants", str(tmp_path / "v")]) == 0
    monkeypatch.setitem(sys.modules, "libcst", None)
    monkeypatch.setitem(sys.modules, "dtype_lint.api", None)
    rep = verify.run_matrix("cpu", ("B",), (0,), backends=("marlin", "awq"), variants_dir=tmp_path / "v")
    assert rep["ok"], rep["violations"]
    assert rep["fixer"]["origin"].endswith(str(tmp_path / "v"))


def test_saved_variants_of_another_fixture_are_refused(tmp_path):
    verify.write_variants(tmp_path)
    (pkg,) = [p for p in tmp_path.iterdir() if p.is_dir()]
    (pkg / "pre.py").write_text((pkg / "pre.py").read_text() + "\n# edited\n")
    with pytest.raises(ValueError, match="not the current fixture"):
        verify.load_variants(tmp_path)


def test_main_writes_json_and_exits_zero(tmp_path, capsys):
    path = tmp_path / "verify.json"
    rc = verify.main(["--scenarios", "B", "--seeds", "0", "--backends", "bf16,awq", "--json", str(path), "--no-table"])
    assert rc == 0
    assert capsys.readouterr().out == ""
    data = json.loads(path.read_text())
    assert data["ok"] and data["scenarios"] == ["B"] and data["seeds"] == [0]
    assert [r["backend"] for r in data["runs"]] == ["bf16", "awq"]


def test_main_rejects_an_unknown_scenario(capsys):
    assert verify.main(["--scenarios", "Z", "--no-table"]) == 2
    assert "unknown scenario" in capsys.readouterr().err


# ----------------------------------------------------------------------------- chunking (§6)


def _plan(name: str, rows: int = 1):
    s = SCENARIOS[name]
    return plan_chunked_context(
        context_lens=torch.tensor(s.context_lens),
        query_start_loc=torch.tensor(s.query_start_loc),
        workspace=torch.empty(s.workspace_size, rows),
        block_size=s.block_size,
    )


def test_chunking_scenario_a():
    plan = _plan("A")
    assert plan.chunk_size == 64
    assert len(plan.seq_tot) == 5
    assert plan.has_empty_context == [True] * 5
    assert plan.prefill_tokens_with_context == 12
    assert plan.seq_lens.tolist() == [[64, 64, 0], [64, 64, 0], [64, 2, 0], [64, 0, 0], [44, 0, 0]]
    assert plan.cu_seq_lens[2].tolist() == [0, 64, 66, 66]


def test_chunking_scenario_b():
    plan = _plan("B")
    assert len(plan.seq_tot) == 4
    assert plan.has_empty_context == [False] * 4
    assert plan.prefill_tokens_with_context == 9
    assert plan.seq_tot == [128, 128, 128, 16]


def test_chunking_gpu_scenarios():
    g1, g2 = _plan("G1"), _plan("G2")
    assert (g1.chunk_size, len(g1.seq_tot), g1.prefill_tokens_with_context) == (1344, 7, 896)
    assert (len(g2.seq_tot), any(g2.has_empty_context)) == (2, False)


def test_chunking_requires_requests_with_context_first():
    with pytest.raises(ValueError, match="must come first"):
        plan_chunked_context(
            context_lens=torch.tensor([0, 100]),
            query_start_loc=torch.tensor([0, 2, 4]),
            workspace=torch.empty(128, 1),
            block_size=16,
        )


def test_chunking_without_context_is_none():
    plan = plan_chunked_context(
        context_lens=torch.tensor([0, 0]),
        query_start_loc=torch.tensor([0, 1, 2]),
        workspace=torch.empty(64, 1),
        block_size=16,
    )
    assert plan is None


def test_gather_follows_the_shuffled_block_table():
    s = SCENARIOS["A"]
    data = make_data(s, 0)
    assert data.block_table[0, :3].tolist() != [0, 1, 2]  # shuffled (seed 0)
    cache = store_cache(data, torch.float32)
    plan = _plan("A", rows=cache.shape[-1])
    rows = torch.cat((data.latent, data.k_pe), dim=1)  # requests back to back: 300, then 130
    for i in range(len(plan.seq_tot)):
        dst = torch.zeros_like(plan.workspace)
        gather_cache(
            src_cache=cache, dst=dst, block_table=data.block_table, cu_seq_lens=plan.cu_seq_lens[i],
            token_to_seq=plan.token_to_seq[i], num_tokens=plan.chunk_total_token[i], seq_starts=plan.starts[i],
        )
        start, n0, n1 = 64 * i, *plan.seq_lens[i, :2].tolist()
        assert torch.equal(dst[:n0], rows[start : start + n0])
        assert torch.equal(dst[n0 : n0 + n1], rows[300 + start : 300 + start + n1])
