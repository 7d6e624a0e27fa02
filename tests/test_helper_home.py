"""Where the shared helper lives: a validated `helper` setting (issue #8), or, unset, a home inferred
from the project's layout (issue #13), and `migrate`/`--fix` on projects with nothing to fix.

Projects are our own, written into tmp_path: a package that imports vLLM's linear layers (so the
vLLM preset resolves them) without being vLLM.
"""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import pytest
from cli_runner import dtl
from tiny_project import ATTN, tree_bytes, write_tree

from dtype_lint.fix.helper_template import helper_source

# Unguarded with fp8-input-default = false: the fix exists but is unsafe.
UNCONFIGURED = '[project]\nname = "sample"\n'


write = write_tree
snapshot = tree_bytes


# --- inferred home -------------------------------------------------------------------------------


def test_src_layout_gets_the_helper_in_the_package_with_most_sites(tmp_path: Path):
    root = write(tmp_path / "p", {
        "pyproject.toml": UNCONFIGURED,
        "src/pkg/__init__.py": "", "src/pkg/a.py": ATTN, "src/pkg/b.py": ATTN,
        "src/other/__init__.py": "", "src/other/c.py": ATTN,
    })
    proc = dtl(root, "migrate", ".", "--report", "PR.md")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    helper = root / "src/pkg/layer_input_dtype.py"
    # Made from the torch template: a project that is not vLLM must not import vllm.platforms.
    assert helper.read_text(encoding="utf-8") == helper_source("get_layer_input_dtype", "torch")
    assert not (root / "vllm").exists() and not (root / "layer_input_dtype.py").exists()
    for rel in ("src/pkg/a.py", "src/pkg/b.py", "src/other/c.py"):
        text = (root / rel).read_text(encoding="utf-8")
        assert "from pkg.layer_input_dtype import get_layer_input_dtype\n" in text, rel
        compile(text, rel, "exec")
    report = (root / "PR.md").read_text(encoding="utf-8")
    assert "- Helper: `pkg.layer_input_dtype:get_layer_input_dtype` in `src/pkg/layer_input_dtype.py` (created" in report
    why = next(line for line in report.splitlines() if line.startswith("- Why there: "))
    assert "belongs to package `vllm`" in why and "package `pkg` holds 2 of the 3 sites to fix" in why
    assert "src/ layout" in why and 'helper = "pkg.layer_input_dtype:get_layer_input_dtype"' in why
    # Every file created or changed is listed, the report itself included.
    listed = [line for line in report.split("## Files created or changed", 1)[1].split("##", 1)[0].splitlines()
              if line.startswith("- ")]
    assert listed == ["- `src/pkg/layer_input_dtype.py` (created: helper)", "- `src/other/c.py` (changed: fix)",
                      "- `src/pkg/a.py` (changed: fix)", "- `src/pkg/b.py` (changed: fix)", "- `PR.md` (this report)"]
    assert "dtype-lint: created src/pkg/layer_input_dtype.py (helper)" in proc.stderr
    assert "dtype-lint: created PR.md (report)" in proc.stderr
    assert dtl(root, "check").returncode == 0


def test_an_inferred_helper_is_found_again(tmp_path: Path):
    """pre-commit passes only the staged files: a later run over a file of another package must
    reuse the helper an earlier run created, not create a second one."""
    root = write(tmp_path / "p", {
        "pyproject.toml": UNCONFIGURED + "\n[tool.dtype-lint]\n",
        "alpha/__init__.py": "", "alpha/a.py": ATTN,
        "beta/__init__.py": "", "beta/b.py": ATTN,
    })
    assert dtl(root, "check", "--fix", "alpha/a.py").returncode == 0
    assert (root / "alpha/layer_input_dtype.py").exists()
    proc = dtl(root, "check", "--fix", "beta/b.py", "--verbose")  # the warning's detail names the helper
    assert proc.returncode == 0, proc.stderr
    assert not (root / "beta/layer_input_dtype.py").exists()
    assert "from alpha.layer_input_dtype import get_layer_input_dtype" in (root / "beta/b.py").read_text()
    assert "the existing `alpha.layer_input_dtype:get_layer_input_dtype`" in proc.stderr


