"""`migrate --series`: the migration as patches a maintainer can review and `git am`.

On copies of our fixture projects: the series applies in order with `git am` on a checkout of
the tree, every commit compiles on its own (apply the first k patches, compile every file), and
the tree after the last patch equals the in-place migration byte for byte, for every grouping.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from cli_runner import dtl

from dtype_lint.migrate import series

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"
def git(cwd: Path, *args: str) -> str:
    return series.git(list(args), cwd)


def checkout(src: Path, dest: Path) -> Path:
    return series.checkout(src, dest)


def tree_bytes(root: Path) -> dict[str, bytes]:
    return {p.relative_to(root).as_posix(): p.read_bytes() for p in sorted(root.rglob("*"))
            if p.is_file() and ".git" not in p.parts and ".dtype_lint_cache" not in p.parts}


def compile_all(root: Path) -> None:
    for path in root.rglob("*.py"):
        compile(path.read_bytes(), str(path), "exec")


@pytest.fixture(scope="module")
def in_place(tmp_path_factory) -> dict[str, dict[str, bytes]]:
    """The in-place migration of each fixture project, as file bytes."""
    out = {}
    for name in ("project", "shapes"):
        root = checkout(FIXTURES / name, tmp_path_factory.mktemp(f"inplace-{name}") / name)
        proc = dtl(root, "migrate", ".", "--report", "../report.md")
        assert proc.returncode in (0, 1), proc.stderr
        out[name] = tree_bytes(root)
    return out


@pytest.mark.parametrize("name", ["project", "shapes"])
@pytest.mark.parametrize("group_by", ["file", "directory", "rule"])
def test_series_applies_compiles_and_equals_in_place(tmp_path: Path, in_place, name: str, group_by: str):
    root = checkout(FIXTURES / name, tmp_path / name)
    before = tree_bytes(root)
    series = tmp_path / "series"
    proc = dtl(root, "migrate", ".", "--series", str(series), "--group-by", group_by, "--report", "../report.md")
    assert proc.returncode == 0, proc.stderr
    assert tree_bytes(root) == before, "--series must leave the tree untouched"
    patches = sorted(series.glob("*.patch"))
    assert patches
    target = checkout(FIXTURES / name, tmp_path / "target")
    for k, patch in enumerate(patches, 1):
        git(target, "am", "-q", str(patch))
        compile_all(target)
        assert len(git(target, "log", "--oneline").splitlines()) == k + 1
    assert tree_bytes(target) == in_place[name]


def test_commit_messages_say_what_why_how_and_what_verified(tmp_path: Path):
    root = checkout(FIXTURES / "shapes", tmp_path / "shapes")
    series = tmp_path / "series"
    assert dtl(root, "migrate", ".", "--series", str(series), "--report", "../r.md").returncode == 0
    first, *rest = sorted(series.glob("*.patch"))
    head = first.read_text(encoding="utf-8")
    assert "Subject: [PATCH 1/" in head and "get_layer_input_dtype" in head and "new file mode" in head
    for patch in rest:
        text = patch.read_text(encoding="utf-8")
        message = text.split("\n---\n", 1)[0]
        for section in ("Sites:", "Rewrite:", "Verified:"):
            assert section in message, (patch.name, section)
        assert "Marlin FP8 stores `torch.int32`" in message.replace("\n", " ")
        prose = [line for line in message.splitlines()[5:] if not line.startswith("    ")]
        assert max(len(line) for line in prose) <= 80, "prose is wrapped; only proof tables may be wider"
        # The executable proof: the reference layers run the old cast and the new one.
        assert "unsupported `a` scalar_type" in message and "ok (bfloat16 out)" in message


def _section(report: str, title: str) -> str:
    return report.split(f"## {title}\n", 1)[1].split("\n## ", 1)[0]


def test_series_report_counts_what_the_patches_fix(tmp_path: Path):
    """The report of a series run says what the patches fix and leave, as the in-place run's does."""
    reports = {}
    for mode in ("in-place", "series"):
        root = checkout(FIXTURES / "shapes", tmp_path / mode / "shapes")
        extra = ["--series", str(tmp_path / mode / "patches")] if mode == "series" else []
        proc = dtl(root, "migrate", ".", *extra, "--report", "../report.md")
        assert proc.returncode in (0, 1), proc.stderr
        reports[mode] = (tmp_path / mode / "report.md").read_text()
    counts = {m: re.search(r"- Sites fixed: (\d+) in (\d+) files", r).groups() for m, r in reports.items()}
    assert counts["series"] == counts["in-place"] and int(counts["series"][0]) > 0
    assert "(by the patches; the tree itself is unchanged)" in reports["series"]
    assert _section(reports["series"], "Fixed") == _section(reports["in-place"], "Fixed")
    assert _section(reports["series"], "Left for a human") == _section(reports["in-place"], "Left for a human")
    assert "added by the series' first patch" in reports["series"]
