"""The trees bench.py measures: a copy of the source tree (1×) and ten renamed copies of it (10×).

Each corpus is a project of its own: the copies of the tree's top-level packages and modules,
and a `pyproject.toml` with a `[tool.dtype-lint]` table, so that a run on one named file (what
pre-commit does) is checked against the index of the whole project, as in a real repository. In
the 10× corpus, copy 0 is the tree itself and copy `i` (1-9) renames every top-level name `x` of
the tree to `x{i}` (`vllm1` … `vllm9`), in paths and as a whole word in the text, so that imports
stay inside their copy and the project holds ten times the modules, classes and sites of the
original: a vLLM ten times the size, the preset's classes still defined (in copy 0).

Corpora of a pinned release are built once under the releases cache (outside the repo: no
engine's code enters this project) and reused; a corpus is published by one rename after its
marker is written, like the release trees themselves.
"""

from __future__ import annotations

import hashlib
import os
import re
import shutil
import tempfile
import time
from pathlib import Path

MARKER = ".bench-corpus-complete"
PYPROJECT = "[tool.dtype-lint]\n# A corpus built by benchmarks/corpus.py: zero configuration, a project root.\n"


def top_level(tree: Path) -> list[str]:
    """The tree's top-level packages and modules (what a copy renames)."""
    out = []
    for entry in sorted(os.scandir(tree), key=lambda e: e.name):
        if entry.name.startswith(".") or entry.name == "__pycache__":
            continue
        if entry.is_dir() or entry.name.endswith(".py"):
            out.append(entry.name[:-3] if entry.name.endswith(".py") else entry.name)
    return out


def build(tree: Path, scale: int, dest: Path) -> Path:
    """`dest` holding the corpus of `scale` copies of `tree` (built when missing)."""
    if (dest / MARKER).is_file():
        return dest
    dest.parent.mkdir(parents=True, exist_ok=True)
    staged = Path(tempfile.mkdtemp(prefix=f".{dest.name}.", dir=dest.parent))
    try:
        names = top_level(tree)
        for i in range(scale):
            rename = {n: n if i == 0 else f"{n}{i}" for n in names}
            _copy(tree, staged, rename)
        (staged / "pyproject.toml").write_text(PYPROJECT, encoding="utf-8")
        (staged / MARKER).write_text(f"{tree}\n{scale}\n", encoding="utf-8")
        try:
            os.rename(staged, dest)
        except OSError:
            if not (dest / MARKER).is_file():
                raise
    finally:
        shutil.rmtree(staged, ignore_errors=True)
    return dest


def _copy(tree: Path, into: Path, rename: dict[str, str]) -> None:
    changed = {a: b for a, b in rename.items() if a != b}
    word = re.compile(rb"\b(" + b"|".join(re.escape(a.encode()) for a in changed) + rb")\b") if changed else None
    for dirpath, dirnames, filenames in os.walk(tree):
        dirnames[:] = sorted(d for d in dirnames if not d.startswith(".") and d != "__pycache__")
        rel = Path(dirpath).relative_to(tree)
        parts = rel.parts
        if not parts:
            dirnames[:] = [d for d in dirnames if d in rename]
        out = into.joinpath(*([rename.get(parts[0], parts[0]), *parts[1:]] if parts else []))
        out.mkdir(parents=True, exist_ok=True)
        for name in sorted(filenames):
            if not name.endswith(".py") or (not parts and name[:-3] not in rename):
                continue
            data = (Path(dirpath) / name).read_bytes()
            if word is not None:
                data = word.sub(lambda m: changed[m.group(1).decode()].encode(), data)
            target = name if parts else rename[name[:-3]] + ".py"
            (out / target).write_bytes(data)


def corpus_dir(cache_root: Path, tree: Path, scale: int) -> Path:
    """Where the corpus of a tree lives in the cache: named by the tree's path and marker."""
    marker = tree / ".dtype-lint-complete"
    stamp = marker.read_text(encoding="utf-8", errors="replace") if marker.is_file() else ""
    key = hashlib.sha1(f"{tree.resolve()}\n{stamp}".encode()).hexdigest()[:12]
    return cache_root / "bench-corpus" / f"{tree.name}-{key}-x{scale}"


EDIT_MARK = "# dtype-lint benchmark edit "


def edit(path: Path, seq: int) -> None:
    """Edit `path` for real: its text ends with a comment naming the sample (the previous
    sample's comment replaced), so its cached analysis no longer applies and the run analyses
    it again, as pre-commit after an edit does; its findings stay the same."""
    text = path.read_text(encoding="utf-8")
    lines = text.splitlines(keepends=True)
    while lines and lines[-1].startswith(EDIT_MARK):
        lines.pop()
    body = "".join(lines)
    if body and not body.endswith("\n"):
        body += "\n"
    # The clock too: a sample number alone repeats across runs, and a text the cache has seen
    # (the previous run's last edit, caught up by the warm-up) would be a cache hit.
    path.write_text(f"{body}{EDIT_MARK}{seq} {time.time_ns()}\n", encoding="utf-8")


def touch(path: Path, seq: int) -> None:
    """Make `path` look edited (a new mtime, same bytes): its cache entries are stale, its
    findings the same, so every sample of the pre-commit rows does the same work."""
    st = path.stat()
    ns = max(st.st_mtime_ns, 1_000_000_000 * 1_700_000_000) + (seq + 1) * 1_000_000
    os.utime(path, ns=(ns, ns))
