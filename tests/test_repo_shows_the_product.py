"""The repository shows the product (issue #35): the README's first screen says what dtype-lint is,
how to install and run it and shows a finding exactly as the tool prints it; docs/ holds
documentation only (generated patch series are test goldens, triage data is the accuracy
benchmark); and every relative link of the documentation points at a file that exists."""

from __future__ import annotations

import re
from pathlib import Path

from cli_runner import dtl

ROOT = Path(__file__).resolve().parents[1]
DOCS_BUDGET = 300 * 1024
# Markdown a reader follows: the product's and the contributors' documentation, the benchmarks'.
LINKED = ("README.md", "CONTRIBUTING.md", "CHANGELOG.md", "docs", "benchmarks", "tests/goldens")
_LINK = re.compile(r"\]\(([^)\s]+)\)")


def _first_screen() -> list[str]:
    return (ROOT / "README.md").read_text(encoding="utf-8").splitlines()[:30]


def test_the_first_screen_shows_a_finding_as_the_tool_prints_it():
    screen = _first_screen()
    start = screen.index("```text") + 1
    shown = "\n".join(screen[start: screen.index("```", start)])
    run = dtl(ROOT, "check", "fixtures/project", "--no-cache")  # in this process: what it prints is the same
    assert run.returncode == 1, run.stderr
    assert shown and shown in run.stdout, "README's example finding is not what `dtype-lint check fixtures/project` prints"


def test_the_first_screen_says_what_it_is_and_holds_no_test_tier_material():
    screen = "\n".join(_first_screen())
    assert "linter with autofix" in screen and "x.to(layer.weight.dtype)" in screen
    for contributor_words in ("SLOW_MODULES", "DTL_FULL", "not slow and not network", "xdist"):
        assert contributor_words not in screen


def test_docs_hold_documentation_only_within_budget():
    files = [path for path in (ROOT / "docs").rglob("*") if path.is_file()]
    assert sum(path.stat().st_size for path in files) <= DOCS_BUDGET
    assert {path.suffix for path in files} == {".md"}, "docs/ holds Markdown pages only (data lives in tests/ or benchmarks/)"


def _markdown() -> list[Path]:
    found: list[Path] = []
    for name in LINKED:
        path = ROOT / name
        found.extend([path] if path.is_file() else sorted(path.rglob("*.md")))
    return found


def test_every_relative_link_points_at_a_file_that_exists():
    broken = []
    for page in _markdown():
        text = page.read_text(encoding="utf-8")
        text = re.sub(r"```.*?```", "", text, flags=re.S)  # code blocks are not links
        for target in _LINK.findall(text):
            if re.match(r"[a-z]+:|#", target):
                continue
            path = target.split("#", 1)[0]
            if path and not (page.parent / path).exists():
                broken.append(f"{page.relative_to(ROOT)}: {target}")
    assert not broken, "\n".join(broken)
