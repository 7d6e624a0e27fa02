"""`migrate --series`: the migration as patches a maintainer can review and `git am`.

On copies of our fixture projects: the series applies in order with `git am` on a checkout of
the tree, every commit compiles on its own (apply the first k patches, compile every file), and
the tree after the last patch equals the in-place migration byte for byte, for every grouping,
plus the regression tests the series adds. `--series DIR` writes only into DIR, and exits as the
in-place migration does for the same change.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from cli_runner import dtl

from dtype_lint.migrate import series

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"
AUTHOR = "Ann Maintainer <ann@example.org>"


def git(cwd: Path, *args: str) -> str:
    return series.git(list(args), cwd)


def checkout(src: Path, dest: Path) -> Path:
    return series.checkout(src, dest)


def tree_bytes(root: Path, leave_out: tuple[str, ...] = ()) -> dict[str, bytes]:
    """Every file's bytes; `leave_out`: paths not compared (the tests a series adds)."""
    return {p.relative_to(root).as_posix(): p.read_bytes() for p in sorted(root.rglob("*"))
            if p.is_file() and ".git" not in p.parts and ".dtype_lint_cache" not in p.parts
            and p.relative_to(root).as_posix() not in leave_out}


def added_tests(patches) -> tuple[str, ...]:
    """The test files the patches create under tests/ (what the in-place migration does not write)."""
    added = []
    for patch in patches:
        for line in Path(patch).read_text(encoding="utf-8").splitlines():
            if line.startswith("+++ b/tests/"):
                added.append(line.removeprefix("+++ b/"))
    return tuple(added)


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
    proc = dtl(root, "migrate", ".", "--series", str(series), "--group-by", group_by, "--author", AUTHOR)
    assert proc.returncode in (0, 1), proc.stderr
    assert tree_bytes(root) == before, "--series must leave the tree untouched"
    patches = sorted(series.glob("*.patch"))
    assert patches
    target = checkout(FIXTURES / name, tmp_path / "target")
    for k, patch in enumerate(patches, 1):
        git(target, "am", "-q", str(patch))
        compile_all(target)
        assert len(git(target, "log", "--oneline").splitlines()) == k + 1
    tests = added_tests(patches)
    # shapes gets the shared helper, and its patch adds the helper's unit test; project routes to a
    # helper it already has.
    assert bool(tests) == (name == "shapes"), tests
    assert tree_bytes(target, tests) == in_place[name]


def test_commit_messages_say_what_why_how_and_what_verified(tmp_path: Path):
    root = checkout(FIXTURES / "shapes", tmp_path / "shapes")
    series = tmp_path / "series"
    assert dtl(root, "migrate", ".", "--series", str(series), "--author", AUTHOR).returncode in (0, 1)
    first, *rest = sorted(series.glob("*.patch"))
    head = first.read_text(encoding="utf-8")
    assert "Subject: [PATCH 1/" in head and "get_layer_input_dtype" in head and "new file mode" in head
    assert "+++ b/tests/test_get_layer_input_dtype.py" in head and "@pytest.mark.parametrize" in head
    assert "Before: 0/16 pass" in head and "after: 16/16 pass" in head
    for patch in [first, *rest]:
        text = patch.read_text(encoding="utf-8")
        message = text.split("\n---\n", 1)[0]
        assert f"From: {AUTHOR}" in message
        assert not re.search(r"DTL\d{3}", message) and "dtype-lint's" not in message, patch.name
        # The generic convention: the Purpose / Test Plan / Test Result template, no sign-off.
        for section in ("Purpose:", "Test Plan:", "Test Result:"):
            assert section in message, (patch.name, section)
        assert "Signed-off-by:" not in message
    for patch in rest:
        message = patch.read_text(encoding="utf-8").split("\n---\n", 1)[0]
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
        extra = ["--series", str(tmp_path / mode / "patches"), "--author", AUTHOR] if mode == "series" else []
        proc = dtl(root, "migrate", ".", *extra, "--report", "../report.md")
        assert proc.returncode in (0, 1), proc.stderr
        reports[mode] = (tmp_path / mode / "report.md").read_text()
    counts = {m: re.search(r"- Sites fixed: (\d+) in (\d+) files", r).groups() for m, r in reports.items()}
    assert counts["series"] == counts["in-place"] and int(counts["series"][0]) > 0
    assert "(by the patches; the tree itself is unchanged)" in reports["series"]
    assert _section(reports["series"], "Fixed") == _section(reports["in-place"], "Fixed")
    assert _section(reports["series"], "Left for a human") == _section(reports["in-place"], "Left for a human")
    assert "added by the series' first patch" in reports["series"]


