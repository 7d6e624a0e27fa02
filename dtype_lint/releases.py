"""Pinned releases of real inference engines as plain `.py` trees: `verify` runs vLLM's own MLA
prefill from them, and the real-world tests, triage and benchmarks lint them.

`release_tree("vllm", "0.27.1")` returns a directory holding `vllm/` with every `.py` file of that
release's wheel and nothing else. The first call downloads the wheel with pip (`--no-deps`, never
an install), unpacks only the `.py` members, and deletes the wheel; later calls return the cached
tree. `vllm_tree(version)` is the same for vLLM. Peers: `sglang`, `aphrodite-engine`, `lmdeploy`;
out-of-tree vLLM projects: `vllm-omni`, `vllm-ascend`, `tpu-inference`; Intel's low-bit library
`ipex-llm`.

Cache: `${DTYPE_LINT_CACHE_DIR:-~/.cache/dtype-lint}/<dist>-<version>/`, deliberately outside the
repo: no engine's code is ever copied into this project.

Why each step is shaped the way it is:
- The tree is extracted into a temporary directory beside the cache entry and published with one
  `rename`, so a reader sees either no entry or a complete one. The marker file is the last file
  written before that rename, and a tree without it (a copy by hand, an older layout) is ignored
  and rebuilt.
- An exclusive `flock` on `vllm-<version>.lock` serialises the download across parallel pytest
  workers and benchmark runs; the losers wait and then find the marker. Where `fcntl` does not
  exist, the rename itself arbitrates: the loser discards its copy and uses the winner's.
- pip is always asked for the same target (CPython 3.11, manylinux x86_64, abi3 or cp311), so every
  machine analyses the same files whatever Python or processor it runs.

Usable as a script: `python -m dtype_lint.releases vllm 0.27.1` prints the path of the tree.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path, PurePosixPath

MARKER = ".dtype-lint-complete"

# One wheel for every host: the CPython 3.11 manylinux x86_64 build (abi3 where the project ships
# one). Only its `.py` files are kept, which are the same in every build of a release.
_TARGET = (
    "--python-version", "3.11", "--implementation", "cp",
    "--abi", "cp311", "--abi", "abi3", "--abi", "none",
    "--platform", "manylinux_2_34_x86_64", "--platform", "manylinux_2_28_x86_64",
    "--platform", "manylinux_2_17_x86_64", "--platform", "manylinux2014_x86_64", "--platform", "any",
)
# distribution -> the top-level package its wheel must hold
PACKAGES = {"vllm": "vllm", "sglang": "sglang", "aphrodite-engine": "aphrodite", "lmdeploy": "lmdeploy",
            # Hugging Face model code: quantizers replace its modules at load time (docs/hf.md).
            "transformers": "transformers", "diffusers": "diffusers", "peft": "peft",
            # Out-of-tree vLLM projects: they import vLLM's layers without containing vLLM (the
            # catalogue path, docs/quantizability.md), triaged in benchmarks/accuracy/triage/.
            "vllm-omni": "vllm_omni", "vllm-ascend": "vllm_ascend",
            # vLLM's TPU backend (JAX and torchax): vLLM's layers with its own quantization methods.
            "tpu-inference": "tpu_inference",
            # Intel's low-bit library: its own low-bit linears hold packed `.weight` storage, and it
            # patches Hugging Face model code (judged as Hugging Face-style code, docs/hf.md).
            "ipex-llm": "ipex_llm"}


class ReleaseFetchError(RuntimeError):
    """pip could not fetch the wheel (usually: no network), or the wheel was not what we expect."""


VllmFetchError = ReleaseFetchError


def cache_root() -> Path:
    from dtype_lint.core.engine_source import tool_cache_root  # one definition (installed engines' cache too)

    return tool_cache_root()


def vllm_tree(version: str) -> Path:
    """Root of the unpacked `.py` tree of vLLM `version` (the directory that contains `vllm/`)."""
    return release_tree("vllm", version)


def release_tree(dist: str, version: str) -> Path:
    """Root of the unpacked `.py` tree of `dist==version` (the directory holding its package)."""
    if dist not in PACKAGES:
        raise ReleaseFetchError(f"unknown distribution {dist!r}; known: {', '.join(PACKAGES)}")
    if not re.fullmatch(r"[0-9][0-9A-Za-z.+!-]*", version):
        raise ReleaseFetchError(f"{version!r} is not a release version")
    root = cache_root()
    name = f"{dist}-{version}"
    dest = root / name
    if (dest / MARKER).is_file():
        return dest
    root.mkdir(parents=True, exist_ok=True)
    with _exclusive(root / f"{name}.lock") as locked:
        if (dest / MARKER).is_file():  # another process built it while we waited
            return dest
        if locked:
            _remove_leftovers(root, name, dest)
        with tempfile.TemporaryDirectory(prefix=f".{name}.tmp-", dir=root) as tmp:
            tmp_path = Path(tmp)
            wheel = _download(dist, version, tmp_path / "wheel")
            staged = tmp_path / "tree"
            count = _extract_py(wheel, staged, PACKAGES[dist])
            info = {"dist": dist, "version": version, "wheel": wheel.name, "py_files": count}
            wheel.unlink()
            (staged / MARKER).write_text(json.dumps(info) + "\n", encoding="utf-8")
            try:
                os.rename(staged, dest)
            except OSError:
                # Lost a race with a process that had no lock (no fcntl): theirs is as good.
                if not (dest / MARKER).is_file():
                    raise
    return dest


def _download(dist: str, version: str, into: Path) -> Path:
    into.mkdir()
    cmd = [
        sys.executable, "-m", "pip", "download", f"{dist}=={version}",
        "--no-deps", "--only-binary=:all:", "--no-cache-dir", "--progress-bar", "off",
        "--disable-pip-version-check", "-d", str(into), *_TARGET,
    ]
    proc = subprocess.run(cmd, capture_output=True, text=True)
    if proc.returncode != 0:
        said = (proc.stdout + proc.stderr).strip().splitlines()[-8:]
        raise ReleaseFetchError(
            f"could not download {dist}=={version} with pip (exit {proc.returncode}); "
            "offline, or no package index? Tests that need a release are marked "
            "`network`: deselect them with -m 'not network'.\n"
            f"command: {' '.join(cmd)}\npip said:\n  " + "\n  ".join(said)
        )
    stem = dist.replace("-", "_")
    wheels = sorted(into.glob("*.whl"))
    if len(wheels) != 1 or not wheels[0].name.startswith(f"{stem}-{version}-"):
        raise ReleaseFetchError(f"pip download {dist}=={version} left {wheels or 'no wheel'} in {into}")
    return wheels[0]


def _extract_py(wheel: Path, staged: Path, package: str) -> int:
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
                raise ReleaseFetchError(f"{wheel.name}: unsafe member path {name!r}")
            target = staged.joinpath(*parts)
            target.parent.mkdir(parents=True, exist_ok=True)
            with zf.open(info) as src, open(target, "wb") as dst:
                shutil.copyfileobj(src, dst, 1 << 20)
            count += 1
    if count == 0 or not (staged / package).is_dir():
        raise ReleaseFetchError(f"{wheel.name} holds no {package}/*.py files")
    return count


def _remove_leftovers(root: Path, name: str, dest: Path) -> None:
    """Under the lock, any temp dir of this release is from a process that died mid-way."""
    for stale in root.glob(f".{name}.tmp-*"):
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
    with open(lock_path, "a+") as handle:
        fcntl.flock(handle.fileno(), fcntl.LOCK_EX)
        try:
            yield True
        finally:
            fcntl.flock(handle.fileno(), fcntl.LOCK_UN)


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 2 or any(a.startswith("-") for a in args):
        print(f"usage: python -m dtype_lint.releases DIST VERSION   (DIST: {', '.join(PACKAGES)})",
              file=sys.stderr)
        return 2
    try:
        print(release_tree(args[0], args[1]))
    except ReleaseFetchError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