def test_check_shows_the_fix_it_would_apply(tmp_path: Path):
    root = write(tmp_path / "p", {"pyproject.toml": UNCONFIGURED, "pkg/__init__.py": "", "pkg/a.py": ATTN})
    proc = dtl(root, "check", "--output-format", "json")
    (finding,) = json.loads(proc.stdout)["findings"]
    assert finding["fix"]["imports"] == [["pkg.layer_input_dtype", "get_layer_input_dtype"]]
    text = dtl(root, "check")
    assert "pkg/a.py:11:13: DTL001 [*]" in text.stdout and "(1 fixable)" in text.stdout
    diff = dtl(root, "check", "--diff")
    assert diff.returncode == 1 and "+++ b/pkg/layer_input_dtype.py" in diff.stdout
    assert not (root / "pkg/layer_input_dtype.py").exists()


def test_generic_preset_puts_the_helper_inside_the_package(tmp_path: Path):
    """The generic preset's default is a top-level module at the project root, which an installed
    package cannot import."""
    root = write(tmp_path / "p", {
        "pyproject.toml": '[tool.dtype-lint]\npreset = "generic"\nquantizable = ["pkg.layers.QLinear"]\n',
        "pkg/__init__.py": "",
        "pkg/layers.py": "import torch\n\n\nclass QLinear(torch.nn.Module):\n    pass\n",
        "pkg/a.py": "from pkg.layers import QLinear\n\n\ndef run(layer: QLinear, x):\n    return layer(x.to(layer.weight.dtype))\n",
    })
    proc = dtl(root, "check", "--fix", "--verbose")  # the warning's detail says why not the preset's
    assert proc.returncode == 0, proc.stderr
    assert (root / "pkg/layer_input_dtype.py").read_text() == helper_source("get_layer_input_dtype", "torch")
    assert not (root / "layer_input_dtype.py").exists()
    assert "is not importable from `pkg.a`" in proc.stderr


PLAIN_TORCH = {
    "pyproject.toml": '[project]\nname = "plain"\n\n[tool.dtype-lint]\nquantizable = ["pkg.layers.QLinear"]\n',
    "pkg/__init__.py": "",
    "pkg/layers.py": "import torch\n\n\nclass QLinear(torch.nn.Module):\n    pass\n",
    "pkg/a.py": "from pkg.layers import QLinear\n\n\ndef run(layer: QLinear, x):\n    return layer(x.to(layer.weight.dtype))\n",
}
PLACED = ("fixes use a new `pkg.layer_input_dtype:get_layer_input_dtype` in pkg/layer_input_dtype.py (package `pkg` "
          "holds the one site to fix). Pin it with `helper = \"pkg.layer_input_dtype:get_layer_input_dtype\"` in "
          "[tool.dtype-lint]")


