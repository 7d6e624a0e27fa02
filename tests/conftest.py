"""Shared fixtures.

Real trees: `vllm_0271` (the last release before the MLA prefill fix, vLLM PR #38771), `vllm_0280`
(the first with it), `vllm_0330`, and the peers `sglang_0523`, `aphrodite_0241`, `lmdeploy_0180`
are the roots of those releases' `.py` trees, fetched once per machine by `dtype_lint.releases`
into a cache outside the repo. A test that uses one is given the `network` marker automatically
(and should say `@pytest.mark.network` itself as well), so `-m "not network"` deselects it; when
the index cannot be reached the fixture fails with pip's reason instead of hanging on or
skipping silently.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

_TESTS = Path(__file__).resolve().parent
if str(_TESTS) not in sys.path:
    sys.path.insert(0, str(_TESTS))

from rewritten_tests import write_share_of_the_rewritten_modules  # noqa: E402
from xdist_groups import group_for_xdist  # noqa: E402

from dtype_lint import releases  # noqa: E402

# fixture name -> (distribution, version)
RELEASE_FIXTURES = {
    "vllm_0271": ("vllm", "0.27.1"),
    "vllm_0280": ("vllm", "0.28.0"),
    "vllm_0300": ("vllm", "0.30.0"),
    "vllm_0330": ("vllm", "0.33.0"),
    "sglang_0523": ("sglang", "0.5.23"),
    "aphrodite_0241": ("aphrodite-engine", "0.24.1"),
    "lmdeploy_0180": ("lmdeploy", "0.18.0"),
    "transformers_5230": ("transformers", "5.23.0"),
    "transformers_5250": ("transformers", "5.25.0"),
    "diffusers_0421": ("diffusers", "0.42.1"),
    "peft_0212": ("peft", "0.21.2"),
}
VLLM_RELEASE_FIXTURES = RELEASE_FIXTURES  # older name


def _release(dist: str, version: str) -> Path:
    try:
        return releases.release_tree(dist, version)
    except releases.ReleaseFetchError as exc:
        pytest.fail(f"{dist} {version} is needed and could not be fetched: {exc}", pytrace=False)


@pytest.fixture(scope="session")
def vllm_0271() -> Path:
    """Root of vLLM 0.27.1's `.py` tree (holds `vllm/`): MLA prefill casts to kv_b_proj's dtype."""
    return _release("vllm", "0.27.1")


@pytest.fixture(scope="session")
def vllm_0280() -> Path:
    """Root of vLLM 0.28.0's `.py` tree: the casts go through `_get_kv_b_proj_input_dtype`."""
    return _release("vllm", "0.28.0")


@pytest.fixture(scope="session")
def vllm_0300() -> Path:
    """Root of vLLM 0.30.0's `.py` tree: a release triaged zero-config after the rules were written."""
    return _release("vllm", "0.30.0")


@pytest.fixture(scope="session")
def vllm_0330() -> Path:
    """Root of vLLM 0.33.0's `.py` tree: the current release, the patch series' target."""
    return _release("vllm", "0.33.0")


@pytest.fixture(scope="session")
def sglang_0523() -> Path:
    """Root of sglang 0.5.23's `.py` tree: a peer with namespace packages (no `__init__.py`)."""
    return _release("sglang", "0.5.23")


@pytest.fixture(scope="session")
def aphrodite_0241() -> Path:
    """Root of aphrodite-engine 0.24.1's `.py` tree: a vLLM fork under another package name."""
    return _release("aphrodite-engine", "0.24.1")


@pytest.fixture(scope="session")
def lmdeploy_0180() -> Path:
    """Root of lmdeploy 0.18.0's `.py` tree: a peer with nothing to fix."""
    return _release("lmdeploy", "0.18.0")


@pytest.fixture(scope="session")
def transformers_5230() -> Path:
    """Root of transformers 5.23.0's `.py` tree: Hugging Face model code (docs/hf.md)."""
    return _release("transformers", "5.23.0")


@pytest.fixture(scope="session")
def transformers_5250() -> Path:
    """Root of transformers 5.25.0's `.py` tree: layers built by expressions (#39)."""
    return _release("transformers", "5.25.0")


@pytest.fixture(scope="session")
def diffusers_0421() -> Path:
    """Root of diffusers 0.42.1's `.py` tree: Hugging Face model code (docs/hf.md)."""
    return _release("diffusers", "0.42.1")


@pytest.fixture(scope="session")
def peft_0212() -> Path:
    """Root of peft 0.21.2's `.py` tree: an adapter library whose base layers are quantized (#40)."""
    return _release("peft", "0.21.2")


