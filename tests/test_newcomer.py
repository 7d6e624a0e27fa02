"""What a new user meets first: usage errors, the closing summary, runs that check nothing, the same
paths in every format, every configuration key documented, and black-formatted code found.

Each test is one edge issue #13 (and #8's "honest summaries") named; the project is our own, in
the shape of the MLA prefill bug. The last (slow) one is issue #24's newcomer: a fresh virtualenv
walked through the README, the CPU-torch install, a pre-commit commit, an editor session and the
project's own ruff settings.
"""

from __future__ import annotations

import json
import re
import subprocess
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest
from cli_runner import dtl
from conftest import budget, builds_the_checkout
from tiny_project import ATTN

from dtype_lint.core.config import SETTING_KEYS as _KEYS

ROOT = Path(__file__).resolve().parents[1]

PYPROJECT = '[tool.dtype-lint]\nhelper = "pkg.dtypes:get_layer_input_dtype"\n'


def write(root: Path, files: dict[str, str]) -> Path:
    for rel, text in files.items():
        p = root / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(text, encoding="utf-8")
    return root


def project(root: Path, **extra: str) -> Path:
    return write(root, {"pyproject.toml": PYPROJECT, "pkg/__init__.py": "", "pkg/attn.py": ATTN,
                        "pkg/util.py": "def f(x):\n    return x\n", **extra})


# --- usage errors --------------------------------------------------------------------------------


@pytest.mark.parametrize("argv, command", [
    (["check", "--bogus"], "check"),
    (["--bogus"], "check"),  # the default command
    (["check", ".", "--fixx"], "check"),
    (["migrate", ".", "--bogus"], "migrate"),
    (["rule", "DTL001", "--bogus"], "rule"),
    (["doctor", "--bogus"], "doctor"),
])
def test_a_bad_flag_prints_its_commands_usage(tmp_path: Path, argv: list[str], command: str):
    proc = dtl(tmp_path, *argv)
    assert proc.returncode == 2
    assert proc.stderr.startswith(f"usage: dtype-lint {command} ")
    assert f"dtype-lint {command}: error: unrecognized arguments: {argv[-1]}" in proc.stderr
    assert "COMMAND ..." not in proc.stderr  # not the top-level usage


def test_a_bad_flag_value_still_names_the_command(tmp_path: Path):
    proc = dtl(tmp_path, "check", "--output-format", "xml")
    assert proc.returncode == 2 and proc.stderr.startswith("usage: dtype-lint check ")


# --- the closing summary -------------------------------------------------------------------------


def test_summary_says_how_many_files_were_checked(tmp_path: Path):
    root = project(tmp_path / "p")
    proc = dtl(root, "check")
    assert proc.returncode == 1
    assert proc.stdout.rstrip().endswith("Found 1 finding (1 fixable); 3 files checked\n[*] 1 fixable with `--fix`.")
    assert dtl(root, "check", "--output-format", "concise").stdout.endswith("; 3 files checked\n[*] 1 fixable with `--fix`.\n")
    proc = dtl(root, "check", "pkg/util.py")
    assert proc.returncode == 0 and proc.stdout == "All checks passed! (1 file checked)\n"
    proc = dtl(root, "check", "--fix")
    assert proc.returncode == 0 and "Found 1 finding (1 fixed, 0 remaining); 3 files checked" in proc.stdout


@pytest.mark.parametrize("case", ["empty-folder", "everything-excluded", "only-other-files"])
def test_a_run_over_no_python_file_warns_and_never_passes(tmp_path: Path, case: str):
    root = tmp_path / "p"
    root.mkdir()
    if case == "everything-excluded":
        project(root)
        (root / "pyproject.toml").write_text(PYPROJECT + 'exclude = ["*"]\n', encoding="utf-8")
    elif case == "only-other-files":
        write(root, {"README.md": "# x\n", "data/x.json": "{}\n"})
    for fmt in ("text", "concise"):
        proc = dtl(root, "check", "--output-format", fmt)
        assert proc.returncode == 0, proc.stderr
        assert "All checks passed" not in proc.stdout
        assert proc.stdout == "No Python files checked.\n"
        assert "dtype-lint: warning: no Python files found under `.`" in proc.stderr
    data = json.loads(dtl(root, "check", "--output-format", "json").stdout)
    assert data["summary"]["files"] == 0