def test_the_inferred_helpers_why_names_no_engine_the_project_is_not_on(tmp_path: Path):
    """A plain torch project (a configured `quantizable` class; no file is vLLM's or imports from its
    layers) needs the shared helper: why it goes where it goes says that the preset's default does
    not apply, never the preset's helper path nor that it would shadow the installed engine (as it
    did at 08e5258), in doctor, in `check --diff -v` and in a migration's report. A project on vLLM's
    layers keeps today's words."""
    root = write(tmp_path / "plain", PLAIN_TORCH)
    why = ("`helper` is not set, and the `vllm` preset's default does not apply here (no file is its engine's code "
           "or imports from its layers); " + PLACED)
    doctor = dtl(root, "doctor", "--no-cache").stdout
    assert f"\n  why: {why}\n" in doctor, doctor
    diff = dtl(root, "check", "--diff", "-v", "--no-cache")
    assert f"\n  {why}\n" in diff.stderr, diff.stderr
    assert dtl(root, "migrate", ".", "--report", "PR.md").returncode == 0
    report = (root / "PR.md").read_text(encoding="utf-8")
    assert f"- Why there: {why}\n" in report, report
    why_line = next(line for line in doctor.splitlines() if line.startswith("  why: "))
    for said in (why_line, diff.stderr, report):
        assert "model_executor" not in said and "shadow" not in said, said
    # the same project on vLLM's layers: the preset's helper is named as unusable, as before
    engine = write(tmp_path / "engine", {**PLAIN_TORCH, "pkg/attn.py": ATTN})
    kept = dtl(engine, "doctor", "--no-cache").stdout
    assert ("\n  why: `helper` is not set, and the vllm preset's `vllm.model_executor.layers.quantization.utils."
            "layer_input_dtype:get_layer_input_dtype` cannot be used: it belongs to package `vllm`, which this "
            "project does not hold (creating it here would shadow the installed `vllm`); fixes use a new "
            "`pkg.layer_input_dtype:get_layer_input_dtype` in pkg/layer_input_dtype.py (package `pkg` holds both "
            "sites to fix). Pin it") in kept, kept


def test_scripts_without_a_package_get_the_helper_beside_them(tmp_path: Path):
    root = write(tmp_path / "p", {"pyproject.toml": UNCONFIGURED, "tools/run_a.py": ATTN, "tools/run_b.py": ATTN})
    assert dtl(root, "check", "--fix").returncode == 0
    assert (root / "tools/layer_input_dtype.py").exists()
    assert "from layer_input_dtype import get_layer_input_dtype" in (root / "tools/run_a.py").read_text()


def test_no_home_to_infer_drops_the_fix_in_a_check_and_stops_a_fix(tmp_path: Path):
    """Sites in top-level modules of two folders: no helper location works for both. A check keeps
    the findings without `[*]`, saying why; `--fix`, `--diff` and `migrate` exit 2, writing nothing."""
    root = write(tmp_path / "p", {"pyproject.toml": UNCONFIGURED, "one/a.py": ATTN, "two/b.py": ATTN})
    before = snapshot(root)
    proc = dtl(root, "check")
    assert proc.returncode == 1
    assert "DTL001 [*]" not in proc.stdout and "DTL001 activation" in proc.stdout
    assert "fixable" not in proc.stdout
    assert "no home for it could be inferred" in proc.stderr and "several folders" in proc.stderr
    found = json.loads(dtl(root, "check", "--output-format", "json").stdout)["findings"]
    assert all(f["fix"] is None and "cannot be located" in f["no_fix_reason"] for f in found)
    for argv in (["check", "--fix"], ["check", "--diff"], ["migrate", ".", "--report", "PR.md"]):
        proc = dtl(root, *argv)
        assert proc.returncode == 2, (argv, proc.stdout, proc.stderr)
        assert 'Set `helper = "yourpackage.module:get_layer_input_dtype"`' in proc.stderr
        assert snapshot(root) == before


def test_unsafe_fixes_are_not_marked_fixable_without_the_flag(tmp_path: Path):
    root = write(tmp_path / "p", {
        "pyproject.toml": '[tool.dtype-lint]\nhelper = "pkg.dtypes:get_layer_input_dtype"\nfp8-input-default = false\n',
        "pkg/__init__.py": "", "pkg/a.py": ATTN})
    proc = dtl(root, "check")
    assert "DTL001 [*]" not in proc.stdout and "1 hidden fix can be enabled with --unsafe-fixes" in proc.stdout
    proc = dtl(root, "check", "--unsafe-fixes")
    assert "DTL001 [*]" in proc.stdout and "(1 fixable)" in proc.stdout


# --- nothing to migrate --------------------------------------------------------------------------

