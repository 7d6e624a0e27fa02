"""Docs stay true: generated rule pages match their rules, and the README's commands are the ones
CI runs."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

from dtype_lint.cli import build_parser, rule_doc
from dtype_lint.rules import ALL_RULES

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.parametrize("rule", ALL_RULES, ids=lambda r: r.code)
def test_rule_page_is_generated_from_the_rule(rule):
    page = (ROOT / "docs" / "rules" / f"{rule.code}.md").read_text(encoding="utf-8")
    assert page == rule_doc(rule) + "\n", f"regenerate: dtype-lint rule {rule.code} > docs/rules/{rule.code}.md"


@pytest.mark.parametrize("rule", ALL_RULES, ids=lambda r: r.code)
def test_rule_doc_has_the_ruff_sections(rule):
    doc = rule_doc(rule)
    for section in ("## What it does", "## Why is this bad?", "## Example", "## Use instead", "## Fix safety"):
        assert section in doc, section


def test_readme_first_lines_are_the_two_commands_and_ci_runs_the_second():
    lines = (ROOT / "README.md").read_text(encoding="utf-8").splitlines()
    block = lines[lines.index("```sh") + 1 : lines.index("```sh") + 3]
    assert block[0].endswith("dtype-lint check fixtures/project")
    assert "pytest" in block[1]
    ci = (ROOT / ".ci" / "run").read_text(encoding="utf-8")
    assert block[1] in ci


def test_readme_mentions_every_check_flag():
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    check = build_parser()._subparsers._group_actions[0].choices["check"]
    flags = {o for a in check._actions for o in a.option_strings if o.startswith("--")} - {"--help"}
    missing = sorted(f for f in flags if f not in readme)
    assert not missing, f"README does not mention {missing}"


def test_help_runs_and_names_exit_codes():
    out = subprocess.run([sys.executable, "-m", "dtype_lint", "--help"], capture_output=True, text=True)
    assert out.returncode == 0
    assert re.search(r"0 clean, 1 findings", out.stdout)


def test_the_repo_lints_clean_with_its_own_configuration():
    out = subprocess.run([sys.executable, "-m", "dtype_lint", "check", ".", "--no-cache", "--output-format", "concise"],
                         cwd=ROOT, capture_output=True, text=True)
    assert out.returncode == 0, out.stdout + out.stderr


def test_readme_fix_column_is_generated_from_each_rules_fix_availability():
    sys.path.insert(0, str(ROOT / "scripts"))
    try:
        import readme_rules
    finally:
        sys.path.pop(0)
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    assert readme_rules.render(text) == text, "README.md's fix column is stale: run python scripts/readme_rules.py"
    for rule in ALL_RULES:
        assert f"[{rule.code}](docs/rules/{rule.code}.md)" in text and f"| {rule.fix_column()} |" in text


@pytest.mark.parametrize("rule", ALL_RULES, ids=lambda r: r.code)
def test_fix_availability_matches_the_rules_examples(rule):
    from dtype_lint.rule import FixAvailability

    fixed = [example.expected_replacement is not None for example in rule.INVALID]
    if rule.fix_availability is FixAvailability.NONE:
        assert not any(fixed), "a rule declaring no fix has an example with a fixed text"
    elif rule.fix_availability is FixAvailability.ALWAYS:
        assert fixed and all(fixed)
    else:
        assert any(fixed), "a rule whose findings sometimes carry a fix shows one in its examples"


def test_the_repos_pre_commit_hooks_run_ruff_and_dtype_lint_from_the_test_extra():
    import yaml

    from dtype_lint.core.config import tomllib

    hooks = {h["id"]: h for repo in yaml.safe_load((ROOT / ".pre-commit-config.yaml").read_text())["repos"]
             for h in repo["hooks"]}
    assert hooks["ruff"]["entry"].startswith("ruff check") and hooks["dtype-lint"]["entry"].startswith("dtype-lint check")
    project = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    assert any(dep.startswith("ruff") for dep in project["project"]["optional-dependencies"]["test"])
    lint = project["tool"]["ruff"]["lint"]
    assert {"E", "F", "B", "I"} <= set(lint["select"])


def test_the_slow_tier_is_marked_by_module_in_conftest():
    from conftest import SLOW_MODULES, slow_reason

    assert slow_reason("tests/test_mutate.py::test_anything") == SLOW_MODULES["test_mutate.py"]
    assert slow_reason("kernels/test_cuda_emulated.py::test_x[0]")
    assert slow_reason("tests/test_rule_examples.py::test_valid") is None
    assert all((ROOT / "tests" / module).is_file() for module in SLOW_MODULES), "a slow module was renamed"
    assert '-m "not slow and not network"' in (ROOT / "docs" / "testing.md").read_text(encoding="utf-8")
