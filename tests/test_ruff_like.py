"""The command line behaves like the tools people already use (issue #24): Ruff's flags and output
conventions, quiet stderr, one path base, a project root never inside a package, configuration
files, Ruff's `# noqa` semantics and a file-level directive. In-process runs of `dtype-lint`."""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from cli_runner import dtl
from tiny_project import ATTN, FIXED_CALL, PYPROJECT, tiny_project

TOP = "dtype-lint: "


def check_stdin(cwd: Path, data: str, *args: str, monkeypatch) -> subprocess.CompletedProcess:
    monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(data.encode("utf-8")), encoding="utf-8"))
    return dtl(cwd, "check", *args)


# --- --diff, paths, stderr, baseline ---------------------------------------------------------------


def test_diff_prints_only_a_diff_and_nothing_when_no_fix_applies(tmp_path: Path):
    root = tiny_project(tmp_path / "p", {"proj/clean.py": "def f(x):\n    return x\n"})
    proc = dtl(root, "check", "--diff")
    assert proc.returncode == 1
    assert proc.stdout.startswith("--- ") and "+++ b/proj/attn.py" in proc.stdout
    assert "Found" not in proc.stdout and "DTL001" not in proc.stdout
    clean = dtl(root, "check", "--diff", "proj/clean.py")
    assert (clean.returncode, clean.stdout) == (0, "")
    # A finding without a fix: still no report on stdout, exit 0 (Ruff's --diff).
    unfixable = dtl(root, "check", "--diff", "--select", "DTL003")
    assert unfixable.stdout == "" and unfixable.returncode == 0


def test_every_path_is_relative_to_the_current_folder(tmp_path: Path):
    root = tiny_project(tmp_path / "p")
    proc = dtl(tmp_path, "check", "p", "--fix")
    assert proc.returncode == 0, proc.stderr
    assert f"{TOP}created p/proj/dtypes.py (helper)" in proc.stderr
    assert f"{TOP}wrote p/proj/attn.py (fix)" in proc.stderr
    (root / "proj/attn.py").write_text(ATTN)
    (root / "proj/dtypes.py").unlink()
    diff = dtl(tmp_path, "check", "p", "--diff").stdout
    assert "+++ b/p/proj/dtypes.py" in diff and "+++ b/p/proj/attn.py" in diff


def test_stderr_is_quiet_by_default_and_verbose_says_what_it_wrote_for_itself(tmp_path: Path):
    root = tiny_project(tmp_path / "p")
    first = dtl(root, "check")
    assert first.stderr == ""  # no `created .dtype_lint_cache/` on a first run (pre-commit logs)
    assert (root / ".dtype_lint_cache").is_dir()
    (root / "proj/other.py").write_text("x = 1\n")
    import shutil

    shutil.rmtree(root / ".dtype_lint_cache")
    verbose = dtl(root, "check", "-v")
    assert f"{TOP}created .dtype_lint_cache/ (cache)" in verbose.stderr


def test_write_baseline_says_it_once(tmp_path: Path):
    root = tiny_project(tmp_path / "p")
    proc = dtl(root, "check", "--write-baseline", "baseline.json")
    assert proc.returncode == 0
    assert proc.stdout == ""  # not "All checks passed!" while recording a finding
    assert proc.stderr.splitlines() == [
        "dtype-lint: wrote baseline baseline.json: 1 finding recorded; `--baseline baseline.json` hides it"]
    assert dtl(root, "check", "--baseline", "baseline.json").returncode == 0


def test_the_root_of_a_tree_without_configuration_is_not_inside_a_package(tmp_path: Path):
    tree = tmp_path / "tree"
    for rel, text in {"vllm/__init__.py": "", "vllm/layers/__init__.py": "", "vllm/layers/attn.py": ATTN}.items():
        (tree / rel).parent.mkdir(parents=True, exist_ok=True)
        (tree / rel).write_text(text)
    for cwd, arg in ((tree, "vllm"), (tree / "vllm", "."), (tree / "vllm/layers", "attn.py")):
        proc = dtl(cwd, "check", arg, "--output-format", "json")
        assert proc.returncode == 1, proc.stderr
        assert not (tree / "vllm/.dtype_lint_cache").exists() and not (tree / "vllm/layers/.dtype_lint_cache").exists()
        assert (tree / ".dtype_lint_cache").is_dir()
    doctor = dtl(tree, "doctor", "vllm")
    assert str(tree) in doctor.stdout