# gptqmodel's shape: its own quantized linear (packed `qweight`, no `.weight`), no vLLM import.
GPTQ_SHAPED = {
    "pyproject.toml": '[project]\nname = "gptq-shaped"\n',
    "gptq_shaped/__init__.py": "",
    "gptq_shaped/qlinear.py": (
        "import torch\n\n\nclass QuantLinear(torch.nn.Module):\n"
        "    def __init__(self, bits, infeatures, outfeatures):\n"
        "        super().__init__()\n"
        "        self.register_buffer('qweight', torch.zeros(infeatures // 32 * bits, outfeatures, dtype=torch.int32))\n\n"
        "    def forward(self, x):\n"
        "        return x.to(torch.float16) @ self.qweight.to(torch.float16)\n"
    ),
    "gptq_shaped/model.py": (
        "import torch\n\n\nclass Head(torch.nn.Module):\n"
        "    def __init__(self):\n        super().__init__()\n        self.proj = torch.nn.Linear(4, 4)\n\n"
        "    def forward(self, x):\n        return self.proj(x.to(self.proj.weight.dtype))\n"
    ),
}


def test_nothing_to_migrate_exits_0_and_writes_only_the_report(tmp_path: Path):
    root = write(tmp_path / "p", GPTQ_SHAPED)
    before = snapshot(root)
    proc = dtl(root, "migrate", ".", "--report", "PR.md")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    after = snapshot(root)
    assert after.pop("PR.md") and after == before
    report = (root / "PR.md").read_text(encoding="utf-8")
    assert "- Files checked: 3" in report and "Nothing to fix." in report and "- Helper:" not in report
    assert "- `PR.md` (this report)" in report
    proc = dtl(root, "check", "--fix")
    assert proc.returncode == 0 and "All checks passed! (3 files checked)" in proc.stdout
    assert snapshot(root) == {**before, "PR.md": (root / "PR.md").read_bytes()}


@pytest.mark.network
@pytest.mark.full("a whole-tree migrate; CI: lmdeploy's triage finds nothing (test_triage.py), migrate on our projects here")
def test_lmdeploy_has_nothing_to_migrate(tmp_path: Path, lmdeploy_0180: Path):
    root = tmp_path / "lmdeploy"
    shutil.copytree(lmdeploy_0180, root)
    before = snapshot(root)
    proc = dtl(root, "migrate", ".", "--report", "PR.md", "--no-progress")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    after = snapshot(root)
    after.pop("PR.md")
    assert after == before
    assert dtl(root, "check", "--fix", "--no-progress").returncode == 0


# --- the helper setting is validated (issue #8) ---------------------------------------------------

PROJECT = {"pkg/__init__.py": "", "pkg/a.py": ATTN, "pkg/model.py": "X = 1\n", "pkg/util.py": "def other():\n    pass\n",
           "pkg/helpers/readme.txt": "a namespace folder\n"}


@pytest.mark.parametrize("helper, message", [
    ("torch:get_layer_input_dtype", "`torch` is "),  # installed here, or not (pre-commit's own virtualenv)
    ("vllm.utils:get_layer_input_dtype", "`vllm` is a package such projects install"),
    ("json:get_layer_input_dtype", "`json` is a standard-library module"),
    ("os:system", "`os` is a standard-library module"),
    ("os.path:join", "`os` is a standard-library module"),
    ("rich.x:get_layer_input_dtype", "`rich` is an installed package ("),
    ("pkg.model.helpers:get_layer_input_dtype", "`pkg.model` is the module"),
    ("pkg.helpers:get_layer_input_dtype", "is a namespace package"),
    ("pkg.util:get_layer_input_dtype", "exists but defines no `get_layer_input_dtype`"),
])
def test_a_helper_setting_that_cannot_be_the_projects_own_is_refused(tmp_path: Path, helper: str, message: str):
    root = write(tmp_path / "p", {"pyproject.toml": f'[tool.dtype-lint]\nhelper = "{helper}"\n', **PROJECT})
    before = snapshot(root)
    for argv in (["check"], ["check", "--fix"], ["check", "--diff"], ["migrate", "."]):
        proc = dtl(root, *argv)
        assert proc.returncode == 2, (argv, proc.stdout, proc.stderr)
        assert proc.stderr.startswith("dtype-lint: error: ") and message in proc.stderr, proc.stderr
        assert snapshot(root) == before
    assert not any((root / name).exists() for name in ("torch.py", "json.py", "os.py", "pkg/model", "pkg/helpers.py"))


