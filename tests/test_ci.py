"""The CI entry points as far as this machine can run them: the GitHub Action's YAML and its steps
(run with bash exactly as action.yml spells them, on a git repository with a fake pull-request
event), and the GitLab job documented in docs/ci.md (its script lines run on a sample project).

The install step pip-installs this repository into a new virtualenv (dependencies come from the
package index), hence `network` on the test that runs it; the others use the dtype-lint this test
run already has.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from conftest import builds_the_checkout
from tiny_project import ATTN

from dtype_lint import __version__

ROOT = Path(__file__).resolve().parents[1]
ACTION = yaml.safe_load((ROOT / "action.yml").read_text(encoding="utf-8"))
VENV = Path(sys.executable).parent.parent  # this test run's virtualenv: bin/python, bin/dtype-lint


# --- action.yml ----------------------------------------------------------------------------------


def test_action_yaml_is_a_complete_composite_action():
    assert {"name", "description", "inputs", "outputs", "runs"} <= ACTION.keys()
    assert ACTION["runs"]["using"] == "composite"
    steps = ACTION["runs"]["steps"]
    assert [s["name"] for s in steps] == ["Install dtype-lint", "Run dtype-lint"]
    for step in steps:
        assert step["shell"] == "bash" and step["run"].strip()
    assert set(ACTION["inputs"]) == {"paths", "args", "fail-on-findings", "sarif-file", "changed-only", "python"}
    for name, spec in ACTION["inputs"].items():
        assert spec["description"] and "default" in spec and spec["required"] is False, name
    # Every input reaches the steps, and every output is one the check step writes.
    env = {k: v for s in steps for k, v in s.get("env", {}).items()}
    used = set(re.findall(r"\$\{\{ inputs\.([\w-]+) \}\}", json.dumps(env)))
    assert used == set(ACTION["inputs"])
    check = next(s for s in steps if s.get("id") == "check")
    for name, out in ACTION["outputs"].items():
        assert out["value"] == f"${{{{ steps.check.outputs.{name} }}}}" and out["description"]
        assert f"{name}=" in (ROOT / "scripts" / "github_action.py").read_text(encoding="utf-8")
    # The script reads exactly the INPUT_ variables the step sets (as underscores: bash-safe).
    script = (ROOT / "scripts" / "github_action.py").read_text(encoding="utf-8")
    for key in check["env"]:
        if key.startswith("INPUT_"):
            assert re.fullmatch(r"INPUT_[A-Z_]+", key), key
            assert f'get("{key[6:].lower().replace("_", "-")}"' in script, key
    # It installs the action's own checkout, i.e. the version the workflow pinned.
    install = steps[0]
    assert install["env"]["ACTION_PATH"] == "${{ github.action_path }}"
    assert '-m pip install --quiet --disable-pip-version-check "$ACTION_PATH"' in install["run"]


def _substitute(value: str, inputs: dict[str, str]) -> str:
    def one(m: re.Match) -> str:
        expr = m.group(1)
        if expr == "github.action_path":
            return str(ROOT)
        if expr.startswith("inputs."):
            name = expr[len("inputs."):]
            return inputs.get(name, ACTION["inputs"][name].get("default", ""))
        raise AssertionError(f"unknown expression {expr}")

    return re.sub(r"\$\{\{ ([\w.-]+) \}\}", one, str(value))


def run_step(name: str, cwd: Path, env: dict[str, str], inputs: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    """One step of action.yml, run as the runner runs it: its `run` text under bash, its `env`."""
    step = next(s for s in ACTION["runs"]["steps"] if s["name"] == name)
    step_env = {k: _substitute(v, inputs or {}) for k, v in step.get("env", {}).items()}
    full = {**{k: v for k, v in os.environ.items() if k not in ("CI", "VIRTUAL_ENV", "PRE_COMMIT")},
            **env, **step_env, "NO_COLOR": "1"}
    return subprocess.run(["bash", "-e", "-c", step["run"]], cwd=cwd, env=full, capture_output=True, text=True,
                          timeout=600)


def _git(cwd: Path, *args: str) -> str:
    env = {**os.environ, "GIT_CONFIG_GLOBAL": os.devnull, "GIT_CONFIG_NOSYSTEM": "1"}
    return subprocess.run(["git", "-c", "user.name=t", "-c", "user.email=t@example.com", *args], cwd=cwd,
                          env=env, capture_output=True, text=True, check=True).stdout.strip()


@pytest.fixture
def pr_repo(tmp_path: Path) -> tuple[Path, str]:
    """A repository whose base has one finding (old.py) and whose pull request adds another (new.py)
    and edits a README; returns (checkout, base commit)."""
    repo = tmp_path / "repo"
    (repo / "pkg").mkdir(parents=True)
    (repo / "pyproject.toml").write_text('[tool.dtype-lint]\nhelper = "pkg.dtypes:get_layer_input_dtype"\n')
    (repo / "pkg/__init__.py").write_text("")
    (repo / "pkg/old.py").write_text(ATTN)
    (repo / "README.md").write_text("# sample\n")
    _git(repo, "init", "-q")
    _git(repo, "add", "-A")
    _git(repo, "commit", "-qm", "base")
    base = _git(repo, "rev-parse", "HEAD")
    (repo / "pkg/new.py").write_text(ATTN.replace("class Attn", "class Attn2"))
    (repo / "README.md").write_text("# sample, changed\n")
    _git(repo, "add", "-A")
    _git(repo, "commit", "-qm", "pull request")
    return repo, base


def _runner_env(tmp: Path, event: dict) -> dict[str, str]:
    (tmp / "event.json").write_text(json.dumps(event))
    for name in ("output", "summary", "env"):
        (tmp / name).write_text("")
    return {"GITHUB_EVENT_PATH": str(tmp / "event.json"), "GITHUB_OUTPUT": str(tmp / "output"),
            "GITHUB_STEP_SUMMARY": str(tmp / "summary"), "GITHUB_ENV": str(tmp / "env"),
            "RUNNER_TEMP": str(tmp), "DTYPE_LINT_VENV": str(VENV)}


def _outputs(tmp: Path) -> dict[str, str]:
    return dict(line.split("=", 1) for line in (tmp / "output").read_text().splitlines())


def test_pull_request_annotates_only_its_changed_files(pr_repo, tmp_path: Path):
    repo, base = pr_repo
    env = _runner_env(tmp_path, {"pull_request": {"base": {"sha": base}, "number": 7}})
    proc = run_step("Run dtype-lint", repo, env, {"sarif-file": "dtype-lint.sarif"})
    assert proc.returncode == 1, proc.stdout + proc.stderr
    annotations = [ln for ln in proc.stdout.splitlines() if ln.startswith("::error ")]
    assert len(annotations) == 1 and annotations[0].startswith("::error file=pkg/new.py,line=11,col=13,")
    assert _outputs(tmp_path) == {"exit-code": "1", "findings": "1", "files": "1"}
    summary = (tmp_path / "summary").read_text()
    assert "Checked 1 changed files." in summary and "pkg/new.py:11:13: DTL001" in summary
    # SARIF covers the whole tree: code scanning would close the alert in old.py otherwise.
    sarif = json.loads((repo / "dtype-lint.sarif").read_text())
    uris = {r["locations"][0]["physicalLocation"]["artifactLocation"]["uri"] for r in sarif["runs"][0]["results"]}
    assert uris == {"pkg/old.py", "pkg/new.py"}
    assert sarif["runs"][0]["tool"]["driver"]["version"] == __version__
    # fail-on-findings: false reports the same and passes.
    env = _runner_env(tmp_path, {"pull_request": {"base": {"sha": base}}})
    proc = run_step("Run dtype-lint", repo, env, {"fail-on-findings": "false"})
    assert proc.returncode == 0 and "::error file=pkg/new.py" in proc.stdout
    assert _outputs(tmp_path)["exit-code"] == "1"


def test_push_checks_the_whole_tree(pr_repo, tmp_path: Path):
    repo, _ = pr_repo
    env = _runner_env(tmp_path, {"after": "x", "ref": "refs/heads/main"})
    proc = run_step("Run dtype-lint", repo, env)
    assert proc.returncode == 1
    files = re.findall(r"^::error file=([^,]+),", proc.stdout, re.M)
    assert files == ["pkg/new.py", "pkg/old.py"]
    assert _outputs(tmp_path) == {"exit-code": "1", "findings": "2", "files": "3"}


def test_a_pull_request_without_python_changes_passes(pr_repo, tmp_path: Path):
    repo, _ = pr_repo
    head = _git(repo, "rev-parse", "HEAD")
    (repo / "README.md").write_text("# again\n")
    _git(repo, "commit", "-qam", "docs only")
    env = _runner_env(tmp_path, {"pull_request": {"base": {"sha": head}}})
    proc = run_step("Run dtype-lint", repo, env)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "changes no Python file" in proc.stdout and "::error" not in proc.stdout
    assert _outputs(tmp_path) == {"exit-code": "0", "findings": "0", "files": "0"}


def test_paths_and_args_inputs(pr_repo, tmp_path: Path):
    repo, base = pr_repo
    env = _runner_env(tmp_path, {"pull_request": {"base": {"sha": base}}})
    # An unknown base (a force-pushed branch) falls back to the whole of `paths`, with a warning.
    env_bad = _runner_env(tmp_path, {"pull_request": {"base": {"sha": "0" * 40}}})
    proc = run_step("Run dtype-lint", repo, env_bad, {"paths": "pkg/old.py"})
    assert proc.returncode == 1 and "::warning title=dtype-lint::cannot list the files changed" in proc.stdout
    assert re.findall(r"^::error file=([^,]+),", proc.stdout, re.M) == ["pkg/old.py"]
    proc = run_step("Run dtype-lint", repo, env, {"args": "--ignore DTL001 --select DTL"})
    assert proc.returncode == 0, proc.stdout + proc.stderr
    # A configuration error fails the step whatever fail-on-findings says.
    proc = run_step("Run dtype-lint", repo, env, {"args": "--select E501", "fail-on-findings": "false"})
    assert proc.returncode == 2 and "not a rule code" in proc.stderr


@builds_the_checkout
@pytest.mark.network
@pytest.mark.slow
def test_install_step_installs_the_actions_own_version(tmp_path: Path, pr_repo):
    repo, base = pr_repo
    env = _runner_env(tmp_path, {"pull_request": {"base": {"sha": base}}})
    env.pop("DTYPE_LINT_VENV")
    proc = run_step("Install dtype-lint", repo, env, {"python": sys.executable})
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert f"dtype-lint {__version__}" in proc.stdout
    venv = tmp_path / "dtype-lint-venv"
    assert (tmp_path / "env").read_text() == f"DTYPE_LINT_VENV={venv}\n"
    proc = run_step("Run dtype-lint", repo, {**env, "DTYPE_LINT_VENV": str(venv)})
    assert proc.returncode == 1 and "::error file=pkg/new.py" in proc.stdout


# --- the GitLab job in docs/ci.md ----------------------------------------------------------------


def _gitlab_job() -> dict:
    doc = (ROOT / "docs" / "ci.md").read_text(encoding="utf-8")
    section = doc.split("## GitLab CI", 1)[1]
    block = section.split("```yaml\n", 1)[1].split("```", 1)[0]
    return yaml.safe_load(block)["dtype-lint"]


def test_gitlab_job_is_valid_and_uses_the_code_quality_report():
    job = _gitlab_job()
    assert job["stage"] == "test" and job["image"].startswith("python:3.")
    report = job["artifacts"]["reports"]["codequality"]
    assert job["artifacts"]["when"] == "always"
    assert any(f"--output-format gitlab -o {report}" in line for line in job["script"])
    # Pinned to a commit of main (tags are not published): docs/releasing.md.
    assert any("@<commit>" in line for line in job["script"] if "pip install" in line)


def test_gitlab_job_script_runs(pr_repo, tmp_path: Path):
    """The job's script lines after the install, run as GitLab's shell runs them (one bash, stop at
    the first failing line) with this test run's dtype-lint on PATH."""
    repo, _ = pr_repo
    job = _gitlab_job()
    lines = [line for line in job["script"] if not re.search(r"apt-get|pip install", line)]
    env = {**{k: v for k, v in os.environ.items() if k not in ("CI", "VIRTUAL_ENV")},
           "PATH": f"{VENV / 'bin'}{os.pathsep}{os.environ['PATH']}", "NO_COLOR": "1"}
    proc = subprocess.run(["bash", "-e", "-c", "\n".join(lines)], cwd=repo, env=env, capture_output=True, text=True)
    assert proc.returncode == 1, proc.stdout + proc.stderr  # findings remain: the job fails
    issues = json.loads((repo / job["artifacts"]["reports"]["codequality"]).read_text())
    assert sorted(i["location"]["path"] for i in issues) == ["pkg/new.py", "pkg/old.py"]
    assert all({"description", "check_name", "fingerprint", "severity", "location"} <= i.keys() for i in issues)
    assert "pkg/old.py:11:13: DTL001" in proc.stdout  # the readable log