def test_nothing_changed_since_a_ref_says_so(tmp_path: Path):
    root = project(tmp_path / "p")
    git = ["git", "-c", "user.name=t", "-c", "user.email=t@example.com"]
    subprocess.run([*git, "init", "-q"], cwd=root, check=True)
    subprocess.run([*git, "add", "-A"], cwd=root, check=True)
    subprocess.run([*git, "commit", "-qm", "x"], cwd=root, check=True)
    proc = dtl(root, "check", "--changed-since", "HEAD")
    assert proc.returncode == 0 and proc.stdout == "No Python files checked.\n"
    assert "no Python file changed since `HEAD`" in proc.stderr


@pytest.mark.parametrize("setting", ["select = []", 'ignore = ["ALL"]', 'select = ["DTL9"]'])
def test_a_configuration_that_enables_no_rule_is_an_error(tmp_path: Path, setting: str):
    root = project(tmp_path / "p")
    (root / "pyproject.toml").write_text(PYPROJECT + setting + "\n", encoding="utf-8")
    for argv in (["check"], ["check", "--fix"], ["migrate", "."]):
        proc = dtl(root, *argv)
        assert proc.returncode == 2, (argv, proc.stdout, proc.stderr)
        assert "no rule is enabled" in proc.stderr and "pyproject.toml" in proc.stderr
        assert "All checks passed" not in proc.stdout
    assert (root / "pkg/attn.py").read_text(encoding="utf-8") == ATTN


# --- paths ---------------------------------------------------------------------------------------


def _paths(fmt: str, out: str) -> set[str]:
    if fmt in ("text", "concise"):
        return set(re.findall(r"^(\S+\.py):\d+:\d+:", out, re.M))
    if fmt == "github":
        return set(re.findall(r"file=([^,]+),", out))
    if fmt == "json":
        return {f["path"] for f in json.loads(out)["findings"]}
    if fmt == "sarif":
        results = json.loads(out)["runs"][0]["results"]
        return {loc["physicalLocation"]["artifactLocation"]["uri"] for r in results for loc in r["locations"]}
    if fmt == "gitlab":
        return {i["location"]["path"] for i in json.loads(out)}
    if fmt == "junit":
        return {tc.get("file") for tc in ET.fromstring(out).iter("testcase") if tc.get("file")}
    raise AssertionError(fmt)


@pytest.mark.parametrize("argv", [[], ["."], ["pkg"], ["./pkg"], ["pkg/attn.py"]])
def test_every_format_names_files_alike(tmp_path: Path, argv: list[str]):
    root = project(tmp_path / "p")
    seen = {}
    for fmt in ("text", "concise", "github", "json", "sarif", "gitlab", "junit"):
        proc = dtl(root, "check", *argv, "--output-format", fmt)
        assert proc.returncode == 1, proc.stderr
        seen[fmt] = _paths(fmt, proc.stdout)
    assert all(paths == {"pkg/attn.py"} for paths in seen.values()), seen


# --- documentation -------------------------------------------------------------------------------


def test_every_configuration_key_is_in_the_readme():
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    block = readme.split("```toml\n[tool.dtype-lint]\n", 1)[1].split("```", 1)[0]
    documented = set(re.findall(r"^([a-z][a-z0-9-]*)\s*=", block, re.M))
    assert documented == set(_KEYS), (
        f"undocumented: {sorted(set(_KEYS) - documented)}; not keys: {sorted(documented - set(_KEYS))}")


# --- black-formatted sites -----------------------------------------------------------------------