@pytest.mark.parametrize("helper", ["pkg..x:f", "pkg.x.:f", ".pkg:f", "pkg.class:f", "pkg:def", "pkg.x:f:g", "pkg x:f"])
def test_a_malformed_helper_setting_is_a_configuration_error(tmp_path: Path, helper: str):
    root = write(tmp_path / "p", {"pyproject.toml": f'[tool.dtype-lint]\nhelper = "{helper}"\n',
                                  "pkg/__init__.py": "", "pkg/clean.py": "x = 1\n"})
    proc = dtl(root, "check")
    assert proc.returncode == 2 and "`helper` must look like `package.module:function`" in proc.stderr


def test_a_valid_helper_setting_is_created_or_used(tmp_path: Path):
    root = write(tmp_path / "p", {"pyproject.toml": '[tool.dtype-lint]\nhelper = "pkg.model_utils.dtypes:pick"\n',
                                  **PROJECT})
    assert dtl(root, "check", "--fix").returncode == 0
    # vllm is third party here: one import block with torch, as isort sorts it.
    assert (root / "pkg/model_utils/dtypes.py").read_text() == helper_source("pick", "vllm", vllm_first_party=False)
    assert (root / "pkg/model_utils/__init__.py").exists()
    assert "from pkg.model_utils.dtypes import pick" in (root / "pkg/a.py").read_text()


def test_a_helper_in_a_nested_import_root_is_the_projects_own(tmp_path: Path):
    """sglang keeps its package in `python/sglang`: checking only `test/` must not take a helper
    under `sglang` for a foreign package."""
    root = write(tmp_path / "p", {"pyproject.toml": '[tool.dtype-lint]\nhelper = "sglang.srt.dtypes:get_layer_input_dtype"\n',
                                  "python/sglang/__init__.py": "", "python/sglang/srt/__init__.py": "",
                                  "test/test_x.py": "def test():\n    pass\n", "test/test_attn.py": ATTN})
    proc = dtl(root, "check", "test", "--fix")
    assert proc.returncode == 0, proc.stderr
    assert (root / "python/sglang/srt/dtypes.py").exists() and not (root / "sglang").exists()
    assert dtl(root, "check", "python").returncode == 0


@pytest.mark.network
@pytest.mark.full("CI: the inferred-home tests above, on our own projects, and aphrodite's triage")
def test_a_vllm_fork_migrates_with_an_inferred_helper(tmp_path: Path, aphrodite_0241: Path):
    """aphrodite-engine is vLLM under another package name: no configuration, the vLLM preset's
    helper cannot live there, so it goes into `aphrodite/`, and every rewritten file imports it."""
    root = tmp_path / "aphrodite"
    shutil.copytree(aphrodite_0241, root)
    before = snapshot(root)
    proc = dtl(root, "migrate", ".", "--report", "PR.md", "--no-progress")
    assert proc.returncode in (0, 1), proc.stdout + proc.stderr
    helper = root / "aphrodite/layer_input_dtype.py"
    assert helper.read_text(encoding="utf-8") == helper_source("get_layer_input_dtype", "torch")
    report = (root / "PR.md").read_text(encoding="utf-8")
    assert "- Why there: " in report and "package `aphrodite` holds" in report
    changed = {rel for rel, data in snapshot(root).items() if before.get(rel) != data} - {"PR.md"}
    assert "aphrodite/layer_input_dtype.py" in changed and len(changed) > 1
    for rel in changed:
        text = (root / rel).read_text(encoding="utf-8")
        compile(text, rel, "exec")
        if rel == "aphrodite/layer_input_dtype.py":
            pass
        elif "get_layer_input_dtype(" in text:
            assert "from aphrodite.layer_input_dtype import get_layer_input_dtype" in text, rel
        else:  # the fork's own MLA helper, given its missing branch in place (DTL005)
            assert re.search(rf"`{re.escape(rel)}:\d+` `\w+`: fixed in place", report), rel
        assert f"- `{rel}` (" in report
    again = json.loads(dtl(root, "check", "--output-format", "json", "--no-progress").stdout)
    assert again["summary"]["fixable"] == 0


