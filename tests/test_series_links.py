"""`migrate --series` on a tree with symbolic links, and the scratch copy its re-check reads.

The re-check runs on a scratch copy of the tree with the patches applied (writer.scratch_copy).
A link in that copy must read what the link reads in the patched tree: an absolute link into the
tree used to keep reading the user's unpatched file (and the re-check then crashed mapping its
findings back: ValueError, a traceback), a relative link climbing out of the tree dangled, and a
file written at a link's place was written through it. A fix to a file whose link leads out of
the series root cannot be a patch of the tree: it is not applied and DTL901 says why, as `--fix`
says it, and the outside file is never written.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path
from types import SimpleNamespace

import pytest

from dtype_lint.core import writer
from dtype_lint.core.config import load_config
from dtype_lint.core.writer import scratch_copy, write_scratch_files
from dtype_lint.migrate import series
from dtype_lint.migrate.migration import migration_series

CALLERS = Path(__file__).resolve().parents[1] / "fixtures" / "helper_callers"
AUTHOR = "Ann Maintainer <ann@example.org>"

pytestmark = pytest.mark.skipif(not hasattr(os, "symlink") or os.name == "nt",
                                reason="symbolic links need a POSIX file system here")


def _tree(tmp_path: Path, link: str) -> tuple[Path, Path]:
    """fixtures/helper_callers in a git repository, its dtypes.py moved and replaced by a link:
    `inside-absolute` (to shared/dtypes.py, by absolute path), `inside-relative` (the same, by
    `../shared/dtypes.py`) or `outside` (to a file beside the repository). Returns the tree and
    the real file."""
    src = tmp_path / "tree"
    shutil.copytree(CALLERS, src, ignore=shutil.ignore_patterns("expected.txt", "__pycache__"))
    real_dir = tmp_path / "elsewhere" if link == "outside" else src / "shared"
    real_dir.mkdir()
    real = real_dir / "dtypes.py"
    shutil.move(src / "callerlm" / "dtypes.py", real)
    aim = "../shared/dtypes.py" if link == "inside-relative" else str(real)
    os.symlink(aim, src / "callerlm" / "dtypes.py")
    for args in (["init", "-q", "-b", "main"], ["add", "-A"], ["commit", "-q", "-m", "base"]):
        series.git(args, src)  # (series.checkout copies a link as its target's content)
    return src, real


def _series(tree: Path, out: Path, monkeypatch):
    monkeypatch.setattr(series.proofs, "available", lambda: False)
    monkeypatch.chdir(tree)
    return migration_series(load_config(tree), ".", str(out), proof=False, author=AUTHOR)


@pytest.mark.parametrize("link", ["inside-absolute", "inside-relative"])
def test_a_link_into_the_tree_is_patched_at_its_target_and_rechecked_clean(tmp_path, monkeypatch, link):
    """The patch changes the file the link leads to, and the re-check reads the patched file
    through the link: nothing remains (on the code before this test, the absolute link read the
    unpatched file and the re-check raised ValueError)."""
    tree, real = _tree(tmp_path, link)
    before = real.read_bytes()
    result, patches, _files = _series(tree, tmp_path / "out", monkeypatch)
    changed = {c.path for p in patches for c in p.changes if not c.test}
    assert changed == {"shared/dtypes.py"}
    assert result.findings == []
    assert real.read_bytes() == before  # a series leaves the tree as it is


def test_a_fix_behind_a_link_out_of_the_tree_is_not_applied_and_says_why(tmp_path, monkeypatch):
    tree, real = _tree(tmp_path, "outside")
    before = real.read_bytes()
    result, patches, _files = _series(tree, tmp_path / "out", monkeypatch)
    assert all(c.path != "callerlm/dtypes.py" and "elsewhere" not in c.path for p in patches for c in p.changes)
    assert real.read_bytes() == before
    not_applied = [f for f in result.findings if f.code == "DTL901"]
    assert [f.path for f in not_applied] == ["callerlm/dtypes.py"]
    assert "outside the series root" in not_applied[0].message
    # Its findings remain, named as the fixing run names the file (the link, not the target).
    assert {(f.path, f.code) for f in result.findings if f.code != "DTL901"} >= {("callerlm/dtypes.py", "DTL005")}
    assert not any("elsewhere" in f.path for f in result.findings)


def test_the_scratch_copy_aims_its_links_where_they_lead_after_the_change(tmp_path):
    root = tmp_path / "root"
    (root / "pkg").mkdir(parents=True)
    (root / "pkg" / "real.py").write_text("old\n")
    outside = tmp_path / "outside.py"
    outside.write_text("outside\n")
    os.symlink(root / "pkg" / "real.py", root / "pkg" / "absolute.py")
    os.symlink("real.py", root / "pkg" / "relative.py")
    os.symlink(outside, root / "pkg" / "out.py")
    os.symlink("../../outside.py", root / "pkg" / "climbing.py")
    (root / ".git").mkdir()
    (root / ".git" / "HEAD").write_text("ref\n")
    with scratch_copy(root, (".git",)) as copy:
        assert not (copy / ".git").exists()
        write_scratch_files(copy, {"pkg/real.py": "new\n", "pkg/out.py": "written here\n"})
        assert (copy / "pkg" / "absolute.py").read_text() == "new\n"
        assert (copy / "pkg" / "relative.py").read_text() == "new\n"
        assert (copy / "pkg" / "climbing.py").read_text() == "outside\n"  # the same file, not a dangling link
        assert not os.path.isabs(os.readlink(copy / "pkg" / "absolute.py"))
        # A file written at a link's place replaces the link in the copy, never its target.
        assert not (copy / "pkg" / "out.py").is_symlink()
        assert (copy / "pkg" / "out.py").read_text() == "written here\n"
    assert outside.read_text() == "outside\n"
    assert (root / "pkg" / "real.py").read_text() == "old\n"
    assert not copy.exists()


def test_the_scratch_copy_goes_where_there_is_room_and_the_user_has_not_chosen(tmp_path, monkeypatch):
    root = tmp_path / "root"
    root.mkdir()
    (root / "a.py").write_bytes(b"x" * 1000)
    memory = tmp_path / "memory"
    memory.mkdir()
    monkeypatch.setattr(writer, "MEMORY_SCRATCH", str(memory))
    monkeypatch.delenv("TMPDIR", raising=False)
    assert writer._scratch_base(root, ()) == str(memory)
    with scratch_copy(root) as copy:
        assert copy.parent.parent == memory
        assert (copy / "a.py").read_bytes() == b"x" * 1000
    # The free space as the folder reports it, held still: read twice from the disk, it moved
    # whenever a parallel test worker wrote or removed files there in between.
    free = shutil.disk_usage(memory).free
    monkeypatch.setattr(shutil, "disk_usage", lambda path: SimpleNamespace(total=free * 2, used=free, free=free))
    monkeypatch.setattr(writer, "SCRATCH_ROOM", free // 1000)  # the copy takes exactly its share
    assert writer._scratch_base(root, ()) == str(memory)
    monkeypatch.setattr(writer, "SCRATCH_ROOM", free // 1000 + 1)  # the copy would take more than its share
    assert writer._scratch_base(root, ()) is None
    monkeypatch.setattr(writer, "SCRATCH_ROOM", 4)
    monkeypatch.setenv("TMPDIR", str(tmp_path))  # the user's choice wins
    assert writer._scratch_base(root, ()) is None
    monkeypatch.delenv("TMPDIR")
    monkeypatch.setattr(writer, "MEMORY_SCRATCH", str(tmp_path / "absent"))
    assert writer._scratch_base(root, ()) is None