BLACK_GETATTR = """\
import torch
from vllm.model_executor.layers.linear import ColumnParallelLinear


class Attn(torch.nn.Module):
    def __init__(self, kv_b_proj: ColumnParallelLinear):
        super().__init__()
        self.kv_b_proj = kv_b_proj

    def forward(self, x):
        y = x.to(
            getattr(
                self.kv_b_proj,  # the packed layer
                "weight",
            ).dtype
        )
        return self.kv_b_proj(y)
"""


def test_a_multi_line_getattr_with_a_comment_is_found_and_fixed(tmp_path: Path):
    from dtype_lint.core.prefilter import for_rules
    from dtype_lint.rules import ALL_RULES

    might_match = for_rules(ALL_RULES).might_match

    assert might_match(BLACK_GETATTR)
    # Without the multi-line form the file has no other spelling the prefilter knows.
    assert not might_match(BLACK_GETATTR.replace("getattr", "get_attr"))
    root = project(tmp_path / "p", **{"pkg/attn.py": BLACK_GETATTR})
    proc = dtl(root, "check", "--output-format", "json")
    (finding,) = json.loads(proc.stdout)["findings"]
    assert (finding["path"], finding["line"], finding["code"]) == ("pkg/attn.py", 11, "DTL001")
    assert finding["fix"] is not None
    assert dtl(root, "check", "--fix").returncode == 0
    fixed = (root / "pkg/attn.py").read_text(encoding="utf-8")
    assert "get_layer_input_dtype(self.kv_b_proj, True)" in fixed and '"weight"' not in fixed
    compile(fixed, "attn.py", "exec")


def test_quiet_prints_findings_only(tmp_path: Path):
    root = project(tmp_path / "p")
    for fmt in ("text", "concise"):
        proc = dtl(root, "check", "-q", "--output-format", fmt)
        assert proc.returncode == 1 and "pkg/attn.py:11:13: DTL001" in proc.stdout
        assert "Found" not in proc.stdout and "checked" not in proc.stdout
    proc = dtl(root, "check", "--quiet", "pkg/util.py")
    assert proc.returncode == 0 and proc.stdout == ""
    assert "Found" not in dtl(root, "check", "-q", "--statistics").stdout


# --- a fresh virtualenv, as a new user starts ----------------------------------------------------


def _run(*cmd, cwd: Path, **kw) -> subprocess.CompletedProcess:
    return subprocess.run([str(c) for c in cmd], cwd=cwd, capture_output=True, text=True, timeout=900, **kw)


