"""The one safe reader: every file dtype-lint reads goes through `read_bytes`.

A FIFO or a device is refused from its `stat` without being opened (opening a FIFO blocks;
`/dev/zero` never ends), a file over the caller's limit is refused unread, and the open is
non-blocking and checked again in case the path changed in between. Standard library only, so
that the pre-commit fast path can read with it before the engine is imported.
"""

from __future__ import annotations

import os
import stat

# A `.py` larger than this is generated data, not inference code: skipped unread (DTL900).
# vLLM's largest module is ~350 KB; parsing costs ~300 bytes of memory per source byte. Here, not
# in source.py, so that the fast path and the stamps read with the same limit without importing it.
MAX_SOURCE_BYTES = 4 << 20

class NotRegularFile(OSError):
    """A path that is a FIFO, a device, a socket or a folder: never opened for reading."""


def read_bytes(path: str | os.PathLike, limit: int) -> bytes:
    """The bytes of a regular file of at most `limit` bytes. A FIFO or a device is refused from
    its `stat` without being opened (opening a FIFO blocks; `/dev/zero` never ends); the open is
    non-blocking and checked again, in case the path changed in between."""
    st = os.stat(path)
    if not stat.S_ISREG(st.st_mode):
        raise NotRegularFile(f"not a regular file ({_kind(st.st_mode)}); skipped unread")
    if st.st_size > limit:
        raise ValueError(f"larger than {byte_size(limit)} ({byte_size(st.st_size)}); skipped unread")
    descriptor = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_NOCTTY", 0))
    try:
        opened = os.fstat(descriptor)
        if not stat.S_ISREG(opened.st_mode):
            raise NotRegularFile("not a regular file; skipped unread")
        data = _read_up_to(descriptor, min(opened.st_size, limit) + 1, limit + 1)
    finally:
        os.close(descriptor)
    if len(data) > limit:
        raise ValueError(f"larger than {byte_size(limit)}; skipped")
    return data


def _read_up_to(descriptor: int, expected: int, most: int) -> bytes:
    """At most `most` bytes, asking first for the `expected` the file's size promises: a buffered
    read of `limit + 1` allocated 4 MiB for every file, half the cost of reading a tree. A file
    that grew since its `fstat` is read on, up to `most`."""
    chunks = []
    got = 0
    want = expected
    while got < most:
        chunk = os.read(descriptor, want - got)
        if not chunk:
            break
        chunks.append(chunk)
        got += len(chunk)
        if got >= want:
            want = most  # as large as its size said, or larger: read on until the end or the limit
    return chunks[0] if len(chunks) == 1 else b"".join(chunks)


def _kind(mode: int) -> str:
    for test, name in ((stat.S_ISFIFO, "a FIFO"), (stat.S_ISCHR, "a character device"),
                       (stat.S_ISBLK, "a block device"), (stat.S_ISSOCK, "a socket"), (stat.S_ISDIR, "a folder")):
        if test(mode):
            return name
    return "a special file"


def byte_size(n: int) -> str:
    """`n` bytes, as messages say it (`12 MiB`, `300 bytes`)."""
    return f"{n / (1 << 20):.0f} MiB" if n >= 1 << 20 else f"{n} bytes"
