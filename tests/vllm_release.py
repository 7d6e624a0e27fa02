"""Pinned vLLM releases as plain `.py` trees, for the real-world tests and the benchmark.

`vllm_tree("0.27.1")` returns a directory holding `vllm/` with every `.py` file of that release's
wheel and nothing else. The first call downloads the wheel with pip (`--no-deps`, never an
install), unpacks only the `.py` members, and deletes the wheel; later calls return the cached tree.

Cache: `${DTYPE_LINT_CACHE_DIR:-~/.cache/dtype-lint}/vllm-<version>/`, deliberately outside the
repo: vLLM code is never copied into this project.

Why each step is shaped the way it is:
- The tree is extracted into a temporary directory beside the cache entry and published with one
  `rename`, so a reader sees either no entry or a complete one. The marker file is the last file
  written before that rename, and a tree without it (a copy by hand, an older layout) is ignored
  and rebuilt.
- An exclusive `flock` on `vllm-<version>.lock` serialises the download across parallel pytest
  workers and benchmark runs; the losers wait and then find the marker. Where `fcntl` does not
  exist, the rename itself arbitrates: the loser discards its copy and uses the winner's.
- The wheel is the abi3 manylinux x86_64 build. On a Linux x86_64 host with a Python the release
  supports, a plain `pip download` picks it; elsewhere (or when that finds no match) the platform
  is named explicitly so that every machine analyses the same files.

Usable as a script: `python tests/vllm_release.py 0.27.1` prints the path of the tree.
"""

from __future__ import annotations

import contextlib
import json
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path, PurePosixPath

MARKER = ".dtype-lint-complete"

# What a non-x86_64 host asks pip for: the wheel a Linux x86_64 host gets by default.
_EXPLICIT_TARGET = (
    "--platform", "manylinux_2_28_x86_64",
    "--implementation", "cp",
    "--python-version", "3.12",
    "--abi", "abi3",
)


class VllmFetchError(RuntimeError):
    """pip could not fetch the wheel (usually: no network), or the wheel was not what we expect."""


def cache_root() -> Path:
    env = os.environ.get("DTYPE_LINT_CACHE_DIR")
    return Path(env).expanduser() if env else Path.home() / ".cache" / "dtype-lint"


def vllm_tree(version: str) -> Path:
    """Root of the unpacked `.py` tree of vLLM `version` (the directory that contains `vllm/`)."""
    root = cache_root()
    dest = root / f"vllm-{version}"
    if (dest / MARKER).is_file():
        return dest
    root.mkdir(parents=True, exist_ok=True)
    with _exclusive(root / f"vllm-{version}.lock") as locked:
        if (dest / MARKER).is_file():  # another process built it while we waited
            return dest
        if locked:
            _remove_leftovers(root, version, dest)
        with tempfile.TemporaryDirectory(prefix=f".vllm-{version}.tmp-", dir=root) as tmp:
            tmp_path = Path(tmp)
            wheel = _download(version, tmp_path / "wheel")
            staged = tmp_path / "tree"
            count = _extract_py(wheel, staged)
            info = {"version": version, "wheel": wheel.name, "py_files": count}
            wheel.unlink()
            (staged / MARKER).write_text(json.dumps(info) + "\n", encoding="utf-8")
            try:
                os.rename(staged, dest)
            except OSError:
                # Lost a race with a process that had no lock (no fcntl): theirs is as good.
                if not (dest / MARKER).is_file():
                    raise
    return dest


def _download(version: str, into: Path) -> Path:
    into.mkdir()
    base = [
        sys.executable, "-m", "pip", "download", f"vllm=={version}",
        "--no-deps", "--only-binary=:all:", "--no-cache-dir", "--progress-bar", "off",
        "--disable-pip-version-check", "-d", str(into),
    ]
    explicit = base + list(_EXPLICIT_TARGET)
    attempts = [base, explicit] if _is_default_target() else [explicit]
    for cmd in attempts:
        proc = subprocess.run(cmd, capture_output=True, text=True)
        if proc.returncode == 0:
            break
        # A second try is only worth it when the index answered but had nothing for this Python.
        if cmd is attempts[-1] or "No matching distribution" not in proc.stdout + proc.stderr:
            said = (proc.stdout + proc.stderr).strip().splitlines()[-8:]
            raise VllmFetchError(
                f"could not download vllm=={version} with pip (exit {proc.returncode}); "
                "offline, or no package index? Tests that need a vLLM release are marked "
                "`network`: deselect them with -m 'not network'.\n"
                f"command: {' '.join(cmd)}\npip said:\n  " + "\n  ".join(said)
            )
    wheels = sorted(into.glob("vllm-*.whl"))
    if len(wheels) != 1:
        raise VllmFetchError(f"pip download vllm=={version} left {wheels or 'no wheel'} in {into}")
    wheel = wheels[0]
    if not (wheel.name.startswith(f"vllm-{version}-") and "abi3" in wheel.name
            and wheel.name.endswith("x86_64.whl")):
        raise VllmFetchError(f"expected the abi3 manylinux x86_64 wheel, pip got {wheel.name}")
    return wheel


def _is_default_target() -> bool:
    return sys.platform == "linux" and platform.machine() in ("x86_64", "AMD64")


def _extract_py(wheel: Path, staged: Path) -> int:
    """Unpack the `.py` members of wheel under staged; return how many."""
    staged.mkdir()
    count = 0
    with zipfile.ZipFile(wheel) as zf:
        for info in zf.infolist():
            name = info.filename
            if info.is_dir() or not name.endswith(".py"):
                continue
            parts = PurePosixPath(name).parts
            if name.startswith("/") or ".." in parts or "\\" in name:
                raise VllmFetchError(f"{wheel.name}: unsafe member path {name!r}")
            target = staged.joinpath(*parts)
            target.parent.mkdir(parents=True, exist_ok=True)
            with zf.open(info) as src, open(target, "wb") as dst:
                shutil.copyfileobj(src, dst, 1 << 20)
            count += 1
    if count == 0 or not (staged / "vllm").is_dir():
        raise VllmFetchError(f"{wheel.name} holds no vllm/*.py files")
    return count


def _remove_leftovers(root: Path, version: str, dest: Path) -> None:
    """Under the lock, any temp dir of this version is from a process that died mid-way."""
    for stale in root.glob(f".vllm-{version}.tmp-*"):
        shutil.rmtree(stale, ignore_errors=True)
    if dest.exists():  # no marker: a half-written or foreign tree
        shutil.rmtree(dest)


@contextlib.contextmanager
def _exclusive(lock_path: Path):
    """Yield True while holding an exclusive lock on lock_path, False where locks are unavailable."""
    try:
        import fcntl
    except ImportError:
        yield False
        return
    with open(lock_path, "a+") as fh:
        fcntl.flock(fh.fileno(), fcntl.LOCK_EX)
        try:
            yield True
        finally:
            fcntl.flock(fh.fileno(), fcntl.LOCK_UN)


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 1 or args[0].startswith("-"):
        print("usage: python tests/vllm_release.py VERSION   (e.g. 0.27.1)", file=sys.stderr)
        return 2
    try:
        print(vllm_tree(args[0]))
    except VllmFetchError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
