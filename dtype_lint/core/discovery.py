"""Which files a run looks at: paths → Python files, minus excludes, optionally only changed ones."""

from __future__ import annotations

import fnmatch
import functools
import os
import re
from pathlib import Path
from typing import NamedTuple

from dtype_lint.core.gitignore import GitIgnore, for_folder, read_ignore_file

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

    @property
    def has_path_patterns(self) -> bool:
        return self._path is not None

    def excluded_path(self, rel_posix: str) -> bool:
        return bool(self._path and self._path.match(rel_posix))


class Found(NamedTuple):
    """One discovered file: the name shown, where it really is, and the module it defines."""

    path: str  # as the user reaches it (relative to cwd when the walk started from a relative path)
    real: str  # absolute, symlinks resolved: one file reached by two names has one `real`
    module: str  # the dotted name it is imported by (module_name)


def discover(paths: list[str], excludes: tuple[str, ...], root: Path, temps: list[str] | None = None) -> list[str]:
    """Python files under paths, sorted, as display paths (relative to cwd when given relative).

    A file named explicitly is always checked, as in ruff; excludes prune directory walks. One
    file reached by several names (a symlink and its target, overlapping paths) is listed once,
    under its own name rather than a link's. `temps`: collects temp files a killed dtype-lint
    run left in the folders walked (see writer.is_temp_name).
    """
    return [f.path for f in discover_files(paths, excludes, root, temps=temps)]


def discover_files(paths: list[str], excludes: tuple[str, ...], root: Path,
                   skip_real: set[str] | None = None, temps: list[str] | None = None,
                   force_exclude: bool = False, messages: list[str] | None = None,
                   visited: list[tuple[str, bool]] | None = None) -> list[Found]:
    """`discover`, with each file's real path and module name, in one walk per directory given.

    Work per file is a few string operations: the module name is carried down the walk (the
    package a folder belongs to is known from its parent), and `realpath` is called only for
    symlinks (a folder reached without following a link has its parent's real path plus its own
    name). `skip_real`: real paths already listed elsewhere (named files), left out.
    `force_exclude`: a file or folder named in `paths` is left out too when the excludes (or the
    .gitignore files) match its path below the root (Ruff's `--force-exclude`, for pre-commit,
    which names each file).
    `.gitignore` files (gitignore.py) prune the walk as git would; what could not be read in them
    is said in `messages`. `visited`: collects (folder, holds a .gitignore) for each folder the
    walks listed (what layout_cache.py stamps).
    """
    excluder = Excluder(tuple(DEFAULT_EXCLUDES) + tuple(excludes))
    root_abs = os.path.abspath(root)
    out: list[Found] = []
    where: dict[str, int] = dict.fromkeys(skip_real or (), -1)  # real path -> index in out

    def add(found: Found, is_link: bool) -> None:
        i = where.get(found.real)
        if i is None:
            where[found.real] = len(out)
            out.append(found)
        elif i >= 0 and not is_link and os.path.islink(out[i].path):
            out[i] = found  # the file itself, not the link to it

    for given in paths:
        p = Path(given)
        if not p.exists():
            raise DiscoveryError(f"{given}: no such file or directory")
        if force_exclude and _named_excluded(p, root_abs, excluder, messages):
            continue
        if not p.is_dir():
            add(Found(str(p), os.path.realpath(p), module_name(str(p), root_abs)), os.path.islink(p))
            continue
        # A folder named on the command line is walked even when ignored (as a named file is
        # checked); the .gitignore files above it and in it apply below it.
        ignores = for_folder(root_abs, os.path.abspath(p), messages) if _inside(p, root_abs) else GitIgnore()
        _walk(str(p), _rel(p, root), excluder, root_abs, add, temps, ignores, messages, visited)
    return out


def _inside(path: Path, root_abs: str) -> bool:
    real, root = os.path.realpath(path), os.path.realpath(root_abs)
    return real == root or real.startswith(root.rstrip(os.sep) + os.sep)


def path_excluded(path: str | os.PathLike, excludes: tuple[str, ...], root: Path,
                  messages: list[str] | None = None) -> bool:
    """Would the default and configured excludes or the project's .gitignore files leave out
    `path` (a file named on the command line, or a buffer's file name), below the root?"""
    return _named_excluded(Path(path), os.path.abspath(root), Excluder(tuple(DEFAULT_EXCLUDES) + tuple(excludes)),
                           messages)


def _named_excluded(path: Path, root_abs: str, excluder: Excluder, messages: list[str] | None = None) -> bool:
    """Do the excludes or the .gitignore files match a path named on the command line? Judged on
    its path below the project root (the name as given when it lies outside), every folder on
    the way included."""
    rel = os.path.relpath(os.path.abspath(path), root_abs)
    rel_posix = Path(rel).as_posix() if not rel.startswith("..") else path.as_posix()
    rel_posix = rel_posix.lstrip("./") if rel_posix.startswith("./") else rel_posix
    if rel_posix in ("", "."):
        return False
    parts = rel_posix.split("/")
    if any(excluder.excluded("/".join(parts[: i + 1])) for i in range(len(parts))):
        return True
    if rel.startswith("..") or not _inside(path, root_abs):
        return False
    ignores = for_folder(root_abs, os.path.dirname(os.path.abspath(path)), messages)
    is_dir = path.is_dir()
    return any(ignores.ignored("/".join(parts[: i + 1]), is_dir or i < len(parts) - 1) for i in range(len(parts)))