# The slow tier, by module (path under tests/) or by test name: what each is slow for. `pytest -m
# "not slow and not network"` (the fast tier, docs/testing.md) runs the rest; plain `pytest` runs all. A new
# test that takes more than a second or two belongs in one of these, not in a decorator of its own.
SLOW_MODULES = {
    "kernels/test_cuda_emulated.py": "kernel emulation (the SIMT emulator runs the CUDA sources)",
    "kernels/test_cuda_compile.py": "kernel compilation",
    "kernels/test_gpu_check_cpu.py": "the GPU check script, run on CPU",
    "test_add_rule.py": "the rule scaffold in a copy of the checkout, its tests run there",
    "test_mutate.py": "mutation testing",
    "test_crash_consistency.py": "crash consistency (SIGKILL at random points)",
    "test_fuzz.py": "fuzzing (hypothesis)",
    "test_bench_smoke.py": "benchmark smoke run",
    "test_verify.py": "verification on the reference kernels",
    "test_cli_verify.py": "verification on the reference kernels",
    "test_fix_verification.py": "every fixture fixed and verified",
    "test_series.py": "patch series (git am, compile)",
    "test_upstream.py": "patch series regenerated",
    "test_ci.py": "CI: fresh venvs and the GitHub Action",
    "test_release.py": "release: build and install the wheel",
    "test_round_trips.py": "real-world trees",
    "test_rules_real_world.py": "real-world trees",
    "test_vllm_real_world.py": "real-world trees",
    "test_recall_value_flow_real.py": "real-world trees (vLLM 0.34.0's value-flow sites, #39)",
    "test_vllm_migrate.py": "real-world trees",
    "test_triage.py": "real-world trees (the triage verdicts)",
    "test_newcomer.py": "a newcomer's session, end to end",
    "test_hf_verify.py": "real bitsandbytes 4/8-bit on CPU (the `hf` extra)",
    "test_oracle_sweep.py": "the oracle sweep's CI share (tiny models under real bitsandbytes, the guard)",
    "test_guard_bnb.py": "the run-time guard on real bitsandbytes, HF models and peft (the `hf` extra)",
    "test_hf_upstream.py": "HF patch series (git am, compile)",
    "test_budget.py": "the CI budget, run in pytest subprocesses",
    "test_recall_real_trees.py": "real-world trees (transformers 5.25.0's built-then-cast and appended layers)",
    "test_peft_family.py": "real bitsandbytes 4/8-bit on CPU and peft itself (the `hf` extra), the peft tree",
}
SLOW_TESTS: dict[str, str] = {
    "test_journey_hf_package.py::test_name_heuristics_fix_runs": "the --name-heuristics fix run on real bitsandbytes",
    "test_journey_hf_reshape.py::test_fixed_subclass_and_patched_forward_run_on_bitsandbytes": "the fixed reshaping project run on real bitsandbytes",
    "test_journey_hf_reshape.py::test_the_shipped_catalogue_is_fresh": "transformers' and diffusers' model classes recomputed from the cached releases",
    "test_journey_hf_package.py::test_wheel_": "the fixed HF package built as a wheel, installed fresh, run on real bitsandbytes",
    "test_journey_quant_replace.py::test_fixed_gate_runs_on_real_quantized_layers": "the fixed plain PyTorch gate run on real bitsandbytes, torchao and quanto layers",
    "test_journey_mixed.py::test_the_fixed_": "the mixed project's fixed modules run on every storage and on real bitsandbytes",
    "test_journey_adapter.py::test_the_fixed_adapters_run": "the adapter library's fixed adapters run on real bitsandbytes bases and stand-ins",
    "test_journey_vllm_plugin.py::test_the_fixed_plugin_model": "the vLLM plugin's fixed model run on a stand-in vLLM of every storage",
    # "module::test name prefix": why
    "test_trust_round3_compiled.py::test_a_fixed_module_compiles_and_exports_on_every_storage": "torch.compile and torch.export of a fixed module on every storage",
    # The first torch.compile of a process imports and warms dynamo (about 3.5 s of CPU, most of the
    # fast tier's costliest test); test_a_method_torch_compiler_disable_keeps_eager_is_fixed is its fast share.
    "test_trust_round3_compiled.py::test_torch_compiler_disable_is_fixed_and_still_compiles": "torch.compile of a fixed module on every storage",
    "test_trust_round3_edits.py::test_the_analysis_of_a_file_does_work_linear_in_its_functions": "a scaling measurement (files of growing size analysed)",
    "test_trust_round3_edits.py::test_the_name_check_looks_each_new_variable_up_once": "a scaling measurement (libcst's scope check of 40 and 160 fixed sites)",
    "test_bad_input.py::test_one_line_files_are_scanned_in_linear_time": "a scaling measurement (one-line files of growing length)",
    "test_trust_round3_home.py::test_a_helper_import": "the fixed project imported in a subprocess without the optional dependency",
    "test_trust_round3_home.py::test_each_package_of_a_monorepo_gets_its_own_helper": "each package's fixed module imported alone in a subprocess",
    "test_xdist_groups.py::test_a_group_runs_on_one_worker": "pytest-xdist's workers started in a subprocess",
    "test_guard.py::test_plugin_": "a pytest session with the guard plugin, run in-process",
    "kernels/test_gpu_check_image.py::test_python_312_compiles": "the package compiled by a second interpreter",
    "test_docs.py::test_the_repo_lints_clean_with_its_own_configuration": "dtype-lint over the whole checkout in a subprocess",
    "test_conventions.py::test_hf_series": "a migration series of the Hugging Face-shaped fixture",
    "test_type_check.py::test_mypy_is_clean": "mypy over the package (about 20 s of CPU cold)",
    "test_conventions.py::test_generated_helper_test_runs": "pytest in a subprocess against a tree",
    "test_hf_regression.py::test_each_patch_test": "the transformers series' tests, run on the release before and after",
    "test_hf_regression.py::test_committed_series_is_fresh": "the transformers series regenerated (DTL_FULL)",
    "test_named_file_backends.py::test_real_": "real-world trees (named files of vLLM 0.27.1 and 0.33.0 vs the whole tree)",
}


