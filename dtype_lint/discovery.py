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


def discover(paths: list[str], excludes: tuple[str, ...], root: Path, temps: list[str] | None = None) -> list[str]:
    """Python files under paths, sorted, as display paths (relative to cwd when given relative).

    A file named explicitly is always checked, as in ruff; excludes prune directory walks. One
    file reached by several names (a symlink and its target, overlapping paths) is listed once,
    under its own name rather than a link's. `temps`: collects temp files a killed dtype-lint
    run left in the folders walked (see writer.is_temp_name).
    """
    from .writer import is_temp_name

    excluder = Excluder(tuple(DEFAULT_EXCLUDES) + tuple(excludes) + read_gitignore(root))
    out: list[str] = []
    where: dict[str, int] = {}  # real path -> index in out

    def add(full: str, key: str, is_link: bool) -> None:
        i = where.get(key)
        if i is None:
            where[key] = len(out)
            out.append(full)
        elif not is_link and os.path.islink(out[i]):
            out[i] = full  # the file itself, not the link to it

    for given in paths:
        p = Path(given)
        if not p.exists():
            raise DiscoveryError(f"{given}: no such file or directory")
        if not p.is_dir():
            add(str(p), os.path.realpath(p), os.path.islink(p))
            continue
        base_rel = _rel(p, root)
        for dirpath, dirnames, filenames in os.walk(p):
            sub = os.path.relpath(dirpath, p)
            rel_dir = base_rel if sub == "." else _join(base_rel, sub.replace(os.sep, "/"))
            dirnames[:] = sorted(
                d for d in dirnames if not excluder.excluded_child(_join(rel_dir, d), d)
            )
            real_dir = os.path.realpath(dirpath)
            for name in sorted(filenames):
                if not name.endswith((".py", ".pyi")):
                    if temps is not None and is_temp_name(name):
                        temps.append(os.path.join(dirpath, name))
                    continue
                if excluder.excluded_child(_join(rel_dir, name), name):
                    continue
                full = os.path.join(dirpath, name)
                if full.startswith("." + os.sep):
                    # `check` with no path walks `.`: report `pkg/x.py` as every format and a
                    # named file do, not `./pkg/x.py`.
                    full = full[2:]
                link = os.path.islink(full)
                add(full, os.path.realpath(full) if link else os.path.join(real_dir, name), link)
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
    if not ref or ref.startswith("-") or any(ord(c) < 32 or c == "\x7f" for c in ref):
        raise DiscoveryError(f"--changed-since {ref!r}: not a git revision")
    try:
        env = _git_env()
        git = ["git", *_git_overrides(cwd, env)]
        top = _git(git, ["rev-parse", "--show-toplevel"], cwd, env).strip()
        commit = _git(git, ["rev-parse", "--verify", "--quiet", f"{ref}^{{commit}}"], cwd, env,
                      f"--changed-since {ref}: not a commit in this repository").strip()
        changed = _git(git, ["diff", "--name-only", "--no-ext-diff", "--no-textconv", "--diff-filter=ACMR", commit, "--"],
                       cwd, env)
        untracked = _git(git, ["ls-files", "--others", "--exclude-standard", "--"], cwd, env)
    except FileNotFoundError:
        raise DiscoveryError("--changed-since needs git on PATH") from None
    names = [n for n in (changed + untracked).splitlines() if n.endswith((".py", ".pyi"))]
    return {os.path.realpath(os.path.join(top, n)) for n in names}


def _git_env() -> dict[str, str]:
    """The environment git runs in: none of the caller's GIT_* variables (GIT_DIR, GIT_EXTERNAL_DIFF,
    GIT_CONFIG_PARAMETERS...), no system or user configuration, no prompts, no pager."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("GIT_")}
    env.update(GIT_CONFIG_NOSYSTEM="1", GIT_CONFIG_GLOBAL=os.devnull, GIT_TERMINAL_PROMPT="0",
               GIT_OPTIONAL_LOCKS="0", GIT_PAGER="cat", GIT_ASKPASS="", SSH_ASKPASS="")
    return env


def _git_overrides(cwd: Path, env: dict[str, str]) -> list[str]:
    """`-c` settings that switch off every command the repository's own config may name and a
    diff could run: the fsmonitor hook, hooks, and each configured content filter (a diff against
    the work tree would run a `clean` filter). Reading the config runs nothing."""
    out = ["-c", "core.fsmonitor=false", "-c", f"core.hooksPath={os.devnull}", "-c", "diff.external="]
    proc = subprocess.run(["git", "-c", "core.fsmonitor=false", "config", "--null", "--name-only", "--get-regexp",
                           r"^filter\..*\.(clean|smudge|process)$"], cwd=cwd, env=env, capture_output=True)
    for name in proc.stdout.decode("utf-8", "replace").split("\0"):
        if name:
            out += ["-c", f"{name}="]
    return out


def _git(git: list[str], args: list[str], cwd: Path, env: dict[str, str], failure: str | None = None) -> str:
    proc = subprocess.run([*git, *args], cwd=cwd, env=env, capture_output=True)
    if proc.returncode != 0:
        raise DiscoveryError(failure or f"git {' '.join(args)}: {proc.stderr.decode('utf-8', 'replace').strip()}")
    return proc.stdout.decode("utf-8", "surrogateescape")


def module_name(path: str, root: str | os.PathLike | None = None) -> str:
    """The dotted name the file is imported by, read off the tree's layout.

    - Under `<root>/src/` (a src layout) the name is the path below `src`, namespace folders
      (PEP 420, no `__init__.py`) included.
    - Otherwise the name starts at the topmost folder with an `__init__.py` above the file (not
      above `root`): folders between it and the file count whether or not they have one, since
      a namespace folder inside a package is still imported through it (sglang's
      `sglang/multimodal_gen/runtime/` has no `__init__.py`; its modules are
      `sglang.multimodal_gen.runtime.*`).
    - A file with no package above it is a top-level module: its stem.
    """
    p = os.path.abspath(path)
    directory, stem = os.path.dirname(p), os.path.splitext(os.path.basename(p))[0]
    base = _import_root(directory, os.path.abspath(root) if root is not None else None)
    parts = [] if base is None else os.path.relpath(directory, base).split(os.sep)
    parts = [x for x in parts if x not in ("", ".")]
    if stem != "__init__":
        parts.append(stem)
    return ".".join(parts)


def import_root(path: str, root: str | os.PathLike | None = None) -> str | None:
    """The folder `path`'s package is imported from (see module_name), or None for a file with
    no package above it."""
    p = os.path.abspath(path)
    return _import_root(os.path.dirname(p), os.path.abspath(root) if root is not None else None)


@functools.lru_cache(maxsize=8192)
def _import_root(directory: str, root: str | None) -> str | None:
    """The folder the file's package is imported from (its name is relative to it), or None."""
    if root is not None:
        src = os.path.join(root, "src")
        if directory == src or directory.startswith(src + os.sep):
            return src
    top = None
    d = directory
    while True:
        if os.path.exists(os.path.join(d, "__init__.py")):
            top = d
        parent = os.path.dirname(d)
        if parent == d or (root is not None and d == root):
            break
        d = parent
    return os.path.dirname(top) if top is not None else None
