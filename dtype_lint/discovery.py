"""Which files a run looks at: paths → Python files, minus excludes, optionally only changed ones."""

from __future__ import annotations

import fnmatch
import functools
import os
import re
import subprocess
from pathlib import Path

# Written gitignore-style: a bare name matches that directory or file anywhere in the tree.
DEFAULT_EXCLUDES = (
    ".git", ".hg", ".svn", ".venv", "venv", ".tox", ".nox", "__pycache__", ".mypy_cache",
    ".pytest_cache", ".ruff_cache", ".dtype_lint_cache", "node_modules", "build", "dist",
    "site-packages", ".eggs", "*.egg-info",
)


class DiscoveryError(Exception):
    pass


class Excluder:
    """gitignore-style patterns compiled once: bare names match any path component, patterns with
    a slash match the path relative to the root."""

    def __init__(self, patterns: tuple[str, ...]):
        names, paths = [], []
        for pat in patterns:
            anchored = pat.startswith("/")
            pat = pat.strip("/")
            if not pat:
                continue
            if "/" in pat or anchored:
                paths.append(fnmatch.translate(pat))
                paths.append(fnmatch.translate(pat + "/*"))
            else:
                names.append(fnmatch.translate(pat))
        self._name = re.compile("|".join(names)) if names else None
        self._path = re.compile("|".join(paths)) if paths else None

    def excluded_name(self, name: str) -> bool:
        return bool(self._name and self._name.match(name))

    def excluded(self, rel_posix: str) -> bool:
        if self._path and self._path.match(rel_posix):
            return True
        return any(self.excluded_name(part) for part in rel_posix.split("/"))

    def excluded_child(self, rel_posix: str, name: str) -> bool:
        """For a directory walk that already pruned the parents: only the new component."""
        return self.excluded_name(name) or bool(self._path and self._path.match(rel_posix))


def read_gitignore(root: Path) -> tuple[str, ...]:
    """The plain patterns of root/.gitignore. Negations (`!pat`) are not supported and skipped."""
    try:
        lines = (root / ".gitignore").read_text(encoding="utf-8").splitlines()
    except OSError:
        return ()
    pats = []
    for line in lines:
        line = line.strip()
        if line and not line.startswith(("#", "!")):
            pats.append(line)
    return tuple(pats)


def discover(paths: list[str], excludes: tuple[str, ...], root: Path) -> list[str]:
    """Python files under paths, sorted, as display paths (relative to cwd when given relative).

    A file named explicitly is always checked, as in ruff; excludes prune directory walks.
    """
    excluder = Excluder(tuple(DEFAULT_EXCLUDES) + tuple(excludes) + read_gitignore(root))
    out: list[str] = []
    seen: set[str] = set()
    for given in paths:
        p = Path(given)
        if not p.exists():
            raise DiscoveryError(f"{given}: no such file or directory")
        if p.is_file():
            key = os.path.realpath(p)
            if key not in seen:
                seen.add(key)
                out.append(str(p))
            continue
        base_rel = _rel(p, root)
        for dirpath, dirnames, filenames in os.walk(p):
            sub = os.path.relpath(dirpath, p)
            rel_dir = base_rel if sub == "." else _join(base_rel, sub.replace(os.sep, "/"))
            dirnames[:] = sorted(
                d for d in dirnames if not excluder.excluded_child(_join(rel_dir, d), d)
            )
            for name in sorted(filenames):
                if not name.endswith((".py", ".pyi")):
                    continue
                if excluder.excluded_child(_join(rel_dir, name), name):
                    continue
                full = os.path.join(dirpath, name)
                # Symlinked duplicates are the only way one file shows up twice in a walk.
                key = os.path.realpath(full) if os.path.islink(full) or os.path.islink(dirpath) else os.path.abspath(full)
                if key not in seen:
                    seen.add(key)
                    out.append(full)
    return out


def _rel(path: Path, root: Path) -> str:
    try:
        return path.resolve().relative_to(root.resolve()).as_posix()
    except ValueError:
        return path.as_posix()


def _join(rel_dir: str, name: str) -> str:
    return name if rel_dir in ("", ".") else f"{rel_dir}/{name}"


def changed_since(ref: str, cwd: Path) -> set[str]:
    """Real paths of .py files changed (or untracked) relative to a git ref."""
    try:
        top = _git(["rev-parse", "--show-toplevel"], cwd).strip()
        changed = _git(["diff", "--name-only", "--diff-filter=ACMR", ref, "--"], cwd)
        untracked = _git(["ls-files", "--others", "--exclude-standard"], cwd)
    except FileNotFoundError:
        raise DiscoveryError("--changed-since needs git on PATH") from None
    names = [n for n in (changed + untracked).splitlines() if n.endswith((".py", ".pyi"))]
    return {os.path.realpath(os.path.join(top, n)) for n in names}


def _git(args: list[str], cwd: Path) -> str:
    proc = subprocess.run(["git", *args], cwd=cwd, capture_output=True, text=True)
    if proc.returncode != 0:
        raise DiscoveryError(f"git {' '.join(args)}: {proc.stderr.strip()}")
    return proc.stdout


def module_name(path: str) -> str:
    """Dotted module name: the file's stem joined to every parent directory holding __init__.py."""
    p = Path(os.path.abspath(path))
    prefix = _package_of(str(p.parent))
    if p.stem == "__init__":
        return prefix
    return f"{prefix}.{p.stem}" if prefix else p.stem


@functools.lru_cache(maxsize=4096)
def _package_of(directory: str) -> str:
    if not os.path.exists(os.path.join(directory, "__init__.py")):
        return ""
    parent = os.path.dirname(directory)
    name = os.path.basename(directory)
    if parent == directory:
        return name
    outer = _package_of(parent)
    return f"{outer}.{name}" if outer else name