# The CI budget (docs/testing.md). The long tests of the slow tier run a share of their work by
# default, as `.ci/run` does, and all of it with DTL_FULL=1: sizes (fuzzing examples, SIGKILL
# trials) through `budget(ci, full)`, and cases (peer trees, bitsandbytes model classes, the whole
# mutant set) through the `full` marker, on a test or on a `pytest.param`, which a run without
# DTL_FULL skips, saying so. The share is named in the test, never sampled, and keeps one case of
# each mechanism the full set exercises, so that a regression in any of them still fails CI.
FULL = os.environ.get("DTL_FULL", "").strip().lower() not in ("", "0", "false", "no")
BEYOND = "beyond the CI budget"


def budget(ci, full):
    """`ci` under the CI budget, `full` with DTL_FULL=1."""
    return full if FULL else ci


def full_only(value, why: str = ""):
    """A `pytest.param` of `value` that only DTL_FULL=1 runs (`why`: what the CI share keeps of it)."""
    return pytest.param(value, marks=pytest.mark.full(why), id=str(value))


def pinned_hf_tree(library: str) -> Path:
    """The cached `.py` tree of the transformers/diffusers release the shipped Hugging Face lists
    are built from (scripts/hf_model_classes.py fetches it); the test is skipped when it is absent."""
    from dtype_lint.ecosystems.hf.model_classes import PINNED

    tree = Path.home() / ".cache" / "dtype-lint" / f"{library}-{PINNED[library]}"
    if not (tree / library).is_dir():
        pytest.skip(f"{library} {PINNED[library]} is not cached (python scripts/hf_model_classes.py fetches it)")
    return tree


# The tests that pip-install this checkout: pip builds in the source tree, so under pytest-xdist
# they run in one worker, one after the other (`--dist loadgroup` in pyproject.toml, docs/testing.md).
builds_the_checkout = pytest.mark.xdist_group("builds-the-checkout")


def pytest_configure(config):
    config.addinivalue_line("markers", "full(why): beyond the CI budget; runs only with DTL_FULL=1 (docs/testing.md)")
    if not hasattr(config, "workerinput"):  # once, in the process that starts the workers
        compile_the_environment()
        compile_the_checkout()
    write_share_of_the_rewritten_modules(config)  # the tests' own bytecode (tests/rewritten_tests.py)


# Installed packages whose bytecode tells whether the environment was compiled (the first found).
COMPILE_PROBES = ("torch", "transformers", "mypy", "hypothesis")


def compile_the_environment() -> None:
    """Write the installed packages' bytecode with every CPU, when the install left none.

    `.ci/run` installs with `pip install --no-compile`: pip compiles each installed file in turn,
    about a minute of CPU for torch, transformers and the rest, on one core. Here they are compiled
    once, on all cores, before the workers start; where PYTHONDONTWRITEBYTECODE is set nothing else
    would write them, and each process importing torch would compile it again. An environment that
    has its bytecode (pip's default) costs one file lookup.
    """
    import compileall
    import importlib.util
    import sysconfig
    import warnings

    for name in COMPILE_PROBES:
        spec = importlib.util.find_spec(name)
        if spec is not None and spec.origin and spec.origin.endswith(".py"):
            if os.path.exists(importlib.util.cache_from_source(spec.origin)):
                return
            break
    else:
        return
    for folder in dict.fromkeys((sysconfig.get_path("purelib"), sysconfig.get_path("platlib"))):
        if folder and os.access(folder, os.W_OK):
            with warnings.catch_warnings():  # third-party docstrings' escapes: pip's compile is silent too
                warnings.simplefilter("ignore")  # (the forked workers inherit the filter)
                compileall.compile_dir(folder, quiet=2, workers=0)


