"""What a cache entry of a file is keyed by (pipeline, the run memo): its size and a hash of its
bytes. Apart from the pipeline so that the pre-commit fast path can check stamps without
importing it."""

from __future__ import annotations

import os

try:  # hashlib.blake2b itself: hashlib's import starts OpenSSL, a tenth of a pre-commit replay
    from _blake2 import blake2b
except ImportError:  # an interpreter built without it
    from hashlib import blake2b

from dtype_lint.core.safe_read import MAX_SOURCE_BYTES, read_bytes


def file_stamp(path: str) -> str:
    """What a cache entry of this file is keyed by: its size and a hash of its bytes. Not its
    mtime: an edit that keeps size and mtime (`touch -r`, `cp -p`, `rsync -t`, two writes in one
    timestamp tick) must not bring old findings back. Reading and hashing every file costs a
    warm run about 0.15 CPU s on vLLM (2,360 files, 35 MB), against seconds of parsing; it also
    keeps a cache valid across a fresh checkout, which changes every mtime. A file that cannot be
    read safely (a FIFO, a device, too large) is stamped from its `stat` alone: it is refused
    unread anyway."""
    try:
        data = read_bytes(path, MAX_SOURCE_BYTES)
    except FileNotFoundError:
        return "missing"
    except (OSError, ValueError):
        try:
            st = os.stat(path)
        except OSError:
            return "missing"
        return f"unread:{st.st_mode}:{st.st_size}:{st.st_mtime_ns}:{st.st_ctime_ns}"
    return stamp_of(data)


def stamp_of(data: bytes) -> str:
    """`file_stamp` of a file whose bytes (all of them) are in hand."""
    return f"{len(data)}:{blake2b(data, digest_size=16).hexdigest()}"


def small_file_stamp(path: str) -> str:
    """The stamp of a small file (a configuration, a .gitignore: the fast path's record and the
    replay index watch them): its size and a hash of its bytes, or, past 4 MiB, its stat data with
    a mark no content stamp equals. Raises OSError when the file is gone."""
    try:
        data = read_bytes(path, 4 << 20)
    except ValueError:  # too large: from its stat, with a mark that no content stamp equals
        st = os.stat(path)
        return f"unread:{st.st_size}:{st.st_mtime_ns}:{st.st_ctime_ns}"
    return f"{len(data)}:{blake2b(data, digest_size=16).hexdigest()}"
