"""`dtype-lint clean` removes what dtype-lint keeps in the project's cache folder and nothing
else; a run that starts a new cache folder (an upgrade, other settings) removes those of other
versions or settings that no run has written to for STALE_DAYS days (run/cache_clean.py)."""

from __future__ import annotations

import contextlib
import io
import os
import time
from pathlib import Path

from tiny_project import tiny_project

from dtype_lint.cli import main
from dtype_lint.run import cache_clean
from dtype_lint.run.replay_index import plain_check


def _cli(*argv: str, cwd: Path) -> tuple[int, str]:
    err = io.StringIO()
    here = os.getcwd()
    os.chdir(cwd)
    try:
        with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
            code = main(list(argv))
    finally:
        os.chdir(here)
    return code, err.getvalue()


def _cached_project(tmp_path: Path) -> Path:
    root = tiny_project(tmp_path / "p")
    assert _cli("check", ".", "--exit-zero", cwd=root)[0] == 0
    assert any(p.name.startswith("v2-") for p in (root / ".dtype_lint_cache").iterdir())
    return root


def test_clean_removes_the_cache_folder_and_what_it_held(tmp_path: Path):
    root = _cached_project(tmp_path)
    code, err = _cli("clean", cwd=root / "proj")  # a folder of the project: its root's cache
    assert code == 0 and err.startswith("dtype-lint: removed the cache at ") and ".dtype_lint_cache (" in err
    assert not (root / ".dtype_lint_cache").exists()
    assert sorted(p.name for p in root.iterdir()) == ["proj", "pyproject.toml"]
    code, err = _cli("clean", cwd=root)
    assert code == 0 and "no cache at .dtype_lint_cache" in err
    # and the next run makes it again, with the same findings
    assert _cli("check", ".", cwd=root)[0] == 1


def test_clean_keeps_what_is_not_dtype_lints_and_says_so(tmp_path: Path):
    root = _cached_project(tmp_path)
    folder = root / ".dtype_lint_cache"
    (folder / "notes.txt").write_text("mine\n")
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "keep.txt").write_text("keep\n")
    (folder / "v2-linked").symlink_to(outside, target_is_directory=True)  # named like ours: the link goes
    code, err = _cli("clean", cwd=root)
    assert code == 0 and "1 entry that dtype-lint did not make (notes.txt)" in err
    assert sorted(p.name for p in folder.iterdir()) == [".gitignore", "notes.txt"]
    assert (outside / "keep.txt").read_text() == "keep\n"


def test_clean_refuses_a_cache_folder_that_leaves_the_project(tmp_path: Path):
    root = tiny_project(tmp_path / "p")
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (elsewhere / "v2-x").mkdir()
    (root / ".dtype_lint_cache").symlink_to(elsewhere, target_is_directory=True)
    code, err = _cli("clean", cwd=root)
    assert code == 2 and "outside the project" in err
    assert (elsewhere / "v2-x").is_dir()


def test_clean_is_a_command_not_a_path():
    assert plain_check(["clean"]) is None  # the replay and the fast path leave it to the command


def _age(folder: Path, days: float) -> None:
    when = time.time() - days * 86400
    for path in (folder, *folder.iterdir()):
        os.utime(path, (when, when))


def test_a_new_cache_folder_removes_those_unused_for_STALE_DAYS(tmp_path: Path):
    root = _cached_project(tmp_path)
    base = root / ".dtype_lint_cache"
    (current,) = [p for p in base.iterdir() if p.name.startswith("v2-")]
    stale, recent = base / "v2-old-version", base / "v2-other-settings"
    for folder in (stale, recent):
        (folder / "f").mkdir(parents=True)
        (folder / "f" / "entry.json").write_text("{}")
    _age(stale, cache_clean.STALE_DAYS + 1)
    _age(recent, cache_clean.STALE_DAYS - 1)
    assert _cli("check", ".", "--exit-zero", cwd=root)[0] == 0
    assert stale.exists() and recent.exists()  # no new folder: nothing removed
    # other settings: a new folder, which removes the stale one (and keeps those in use)
    assert _cli("check", ".", "--exit-zero", "--select", "ALL", cwd=root)[0] == 0
    names = {p.name for p in base.iterdir() if p.name.startswith("v2-")}
    assert stale.name not in names and {recent.name, current.name} <= names and len(names) == 3


def test_a_run_that_writes_nothing_marks_its_folder_used(tmp_path: Path):
    from dtype_lint.core.writer import ProjectWriter
    from dtype_lint.run.cache import Cache

    folder = tmp_path / "cache" / "v2-k"
    (folder / "f").mkdir(parents=True)
    _age(folder, cache_clean.STALE_DAYS + 1)
    Cache(tmp_path / "cache", key="k", root=tmp_path).save(ProjectWriter(tmp_path))
    assert time.time() - folder.stat().st_mtime < 60
    assert cache_clean.remove_stale_folders(tmp_path / "cache", tmp_path / "cache" / "v2-new") == []


def test_the_current_folder_and_foreign_names_are_never_stale(tmp_path: Path):
    base = tmp_path / "cache"
    for name in ("v2-current", "v2-old", "notes", "cache-x.json"):
        (base / name).mkdir(parents=True)
        _age(base / name, cache_clean.STALE_DAYS * 3)
    assert cache_clean.remove_stale_folders(base, base / "v2-current") == ["v2-old"]
    assert sorted(p.name for p in base.iterdir()) == ["cache-x.json", "notes", "v2-current"]
