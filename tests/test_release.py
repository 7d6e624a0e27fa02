"""Releases: one version, a changelog entry for it, docs that pin only what exists (a commit of
main: tags are not published), `[project.urls]` that point at real files, `scripts/release` on a
temporary clone, and pre-commit hooks that work as users run them (`pre-commit try-repo` on a
small project of our own, pinned to this checkout's commit).

pre-commit builds its own virtualenv and installs dtype-lint and its dependencies from the package
index into it, hence the `network` marker (tests/test_pre_commit.py runs the same hooks offline).
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from cli_runner import dtl

from dtype_lint import __version__

ROOT = Path(__file__).resolve().parents[1]
TAG = f"v{__version__}"


def test_version_has_one_source():
    from dtype_lint.core.config import tomllib

    pyproject = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    project = pyproject["project"]
    assert "version" not in project and "version" in project["dynamic"], "the version lives in dtype_lint/__init__.py only"
    assert pyproject["tool"]["setuptools"]["dynamic"]["version"] == {"attr": "dtype_lint.__version__"}
    assert re.fullmatch(r"\d+\.\d+\.\d+", __version__)


def test_the_installed_metadata_agrees():
    from importlib.metadata import version

    assert version("dtype-lint") == __version__


def test_version_flag(tmp_path: Path):
    proc = dtl(tmp_path, "--version")
    assert proc.returncode == 0 and proc.stdout.strip() == f"dtype-lint {__version__}"
    # The console script says the same (what `pre-commit` and CI logs show).
    exe = Path(sys.executable).with_name("dtype-lint")
    if exe.exists():
        out = subprocess.run([str(exe), "--version"], capture_output=True, text=True)
        assert out.stdout.strip() == f"dtype-lint {__version__}"


def test_changelog_has_a_section_for_this_version():
    changelog = (ROOT / "CHANGELOG.md").read_text(encoding="utf-8")
    sections = re.findall(r"^## \[?(\d+\.\d+\.\d+)\]?", changelog, re.M)
    assert sections and sections[0] == __version__, "the newest CHANGELOG section is this version"
    body = changelog.split(f"## {__version__}", 1)[1].split("\n## ", 1)[0]
    assert body.count("\n- ") >= 3


PIN_DOCS = ("README.md", "docs/ci.md", "action.yml", "CHANGELOG.md")


def test_the_docs_pin_only_what_exists():
    """No `rev: vX.Y.Z` or `@vX.Y.Z` pin of a tag this repository does not have: the docs pin a
    commit of main (a placeholder the user fills with a real SHA)."""
    for rel in PIN_DOCS:
        text = (ROOT / rel).read_text(encoding="utf-8")
        for tag in re.findall(r"(?:rev: |dtype-lint@|\.git@|@)(v\d+\.\d+\.\d+)\b", text):
            assert _has_tag(tag), f"{rel} pins {tag}, which this repository does not have"
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    assert "rev: <full commit SHA of main>" in readme
    assert "@<commit>" in (ROOT / "docs" / "ci.md").read_text(encoding="utf-8")


def test_project_urls_point_at_files_that_exist():
    from dtype_lint.core.config import tomllib

    urls = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]["urls"]
    assert urls and "Documentation" in urls
    for label, target in urls.items():
        # No public home yet: each is a path in the repository, and it must be there.
        assert "://" not in target and (ROOT / target).is_file(), (label, target)


def test_the_wheel_ships_the_tool_not_its_test_inputs(tmp_path: Path):
    """The wheel holds the package, the rules, the reference kernels, the shipped catalogues and the
    one test input the tool needs at run time (`dtype-lint verify`'s fixture), and no fixtures
    module: `fixtures/` is the test suite's input. Installed from the wheel, verify finds its
    fixture."""
    import zipfile

    source = tmp_path / "source"
    listed = subprocess.run(["git", "ls-files", "--cached", "--others", "--exclude-standard", "-z"], cwd=ROOT,
                            capture_output=True, text=True, check=True).stdout
    for name in filter(None, listed.split("\0")):
        if (ROOT / name).is_file():
            (source / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(ROOT / name, source / name)
    built = subprocess.run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "--no-build-isolation",
                            "-w", str(tmp_path / "dist"), str(source)], capture_output=True, text=True, timeout=600)
    assert built.returncode == 0, built.stderr[-3000:]
    (wheel,) = (tmp_path / "dist").glob("dtype_lint-*.whl")
    names = zipfile.ZipFile(wheel).namelist()
    assert not [name for name in names if "fixtures/" in name or name.startswith("fixtures")]
    assert "dtype_lint/kernels_ref/harness/verify_fixture/mla_prefill.py" in names
    assert "dtype_lint/rules/dtl001_weight_dtype_cast.py" in names and "dtype_lint/core/rule_registry.py" in names
    assert any(name.startswith("dtype_lint/ecosystems/vllm/catalogue-") for name in names)
    target = tmp_path / "installed"
    subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--target", str(target), str(wheel)],
                   check=True, capture_output=True, timeout=300)
    probe = subprocess.run(
        [sys.executable, "-c", "import sys; sys.path.insert(0, sys.argv[1]); import dtype_lint; "
         "from dtype_lint.kernels_ref.harness.variants import fixture_source; from dtype_lint.rules import codes; "
         "print(dtype_lint.__file__, len(fixture_source()) > 0, codes())", str(target)],
        capture_output=True, text=True, cwd=tmp_path, timeout=120)
    assert probe.returncode == 0, probe.stderr[-3000:]
    assert probe.stdout.startswith(str(target)) and " True ('DTL001'" in probe.stdout


def _clone(tmp_path: Path) -> Path:
    clone = tmp_path / "clone"
    subprocess.run(["git", "clone", "-q", str(ROOT), str(clone)], check=True, capture_output=True)
    return clone


def _release(clone: Path, *args: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "GIT_CONFIG_GLOBAL": os.devnull, "GIT_CONFIG_NOSYSTEM": "1",
           "GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@example.com",
           "GIT_COMMITTER_NAME": "t", "GIT_COMMITTER_EMAIL": "t@example.com"}
    return subprocess.run([sys.executable, str(clone / "scripts/release"), *args], cwd=clone, env=env,
                          capture_output=True, text=True)


def test_the_release_script_bumps_writes_the_changelog_and_tags(tmp_path: Path):
    clone = _clone(tmp_path)
    changelog = clone / "CHANGELOG.md"
    text = changelog.read_text(encoding="utf-8")
    if "## Unreleased" not in text:  # a checkout right after a release: give it an entry
        text = text.replace("\n## ", "\n## Unreleased\n\n- something\n\n## ", 1)
        changelog.write_text(text, encoding="utf-8")
        _git(clone, "commit", "-qam", "changes")
    major, minor, _patch = map(int, __version__.split("."))
    new = f"{major}.{minor + 1}.0"
    assert _release(clone, "0.0.1").returncode == 2  # not newer
    dry = _release(clone, new, "--dry-run")
    assert dry.returncode == 0 and "would set" in dry.stdout
    assert _git(clone, "status", "--porcelain") == ""
    done = _release(clone, new, "--date", "2030-01-02")
    assert done.returncode == 0, done.stderr
    assert f'__version__ = "{new}"' in (clone / "dtype_lint/__init__.py").read_text(encoding="utf-8")
    released = changelog.read_text(encoding="utf-8")
    assert f"## Unreleased\n\n## {new} (2030-01-02)\n" in released
    assert re.findall(r"^## \[?(\d+\.\d+\.\d+)", released, re.M)[:2] == [new, __version__]
    assert _git(clone, "tag", "--list", f"v{new}").strip() == f"v{new}"
    assert _git(clone, "log", "-1", "--format=%s").strip() == f"Release {new}"
    assert _git(clone, "status", "--porcelain") == ""
    # Again: the tag exists, and the Unreleased section is empty now.
    assert _release(clone, new).returncode == 2
    again = _release(clone, f"{major}.{minor + 2}.0")
    assert again.returncode == 2 and "lists no change" in again.stderr


# --- the hooks as users run them ------------------------------------------------------------------

SAMPLE = {
    "pyproject.toml": '[tool.dtype-lint]\nhelper = "pkg.dtypes:get_layer_input_dtype"\n',
    "pkg/__init__.py": "",
    "pkg/attn.py": (
        "import torch\n"
        "from vllm.model_executor.layers.linear import ColumnParallelLinear\n\n\n"
        "class Attn(torch.nn.Module):\n"
        "    def __init__(self, kv_b_proj: ColumnParallelLinear):\n"
        "        super().__init__()\n"
        "        self.kv_b_proj = kv_b_proj\n\n"
        "    def forward(self, x):\n"
        "        x = x.to(self.kv_b_proj.weight.dtype)\n"
        "        return self.kv_b_proj(x)\n"
    ),
    "pkg/clean.py": "def f(x):\n    return x + 1\n",
}


def _git(cwd: Path, *args: str) -> str:
    env = {**os.environ, "GIT_CONFIG_GLOBAL": os.devnull, "GIT_CONFIG_NOSYSTEM": "1"}
    return subprocess.run(["git", "-c", "user.name=t", "-c", "user.email=t@example.com", *args], cwd=cwd,
                          env=env, capture_output=True, text=True, check=True).stdout


def _has_tag(tag: str) -> bool:
    proc = subprocess.run(["git", "rev-parse", "-q", "--verify", f"refs/tags/{tag}"], cwd=ROOT,
                          capture_output=True, text=True)
    return proc.returncode == 0


def _pre_commit() -> list[str]:
    exe = Path(sys.executable).with_name("pre-commit")
    if exe.exists():
        return [str(exe)]
    pytest.fail("pre-commit is missing: it is in the `test` extra (pip install -e '.[test]')", pytrace=False)


@pytest.mark.network
@pytest.mark.slow
@pytest.mark.full("tests/test_pre_commit.py runs both hooks on a project in CI")
def test_pre_commit_hooks_at_the_release(tmp_path: Path):
    if shutil.which("git") is None or not (ROOT / ".git").exists():
        pytest.fail("needs git and this repository's checkout", pytrace=False)
    project = tmp_path / "sample"
    for rel, text in SAMPLE.items():
        (project / rel).parent.mkdir(parents=True, exist_ok=True)
        (project / rel).write_text(text, encoding="utf-8")
    _git(project, "init", "-q")
    _git(project, "add", "-A")
    _git(project, "commit", "-qm", "sample")
    # What users pin: a commit of main (this checkout's HEAD stands for it).
    ref = ["--ref", subprocess.run(["git", "rev-parse", "HEAD"], cwd=ROOT, capture_output=True, text=True,
                                   check=True).stdout.strip()]
    env = {k: v for k, v in os.environ.items() if k not in ("PRE_COMMIT", "CI", "VIRTUAL_ENV")}
    env.update(PRE_COMMIT_HOME=str(tmp_path / "pre-commit-home"), GIT_CONFIG_GLOBAL=os.devnull,
               GIT_CONFIG_NOSYSTEM="1", NO_COLOR="1")

    def try_repo(*hook: str) -> subprocess.CompletedProcess:
        return subprocess.run([*_pre_commit(), "try-repo", str(ROOT), *hook, *ref, "--all-files", "--color", "never"],
                              cwd=project, env=env, capture_output=True, text=True, timeout=300)

    # Both hooks, in the order the repository declares them: the check fails on the finding,
    # then the fix hook rewrites the file and creates the helper (pre-commit: "files were modified").
    both = try_repo()
    out = both.stdout + both.stderr
    assert both.returncode == 1, out
    assert re.search(r"^dtype-lint\.+Failed$", out, re.M), out
    assert "pkg/attn.py:11:13: DTL001 [*]" in out
    assert re.search(r"^dtype-lint \(fix\)\.+Failed$", out, re.M) and "files were modified by this hook" in out
    attn = (project / "pkg/attn.py").read_text(encoding="utf-8")
    assert "from pkg.dtypes import get_layer_input_dtype\n" in attn
    assert "kv_b_proj_input_dtype = get_layer_input_dtype(self.kv_b_proj, True)" in attn
    assert (project / "pkg/dtypes.py").exists()
    assert (project / "pkg/clean.py").read_text(encoding="utf-8") == SAMPLE["pkg/clean.py"]
    # The fixed tree passes the check hook.
    _git(project, "add", "-A")
    again = try_repo("dtype-lint")
    assert again.returncode == 0, again.stdout + again.stderr
    assert re.search(r"^dtype-lint\.+Passed$", again.stdout, re.M), again.stdout
