"""The hash functions a run keys things by (cache entries, folder listings, configs, helpers,
fingerprints), taken from the interpreter's own C modules rather than through `hashlib`:
importing `hashlib` loads OpenSSL's libcrypto, about 3.6 MiB of a check's peak RSS (vLLM 0.34.0,
cold `-j 1`: a tenth of what the run adds to a bare interpreter) for digests that the built-in
modules compute identically. An interpreter built without them falls back to `hashlib`."""

from __future__ import annotations

try:
    from _blake2 import blake2b
    from _sha1 import sha1  # type: ignore[import-not-found]
    try:
        from _sha2 import sha256  # type: ignore[import-not-found]  # Python 3.12 merged _sha256 into _sha2
    except ImportError:
        from _sha256 import sha256  # type: ignore[import-not-found]  # Python 3.10 and 3.11
except ImportError:  # an interpreter built without its own hash modules (OpenSSL only)
    from hashlib import blake2b, sha1, sha256

__all__ = ["blake2b", "sha1", "sha256"]