def _walk(top: str, top_rel: str, excluder: Excluder, root_abs: str, add, temps: list[str] | None,
          ignores: GitIgnore | None = None, messages: list[str] | None = None,
          visited: list[tuple[str, bool]] | None = None) -> None:
    """Depth first in sorted order, a folder's files before its subfolders (as os.walk with
    sorted names); folder symlinks are not followed. `add(found, is_link)` takes each file;
    `temps` collects temp files a killed dtype-lint run left (see writer.is_temp_name)."""
    from dtype_lint.core.writer import TEMP_SUFFIX, is_temp_name

    top_abs = os.path.abspath(top)
    base = _import_root(top_abs, root_abs)
    parts = None if base is None else [x for x in os.path.relpath(top_abs, base).split(os.sep) if x not in ("", ".")]
    src = os.path.join(root_abs, "src")
    dot = "." + os.sep
    excluded_names: dict[str, bool] = {}  # file names repeat across folders (`__init__.py`...)
    path_patterns = excluder.has_path_patterns
    # (display path, root-relative posix path, real path, absolute path, module parts or None)
    stack = [(top, top_rel, os.path.realpath(top), top_abs, parts, ignores or GitIgnore())]
    first = True
    while stack:
        dirpath, rel_dir, real_dir, abs_dir, parts, ignores = stack.pop()
        try:
            with os.scandir(dirpath) as it:
                entries = list(it)
        except OSError:
            continue
        files: list[os.DirEntry[str]] = []
        dirs: list[os.DirEntry[str]] = []
        for e in entries:
            try:
                is_dir = e.is_dir()
            except OSError:
                is_dir = False
            (dirs if is_dir else files).append(e)
        files.sort(key=_name)
        has_ignore = any(e.name == ".gitignore" for e in files)
        if visited is not None:
            visited.append((abs_dir, has_ignore))
        if not first and has_ignore:
            # The walk's top folder has its .gitignore already (for_folder); each folder below
            # adds its own, relative to itself.
            base = "" if rel_dir in ("", ".") else rel_dir
            ignores = ignores.below(base, read_ignore_file(os.path.join(dirpath, ".gitignore"), base, messages))
        first = False
        prefix = "" if not parts else ".".join(parts) + "."
        real_prefix = real_dir if real_dir.endswith(os.sep) else real_dir + os.sep
        for e in files:
            name = e.name
            if name.endswith(".py"):
                stem = name[:-3]
            elif name.endswith(".pyi"):
                stem = name[:-4]
            else:
                if temps is not None and name.endswith(TEMP_SUFFIX) and is_temp_name(name):
                    temps.append(os.path.join(dirpath, name))
                continue
            excluded = excluded_names.get(name)
            if excluded is None:
                excluded = excluded_names[name] = excluder.excluded_name(name)
            if excluded or (path_patterns and excluder.excluded_path(_join(rel_dir, name))):
                continue
            if ignores and ignores.ignored(_join(rel_dir, name), False):
                continue
            link = e.is_symlink()
            # `check` with no path walks `.`: report `pkg/x.py` as every format and a named file
            # do, not `./pkg/x.py`.
            shown = e.path[2:] if e.path.startswith(dot) else e.path
            real = os.path.realpath(e.path) if link else real_prefix + name
            # One string for both when they are equal (a walk from an absolute path): every
            # file's names live as long as the run (vLLM 0.34.0: 3,604 files, 0.45 MiB).
            add(Found(shown, shown if real == shown else real,
                      prefix[:-1] if stem == "__init__" else prefix + stem), link)
        subdirs = []
        for e in sorted(dirs, key=_name, reverse=True):
            name = e.name
            if excluder.excluded_child(_join(rel_dir, name), name) or e.is_symlink():
                continue
            if ignores and ignores.ignored(_join(rel_dir, name), True):
                continue
            sub_abs = os.path.join(abs_dir, name)
            if sub_abs == src or sub_abs.startswith(src + os.sep):
                sub_parts = [] if sub_abs == src else (parts or []) + [name]
            elif parts is not None:
                sub_parts = parts + [name]
            elif os.path.exists(os.path.join(e.path, "__init__.py")) or (
                    _below(sub_abs, root_abs) and is_namespace_folder(sub_abs)):
                # the topmost package (or the namespace folder above it): its parent is where it
                # is imported from
                sub_parts = [name]
            else:
                sub_parts = None
            subdirs.append((e.path, _join(rel_dir, name), os.path.join(real_dir, name), sub_abs, sub_parts, ignores))
        stack.extend(subdirs)