# --- Ruff's flags --------------------------------------------------------------------------------


def test_stdin_with_stdin_filename(tmp_path: Path, monkeypatch):
    root = tiny_project(tmp_path / "p", pyproject=PYPROJECT + 'exclude = ["vendored"]\n')
    text = ATTN.replace("def forward", "def forward_unsaved")
    proc = check_stdin(root, text, "-", "--stdin-filename", "proj/attn.py", "--output-format", "concise",
                       monkeypatch=monkeypatch)
    assert proc.returncode == 1, proc.stderr
    assert proc.stdout.startswith("proj/attn.py:11:13: DTL001")
    fixed = check_stdin(root, ATTN, "--stdin-filename", "proj/attn.py", "--fix", monkeypatch=monkeypatch)
    assert fixed.returncode == 0 and FIXED_CALL in fixed.stdout and "from proj.dtypes import" in fixed.stdout
    assert "proj/dtypes.py does not exist yet" in fixed.stderr
    assert (root / "proj/attn.py").read_text() == ATTN  # stdin mode writes nothing
    diff = check_stdin(root, ATTN, "-", "--stdin-filename", "proj/attn.py", "--diff", monkeypatch=monkeypatch)
    assert diff.returncode == 1 and diff.stdout.startswith("--- a/proj/attn.py")
    # A name that does not exist yet is judged alone; an excluded one is skipped with --force-exclude.
    alone = check_stdin(root, ATTN, "-", "--stdin-filename", "proj/new.py", monkeypatch=monkeypatch)
    assert alone.returncode == 1 and "proj/new.py:11:13: DTL001" in alone.stdout
    skipped = check_stdin(root, ATTN, "-", "--stdin-filename", "vendored/x.py", "--force-exclude",
                          monkeypatch=monkeypatch)
    assert (skipped.returncode, skipped.stdout) == (0, "")
    both = dtl(root, "check", "-", "proj")
    assert both.returncode == 2 and "must be the only path" in both.stderr


def test_show_fixes_fix_only_and_exit_non_zero_on_fix(tmp_path: Path):
    root = tiny_project(tmp_path / "p")
    shown = dtl(root, "check", "--show-fixes")
    assert "1 fix available with `--fix`:\n- proj/attn.py:\n    1 \u00d7 DTL001 (weight-dtype-cast)\n" in shown.stdout
    only = dtl(root, "check", "--fix-only", "--show-fixes")
    assert only.returncode == 0
    assert only.stdout.startswith("Fixed 1 finding.\nFixed 1 finding:\n- proj/attn.py:\n")
    assert FIXED_CALL in (root / "proj/attn.py").read_text()
    root2 = tiny_project(tmp_path / "q")
    assert dtl(root2, "check", "--fix").returncode == 0
    (root2 / "proj/attn.py").write_text(ATTN)
    assert dtl(root2, "check", "--fix", "--exit-non-zero-on-fix").returncode == 1
    assert dtl(root2, "check", "--fix", "--exit-non-zero-on-fix").returncode == 0  # nothing left to fix


def test_fix_only_reports_no_remaining_finding(tmp_path: Path):
    root = tiny_project(tmp_path / "p", {"proj/buf.py": (
        "import torch\nfrom vllm.model_executor.layers.linear import ColumnParallelLinear\n\n\n"
        "class B(torch.nn.Module):\n    def __init__(self, proj: ColumnParallelLinear):\n        super().__init__()\n"
        "        self.proj = proj\n\n    def forward(self, x):\n        return self.proj.weight.shape\n")})
    assert dtl(root, "check", "--select", "DTL003").returncode == 1
    proc = dtl(root, "check", "--fix-only", "--select", "DTL003")
    assert (proc.returncode, proc.stdout) == (0, "")