def test_series_writes_only_into_dir_and_exits_as_in_place(tmp_path: Path):
    """No report in the tree unless asked; the exit code is the in-place one for the same change
    (1: sites are left); the counts come from a fresh check of the migrated result."""
    codes, left = {}, {}
    for mode in ("in-place", "series"):
        root = checkout(FIXTURES / "shapes", tmp_path / mode / "shapes")
        outside = set((tmp_path / mode).iterdir())
        before = tree_bytes(root)
        if mode == "series":
            proc = dtl(root, "migrate", ".", "--series", "../patches", "--author", AUTHOR)
            assert tree_bytes(root) == before, "nothing is written into the tree"
            assert set((tmp_path / mode).iterdir()) - outside == {tmp_path / mode / "patches"}
            names = {p.name for p in (tmp_path / mode / "patches").iterdir()}
            assert {"PR.md", "README.md"} <= names
            readme = (tmp_path / mode / "patches" / "README.md").read_text()
            left[mode] = int(re.search(r"reports (\d+) finding", readme).group(1))
        else:
            proc = dtl(root, "migrate", ".", "--report", "../report.md")
            report = (tmp_path / mode / "report.md").read_text()
            left[mode] = int(re.search(r"- Sites left: (\d+)", report).group(1))
            recheck = dtl(root, "check", ".", "--no-cache", "--output-format", "json")
            assert left[mode] == len(json.loads(recheck.stdout)["findings"])
        codes[mode] = proc.returncode
    assert codes["series"] == codes["in-place"] == 1
    assert left["series"] == left["in-place"] > 0


def test_series_without_an_author_is_an_error(tmp_path: Path):
    root = checkout(FIXTURES / "shapes", tmp_path / "shapes")
    env = {"GIT_CONFIG_GLOBAL": "/dev/null", "GIT_CONFIG_NOSYSTEM": "1", "HOME": str(tmp_path)}
    proc = dtl(root, "migrate", ".", "--series", "../patches", env=env)
    assert proc.returncode == 2
    assert "--author" in proc.stderr and "Traceback" not in proc.stderr
    assert not (tmp_path / "patches").exists()


def test_a_series_of_a_package_named_at_a_tree_without_git_applies_at_its_root(tmp_path: Path):
    """`migrate vllm --series OUT` at a release's root (no git yet, no pyproject.toml): 0.3 wrote
    `a/attention/mla.py` (relative to the package), so `git am` at the root, once it was a
    repository, put patch 0001 into a stray top-level `attention/` and failed on 0002. The
    paths are the root's, and the series applies there, to the package's files."""
    import shutil

    root = tmp_path / "release"
    shutil.copytree(FIXTURES / "project" / "minillm", root / "minillm")
    proc = dtl(root, "migrate", "minillm", "--series", "../patches", "--author", AUTHOR)
    assert proc.returncode in (0, 1), proc.stderr
    patches = sorted((tmp_path / "patches").glob("*.patch"))
    paths = {line.split()[2] for p in patches for line in p.read_text().splitlines() if line.startswith("diff --git")}
    assert paths and all(p.startswith("a/minillm/") or p.startswith("a/tests/") for p in paths), paths
    git(root, "init", "-q")
    git(root, "add", "-A")
    git(root, "-c", "user.name=Ann", "-c", "user.email=ann@example.org", "commit", "-qm", "release")
    before = {p.relative_to(root).as_posix() for p in root.rglob("*.py")}
    git(root, "-c", "user.name=Ann", "-c", "user.email=ann@example.org", "am", *map(str, patches))
    after = {p.relative_to(root).as_posix() for p in root.rglob("*.py")}
    assert not [p for p in after - before if not p.startswith(("minillm/", "tests/"))], after - before
    assert "get_layer_input_dtype(" in (root / "minillm/attention/mla.py").read_text()