def _name(entry: os.DirEntry) -> str:
    return entry.name


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
        changed = _git(git, ["diff", "--name-only", "--no-ext-diff", "--no-textconv", "--diff-filter=ACMR",
                             commit, "--"],
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
    import subprocess  # only --changed-since runs git

    out = ["-c", "core.fsmonitor=false", "-c", f"core.hooksPath={os.devnull}", "-c", "diff.external="]
    proc = subprocess.run(["git", "-c", "core.fsmonitor=false", "config", "--null", "--name-only", "--get-regexp",
                           r"^filter\..*\.(clean|smudge|process)$"], cwd=cwd, env=env, capture_output=True)
    for name in proc.stdout.decode("utf-8", "replace").split("\0"):
        if name:
            out += ["-c", f"{name}="]
    return out


def _git(git: list[str], args: list[str], cwd: Path, env: dict[str, str], failure: str | None = None) -> str:
    import subprocess

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


def top_package(module: str, path: str) -> str:
    """The package a file's own helper belongs in: the module's first component, or through the
    namespace folders above it to its first regular package (`fla.layers` for `fla/layers/x.py`
    when `fla/` has no `__init__.py`: the wheel ships `fla/layers/`, not a file put in `fla/`).
    "" for a top-level module."""
    if "." not in module:
        return ""
    parts = module.split(".")
    folder = os.path.dirname(os.path.abspath(path))
    below = len(parts) - (0 if os.path.basename(path) == "__init__.py" else 1)
    base = folder
    for _ in range(below):
        base = os.path.dirname(base)
    for depth in range(1, below + 1):
        if os.path.exists(os.path.join(base, *parts[:depth], "__init__.py")):
            return ".".join(parts[:depth])
    return parts[0]


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
    # A namespace folder above the topmost package (or holding the file) is part of the name:
    # flash-linear-attention's wheel ships `fla/layers/` and `fla/models/` with no
    # `fla/__init__.py` (fla-core provides it), and its files import `fla.layers.X`.
    candidate = directory if top is None else os.path.dirname(top)
    while candidate != root and _below(candidate, root) and is_namespace_folder(candidate):
        top = candidate
        candidate = os.path.dirname(candidate)
    return os.path.dirname(top) if top is not None else None


def _below(folder: str, root: str | None) -> bool:
    """Is `folder` strictly inside `root` (anywhere but a filesystem root when no root is given)?
    The root itself is never a namespace folder: its parent is outside the project."""
    if root is None:
        return os.path.dirname(folder) != folder
    return folder.startswith(root.rstrip(os.sep) + os.sep)


# A file of a sub-package that imports it through the folder's name (`from fla.layers.utils
# import`, scanning `fla/layers/`): the sub-package's own name must follow, since a distribution
# folder named as its package (`packages/alpha/alpha/`) holds files importing `alpha.layers`.
_SELF_IMPORT = r"^[ \t]*(?:from|import)[ \t]+{name}\.{package}\b"
_SELF_IMPORT_FILES = 64  # files read per namespace folder at most: a few ms, once per run
_NESTING = 2  # namespace folders inside a namespace folder (`a/b/pkg`, imported `a.b.pkg`)


@functools.lru_cache(maxsize=1024)
def is_namespace_folder(folder: str, depth: int = 0) -> bool:
    """Is `folder` a namespace package (PEP 420) its sub-packages are imported through: no
    `__init__.py`, a sub-folder that is a package (or such a namespace folder itself), and a
    file of such a sub-package that imports `<folder name>.<sub-package name>`? A folder of loose packages that
    never names itself (`tests/` holding `tests/models/__init__.py`, run from `tests/`) is not:
    its packages stay top-level as they are imported. `depth`: namespace folders nested in it
    so far (at most _NESTING: a data folder of many plain folders is not searched through)."""
    name = os.path.basename(folder)
    if not name.isidentifier() or name in DEFAULT_EXCLUDES or depth > _NESTING or \
            os.path.exists(os.path.join(folder, "__init__.py")):
        return False
    try:
        subfolders = sorted(e.path for e in os.scandir(folder) if e.is_dir(follow_symlinks=False))
    except OSError:
        return False
    packages = [sub for sub in subfolders if os.path.exists(os.path.join(sub, "__init__.py"))
                or is_namespace_folder(sub, depth + 1)]
    if not packages:
        return False
    budget = _SELF_IMPORT_FILES
    for package in packages:
        pattern = re.compile(_SELF_IMPORT.format(name=re.escape(name), package=re.escape(os.path.basename(package))),
                             re.MULTILINE)
        for dirpath, dirnames, filenames in os.walk(package):
            dirnames.sort()
            budget -= 1  # a folder listed counts as a file read: a tree of empty folders ends too
            for file in sorted(f for f in filenames if f.endswith(".py")):
                if budget <= 0:
                    return False
                budget -= 1
                try:
                    with open(os.path.join(dirpath, file), encoding="utf-8", errors="replace") as handle:
                        if pattern.search(handle.read()):
                            return True
                except OSError:
                    continue
    return False