def test_extend_select_adds_to_the_configured_selection(tmp_path: Path):
    root = tiny_project(tmp_path / "p", pyproject=PYPROJECT + 'select = ["DTL003"]\n')
    assert "DTL001" not in dtl(root, "check", "--output-format", "concise").stdout
    assert "DTL001" in dtl(root, "check", "--extend-select", "DTL001", "--output-format", "concise").stdout


@pytest.mark.parametrize("reason", [None, "kv_b_proj is never quantized in this model"])
def test_add_noqa_suppresses_every_finding_in_place(tmp_path: Path, reason):
    root = tiny_project(tmp_path / "p")
    flag = "--add-noqa" if reason is None else f"--add-noqa={reason}"
    proc = dtl(root, "check", flag, "proj")  # a bare --add-noqa never takes the path as its reason
    assert proc.returncode == 0 and "Added 1 suppression" in proc.stderr, proc.stderr
    line = (root / "proj/attn.py").read_text().splitlines()[10]
    expected = "# noqa: DTL001" if reason is None else f"# dtype-lint: ignore[DTL001] {reason}"
    assert line == f"        x = x.to(self.kv_b_proj.weight.dtype)  {expected}"
    assert dtl(root, "check").returncode == 0
    assert dtl(root, "check", "--add-noqa", "--fix").returncode == 2


# --- configuration files -------------------------------------------------------------------------


def test_dtype_lint_toml_takes_precedence_over_pyproject(tmp_path: Path):
    root = tiny_project(tmp_path / "p")
    (root / "dtype-lint.toml").write_text('helper = "proj.dtypes:get_layer_input_dtype"\nignore = ["DTL001"]\n')
    assert dtl(root, "check").returncode == 0
    (root / ".dtype-lint.toml").write_text('helper = "proj.dtypes:get_layer_input_dtype"\n')
    assert dtl(root, "check").returncode == 1  # the dotted one wins, as Ruff's .ruff.toml
    (root / ".dtype-lint.toml").write_text('helpr = "x"\n')
    bad = dtl(root, "check")
    assert bad.returncode == 2 and ".dtype-lint.toml" in bad.stderr and "did you mean `helper`" in bad.stderr
    doctor = dtl(root, "doctor")
    assert doctor.returncode == 2


def test_force_exclude_as_a_setting_and_its_negation(tmp_path: Path):
    root = tiny_project(tmp_path / "p", {"vendored/t.py": ATTN},
                       pyproject=PYPROJECT + 'exclude = ["vendored"]\nforce-exclude = true\n')
    assert dtl(root, "check", "vendored/t.py").returncode == 0
    assert dtl(root, "check", "vendored/t.py", "--no-force-exclude").returncode == 1
    assert dtl(root, "check", "vendored").returncode == 0  # a named folder too


# --- suppressions --------------------------------------------------------------------------------


def test_blanket_noqa_and_a_file_level_directive(tmp_path: Path):
    root = tiny_project(tmp_path / "p", {
        "proj/b.py": ATTN.replace("weight.dtype)", "weight.dtype)  # noqa"),
        "proj/c.py": "# dtype-lint: ignore-file[dtl001] reference module: never quantized\n" + ATTN,
        "proj/d.py": ATTN.replace("weight.dtype)", "weight.dtype)  # NOQA: dtl001"),
    })
    found = json.loads(dtl(root, "check", "--output-format", "json").stdout)["findings"]
    assert [(f["path"], f["code"]) for f in found] == [("proj/attn.py", "DTL001")]


def test_verify_help_without_torch(tmp_path: Path):
    code = "import sys; sys.modules['torch'] = None\nfrom dtype_lint.cli import main\nsys.exit(main(['verify', '--help']))"
    proc = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.startswith("usage: dtype-lint verify") and "docs/install.md" in proc.stdout
    assert "pip install -e '" in proc.stdout and "[verify]'" in proc.stdout
    code = code.replace("'--help'", "'--no-upstream'")
    proc = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, capture_output=True, text=True)
    assert proc.returncode == 2 and "pip install -e '" in proc.stderr and "dtype-lint[verify]" not in proc.stderr
    assert os.path.isdir(proc.stderr.split("pip install -e '", 1)[1].split("[verify]", 1)[0])