def compile_the_checkout() -> None:
    """Write the checkout's bytecode once, before any test runs.

    Hundreds of tests run `dtype-lint` in a subprocess. Where PYTHONDONTWRITEBYTECODE is set (as on
    the machines CI runs on) no process writes `__pycache__`, so each of them compiled the package
    from source again: about 0.3 s of CPU per run, minutes over the suite. `compileall` writes the
    bytecode whatever that variable says, and every later import reads it. An editable install's
    source is a checkout the tests may write into; elsewhere (a read-only copy) this does nothing.
    """
    import compileall

    root = _TESTS.parent
    for folder in ("dtype_lint", "rules", "kernels_ref"):
        if (root / folder).is_dir() and os.access(root / folder, os.W_OK):
            compileall.compile_dir(root / folder, quiet=2, workers=0)


def pytest_report_header(config):
    return ("CI budget: off (DTL_FULL=1): every case and the full sizes" if FULL else
            "CI budget: on (the CI share of the long tests; DTL_FULL=1 runs all of them, docs/testing.md)")


def pytest_terminal_summary(terminalreporter, exitstatus, config):
    skipped = [r for r in terminalreporter.stats.get("skipped", [])
               if isinstance(r.longrepr, tuple) and BEYOND in str(r.longrepr[2])]
    if skipped:
        terminalreporter.write_line(f"CI budget: {len(skipped)} test(s) beyond it skipped; DTL_FULL=1 runs them "
                                    "(docs/testing.md)")


def slow_reason(nodeid: str) -> str | None:
    """Why the test `nodeid` (`tests/...py::name[...]`, or relative to tests/) is in the slow
    tier, or None."""
    path, _, name = nodeid.partition("::")
    path = path.removeprefix("tests/")
    if path in SLOW_MODULES:
        return SLOW_MODULES[path]
    return next((why for key, why in SLOW_TESTS.items()
                 if key.partition("::")[0] == path and name.startswith(key.partition("::")[2])), None)


def pytest_ignore_collect(collection_path, config):
    """A module of the slow tier is not even imported when `-m` deselects every slow test (some
    import hypothesmith or build emulators at import time: seconds each, for nothing)."""
    markexpr = config.getoption("markexpr", "")
    if not markexpr or collection_path.suffix != ".py":
        return None
    try:
        relative = collection_path.resolve().relative_to(_TESTS).as_posix()
    except ValueError:
        return None
    if relative not in SLOW_MODULES:
        return None
    from _pytest.mark.expression import Expression

    expression = Expression.compile(markexpr)
    # Deselected whatever other markers its tests carry: false with `slow` and all others false,
    # and with `slow` and all others true.
    if not expression.evaluate(lambda name: name == "slow") and not expression.evaluate(lambda name: True):
        return True
    return None


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(config, items):
    # tryfirst: the marker must be on the item before `-m` deselection looks at it.
    group_for_xdist(config, items)  # `xdist_group` under pytest 9 (tests/xdist_groups.py)
    for item in items:
        if set(getattr(item, "fixturenames", ())) & RELEASE_FIXTURES.keys():
            if item.get_closest_marker("network") is None:
                item.add_marker(pytest.mark.network)
        relative = Path(str(item.path)).resolve().relative_to(_TESTS).as_posix()
        if item.get_closest_marker("slow") is None and slow_reason(f"{relative}::{item.name}"):
            item.add_marker(pytest.mark.slow)
        full = item.get_closest_marker("full")
        if full is not None and not FULL:
            why = f" ({full.args[0]})" if full.args and full.args[0] else ""
            item.add_marker(pytest.mark.skip(reason=f"{BEYOND}{why}: DTL_FULL=1 runs it (docs/testing.md)"))


@pytest.fixture
def parsed_files(monkeypatch) -> list[str]:
    """The base names of the files the tree store parses (`trees._parse`) while the test runs, in
    order: a test that some text is not parsed asserts its absence here."""
    from dtype_lint.core import trees

    parsed: list[str] = []
    real = trees._parse

    def recording(text, path, chars):
        parsed.append(Path(path).name)
        return real(text, path, chars)

    monkeypatch.setattr(trees, "_parse", recording)
    return parsed
