"""What `--fix` writes, and where (#8): nothing outside the project root; never a `.gitignore`
covering more than the cache folder; `--config FILE` never moves the project; symlinks, modes,
owners, read-only files and folders and hard links respected; a write that is refused or raced
is DTL901, counts as remaining, and makes the run exit 1 with an honest summary.
"""

from __future__ import annotations

import os
import stat
import sys
import tempfile
from pathlib import Path

import pytest
from cli_runner import dtl
from tiny_project import ATTN, FIXED_CALL, PYPROJECT, tiny_project, tree_bytes

from dtype_lint.core.writer import ProjectWriter, is_temp_name, remove_stale_temps
from dtype_lint.run import pipeline

posix_only = pytest.mark.skipif(sys.platform == "win32", reason="POSIX modes, owners and symlinks")
OTHER = ATTN.replace("class Attn", "class Other")


def fix(root: Path, *args: str):
    return dtl(root, "check", "--fix", "--no-cache", "--output-format", "concise", *args)


def assert_honest(proc, fixed: int, remaining: int) -> None:
    """Exit 1 and a summary that counts what was really written and what is left."""
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert f"{fixed} fixed, {remaining} remaining" in proc.stdout or (fixed == 0 and "fixed" not in proc.stdout)
    assert ", 0 remaining" not in proc.stdout and "All checks passed" not in proc.stdout


# --- where files go -------------------------------------------------------------------------------


def test_config_outside_the_project_never_moves_it(tmp_path: Path):
    """pre-commit passes the staged files and `--config path/outside`: the project, its cache and
    its helper stay where the files are; only the settings come from the file."""
    root = tiny_project(tmp_path / "repo", pyproject="[project]\nname = 'x'\n")
    shared = tmp_path / "shared"
    shared.mkdir()
    (shared / "lint.toml").write_text('helper = "proj.dtypes:get_layer_input_dtype"\n'
                                      'per-file-ignores = { "proj/ignored.py" = ["DTL001"] }\n')
    (root / "proj/ignored.py").write_text(OTHER)
    proc = dtl(root, "check", "--fix", "--config", str(shared / "lint.toml"), "proj/attn.py", "proj/ignored.py")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert FIXED_CALL in (root / "proj/attn.py").read_text()
    assert (root / "proj/dtypes.py").exists() and (root / ".dtype_lint_cache").is_dir()
    assert (root / "proj/ignored.py").read_text() == OTHER  # per-file-ignores relative to the project
    assert sorted(p.name for p in shared.iterdir()) == ["lint.toml"]


@posix_only
def test_config_dev_null_creates_nothing_next_to_it(tmp_path: Path):
    root = tiny_project(tmp_path)
    before = set(os.listdir("/dev"))
    assert dtl(root, "check", "--config", os.devnull).returncode == 1
    assert set(os.listdir("/dev")) - before == set()
    assert (root / ".dtype_lint_cache").is_dir()


def test_the_cache_gitignore_covers_only_a_folder_the_run_created(tmp_path: Path):
    root = tiny_project(tmp_path, {"build/keep.txt": "mine\n"},
                       pyproject='[tool.dtype-lint]\ncache-dir = "build"\n')
    assert dtl(root, "check").returncode == 1
    assert not (root / "build/.gitignore").exists()  # an existing folder is not ours to ignore
    assert list((root / "build").glob("v2-*/scan.json"))
    fresh = tiny_project(tmp_path / "fresh", pyproject='[tool.dtype-lint]\ncache-dir = "tools/cache"\n')
    assert dtl(fresh, "check").returncode == 1
    assert (fresh / "tools/cache/.gitignore").read_text() == "# created by dtype-lint\n*\n"
    assert not (fresh / ".gitignore").exists() and not (fresh / "tools/.gitignore").exists()


