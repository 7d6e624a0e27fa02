"""The seal on every file dtype-lint keeps in a cache folder: an HMAC-SHA256 under a per-user
secret that no cache folder holds.

A cache folder is shared more widely than the code it caches: CI restores it from a store that
other jobs (a fork's pull request) can write, a team may share one folder, and anyone who can
write the folder can write entries. An entry's old first line, a SHA-256 of its payload, only
told our own intact files from torn or foreign ones: whoever edited a cached fix could compute it
again, and `--fix` then wrote their edit into a source file. So each file is now sealed with a
keyed MAC. The key is 32 random bytes in `$XDG_STATE_HOME/dtype-lint/cache-key` (by default
`~/.local/state/dtype-lint/cache-key`), created on first use with mode 0600 in a 0700 folder,
and trusted only while it is a regular file of the current user that nobody else may read or
write. Each seal also covers a context (the cache folder's key for its entries, the file's name
for the others), so that a genuine entry moved from a folder computed under other settings or
code is not genuine there.

A cache made under another key (restored on another machine, another user's) is then simply a
miss: every entry is recomputed and sealed again. Where no key can be kept (a read-only or
missing home), nothing is sealed and the caller runs without a cache (pipeline.py says why).

CI runners start with a fresh home, so a restored cache would never hit there: such a job can
hand the key in `DTYPE_LINT_CACHE_KEY` instead (64 or more hex digits, kept as a CI secret that
jobs which can write the cache store cannot read). It is used as given and never written down.

Standard library only, and cheap: the pre-commit fast path unseals its record with it before
the engine is imported. The pre-commit replay index (run/replay_index.py) is sealed with keyed
BLAKE2b instead (`quick_seal`): a MAC as strong as HMAC-SHA256 under the same key, whose module is
built into the interpreter, where `hmac` costs the replay its OpenSSL start-up (about a tenth of
its budget). The HMAC itself is made over the interpreter's built-in SHA-256 (`hmac_sha256`):
`hmac` would import OpenSSL for it.
"""

from __future__ import annotations

import os
import stat

KEY_NAME = "cache-key"
KEY_BYTES = 32
KEY_ENV = "DTYPE_LINT_CACHE_KEY"
_MAC_HEX = 64  # hex digits of an HMAC-SHA256

# key file path -> its key (None: none could be kept there), once per process per path.
_KEYS: dict[str, bytes | None] = {}
# key file path -> why there is no key there (for the run's warning).
_WHY: dict[str, str] = {}


def _key_from_environment() -> bytes | None:
    """The key a CI job hands in `DTYPE_LINT_CACHE_KEY`; ValueError when it is set but too short
    or not hex (a typo must not silently run with a guessable key)."""
    given = os.environ.get(KEY_ENV, "").strip()
    if not given:
        return None
    try:
        key = bytes.fromhex(given)
    except ValueError:
        raise ValueError(f"{KEY_ENV} is not hexadecimal") from None
    if len(key) < KEY_BYTES:
        raise ValueError(f"{KEY_ENV} has {len(key)} bytes; it needs at least {KEY_BYTES} (64 hex digits)")
    return key


def key_path() -> str:
    """Where the key is kept: `$XDG_STATE_HOME/dtype-lint/cache-key`, else under
    `~/.local/state` (a relative XDG_STATE_HOME is ignored, as the XDG specification says)."""
    state = os.environ.get("XDG_STATE_HOME", "")
    if not os.path.isabs(state):
        state = os.path.join(os.path.expanduser("~"), ".local", "state")
    return os.path.join(state, "dtype-lint", KEY_NAME)


def secret() -> bytes | None:
    """This user's cache key (`DTYPE_LINT_CACHE_KEY` where set, else the key file, created on
    first use); None when there is none (see `problem`)."""
    path = key_path()
    if path not in _KEYS:
        try:
            _KEYS[path] = _key_from_environment() or _read_key(path) or _create_key(path)
        except OSError as error:
            _KEYS[path] = None
            _WHY[path] = f"{path}: {error.strerror or error}"
        except ValueError as error:
            _KEYS[path] = None
            _WHY[path] = str(error) if KEY_ENV in str(error) else f"{path}: {error}"
    return _KEYS[path]


def problem() -> str | None:
    """Why there is no key (one line), or None when there is one."""
    if secret() is not None:
        return None
    return _WHY.get(key_path(), key_path())


def forget() -> None:
    """Read the key again on next use (tests that move XDG_STATE_HOME or remove the key)."""
    _KEYS.clear()
    _WHY.clear()


def _read_key(path: str) -> bytes | None:
    """The key in `path`, None when there is no file; ValueError when there is one that must not
    be trusted (another user's, readable or writable by others, a link, of the wrong size)."""
    flags = os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_NONBLOCK", 0)
    try:
        descriptor = os.open(path, flags)
    except FileNotFoundError:
        return None
    except OSError as error:
        if os.path.islink(path):
            raise ValueError("is a symbolic link; not trusted as the cache key") from None
        raise error
    try:
        st = os.fstat(descriptor)
        if not stat.S_ISREG(st.st_mode):
            raise ValueError("not a regular file; not trusted as the cache key")
        if os.name == "posix":
            if st.st_uid != os.geteuid():
                raise ValueError("owned by another user; not trusted as the cache key")
            if st.st_mode & 0o077:
                raise ValueError(f"mode {stat.S_IMODE(st.st_mode):o} lets others read or write it; "
                                 "not trusted as the cache key (chmod 600 it, or remove it)")
        data = os.read(descriptor, KEY_BYTES + 1)
    finally:
        os.close(descriptor)
    if len(data) != KEY_BYTES:
        raise ValueError(f"holds {len(data)} bytes, not {KEY_BYTES}; not trusted as the cache key (remove it)")
    return data


