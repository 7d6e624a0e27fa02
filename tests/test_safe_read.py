"""The one reader's limits, with the size its `fstat` promised right or wrong."""

import os

import pytest

from dtype_lint.core import safe_read
from dtype_lint.core.safe_read import read_bytes


def test_reads_a_file_whole_up_to_the_limit(tmp_path):
    path = tmp_path / "m.py"
    path.write_bytes(b"x = 1\n" * 1000)
    assert read_bytes(path, 6000) == b"x = 1\n" * 1000
    with pytest.raises(ValueError, match="larger than"):
        read_bytes(path, 5999)


@pytest.mark.parametrize("reported", [0, 10, 5999])
def test_a_file_larger_than_its_fstat_said_is_read_on_to_the_limit(tmp_path, monkeypatch, reported):
    # The file grew between the `fstat` and the read: what is there is read, and the limit holds.
    path = tmp_path / "m.py"
    path.write_bytes(b"y" * 6000)
    real_fstat = os.fstat

    def shrunk(descriptor):
        st = real_fstat(descriptor)
        return os.stat_result((st.st_mode, st.st_ino, st.st_dev, st.st_nlink, st.st_uid, st.st_gid, reported,
                               st.st_atime, st.st_mtime, st.st_ctime))

    monkeypatch.setattr(safe_read.os, "fstat", shrunk)
    assert read_bytes(path, 6000) == b"y" * 6000
    with pytest.raises(ValueError, match="larger than"):
        read_bytes(path, 5000)


def test_a_fifo_is_refused_unopened(tmp_path):
    fifo = tmp_path / "pipe.py"
    os.mkfifo(fifo)
    with pytest.raises(safe_read.NotRegularFile):
        read_bytes(fifo, 100)