def test_a_cache_folders_lost_gitignore_comes_back_beside_every_file_dtype_lint_keeps(tmp_path: Path):
    """The folder holds only dtype-lint's files (the fast path's record, the project's file list,
    the pre-commit replay's index and answers...): a `.gitignore` removed by hand is written again."""
    root = tiny_project(tmp_path, {"proj/plain.py": "def f():\n    return 1\n"}, pyproject="[tool.dtype-lint]\n")
    dtl(root, "check", ".")
    dtl(root, "check", "proj/plain.py")  # a run on a named file: its verdict kept in the replay index
    cache = root / ".dtype_lint_cache"
    kept = {p.name for p in cache.iterdir()}
    assert {"fast-path.json", "project-files.json", "replay-answers.bin", "replay-index.bin"} <= kept, kept
    (cache / ".gitignore").unlink()
    (root / "proj" / "attn.py").write_text((root / "proj" / "attn.py").read_text() + "# edited\n")
    dtl(root, "check", ".")  # writes a cache entry again
    assert (cache / ".gitignore").read_text() == "# created by dtype-lint\n*\n"


@posix_only
def test_a_cache_folder_linked_outside_the_project_is_not_written(tmp_path: Path):
    root = tiny_project(tmp_path / "p")
    outside = tmp_path / "elsewhere"
    outside.mkdir()
    os.symlink(outside, root / ".dtype_lint_cache")
    made = []
    real_mkstemp = tempfile.mkstemp

    def watched_mkstemp(*args, **kwargs):
        fd, path = real_mkstemp(*args, **kwargs)
        made.append(path)
        return fd, path

    tempfile.mkstemp = watched_mkstemp
    try:
        assert fix(root).returncode == 0  # the fix lands; its temp file goes next to the target instead
    finally:
        tempfile.mkstemp = real_mkstemp
    assert made and all(os.path.realpath(p).startswith(os.path.realpath(root) + os.sep) for p in made), made
    assert list(outside.iterdir()) == []
    assert [p for p in root.rglob("*") if is_temp_name(p.name)] == []


# --- symlinks, metadata ---------------------------------------------------------------------------


@posix_only
def test_an_in_tree_symlink_and_its_target_are_fixed_once_and_the_link_stays(tmp_path: Path):
    root = tiny_project(tmp_path)
    os.symlink("attn.py", root / "proj/alias.py")  # sorts first: a walk meets the link before the file
    proc = fix(root)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert os.readlink(root / "proj/alias.py") == "attn.py"
    assert (root / "proj/attn.py").read_text().count(FIXED_CALL) == 1
    assert "Found 1 finding (1 fixed, 0 remaining)" in proc.stdout
    assert "wrote proj/attn.py (fix)" in proc.stderr and "alias.py" not in proc.stderr


@posix_only
def test_a_symlink_to_a_file_outside_the_project_is_not_written(tmp_path: Path):
    root = tiny_project(tmp_path / "p")
    outside = tmp_path / "outside.py"
    outside.write_text(OTHER)
    os.symlink(outside, root / "proj/linked.py")
    proc = fix(root)
    assert_honest(proc, 1, 2)
    assert "outside the project root" in proc.stdout and "DTL901" in proc.stdout
    assert outside.read_text() == OTHER and os.path.islink(root / "proj/linked.py")
    assert FIXED_CALL in (root / "proj/attn.py").read_text()


@posix_only
def test_mode_owner_and_group_are_kept(tmp_path: Path):
    root = tiny_project(tmp_path)
    target = root / "proj/attn.py"
    os.chmod(target, 0o640)
    if os.geteuid() == 0:  # root can hand a file to another owner: the fix must give it back
        os.chown(target, 4321, 4322)
    before = os.stat(target)
    assert fix(root).returncode == 0
    after = os.stat(target)
    assert (stat.S_IMODE(after.st_mode), after.st_uid, after.st_gid) == (0o640, before.st_uid, before.st_gid)
    assert FIXED_CALL in target.read_text()


@posix_only
def test_a_read_only_file_is_dtl901_with_the_reason_and_nothing_is_created_for_it(tmp_path: Path):
    root = tiny_project(tmp_path)
    os.chmod(root / "proj/attn.py", 0o444)
    proc = fix(root)
    assert_honest(proc, 0, 2)
    assert "DTL901" in proc.stdout and "read-only; not written" in proc.stdout
    assert (root / "proj/attn.py").read_text() == ATTN
    assert not (root / "proj/dtypes.py").exists()  # no helper for a fix that cannot land


