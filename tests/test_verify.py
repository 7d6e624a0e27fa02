"""``dtype-lint verify`` on the CPU: the fixer's rewrite changes nothing but the crash.

The expectations here are written out by hand (the spec's crash sets, the helper's answers, the
new rows' outcomes read from vLLM 0.27.1's code), not read back from ``backends.py``, so that a
wrong derivation in the harness fails here. The fixture tests run offline; the tests of vLLM's
own functions (``test_upstream_*``) need the release trees and carry the ``network`` marker.
"""

from __future__ import annotations

import json
import re
import sys
import textwrap

import pytest
import torch

from dtype_lint.kernels_ref.harness import matrix, precision, upstream_source, variants, verify
from dtype_lint.kernels_ref.harness.backends import BACKENDS, SPEC_ROWS
from dtype_lint.kernels_ref.harness.chunking import gather_cache, plan_chunked_context
from dtype_lint.kernels_ref.harness.prefill_context import (
    SCENARIOS,
    make_data,
    prepare_inputs,
    run_variant,
    store_cache,
)

# One worker: the module-scoped matrix runs (`report`, `upstream_report`) are built once, not on each.
pytestmark = pytest.mark.xdist_group("verify-matrix")

MARLIN_MSG = "unsupported `a` scalar_type"
AWQ_MSG = "'AwqLikeLinear' object has no attribute 'weight'"
NVFP4_FP8_MSG = "input.dtype needs to be fp16 or bf16 but got torch.float8_e4m3fn."
INT8_MSG = "\"dynamic_scaled_int8_quant_kernel\" not implemented for 'Char'"
MARLINS = {"marlin", "marlin_g128", "marlin_fp16", "marlin_p", "marlin_kv8_s"}
NVFP4_FP8 = {"nvfp4_p", "nvfp4_fp16_p"}  # fp8 prefill into NVFP4
INT8 = {"int8", "int8_fp16"}

# What 0.27.1's two cast blocks do to each row (main = _compute_prefill_context, cp = the
# context-parallel one): the spec's sets on its seven rows, and read from the code for the rest.
PRE_CRASH = {b: ("RuntimeError", MARLIN_MSG) for b in MARLINS} | {
    "awq": ("AttributeError", AWQ_MSG),
    "awq_p": ("AttributeError", AWQ_MSG),
    "awq_fp16": ("AttributeError", AWQ_MSG),
} | {b: ("AssertionError", NVFP4_FP8_MSG) for b in NVFP4_FP8  # uint8: no cast, the fp8 latent reaches NVFP4
     } | {b: ("RuntimeError", INT8_MSG) for b in INT8}  # int8 is neither fp8 nor uint8: cast to int8
