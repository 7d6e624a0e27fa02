"""`migrate --series`'s MLA proof runs the migration's own rewrite of vLLM 0.27.1 (#37).

The series' proof of a patch to vLLM's MLA prefill is `dtype-lint verify` on the release's own
functions. verify used to rewrite 0.27.1's `mla_attention.py` with the fixer itself, repeating what
the migration's fixing run had just done to the same text (about a second of a series' CPU). It
now runs the bytes the patch writes, with the helper the series adds (`variants.ReusedFix`). What
these tests hold:

- the proof hands verify exactly the patch's bytes and the helper its fixes import, and nothing
  when the patch is not a rewrite of that module (verify then fixes the release itself);
- verify runs the reused text without running the fixer, and only when the patch's before-text is
  the release's own text (a rewrite of another text proves nothing about 0.27.1);
- a reused text that is not the fixer's rewrite does not pass silently: "ours" still runs on the
  storages and a cast to the weight's storage crashes there, a violation of the matrix;
- the proof runs vLLM's functions only: the fixer is not run on verify's own fixture, whose rows
  the patch's message does not show (a tenth of a series' CPU), and the demo says so;
- (DTL_FULL) the demo's text is the same, byte for byte, whether verify runs the fixer or the
  reused rewrite, and the fixer runs once (0.27.1's module) or not at all.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from dtype_lint.core.findings import Finding, Fix, Span
from dtype_lint.ecosystems.vllm import proofs
from dtype_lint.migrate.series import FileChange

pytestmark = [pytest.mark.network, pytest.mark.xdist_group("verify-matrix")]

MLA = "vllm/model_executor/layers/attention/mla_attention.py"
HELPER_MODULE = "vllm.model_executor.layers.quantization.utils.layer_input_dtype"
HELPER = "get_layer_input_dtype"
CALL = f"{HELPER}(self.kv_b_proj, use_fp8_prefill)"


def _finding(module: str = HELPER_MODULE) -> Finding:
    fix = Fix("route the cast through the helper", True, (), imports=((module, HELPER),))
    return Finding("DTL001", "cast to kv_b_proj.weight.dtype", MLA, Span(1, 0, 1, 10),
                   scope="MLACommonImpl._compute_prefill_context", fix=fix)


@pytest.fixture(scope="module")
def rewrite(vllm_0271: Path) -> tuple[str, str, str]:
    """(0.27.1's MLA module, the fixer's rewrite of it with the helper where a migration of the
    release puts it, that helper's module text): what `migrate --series` has in hand."""
    from dtype_lint.api import fix_source, helper_module_source

    settings = {"preset": "vllm", "helper": f"{HELPER_MODULE}:{HELPER}", "helper-template": "vllm"}
    text = (vllm_0271 / MLA).read_text()
    fixed = fix_source(text, filename=str(vllm_0271 / "absent" / MLA), settings=settings)
    assert f"from {HELPER_MODULE} import {HELPER}" in fixed and fixed.count(CALL) == 2
    return text, fixed, helper_module_source(settings)


def _reused(before: str, after: str, helper: str):
    from dtype_lint.kernels_ref.harness.variants import ReusedFix

    return ReusedFix(before, after, HELPER_MODULE, helper, HELPER)


def _no_fixer(monkeypatch) -> list[str]:
    """Count (and refuse) the fixer runs verify makes from now on."""
    import dtype_lint.api

    calls: list[str] = []

    def refuse(text, *args, **kwargs):
        calls.append(kwargs.get("filename", ""))
        raise AssertionError("the fixer ran")

    monkeypatch.setattr(dtype_lint.api, "fix_source", refuse)
    return calls


def test_the_proof_hands_verify_the_patch_bytes_and_the_helper_its_fixes_import():
    before, after = b"x = layer.weight.dtype\n", b"x = get_layer_input_dtype(layer, False)\n"
    change = FileChange(MLA, before, after, [_finding()])
    other = FileChange("vllm/model_executor/models/isaac.py", before, after, [_finding()])
    reused = proofs.reused_mla_fix([other, change], "HELPER TEXT", HELPER)
    assert (reused.before, reused.after) == (before.decode(), after.decode())
    assert (reused.helper_module, reused.helper_text, reused.helper_func) == (HELPER_MODULE, "HELPER TEXT", HELPER)
    # Not a rewrite of the MLA module, a created file, or fixes importing the helper from two
    # modules: verify fixes the release itself, as before.
    assert proofs.reused_mla_fix([other], "HELPER TEXT", HELPER) is None
    assert proofs.reused_mla_fix([FileChange(MLA, None, after, [_finding()])], "HELPER TEXT", HELPER) is None
    two = FileChange(MLA, before, after, [_finding(), _finding("vllm.other_helpers")])
    assert proofs.reused_mla_fix([two], "HELPER TEXT", HELPER) is None


def _half_rewrite(text: str) -> str:
    """0.27.1's MLA module with the helper imported and called at the top of the main prefill
    path, but its casts to `kv_b_proj.weight.dtype` kept: a text that is not the fixer's rewrite,
    although it looks like one (made here by hand: no fixer run)."""
    import ast

    tree = ast.parse(text)
    [func] = [node for node in ast.walk(tree) if isinstance(node, ast.FunctionDef)
              and node.name == "_compute_prefill_context"]
    first = func.body[0]
    lines = text.splitlines(keepends=True)
    call = " " * first.col_offset + f"_unused_input_dtype = {CALL}\n"
    lines.insert(first.lineno - 1, call)
    return f"from {HELPER_MODULE} import {HELPER}\n" + "".join(lines)


def test_verify_runs_the_reused_text_without_the_fixer_and_judges_what_it_does(vllm_0271: Path, monkeypatch):
    """The reused text runs as "ours", cut out of those bytes, with the reused helper, and no
    fixer runs. It is not the fixer's rewrite (the main path still casts to the weight's
    storage): Marlin's int32 weight makes "ours" crash there, a violation of the matrix, as the
    unfixed release crashes. The proof judges what it runs; it does not trust where it came from."""
    from dtype_lint.api import helper_module_source
    from dtype_lint.kernels_ref.harness import matrix
    from dtype_lint.kernels_ref.harness.backends import BACKENDS
    from dtype_lint.kernels_ref.harness.variants import upstream_sources

    text = (vllm_0271 / MLA).read_text()
    helper = helper_module_source({"preset": "vllm", "helper": f"{HELPER_MODULE}:{HELPER}", "helper-template": "vllm"})
    doctored = _half_rewrite(text)
    calls = _no_fixer(monkeypatch)
    up = upstream_sources(reused=_reused(text, doctored, helper))
    assert calls == [] and up.settings["reused"] == "the migration's patch"
    ours = up.releases["0.27.1+dtype-lint"]
    assert (ours.helper_module, ours.helper_name, ours.helper_text) == (HELPER_MODULE, HELPER, helper)
    own = {u.name: u for u in ours.units if u.origin == MLA}
    flat = " ".join(doctored.split())  # a method is cut out dedented
    assert all(" ".join(u.text.split()) in flat for u in own.values())
    assert CALL in own["_compute_prefill_context"].text
    with matrix._cpu_threads(1):  # as run_matrix runs it: thousands of small ops
        row = matrix.upstream_row(matrix.ScenarioRun("S", 0, "cpu"), matrix._releases(up, ("S",)), BACKENDS["marlin"])
    assert row["variants"]["ours"]["outcome"] != "ok" and row["violations"]
    # (The true rewrite runs on Marlin: test_verify.py's upstream matrix, and the DTL_FULL test below.)


def test_a_rewrite_of_another_text_is_not_reused(vllm_0271: Path, monkeypatch):
    """A patch of a tree whose MLA module is not 0.27.1's: verify fixes the release itself."""
    from dtype_lint.kernels_ref.harness.variants import upstream_sources

    text = (vllm_0271 / MLA).read_text()
    calls = _no_fixer(monkeypatch)
    with pytest.raises(AssertionError, match="the fixer ran"):
        upstream_sources(reused=_reused(text.replace("\n", "\n\n", 1), _half_rewrite(text), "HELPER TEXT"))
    assert len(calls) == 1


def test_the_proof_runs_no_fixer_and_shows_vllms_rows_only(rewrite, monkeypatch):
    """With the series' rewrite reused, the proof runs no fixer at all: not on 0.27.1's module
    (the patch's bytes run) and not on verify's fixture (its rows are not in the message)."""
    text, fixed, helper = rewrite
    calls = _no_fixer(monkeypatch)
    proofs.mla_demo.cache_clear()
    shown = proofs.mla_demo(_reused(text, fixed, helper))
    proofs.mla_demo.cache_clear()
    assert calls == [] and "exit 0; all assertions hold" in shown, shown
    rows = shown.splitlines()[2:]
    assert [row.split()[0] for row in rows] == ["unquantized", "FP8", "Marlin", "NVFP4", "AWQ/GPTQ", "W8A8-INT8"]
    assert all(row.rstrip().endswith(("ok (cast bfloat16)", "ok (cast None)")) for row in rows), shown  # ours
    assert "RuntimeError: unsupport" in rows[2]  # 0.27.1 on Marlin, as before


def test_verify_without_the_fixture_refuses_what_needs_it():
    from dtype_lint.kernels_ref.harness import matrix

    with pytest.raises(ValueError, match="negative control"):
        matrix.run_matrix("cpu", ["A"], [0], fixture=False)
    with pytest.raises(ValueError, match="upstream"):
        matrix.run_matrix("cpu", ["S"], [0], fixture=False, upstream=False)


@pytest.mark.full("CI: the tests above (no fixer run; the reused text is what runs; a doctored one fails the matrix)")
def test_the_demo_is_the_same_with_the_reused_rewrite_and_runs_the_fixer_once(rewrite, monkeypatch):
    import dtype_lint.api

    text, fixed, helper = rewrite
    original = dtype_lint.api.fix_source
    calls: list[str] = []

    def counting(*args, **kwargs):
        calls.append(kwargs.get("filename", ""))
        return original(*args, **kwargs)

    monkeypatch.setattr(dtype_lint.api, "fix_source", counting)
    proofs.mla_demo.cache_clear()
    own = proofs.mla_demo()
    fixer_runs_own = len(calls)
    calls.clear()
    reused = proofs.mla_demo(_reused(text, fixed, helper))
    assert (fixer_runs_own, len(calls)) == (1, 0)  # 0.27.1's module, only without reuse; never the fixture
    assert reused == own and "all assertions hold" in own
    shown = proofs.mla_demo(_reused(text, _half_rewrite(text), helper))
    assert "all assertions do NOT hold" in shown and "exit 1" in shown