@posix_only
def test_a_read_only_folder_is_dtl901_and_later_files_are_still_written(tmp_path: Path):
    root = tiny_project(tmp_path, {"proj/locked/__init__.py": "", "proj/locked/a.py": OTHER, "proj/z.py": OTHER})
    os.chmod(root / "proj/locked", 0o555)
    try:
        proc = fix(root)
    finally:
        os.chmod(root / "proj/locked", 0o755)
    assert_honest(proc, 2, 2)
    assert "folder" in proc.stdout and "is read-only; not written" in proc.stdout
    assert (root / "proj/locked/a.py").read_text() == OTHER
    assert FIXED_CALL in (root / "proj/attn.py").read_text() and FIXED_CALL in (root / "proj/z.py").read_text()


@posix_only
def test_a_hard_linked_file_is_dtl901(tmp_path: Path):
    root = tiny_project(tmp_path)
    os.link(root / "proj/attn.py", tmp_path / "other-name.py")
    proc = fix(root, "proj")
    assert_honest(proc, 0, 2)
    assert "2 hard links" in proc.stdout
    assert (tmp_path / "other-name.py").read_text() == ATTN == (root / "proj/attn.py").read_text()


@pytest.mark.parametrize("how", ["edited", "deleted", "replaced-by-folder"])
def test_a_file_changed_after_its_fix_was_planned_is_not_written_and_counts_as_remaining(
        tmp_path: Path, monkeypatch, how: str):
    root = tiny_project(tmp_path, {"proj/z.py": OTHER})
    planned = pipeline.fix_path

    def plan_then_touch(path, *args):
        out = planned(path, *args)
        if path.endswith("attn.py"):
            if how == "edited":
                Path(path).write_text(ATTN + "# saved by the user meanwhile\n")
            elif how == "deleted":
                os.unlink(path)
            else:
                os.unlink(path)
                os.mkdir(path)
        return out

    monkeypatch.setattr(pipeline, "fix_path", plan_then_touch)
    proc = fix(root, "-j", "1")
    assert_honest(proc, 1, 2)
    reason = {"edited": "changed on disk while it was being fixed", "deleted": "deleted while it was being fixed",
              "replaced-by-folder": "not a regular file"}[how]
    assert reason in proc.stdout
    if how == "edited":
        assert (root / "proj/attn.py").read_text() == ATTN + "# saved by the user meanwhile\n"
    assert FIXED_CALL in (root / "proj/z.py").read_text()


def test_the_helper_and_its_new_package_appear_together(tmp_path: Path):
    root = tiny_project(tmp_path, pyproject=PYPROJECT.replace("proj.dtypes", "proj.common.dtypes"))
    proc = fix(root)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert (root / "proj/common/__init__.py").read_bytes() == b""
    assert "def get_layer_input_dtype" in (root / "proj/common/dtypes.py").read_text()
    lines = [line for line in proc.stderr.splitlines() if line.startswith("dtype-lint: created")]
    assert lines == ["dtype-lint: created proj/common/ (folder for the helper)",
                     "dtype-lint: created proj/common/__init__.py (package marker for the helper)",
                     "dtype-lint: created proj/common/dtypes.py (helper)"]
    assert not (root / ".dtype_lint_cache").exists()  # staging is removed when it is empty again


def test_stale_temp_files_are_removed_and_live_ones_kept(tmp_path: Path):
    root = tiny_project(tmp_path)
    dead = 2 ** 22 + 12345  # above any pid_max: no such process
    staged = root / ".dtype_lint_cache/tmp"
    staged.mkdir(parents=True)
    stale = [staged / f".attn.py.{dead}.k3j2h_1{'.dtl-tmp'}", root / f"proj/.attn.py.{dead}.abc{'.dtl-tmp'}"]
    (staged / f".common.{dead}.zz.dtl-tmp").mkdir()  # a helper package staged by a killed run
    for p in stale:
        p.write_text("half")
    live = root / f"proj/.attn.py.{os.getppid()}.abc.dtl-tmp"  # the test runner's parent is alive
    live.write_text("in use")
    not_ours = root / "proj/.notes.dtl-tmp"
    not_ours.write_text("a user's file that merely ends the same way")
    assert fix(root).returncode == 0
    assert [p for p in stale if p.exists()] == [] and not (staged / f".common.{dead}.zz.dtl-tmp").exists()
    assert live.exists() and not_ours.exists()