@builds_the_checkout
@pytest.mark.slow
@pytest.mark.parametrize("walk", [budget("readme", "everything")])
def test_a_newcomer_in_a_fresh_virtualenv(tmp_path: Path, walk: str):
    """The README's first command in a fresh virtualenv, docs/install.md's CPU-torch steps (the
    CPU wheel from this machine's local folder: the documented `--index-url` is PyTorch's, out of
    reach here), `verify --help` before torch is there, a pre-commit commit with an excluded folder,
    an LSP session that receives a diagnostic and applies its quick-fix, and `ruff check --select
    I,E501` on the files `--fix` wrote.

    The CI budget (tests/conftest.py) walks the README's part (the fresh virtualenv, the first
    command, `verify` before torch); DTL_FULL=1 walks everything. In CI, this test run's own
    virtualenv is the CPU-torch install, test_pre_commit.py makes the excluded-folder commit,
    test_server.py the editor session and test_formatter_clean.py runs ruff on what `--fix` wrote."""
    import asyncio
    import sys

    import test_pre_commit
    import test_server

    venv = tmp_path / "venv"
    assert _run(sys.executable, "-m", "venv", venv, cwd=tmp_path).returncode == 0
    pip, python, exe = venv / "bin/pip", venv / "bin/python", venv / "bin/dtype-lint"

    # README: `pip install -e . && dtype-lint check fixtures/project` (from the checkout).
    install = _run(pip, "install", "-q", "-e", ROOT, cwd=ROOT)
    assert install.returncode == 0, install.stderr
    example = _run(exe, "check", "fixtures/project", "--no-cache", cwd=ROOT)
    assert example.returncode == 1, example.stderr
    assert "DTL001" in example.stdout and example.stdout.rstrip().splitlines()[-2].startswith("Found ")
    # Without torch: `verify --help` still helps, and `verify` says how to get torch for this checkout.
    helped = _run(exe, "verify", "--help", cwd=tmp_path)
    assert helped.returncode == 0 and "docs/install.md" in helped.stdout, helped.stderr
    refused = _run(exe, "verify", cwd=tmp_path)
    assert refused.returncode == 2 and f"pip install -e '{ROOT}[verify]'" in refused.stderr
    if walk == "readme":
        return

    # docs/install.md: the CPU build of torch first, then the extras; never a CUDA build.
    install_doc = (ROOT / "docs/install.md").read_text(encoding="utf-8")
    assert "pip install torch==2.13.0 --index-url https://download.pytorch.org/whl/cpu" in install_doc
    torch_cpu = _run(pip, "install", "-q", "torch==2.13.0", cwd=tmp_path)
    assert torch_cpu.returncode == 0, torch_cpu.stderr
    extras = _run(pip, "install", "-q", "-e", f"{ROOT}[verify,lsp]", cwd=ROOT)
    assert extras.returncode == 0, extras.stderr
    cuda = _run(python, "-c", "import torch; print(torch.version.cuda)", cwd=tmp_path)
    assert cuda.stdout.strip() == "None", cuda.stdout + cuda.stderr
    listed = _run(pip, "list", "--format", "json", cwd=tmp_path)
    assert not [p["name"] for p in json.loads(listed.stdout) if p["name"].lower().startswith("nvidia")]
    full_help = _run(exe, "verify", "--help", cwd=tmp_path)
    assert full_help.returncode == 0 and "--scenarios" in full_help.stdout, full_help.stderr

    # A pre-commit commit with an excluded folder, the shipped hooks running this venv's dtype-lint.
    repo = test_pre_commit.sample_repo(tmp_path / "repo", ["dtype-lint"], exe=exe)
    test_pre_commit._git(repo, "add", ".pre-commit-config.yaml", "pyproject.toml", "third_party")
    assert test_pre_commit.pre_commit(repo, tmp_path, "install").returncode == 0
    committed = test_pre_commit._git(repo, "commit", "-qm", "vendored code only")
    assert committed.returncode == 0, committed.stdout + committed.stderr
    test_pre_commit._git(repo, "add", "pkg")
    blocked = test_pre_commit._git(repo, "commit", "-qm", "the package")
    assert blocked.returncode != 0 and "pkg/attn.py:11:13: DTL001" in blocked.stdout + blocked.stderr

    # An editor session: a diagnostic, and its quick-fix applied.
    lsp_root = test_server.make_project(tmp_path / "lsp")
    out = asyncio.run(test_server.session(lsp_root, (str(exe), "server")))
    assert out["diagnostic"].code == "DTL001"
    assert "get_layer_input_dtype(self.kv_b_proj, True)" in out["fixed_text"]
    assert list(out["after_change"]) == []

    # `--fix` on the plugin-shaped repository, then the project's own ruff settings on what it wrote.
    (repo / "pyproject.toml").write_text((repo / "pyproject.toml").read_text() + "\n[tool.ruff]\nline-length = 88\n")
    fixed = _run(exe, "check", "--fix", cwd=repo)
    assert fixed.returncode == 0, fixed.stdout + fixed.stderr
    ruff = Path(sys.executable).with_name("ruff")
    linted = _run(ruff, "check", "--select", "I,E501", "--no-cache", "pkg/attn.py", "pkg/dtypes.py", cwd=repo)
    assert linted.returncode == 0, linted.stdout + linted.stderr