@pytest.mark.parametrize("source,problem", [
    ("def f(layer, fp8_input):\n    pass\n", ""),
    ("def f(layer, fp8_input=True, device=None, *, strict=False):\n    pass\n", ""),
    ("def f(*args):\n    pass\n", ""),
    ("def f(layer, /, fp8_input):\n    pass\n", ""),
    ("def f(layer):\n    pass\n", "1 positional parameter"),
    ("def f(layer, fp8_input, device):\n    pass\n", "device has no default"),
    ("def f(layer, fp8_input, *, device):\n    pass\n", "keyword-only parameters without a default (device)"),
    ("async def f(layer, fp8_input):\n    pass\n", "async def"),
    ("@cache\ndef f(layer, fp8_input):\n    pass\n", "decorated (@cache)"),
    ("def f(layer, fp8_input):\n    pass\n\n\nf = None\n", "bound 2 times"),
])
def test_call_problem_reads_the_signature(source: str, problem: str):
    import ast

    from dtype_lint.analysis.helper_functions import call_problem

    tree = ast.parse(source)
    fn = next(n for n in tree.body if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef)))
    got = call_problem(fn, tree)
    assert (problem in got) if problem else got == ""


@pytest.mark.parametrize(("count", "total", "said"), [
    (1, 1, "the one site to fix"), (2, 2, "both sites to fix"), (3, 3, "all 3 sites to fix"),
    (0, 2, "none of the 2 sites to fix"), (2, 5, "2 of the 5 sites to fix")])
def test_why_the_helper_is_where_it_is_counts_its_sites_in_words(count: int, total: int, said: str):
    from dtype_lint.fix.helper_home import _share

    assert _share(count, total) == said


SINGLE_MODULE = {
    "pyproject.toml": ('[project]\nname = "single"\nversion = "0"\n\n[tool.setuptools]\npy-modules = ["model"]\n\n'
                       '[tool.dtype-lint]\nquantizable = ["layers.QLinear"]\n'),
    "layers.py": "import torch\n\n\nclass QLinear(torch.nn.Module):\n    pass\n",
    "model.py": "from layers import QLinear\n\n\ndef run(layer: QLinear, x):\n    return layer(x.to(layer.weight.dtype))\n",
}


@pytest.mark.parametrize("flag", ["--diff", "--fix"])
def test_no_headline_names_an_inferred_helper_that_every_fix_refused(tmp_path: Path, flag: str):
    """A distribution of one top-level module: the inferred helper would be a second top-level
    module its wheel does not install, so the site's fix is refused. The warnings say that, and no
    longer also that "fixes use a new layer_input_dtype.py" (which none does)."""
    root = write_tree(tmp_path / "p", SINGLE_MODULE)
    before = tree_bytes(root)
    proc = dtl(root, "check", flag, "--no-cache")
    assert tree_bytes(root) == before, proc.stdout + proc.stderr
    assert "model.py: fixes refused: the helper would be a new top-level module layer_input_dtype.py" in proc.stderr
    assert "fixes use" not in proc.stderr, proc.stderr
    # where the helper is reachable, the headline is said as before
    write_tree(root, {"pyproject.toml": '[tool.dtype-lint]\nquantizable = ["layers.QLinear"]\n'})  # no distribution
    proc = dtl(root, "check", "--diff", "--no-cache")
    assert "`helper` is not set: fixes use a new layer_input_dtype.py" in proc.stderr, proc.stderr
