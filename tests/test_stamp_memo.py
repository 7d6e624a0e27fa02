"""A cached run takes the stamp of a file whose stat data is unchanged from the memo the last run
kept (run/stamp_memo.py), and hashes every other one: the answer is the one a run without the
cache gives, whatever the edit."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from cli_runner import dtl
from tiny_project import STUB_MODEL, files_passed, stub_project

from dtype_lint.run import replay_index, stamp_memo
from dtype_lint.run.stamp_memo import MEMO_NAME, StampMemo

CHECK = ("check", ".", "--output-format", "concise", "--exit-zero")


@pytest.fixture
def root(tmp_path: Path, monkeypatch) -> Path:
    """A project whose files count as settled: files this young keep no stat data (replay_index.RACY_NS) but
    in the test that lifts the guard."""
    monkeypatch.setattr(replay_index, "RACY_NS", -(10**12))
    monkeypatch.setattr(stamp_memo, "LOAD_AFTER", 0)  # read from the first stamp (a tree of thousands)
    return stub_project(tmp_path, STUB_MODEL, {f"proj/plain{i}.py": f"SIZE = {i}\n" for i in range(3)})


def _hashed(monkeypatch) -> list[str]:
    """The names of the files the memo hashes from now on."""
    return files_passed(monkeypatch, stamp_memo, "file_stamp")


def test_a_warm_run_hashes_only_what_changed(root: Path, monkeypatch):
    first = dtl(root, *CHECK).stdout
    assert (root / ".dtype_lint_cache" / MEMO_NAME).is_file()
    hashed = _hashed(monkeypatch)
    assert dtl(root, *CHECK).stdout == first
    assert hashed == []
    (root / "proj/plain1.py").write_text("SIZE = 10\n")
    assert dtl(root, *CHECK).stdout == first
    assert hashed == ["plain1.py"]


def test_an_edit_that_keeps_size_and_mtime_is_seen(root: Path):
    """`touch -r`, `cp -p`: the ctime moves all the same, so the file is hashed again."""
    model = root / "proj/model.py"
    assert "1 fixable" in dtl(root, *CHECK).stdout
    text = model.read_text()
    edited = text.replace("self.o_proj.weight.dtype", "self.o_proj.weight.shape")
    edited = edited + " " * (len(text) - len(edited)) if len(edited) < len(text) else edited
    assert edited != text and len(edited.encode()) == len(text.encode())
    st = model.stat()
    model.write_text(edited)
    os.utime(model, ns=(st.st_atime_ns, st.st_mtime_ns))
    assert model.stat().st_size == st.st_size and model.stat().st_mtime_ns == st.st_mtime_ns
    assert dtl(root, *CHECK).stdout == dtl(root, *CHECK, "--no-cache").stdout
    assert "DTL001" not in dtl(root, *CHECK).stdout


def test_a_file_changed_just_before_the_run_keeps_no_stat_data(root: Path, monkeypatch):
    dtl(root, *CHECK)
    plain = root / "proj/plain0.py"
    assert "proj/plain0.py" in StampMemo(root / ".dtype_lint_cache", 0).held()  # kept by its path from the root
    monkeypatch.setattr(replay_index, "RACY_NS", 2_000_000_000)  # the guard: every file is this young
    plain.write_text("SIZE = 5\n")
    dtl(root, *CHECK)
    kept = StampMemo(root / ".dtype_lint_cache", 0).held()
    assert "proj/plain0.py" not in kept  # hashed on every run until it settles
    assert "proj/plain1.py" in kept  # vouched for by its stat data


def test_a_memo_not_sealed_by_us_is_no_memo(root: Path, monkeypatch):
    first = dtl(root, *CHECK).stdout
    path = root / ".dtype_lint_cache" / MEMO_NAME
    path.write_bytes(path.read_bytes()[:-3] + b"xyz")
    assert StampMemo(root / ".dtype_lint_cache", 0).held() == {}
    hashed = _hashed(monkeypatch)
    assert dtl(root, *CHECK).stdout == first
    assert "model.py" in hashed


def test_a_whole_run_drops_what_is_gone(root: Path):
    dtl(root, *CHECK)
    gone = root / "proj/plain2.py"
    key = "proj/plain2.py"
    assert key in StampMemo(root / ".dtype_lint_cache", 0).held()
    gone.unlink()
    dtl(root, *CHECK)
    assert key not in StampMemo(root / ".dtype_lint_cache", 0).held()


def test_a_run_that_hashed_few_files_neither_reads_nor_rewrites_the_memo(root: Path, monkeypatch):
    """At ten times vLLM the memo holds 36,000 files: a pre-commit run on an edited file, which
    asks for the stamps of the few files its answers read, hashes them instead of reading the memo,
    and does not rewrite it (the next run hashes them again)."""
    dtl(root, *CHECK)
    memo = root / ".dtype_lint_cache" / MEMO_NAME
    before = memo.read_bytes()
    (root / "proj/model.py").write_text(STUB_MODEL + "\n# edited\n")
    monkeypatch.setattr(stamp_memo, "LOAD_AFTER", 256)  # as shipped: this project has fewer files
    hashed = _hashed(monkeypatch)
    out = dtl(root, "check", "proj/model.py", "--output-format", "concise", "--exit-zero").stdout
    assert out == dtl(root, "check", "proj/model.py", "--output-format", "concise", "--exit-zero", "--no-cache").stdout
    assert "model.py" in hashed and memo.read_bytes() == before
    monkeypatch.setattr(stamp_memo, "LOAD_AFTER", 0)
    (root / "proj/model.py").write_text(STUB_MODEL + "\n# edited again\n")
    dtl(root, "check", "proj/model.py", "--exit-zero")
    assert memo.read_bytes() != before


def test_a_run_on_named_files_that_changed_few_entries_does_not_rewrite_the_memo(root: Path, monkeypatch):
    """At ten times vLLM a pre-commit run whose census read the memo rewrote its 3.1 MB for the one
    file edited: a run on named files rewrites it only for one changed entry in REWRITE_RATIO, and
    the next run hashes the file again; a run on the whole project keeps what it stamped."""
    dtl(root, *CHECK)
    memo = root / ".dtype_lint_cache" / MEMO_NAME
    before = memo.read_bytes()
    held = len(StampMemo(root / ".dtype_lint_cache", 0).held())
    monkeypatch.setattr(stamp_memo, "REWRITE_RATIO", 1)  # one change in `held` entries: too few here
    (root / "proj/model.py").write_text(STUB_MODEL + "\n# edited\n")
    named = ("check", "proj/model.py", "--output-format", "concise", "--exit-zero")
    out = dtl(root, *named).stdout
    assert held > 1 and memo.read_bytes() == before
    hashed = _hashed(monkeypatch)
    assert dtl(root, *named).stdout == out == dtl(root, *named, "--no-cache").stdout
    assert "model.py" in hashed and memo.read_bytes() == before  # hashed again, the memo as it was
    dtl(root, *CHECK)  # the whole project: what changed is kept
    assert memo.read_bytes() != before
    hashed.clear()
    dtl(root, *named)
    assert "model.py" not in hashed


def test_the_stat_data_a_run_vouched_by_is_what_the_file_has(root: Path):
    """StampMemo.stat_data: the replay index keeps a census's files with the stat data the run
    already took of them (23,600 files at ten times vLLM, each stat-ed again before); a file the
    run hashed has none to give, and the index stats it itself."""
    dtl(root, *CHECK)
    (root / "proj/plain1.py").write_text("SIZE = 11\n")
    memo = StampMemo(root / ".dtype_lint_cache", 0)
    same, edited = str((root / "proj/plain0.py").resolve()), str((root / "proj/plain1.py").resolve())
    memo.stamp(same), memo.stamp(edited)
    assert memo.stat_data(same) == replay_index.stat_key(same) is not None
    assert memo.stat_data(edited) is None


def test_stamps_of_many_files_are_each_one_s_stamp(root: Path, monkeypatch):
    """StampMemo.stamps: a census's files in one loop, the memo read first; the same stamps as
    one `stamp` call each, for a file vouched for by its stat data, one edited, one the memo does
    not hold, and one gone."""
    from dtype_lint.core.file_stamp import file_stamp

    dtl(root, *CHECK)
    (root / "proj/plain1.py").write_text("SIZE = 11\n")
    (root / "proj/new.py").write_text("NEW = 1\n")
    files = [str((root / f"proj/{name}.py").resolve()) for name in ("plain0", "plain1", "new", "model")]
    gone = str(root / "proj/gone.py")
    monkeypatch.setattr(stamp_memo, "LOAD_AFTER", 256)  # as shipped: the list alone is too short
    many = StampMemo(root / ".dtype_lint_cache", 0)
    hashed = _hashed(monkeypatch)
    got = many.stamps(files + [gone])
    assert got == [file_stamp(f) for f in files] + [file_stamp(gone)]
    assert sorted(hashed) == ["gone.py", "model.py", "new.py", "plain0.py", "plain1.py"]  # memo not read: 5 < 256
    monkeypatch.setattr(stamp_memo, "LOAD_AFTER", 3)
    hashed.clear()
    assert StampMemo(root / ".dtype_lint_cache", 0).stamps(files + [gone]) == got
    assert sorted(hashed) == ["gone.py", "new.py", "plain1.py"]  # the memo vouched for the others