def test_remove_stale_temps_only_touches_temp_names(tmp_path: Path):
    dead = 2 ** 22 + 12345
    ours = [f".a.py.{dead}.x1_z.dtl-tmp", f".b.c.py.{dead}.q.dtl-tmp"]
    others = ["a.py", ".a.py.dtl-tmp", f".a.py.x.{dead}.dtl-tmp", "b.dtl-tmp", f"a.py.{dead}.x.dtl-tmp"]
    for n in ours + others:
        (tmp_path / n).write_text("")
    assert remove_stale_temps(tmp_path) == 2
    assert sorted(os.listdir(tmp_path)) == sorted(others)


def test_a_fix_whose_staging_folder_cannot_be_made_still_lands_and_leaves_nothing(tmp_path: Path):
    root = tiny_project(tmp_path)
    (root / ".dtype_lint_cache").write_text("a file where the cache folder would go")
    assert fix(root).returncode == 0
    assert FIXED_CALL in (root / "proj/attn.py").read_text()
    assert [p for p in root.rglob("*") if is_temp_name(p.name)] == []


def test_the_writer_refuses_every_path_outside_the_root(tmp_path: Path):
    root = tmp_path / "p"
    root.mkdir()
    w = ProjectWriter(root, root / ".dtype_lint_cache/tmp")
    for bad in (tmp_path / "x.py", root / "../x.py", Path("/") / "x.py"):
        with pytest.raises(Exception, match="outside the project root"):
            w.write(bad, b"x", "fix")
    assert tree_bytes(tmp_path) == {}


def test_a_write_that_fails_midway_is_dtl901_and_the_file_is_unchanged(tmp_path: Path, monkeypatch):
    import errno

    from dtype_lint.core import writer

    root = tiny_project(tmp_path, {"proj/z.py": OTHER})
    real = writer.write_atomic

    def disk_full(path, data, **kwargs):
        if str(path).endswith("attn.py"):
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        return real(path, data, **kwargs)

    monkeypatch.setattr(writer, "write_atomic", disk_full)
    proc = fix(root)
    assert_honest(proc, 1, 2)
    assert "cannot write: No space left on device" in proc.stdout
    assert (root / "proj/attn.py").read_text() == ATTN and FIXED_CALL in (root / "proj/z.py").read_text()


def test_output_problem_by_kind(tmp_path: Path):
    from dtype_lint.run.outputs import output_problem

    root = tmp_path / "proj"
    (root / "pkg").mkdir(parents=True)
    (root / "pkg/a.py").write_text("x = 1\n")
    (root / "conf.toml").write_text("")
    outside = tmp_path / "elsewhere.txt"
    outside.write_text("")
    (root / "link.txt").symlink_to(outside)
    cwd = os.getcwd()
    os.chdir(root)
    try:
        assert "Python source" in output_problem("pkg/a.py", "-o", root)
        assert "Python source" in output_problem("pkg/new.pyi", "-o", root)
        assert "reads" in output_problem("conf.toml", "-o", root, reads=["conf.toml"])
        assert "outside the project root" in output_problem("link.txt", "-o", root)
        assert output_problem(str(outside), "-o", root) is None  # an absolute path the user typed
        assert output_problem("../report.md", "-o", root) is None  # named outside, no link
        assert output_problem("report.md", "-o", root) is None
        assert "cache folder" in output_problem(".dtype_lint_cache/r.txt", "-o", root, cache_dir=".dtype_lint_cache")
        assert "not a folder" in output_problem("pkg/a.py", "--series", root, folder=True)
    finally:
        os.chdir(cwd)