def _create_key(path: str) -> bytes | None:
    """Make the key file, whole or not at all (writer.create_private: 0600, written under a temp
    name and linked into place); when another run made it first, its key is the one read."""
    from dtype_lint.core.writer import create_private  # only the first run of a user gets here

    create_private(path, os.urandom(KEY_BYTES))
    return _read_key(path)


# HMAC's pads (RFC 2104) as translation tables of a key's bytes, as the `hmac` module makes them.
_INNER = bytes(x ^ 0x36 for x in range(256))
_OUTER = bytes(x ^ 0x5C for x in range(256))


def hmac_sha256(key: bytes, message: bytes) -> bytes:
    """HMAC-SHA256 (RFC 2104), equal to `hmac.digest(key, message, "sha256")`, over the
    interpreter's built-in SHA-256 (core/digests.py): `hmac` imports `hashlib`, whose OpenSSL
    start-up is about 3 ms and 3.6 MiB of every cached run's peak RSS, to make two SHA-256s."""
    from dtype_lint.core.digests import sha256

    if len(key) > 64:  # SHA-256's block
        key = sha256(key).digest()
    key = key.ljust(64, b"\0")
    inner = sha256(key.translate(_INNER))
    inner.update(message)
    return sha256(key.translate(_OUTER) + inner.digest()).digest()


def _mac(key: bytes, context: str, payload: bytes) -> bytes:
    message = context.encode("utf-8", "surrogatepass") + b"\0" + payload
    return hmac_sha256(key, message).hex().encode("ascii")


def seal(payload: bytes, context: str) -> bytes | None:
    """The bytes of a cache file holding `payload`: its MAC under the key (over `context` and the
    payload), a line break, the payload. None when there is no key (nothing may be cached)."""
    key = secret()
    if key is None:
        return None
    return _mac(key, context, payload) + b"\n" + payload


def unseal(raw: bytes, context: str) -> bytes | None:
    """The payload of a cache file sealed under this user's key for `context`, else None
    (damaged, edited, foreign, sealed under another key or for another context, or no key)."""
    from _operator import _compare_digest  # hmac.compare_digest, without importing hmac

    return _opened(raw, context, _mac, _compare_digest)


def _opened(raw: bytes, context: str, mac_of, same) -> bytes | None:
    """`raw`'s payload when its MAC is `mac_of(key, context, payload)` under this user's key
    (compared by the constant-time `same`), else None."""
    key = secret()
    if key is None:
        return None
    mac, newline, payload = raw.partition(b"\n")
    if not newline or len(mac) != _MAC_HEX:
        return None
    return payload if same(mac, mac_of(key, context, payload)) else None


def _quick_mac(key: bytes, context: str, payload: bytes) -> bytes:
    from _blake2 import blake2b  # hashlib.blake2b itself, without hashlib's OpenSSL import

    # BLAKE2b takes a key of at most 64 bytes; `DTYPE_LINT_CACHE_KEY` may be longer: hashed down.
    mac_key = blake2b(b"dtype-lint quick seal\0" + key).digest()
    message = context.encode("utf-8", "surrogatepass") + b"\0" + payload
    return blake2b(message, key=mac_key, digest_size=32).hexdigest().encode("ascii")


def quick_seal(payload: bytes, context: str) -> bytes | None:
    """As `seal`, with keyed BLAKE2b as the MAC (see the module docstring)."""
    key = secret()
    if key is None:
        return None
    return _quick_mac(key, context, payload) + b"\n" + payload


def quick_unseal(raw: bytes, context: str) -> bytes | None:
    """As `unseal`, for what `quick_seal` made."""
    from _operator import _compare_digest  # hmac's constant-time comparison where OpenSSL is absent

    return _opened(raw, context, _quick_mac, _compare_digest)


def quick_unseal_dict(raw: bytes, context: str) -> dict | None:
    """The dict that `quick_seal(marshal.dumps(d), context)` holds (the replay index and its
    answers, the stamp memo, the cache's groups), or None: not sealed by this user for `context`,
    or not a dict in marshal's format."""
    import marshal

    payload = quick_unseal(raw, context)
    if payload is None:
        return None
    try:
        value = marshal.loads(payload)  # sealed by this user's key: our own bytes
    except (EOFError, ValueError, TypeError):
        return None
    return value if isinstance(value, dict) else None


def read_quick_sealed_dict(path: str | os.PathLike, context: str, limit: int = 256 << 20) -> dict | None:
    """`quick_unseal_dict` of the file at `path`, or None when it cannot be read (missing, not a
    regular file, larger than `limit` bytes)."""
    from dtype_lint.core.safe_read import read_bytes

    try:
        raw = read_bytes(path, limit)
    except (OSError, ValueError):
        return None
    return quick_unseal_dict(raw, context)