PRE_CP_CRASH = {b: ("RuntimeError", MARLIN_MSG) for b in MARLINS} | {
    b: ("AssertionError", NVFP4_FP8_MSG) for b in NVFP4_FP8  # the fixture's cp path shares the fp8 workspace
} | {b: ("RuntimeError", INT8_MSG) for b in INT8}
# What the helper returns (None: keep the model dtype): the table in its docstring, on every row.
POST_CAST = {
    "bf16": "bfloat16", "fp16": "float16", "fp8": "None", "fp8_p": "float8_e4m3fn",
    "marlin": "bfloat16", "marlin_g128": "bfloat16", "marlin_fp16": "float16", "marlin_p": "bfloat16",
    "nvfp4": "None", "nvfp4_p": "bfloat16", "awq": "bfloat16", "awq_p": "bfloat16",
    "fp8_b128": "None", "fp8_b128_p": "float8_e4m3fn", "bf16_p": "bfloat16", "bf16_kv8": "bfloat16", "int8": "bfloat16",
    "bf16_kv8_s": "bfloat16", "marlin_kv8_s": "bfloat16", "fp16_kv8_s": "float16", "awq_fp16": "float16",
    "fp8_fp16_p": "float8_e4m3fn", "nvfp4_fp16": "None", "nvfp4_fp16_p": "float16", "int8_fp16": "float16",
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
    return verify.run_matrix("cpu", ("A", "B"), (0,), upstream=False)


def _runs(report, source="fixture"):
    return [r for r in report["runs"] if r["source"] == source]


# ----------------------------------------------------------------------------- the fixture


def test_matrix_holds_and_covers_every_backend(report):
    assert report["violations"] == []
    assert report["ok"]
    assert set(report["summary"]["fixture"]) == set(BACKENDS) == set(POST_CAST)
    assert len(_runs(report)) == 2 * len(BACKENDS)
    assert report["upstream"] is None


def test_fixer_rewrote_both_cast_sites(report):
    diff = report["fixer"]["diff"]
    removed = [line[1:].strip() for line in diff.splitlines() if line.startswith("-") and not line.startswith("---")]
    added = [line[1:].strip() for line in diff.splitlines() if line.startswith("+") and not line.startswith("+++")]
    assert "kv_c_normed = kv_c_normed.to(self.kv_b_proj.weight.dtype)" in removed
    assert "kv_c_normed = kv_c_normed.to(kv_b_proj_w_dtype)" in removed
    assert sum("get_layer_input_dtype(self.kv_b_proj, use_fp8_prefill)" in line for line in added) == 2


def test_spec_crash_sets_are_exact(report):
    # The spec: pre = {marlin, awq}, pre_cp = {marlin} on its seven rows; post never crashes there.
    sets = report["crash_sets"]
    assert set(sets["pre"]["observed"]) & set(SPEC_ROWS) == {"marlin", "awq"}
    assert set(sets["pre_cp"]["observed"]) & set(SPEC_ROWS) == {"marlin"}
    assert not set(sets["post"]["observed"]) & set(SPEC_ROWS)


def test_every_crash_has_the_expected_type_message_and_site(report):
    for r in _runs(report):
        for variant, table in (("pre", PRE_CRASH), ("pre_cp", PRE_CP_CRASH)):
            res = r["variants"][variant]
            if r["backend"] not in table:
                assert res == {"outcome": "ok"}, (r["backend"], variant)
                continue
            assert (res["error_type"], res["message"]) == table[r["backend"]], (r["backend"], variant)
            if r["backend"] in MARLINS:
                assert "marlin_gemm" in res["frames"]  # the int32 latent reaches the GEMM
            if res["error_type"] == "AttributeError":
                assert res["frames"][-2:] == ["_compute_prefill_context", "__getattr__"]  # the cast itself
        for variant in ("post", "post_cp"):
            assert r["variants"][variant] == {"outcome": "ok"}, (r["backend"], variant)


def test_the_helper_picks_the_spec_dtype(report):
    for r in _runs(report):
        assert r["expected"]["post"]["cast"] == POST_CAST[r["backend"]], r["backend"]


def test_fp8_prefill_into_nvfp4_runs_after_the_fix(report):
    """The template brings the fp8 latent back to params_dtype for NVFP4 storage (0.27.1's guard
    and 0.28.0's helper keep it fp8, and scaled_fp4_quant rejects it): no known failure is left."""
    assert not [k for r in _runs(report) for k in r["known_failures"]]
    for r in _runs(report):
        if r["backend"] in NVFP4_FP8:
            model = POST_CAST[r["backend"]]
            assert r["expected"]["post"]["cast"] == model and r["expected"]["post"]["fed"] == model
            assert r["variants"]["pre"]["message"] == NVFP4_FP8_MSG  # the unfixed code still fails
    assert report["ok"]


def test_post_is_within_bounds_derived_from_precision(report):
    for r in _runs(report):
        b = BACKENDS[r["backend"]]
        for variant in ("post", "post_cp"):
            if variant not in r["metrics"]:
                continue
            m = r["metrics"][variant]
            assert m["finite"]
            assert m["rel"] <= b.rel_bound and max(m["rel_per_request"]) <= b.rel_bound, r["backend"]
            assert m["lse"] <= b.lse_bound, r["backend"]
            # The precision model predicts the data: observed/predicted in [0.5, 1.5] and [0.1, 1].
            assert 0.5 <= m["rel"] / b.precision.predicted_rel() <= 1.5, (r["backend"], m["rel"])
            assert 0.1 <= m["lse"] / b.precision.predicted_lse() <= 1.0, (r["backend"], m["lse"])


def test_bounds_come_from_the_formats_precision():
    e4m3 = 0.425 * 2**-4
    assert precision.rne(torch.float8_e4m3fn) == pytest.approx(e4m3)
    assert precision.rne(torch.bfloat16) == pytest.approx(0.425 / 256)
    assert BACKENDS["fp8"].rel_bound == pytest.approx(2 * BACKENDS["fp8"].precision.predicted_rel())
    # Ordering that follows from the formats: fp16 < bf16 < int8 < Marlin < W8A8 < AWQ < NVFP4.
    order = ["fp16", "bf16", "int8", "marlin", "fp8", "awq", "nvfp4"]
    bounds = [BACKENDS[b].rel_bound for b in order]
    assert bounds == sorted(bounds)
    assert BACKENDS["fp8_p"].lse_bound > BACKENDS["fp8"].lse_bound  # fp8 q adds score error


def test_bit_identical_wherever_pre_ran_and_twins_on_crash_rows(report):
    for r in _runs(report):
        ident = r["bit_identical"]
        assert all(ident.values()), (r["backend"], ident)
        ran = {v for v in ("pre", "pre_cp") if r["variants"][v]["outcome"] == "ok"}
        expected_keys = {f"{v}={v.replace('pre', 'post')}" for v in ran}
        if r["variants"]["post"]["outcome"] == "ok":
            expected_keys.add("post_cp=post")
        if BACKENDS[r["backend"]].twin is not None:
            expected_keys |= {"post=post_twin", "post_cp=post_cp_twin"}
        assert set(ident) == expected_keys, r["backend"]
    # Every row where pre crashed on Marlin or AWQ has the exact twin check instead, and so does every
    # row whose layer quantizes its input (FP8 W8A8 per token, NVFP4): there it is a second exact check.
    twins = {r["backend"] for r in _runs(report) if "post=post_twin" in r["bit_identical"]}
    assert twins == MARLINS | {"awq", "awq_p", "awq_fp16"} | {"fp8", "fp8_p", "fp8_fp16_p"} | {
        "nvfp4", "nvfp4_p", "nvfp4_fp16", "nvfp4_fp16_p"}


def test_negative_control_leaks_nan(report):
    (control,) = report["negative_control"]
    assert control["scenario"] == "A" and control["nan_tokens"] > 0
    assert matrix.masking_matters(SCENARIOS["A"])
    assert not matrix.masking_matters(SCENARIOS["B"]) and not matrix.masking_matters(SCENARIOS["S"])


# ----------------------------------------------------------------------------- mutations verify must catch


@pytest.mark.parametrize("factor", [1.01, 0.99])
def test_a_uniform_one_percent_marlin_scale_error_fails_verify(monkeypatch, factor):
    from dtype_lint.kernels_ref import marlin_fp8

    real = marlin_fp8.marlin_dequantize_fp8

    def scaled(b_q_weight, b_scales, size_k, size_n, dtype):
        return real(b_q_weight, b_scales * factor, size_k, size_n, dtype)

    monkeypatch.setattr(marlin_fp8, "marlin_dequantize_fp8", scaled)
    rep = verify.run_matrix("cpu", ("B",), (0,), backends=("marlin", "bf16"), upstream=False)
    assert not rep["ok"]
    assert any("post and post_twin ran but their output/LSE bits differ" in v for v in rep["violations"])
    marlin = next(r for r in rep["runs"] if r["backend"] == "marlin")
    # The bound alone would not have caught it: the exact check is what fails.
    assert marlin["metrics"]["post"]["rel"] <= BACKENDS["marlin"].rel_bound


def test_a_do_nothing_fixer_is_caught(monkeypatch):
    import dtype_lint.api

    monkeypatch.setattr(dtype_lint.api, "fix_source", lambda source, **kwargs: source)
    rep = verify.run_matrix("cpu", ("B",), (0,), backends=("bf16", "marlin", "awq"), upstream=False)
    assert not rep["ok"]
    assert any("post.py is identical to pre.py" in v for v in rep["violations"])
    assert any("B/seed 0/marlin: post: expected 'ok'" in v for v in rep["violations"])
    assert any("B/seed 0/awq: post: expected 'ok'" in v for v in rep["violations"])
    assert not any("/bf16:" in v for v in rep["violations"])


def test_a_helper_that_returns_the_storage_dtype_is_caught(monkeypatch):
    # The spec's bug reintroduced in the helper: the expectation follows the helper, so the crash
    # is predicted -- and a predicted post failure on a row that declares none is a violation.
    real = variants.fix_fixture

    def bad_helper(**kwargs):
        src = real(**kwargs)
        helper = src.helper
        for spelling in ("return layer.params_dtype\n", "return params_dtype\n"):  # vllm's template, torch's
            helper = helper.replace(spelling + "    if weight_dtype == torch.uint8",
                                    "return weight_dtype\n    if weight_dtype == torch.uint8", 1)
        assert helper != src.helper
        return variants.FixtureSources(src.name, src.settings, src.unsafe_fixes, src.pre, src.post, helper)

    monkeypatch.setattr(variants, "fix_fixture", bad_helper)
    rep = verify.run_matrix("cpu", ("B",), (0,), backends=("marlin",), upstream=False)
    assert not rep["ok"]
    assert any("post fails on this row: the helper casts to int32" in v for v in rep["violations"]), rep["violations"]


def test_a_gather_that_drops_k_scale_fails_on_the_k_scale_rows(monkeypatch):
    from dtype_lint.kernels_ref.harness import chunking

    real = chunking.gather_cache
    monkeypatch.setattr(chunking, "gather_cache", lambda **kw: real(**{**kw, "scale": None}))
    rep = verify.run_matrix("cpu", ("B",), (0,), backends=("bf16_kv8", "bf16_kv8_s", "marlin_kv8_s"), upstream=False)
    bad = {v.split("/")[2].split(":")[0] for v in rep["violations"]}
    assert bad == {"bf16_kv8_s", "marlin_kv8_s"}, rep["violations"]  # k_scale 1 hides it, as it did everywhere
    assert rep["violations_by_check"]["bounds"] and rep["runtime_violations"] == len(rep["violations"])
    run = matrix.ScenarioRun("B", 0, "cpu")
    k = run.k_scale(BACKENDS["bf16_kv8_s"])
    assert 0.005 < k < 0.02 and k != 2.0 ** round(torch.log2(torch.tensor(k)).item())


def test_a_helper_the_fixer_will_not_use_still_fails_at_run_time(monkeypatch):
    """The fixer's proof rejects a helper that reads .weight.dtype unguarded, so it rewrites
    nothing; verify reports that (check "fixer") and still calls the helper on every row (check
    "helper"), where it raises on the layer without a weight."""
    from dtype_lint.fix import helper_template

    for name, (header, is_fp8, doc, old_body) in list(helper_template._TEMPLATES.items()):
        body = re.sub(r"weight\.dtype if weight is not None else (layer\.)?params_dtype", "weight.dtype", old_body)
        assert body != old_body
        monkeypatch.setitem(helper_template._TEMPLATES, name, (header, is_fp8, doc, body))
    rep = verify.run_matrix("cpu", ("B",), (0,), backends=("bf16", "awq"), upstream=False)
    assert not rep["ok"] and rep["violations_by_check"]["fixer"] >= 1
    helper = [v for v in rep["violations"] if v.startswith("[helper]")]
    assert helper and all("/awq:" in v and "raises AttributeError" in v for v in helper), rep["violations"]


def test_scenario_p_needs_marlin_padding_and_both_releases_cut_it_alike():
    from dtype_lint.kernels_ref.marlin_fp8 import MarlinFp8Linear

    s = SCENARIOS["P"]
    layer = MarlinFp8Linear(make_data(s, 0).w, torch.bfloat16)
    assert (s.out_features, s.kv_lora_rank) == (320, 160) and layer.padded_nk == (384, 192)
    rep = verify.run_matrix("cpu", ("P",), (0,), backends=("marlin", "marlin_fp16", "awq", "nvfp4"), upstream=False)
    assert rep["ok"], rep["violations"]
    assert rep["not_applicable"] == {"P": {"awq": "K = 160 is not a multiple of 64"}}
    assert all(r["bit_identical"]["post=post_twin"] for r in rep["runs"] if r["backend"].startswith("marlin"))


# ----------------------------------------------------------------------------- direct runs


@pytest.fixture(scope="module")
def package():
    with variants.fixture_package(variants.fix_fixture(), "test") as pkg:
        yield pkg


@pytest.mark.parametrize("backend_id", ["marlin", "awq"])
def test_empty_context_tokens_are_exactly_zero_and_minus_inf(package, backend_id):
    # Request 2 of A (tokens 12..15) has no context.
    s = SCENARIOS["A"]
    inputs = prepare_inputs(make_data(s, 3), BACKENDS[backend_id], "cpu")
    for path in ("main", "cp"):
        out, lse = run_variant(package.post, path, s, inputs)
        assert bool((out[12:] == 0).all())
        assert bool((lse[:, 12:] == float("-inf")).all())
        assert bool(torch.isfinite(out[:12]).all()) and bool(torch.isfinite(lse[:, :12]).all())


def test_unmasked_empty_spans_poison_the_output(package):
    # Request 1 of A (130 tokens) has empty spans in chunks 3 and 4; unmasked, fa2's NaN rows
    # survive the merge (request 2's both-empty merges give 0).
    s = SCENARIOS["A"]
    inputs = prepare_inputs(make_data(s, 0), BACKENDS["bf16"], "cpu")
    out, _ = run_variant(package.post, "main", s, inputs, mask_empty_context=False)
    assert bool(torch.isnan(out[5:12]).all())
    assert not bool(torch.isnan(out[:5]).any())


def test_the_cp_path_hands_kv_b_proj_a_3d_latent(package, monkeypatch):
    seen = []
    s = SCENARIOS["B"]
    inputs = prepare_inputs(make_data(s, 0), BACKENDS["bf16"], "cpu")
    forward = type(inputs.layer).forward
    monkeypatch.setattr(type(inputs.layer), "forward", lambda self, x: (seen.append(x.dim()), forward(self, x))[1])
    run_variant(package.post, "cp", s, inputs)
    run_variant(package.post, "main", s, inputs)
    assert seen and set(seen[: len(seen) // 2]) == {3} and set(seen[len(seen) // 2 :]) == {2}


def test_the_matrix_runs_the_kernels_the_caller_routed():
    from dtype_lint.kernels_ref import ops

    with ops.installed("cuda"):
        rep = verify.run_matrix("cpu", ("B",), (0,), backends=("bf16",), upstream=False)
    assert rep["kernels"] == "ops (routed by the caller)"
    post = rep["runs"][0]["variants"]["post"]
    assert post["error_type"] == "CudaUnavailable"
    assert "backend='cuda' needs CUDA tensors" in post["message"]
    assert not rep["ok"]


def test_the_fixture_binds_the_routed_attention():
    # The fixture imports the attention functions by name, so it must be imported inside the
    # ops.installed block (fixture_package does the import).
    from dtype_lint.kernels_ref import ops

    src = variants.fix_fixture()
    with ops.installed("cuda"), variants.fixture_package(src, "test") as pkg:
        for name in ("mla_prefill_attention", "mask_empty_context", "merge_attn_states"):
            assert getattr(pkg.post, name).__wrapped__ is getattr(ops, name)
    with variants.fixture_package(src, "test") as pkg:
        assert not hasattr(pkg.post.mla_prefill_attention, "__wrapped__")


def test_matrix_through_ops_matches_the_direct_reference(report):
    routed = verify.run_matrix("cpu", ("B",), (0,), backends=("fp16", "marlin", "awq", "nvfp4"), kernels="auto", upstream=False)
    assert routed["ok"], routed["violations"]
    direct = {(r["scenario"], r["backend"]): r["metrics"] for r in _runs(report)}
    for r in routed["runs"]:
        assert r["metrics"] == direct[("B", r["backend"])]


# ----------------------------------------------------------------------------- saved variants


def test_saved_variants_run_without_libcst(tmp_path, monkeypatch):
    # The GPU machine has no libcst: the fix is made here and carried (--emit-variants).
    # Only libcst is hidden, as on that machine: dtype_lint.api imports, and the fixer's lazy
    # import of libcst fails inside the fix, which must reach verify as an ImportError.
    assert verify.main(["--emit-variants", str(tmp_path / "v"), "--no-upstream"]) == 0
    monkeypatch.setitem(sys.modules, "libcst", None)
    rep = verify.run_matrix("cpu", ("B",), (0,), backends=("marlin", "awq"), variants_dir=tmp_path / "v", upstream=False)
    assert rep["ok"], rep["violations"]
    assert rep["fixer"]["origin"].endswith(str(tmp_path / "v"))
    assert rep["sources_notes"] == ["fixture not regenerated: LibcstUnavailable: libcst cannot be imported (import of libcst halted; None in sys.modules)"]


def test_the_fixer_without_libcst_raises_an_import_error_not_a_value_error(monkeypatch):
    from dtype_lint.api import fix_source
    from dtype_lint.fix.scope_check import LibcstUnavailable

    monkeypatch.setitem(sys.modules, "libcst", None)
    with pytest.raises(LibcstUnavailable, match="libcst cannot be imported") as info:
        variants.fix_fixture()
    assert isinstance(info.value, ImportError) and not isinstance(info.value, ValueError)
    # A text with nothing to fix needs no libcst.
    assert fix_source("x = 1\n", settings={"preset": "vllm"}) == "x = 1\n"


def test_a_fix_that_fails_with_libcst_present_is_still_a_value_error(monkeypatch):
    from dtype_lint.api import fix_source
    from dtype_lint.fix import scope_check

    def refuse(*args, **kwargs):
        raise scope_check.FixCheckError("a use of the helper does not resolve")

    monkeypatch.setattr("dtype_lint.fix.fixer.verify_names", refuse)
    with pytest.raises(ValueError, match="does not resolve"):
        fix_source(variants.fixture_source(), settings=variants._settings("pkg", "torch"))


def _saved(tmp_path):
    variants.write_variants(tmp_path, upstream=False)
    (pkg,) = [p for p in tmp_path.iterdir() if p.is_dir()]
    return pkg


def _rewrite_recorded(pkg, fname):
    meta = json.loads((pkg.parent / "variants.json").read_text())
    meta["fixture"]["files"][fname] = variants._sha256((pkg / fname).read_text())
    (pkg.parent / "variants.json").write_text(json.dumps(meta))


def test_saved_variants_of_another_fixture_are_refused(tmp_path):
    pkg = _saved(tmp_path)
    (pkg / "pre.py").write_text((pkg / "pre.py").read_text() + "\n# edited\n")
    _rewrite_recorded(pkg, "pre.py")
    with pytest.raises(variants.VariantsError, match="not the current fixture"):
        variants.load_fixture(tmp_path)


@pytest.mark.parametrize("fname", ["post.py", "layer_input_dtype.py", "__init__.py"])
def test_every_saved_file_is_checked_not_only_pre(tmp_path, fname):
    pkg = _saved(tmp_path)
    (pkg / fname).write_text((pkg / fname).read_text() + "\nimport os\n")
    with pytest.raises(variants.VariantsError, match="differ from the recorded sha256"):
        variants.load_fixture(tmp_path)


def test_a_saved_post_importing_something_new_is_refused(tmp_path, monkeypatch):
    pkg = _saved(tmp_path)
    (pkg / "post.py").write_text("import os\n" + (pkg / "post.py").read_text())
    _rewrite_recorded(pkg, "post.py")
    monkeypatch.setitem(sys.modules, "libcst", None)  # as on the GPU machine
    with pytest.raises(variants.VariantsError, match="imports .*import os.*which pre.py does not"):
        variants.load_fixture(tmp_path)


def test_a_saved_helper_importing_anything_but_torch_is_refused(tmp_path, monkeypatch):
    pkg = _saved(tmp_path)
    helper = pkg / "layer_input_dtype.py"
    helper.write_text("import subprocess\n" + helper.read_text())
    _rewrite_recorded(pkg, "layer_input_dtype.py")
    monkeypatch.setitem(sys.modules, "libcst", None)
    with pytest.raises(variants.VariantsError, match="not an import a helper may make"):
        variants.load_fixture(tmp_path)


def test_an_unrecorded_file_in_the_saved_package_is_refused(tmp_path):
    pkg = _saved(tmp_path)
    (pkg / "os.py").write_text("")
    with pytest.raises(variants.VariantsError, match="differ from the recorded"):
        variants.load_fixture(tmp_path)


def test_a_saved_post_that_differs_from_the_fixer_is_refused_where_libcst_is(tmp_path):
    pkg = _saved(tmp_path)
    (pkg / "post.py").write_text((pkg / "post.py").read_text().replace("kv_b_proj_input_dtype", "kv_b_proj_input_dtype_x"))
    _rewrite_recorded(pkg, "post.py")
    with pytest.raises(variants.VariantsError, match="differ from what the fixer writes now"):
        variants.load_fixture(tmp_path)


def test_main_writes_json_and_exits_zero(tmp_path, capsys):
    path = tmp_path / "verify.json"
    rc = verify.main(["--scenarios", "B", "--seeds", "0", "--backends", "bf16,awq", "--json", str(path),
                      "--no-table", "--no-upstream"])
    assert rc == 0
    assert capsys.readouterr().out == ""
    data = json.loads(path.read_text())
    assert data["ok"] and data["scenarios"] == ["B"] and data["seeds"] == [0]
    assert [r["backend"] for r in data["runs"]] == ["bf16", "awq"]


def test_main_rejects_an_unknown_scenario(capsys):
    assert verify.main(["--scenarios", "Z", "--no-table", "--no-upstream"]) == 2
    assert "unknown scenario" in capsys.readouterr().err


# ----------------------------------------------------------------------------- chunking


def _plan(name: str, rows: int = 1):
    s = SCENARIOS[name]
    return plan_chunked_context(
        context_lens=torch.tensor(s.context_lens), query_start_loc=torch.tensor(s.query_start_loc),
        workspace=torch.empty(s.workspace_size, rows), block_size=s.block_size,
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
        plan_chunked_context(context_lens=torch.tensor([0, 100]), query_start_loc=torch.tensor([0, 2, 4]),
                             workspace=torch.empty(128, 1), block_size=16)


def test_chunking_without_context_is_none():
    assert plan_chunked_context(context_lens=torch.tensor([0, 0]), query_start_loc=torch.tensor([0, 1, 2]),
                                workspace=torch.empty(64, 1), block_size=16) is None


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


def test_dcp_rank_caches_split_the_context_between_ranks():
    s = SCENARIOS["S"]
    data = make_data(s, 0)
    full = store_cache(data, torch.float32)
    ranks = [store_cache(data, torch.float32, rank=r, world=2) for r in range(2)]
    rows = torch.cat((data.latent, data.k_pe), dim=1)[:300]
    bt = data.block_table[0].long()
    for p in (0, 1, 2, 151, 299):
        lp = p // 2
        assert torch.equal(ranks[p % 2][bt[lp // 16], lp % 16], rows[p])
        assert torch.equal(full[bt[p // 16], p % 16], rows[p])


# ----------------------------------------------------------------------------- vLLM's own functions


@pytest.fixture(scope="module")
def upstream_report(vllm_0271, vllm_0280) -> dict:
    return verify.run_matrix("cpu", ("S", "A", "P"), (0,))


@pytest.mark.network
def test_upstream_matrix_holds(upstream_report):
    assert upstream_report["violations"] == []
    assert set(upstream_report["summary"]["vllm"]) == set(BACKENDS)


@pytest.mark.network
def test_upstream_crash_sets_are_the_spec_and_the_fixtures(upstream_report):
    runs = _runs(upstream_report, "vllm")
    for r in runs:
        b = r["backend"]
        main, cp = r["variants"]["0.27.1"], r["variants"]["0.27.1_cp"]
        assert (main.get("error_type"), main.get("message")) == PRE_CRASH.get(b, (None, None)), b
        # vLLM's DCP workspace is in the model dtype: there the uint8 row gets a bf16 latent.
        want_cp = None if b in NVFP4_FP8 else PRE_CP_CRASH.get(b)
        assert (cp.get("error_type"), cp.get("message")) == (want_cp or (None, None)), b
    sets = upstream_report["crash_sets"]
    assert set(sets["0.27.1"]["observed"]) & set(SPEC_ROWS) == {"marlin", "awq"}
    assert set(sets["0.27.1_cp"]["observed"]) & set(SPEC_ROWS) == {"marlin"}


@pytest.mark.network
def test_upstream_ours_never_fails_where_0280_runs_and_differs_only_on_int8_and_fp8_into_nvfp4(upstream_report):
    for r in _runs(upstream_report, "vllm"):
        for path in ("", "_cp"):
            ours, theirs = r["variants"][f"ours{path}"], r["variants"][f"0.28.0{path}"]
            assert not (ours["outcome"] != "ok" and theirs["outcome"] == "ok"), r["backend"]
            cast_ours, cast_theirs = r["expected"][f"ours{path}"]["cast"], r["expected"][f"0.28.0{path}"]["cast"]
            if r["backend"] in INT8:
                assert (cast_ours, cast_theirs) == (POST_CAST[r["backend"]], "int8")
                assert ours["outcome"] == "ok" and theirs["error_type"] == "RuntimeError"
            elif r["backend"] in NVFP4_FP8:
                # The template's second difference: 0.28.0 keeps the fp8 latent (None).
                assert (cast_ours, cast_theirs) == (POST_CAST[r["backend"]], "None")
                assert ours["outcome"] == "ok"
                if path == "":
                    assert (theirs["error_type"], theirs["message"]) == ("AssertionError", NVFP4_FP8_MSG)
            else:
                assert cast_ours == cast_theirs, r["backend"]


@pytest.mark.network
def test_upstream_ours_is_bit_identical_to_0280_where_both_cut_alike(upstream_report):
    assert upstream_report["upstream"]["plans_agree"] == {"S/main": True, "S/cp": True, "A/main": False, "A/cp": False,
                                                          "P/main": True, "P/cp": True}
    for r in _runs(upstream_report, "vllm"):
        ident = r["bit_identical"]
        assert all(ident.values()), (r["backend"], ident)
        if r["scenario"] in ("S", "P") and r["backend"] not in INT8:
            want = {"ours=0.28.0", "ours_cp=0.28.0_cp"}
            if r["backend"] in NVFP4_FP8:
                # main: 0.27.1 and 0.28.0 fail (the fp8 latent reaches NVFP4); cp: the DCP workspace
                # holds a bf16 latent, which ours casts to bf16 and 0.27.1 leaves: the same output.
                want = {"0.27.1_cp=ours_cp"}
            assert want <= set(ident), r["backend"]
        if r["scenario"] == "A":
            assert not {"ours=0.28.0", "ours_cp=0.28.0_cp"} & set(ident)
        if r["variants"]["0.27.1"]["outcome"] == "ok":
            assert ident["0.27.1=ours"]
        if BACKENDS[r["backend"]].twin is not None:
            assert ident["ours=ours_twin"] and ident["ours_cp=ours_cp_twin"]


@pytest.mark.network
def test_upstream_functions_run_unmodified(upstream_report, vllm_0271, vllm_0280):
    src = variants.upstream_sources()
    for label, root in (("0.27.1", vllm_0271), ("0.28.0", vllm_0280)):
        ext = src.releases[label]
        names = {u.name for u in ext.units}
        assert {"_compute_prefill_context", "_context_parallel_compute_prefill_context", "reorg_kvcache",
                "build_mla_chunked_context_metadata", "MLACommonPrefillMetadata"} <= names
        for u in ext.units:
            text = (root / u.origin).read_text()
            lines = text.splitlines(keepends=True)
            segment = textwrap.dedent("".join(lines[u.line - 1 : u.line - 1 + len(u.text.splitlines())]))
            if segment != u.text:  # a decorated definition starts at its decorator
                segment = textwrap.dedent("".join(lines[u.line - 2 : u.line - 2 + len(u.text.splitlines())]))
            assert segment == u.text, (label, u.name)
    assert "_get_kv_b_proj_input_dtype" in {u.name for u in src.releases["0.28.0"].units}
    assert set(src.releases["0.28.0"].provided) >= {"ops", "merge_attn_states", "MLADCPManager"}
    ours = {u.name: u.text for u in src.releases["0.27.1+dtype-lint"].units}
    pre = {u.name: u.text for u in src.releases["0.27.1"].units}
    for name in ("_compute_prefill_context", "_context_parallel_compute_prefill_context"):
        assert ours[name] != pre[name] and "get_layer_input_dtype(self.kv_b_proj, use_fp8_prefill)" in ours[name]
        assert ".to(self.kv_b_proj.weight.dtype)" not in ours[name]
    assert all(ours[n] == pre[n] for n in pre if n not in ("_compute_prefill_context", "_context_parallel_compute_prefill_context"))


@pytest.mark.network
def test_upstream_saved_and_loaded_without_libcst(tmp_path, monkeypatch, vllm_0271, vllm_0280):
    variants.write_variants(tmp_path)
    monkeypatch.setitem(sys.modules, "libcst", None)  # the trees are cached here: the fixer is tried and cannot run
    rep = verify.run_matrix("cpu", ("S",), (0,), backends=("marlin", "int8"), variants_dir=tmp_path)
    assert rep["ok"], rep["violations"]
    assert [n.split(":")[0] for n in rep["sources_notes"]] == ["fixture not regenerated", "vLLM's functions not regenerated"]
    data = json.loads((tmp_path / "upstream.json").read_text())
    data["releases"]["0.28.0"]["units"][0]["text"] += "\nimport os\n"
    (tmp_path / "upstream.json").write_text(json.dumps(data))
    with pytest.raises(variants.VariantsError, match="sha256"):
        variants.load_upstream(tmp_path)


@pytest.mark.network
def test_an_extraction_with_an_unknown_name_is_refused(vllm_0271):
    text = (vllm_0271 / upstream_source.MLA_MODULE).read_text()
    text = text.replace("        output = None\n        merge_output = None\n",
                        "        output = some_new_vllm_helper()\n        merge_output = None\n", 1)
    with pytest.raises(upstream_source.ExtractionError, match="some_new_vllm_helper"):
        upstream_source.extract(text, "0.27.1", "edited", read=upstream_source.read_release(vllm_0271))
