"""The exclude files git reads besides `.gitignore`: `$GIT_DIR/info/exclude` and the file named by
`core.excludesFile` (by default `$XDG_CONFIG_HOME/git/ignore`, or `~/.config/git/ignore`).

They apply only inside a git work tree, with patterns relative to its top, and decide below every
`.gitignore` (gitignore(5): a `.gitignore` decides over `info/exclude`, which decides over
`core.excludesFile`). Found without running git, so that a machine without git lints the same:

- the repository: the nearest `.git` above the project root, a folder or a `gitdir: <path>` file
  (a linked worktree, a submodule); `info/exclude` is read from its common folder (a worktree's
  `commondir`), as git does;
- `core.excludesFile`: the last value in git's configuration files, read in git's order (the
  system file unless `GIT_CONFIG_NOSYSTEM`, `GIT_CONFIG_SYSTEM` naming another; the global ones,
  or only `GIT_CONFIG_GLOBAL` when set; the repository's `config`, and `config.worktree` when
  `extensions.worktreeConfig` is on). `~/` is expanded; a relative path is taken from the work
  tree's top (where git runs hooks). Not followed: `[include]`/`[includeIf]` files, `-c` and
  `GIT_CONFIG_COUNT` settings from the environment, `GIT_DIR` and `GIT_WORK_TREE`.

Every file here is read through the safe reader: a FIFO or a device is never opened.
"""

from __future__ import annotations

import os

from dtype_lint.core.records import record
from dtype_lint.core.safe_read import read_bytes

# A git configuration file is a few KB; anything this large is not read.
MAX_CONFIG_BYTES = 1 << 20


@record(frozen=True)
class Repository:
    """A git work tree: its top folder and its git folders."""
    top: str  # the work tree's top folder (absolute)
    git_dir: str  # this work tree's git folder (a linked worktree's own, under the main one)
    common_dir: str  # where info/, config and the objects live (the main git folder)


def find_repository(start: str) -> Repository | None:
    """The git work tree holding the folder `start` (absolute), or None outside any."""
    folder = os.path.abspath(start)
    while True:
        dot_git = os.path.join(folder, ".git")
        git_dir = None
        if os.path.isdir(dot_git):
            git_dir = dot_git
        elif os.path.isfile(dot_git):
            git_dir = _gitdir_of_file(dot_git)
        if git_dir is not None and os.path.isdir(git_dir):
            return Repository(folder, git_dir, _common_dir(git_dir))
        parent = os.path.dirname(folder)
        if parent == folder:
            return None
        folder = parent


def _read_text(path: str) -> str | None:
    try:
        return read_bytes(path, MAX_CONFIG_BYTES).decode("utf-8", "surrogateescape")
    except (OSError, ValueError):
        return None


def _gitdir_of_file(path: str) -> str | None:
    """`gitdir: <path>` of a `.git` file, relative to the folder that holds the file."""
    text = _read_text(path)
    if text is None or not text.startswith("gitdir:"):
        return None
    target = text[len("gitdir:"):].strip()
    return os.path.normpath(os.path.join(os.path.dirname(path), target)) if target else None


def _common_dir(git_dir: str) -> str:
    text = _read_text(os.path.join(git_dir, "commondir"))
    if text is None or not text.strip():
        return git_dir
    return os.path.normpath(os.path.join(git_dir, text.strip()))


def config_files(repo: Repository) -> list[str]:
    """git's configuration files that can set `core.excludesFile`, lowest precedence first."""
    env = os.environ
    files = []
    if not env.get("GIT_CONFIG_NOSYSTEM"):
        files.append(env.get("GIT_CONFIG_SYSTEM") or "/etc/gitconfig")
    if env.get("GIT_CONFIG_GLOBAL") is not None:
        files.append(env["GIT_CONFIG_GLOBAL"])
    else:
        home = os.path.expanduser("~")
        files += [os.path.join(_xdg_config_home(), "git", "config"), os.path.join(home, ".gitconfig")]
    files.append(os.path.join(repo.common_dir, "config"))
    if (config_value([files[-1]], "extensions", "worktreeconfig") or "").lower() in ("true", "yes", "on", "1"):
        files.append(os.path.join(repo.git_dir, "config.worktree"))
    return [f for f in files if f]


def _xdg_config_home() -> str:
    return os.environ.get("XDG_CONFIG_HOME") or os.path.join(os.path.expanduser("~"), ".config")


def config_value(files: list[str], section: str, key: str) -> str | None:
    """The last value of `section.key` (no subsection; both case-insensitive) in `files`."""
    found = None
    for path in files:
        text = _read_text(path)
        if text is None:
            continue
        for sect, name, value in parse_config(text):
            if sect == section and name == key:
                found = value
    return found


def parse_config(text: str) -> list[tuple[str, str, str]]:
    """(section, key, value) of each variable in a git configuration file, in order: section and
    key lower-cased (a subsection is kept after a dot, as written), values unquoted, escapes read,
    comments and backslash line continuations handled; a bare key is "true"."""
    out: list[tuple[str, str, str]] = []
    section = ""
    i, n = 0, len(text)
    while i < n:
        # Skip blank space and comment lines.
        while i < n and text[i] in " \t\r\n":
            i += 1
        if i >= n:
            break
        if text[i] in "#;":
            i = _line_end(text, i)
            continue
        if text[i] == "[":
            close = text.find("]", i)
            if close < 0:
                break  # git refuses the file from here on
            section = _section_name(text[i + 1:close])
            i = close + 1
            continue
        start = i
        while i < n and (text[i].isalnum() or text[i] == "-"):
            i += 1
        name = text[start:i].lower()
        if not name:
            i = _line_end(text, i)
            continue
        while i < n and text[i] in " \t":
            i += 1
        if i >= n or text[i] in "\r\n#;":
            out.append((section, name, "true"))
            continue
        if text[i] != "=":
            i = _line_end(text, i)
            continue
        value, i = _value(text, i + 1)
        out.append((section, name, value))
    return out


def _line_end(text: str, i: int) -> int:
    end = text.find("\n", i)
    return len(text) if end < 0 else end + 1


def _section_name(inside: str) -> str:
    """`core`, `remote "origin"` (subsection kept as written) or the old `branch.main`."""
    inside = inside.strip()
    if '"' in inside:
        name, _, rest = inside.partition('"')
        sub = rest.rsplit('"', 1)[0].replace('\\"', '"').replace("\\\\", "\\")
        return f"{name.strip().lower()}.{sub}"
    name, dot, sub = inside.partition(".")
    return f"{name.lower()}.{sub.lower()}" if dot else name.lower()


def _value(text: str, i: int) -> tuple[str, int]:
    """A value from just after its `=` to the end of its line; returns (value, next index)."""
    n = len(text)
    out: list[str] = []
    quoted = False
    pending_space = ""  # blank space kept only when more of the value follows it
    while i < n:
        c = text[i]
        if c == "\n" or (c in "#;" and not quoted):
            if c != "\n":
                i = _line_end(text, i) - 1
            i += 1
            break
        if c == "\\" and i + 1 < n:
            nxt = text[i + 1]
            if nxt == "\n":  # a continuation line
                i += 2
                continue
            if nxt == "\r" and text[i + 2:i + 3] == "\n":
                i += 3
                continue
            out.append(pending_space + {"n": "\n", "t": "\t", "b": "\b"}.get(nxt, nxt))
            pending_space = ""
            i += 2
            continue
        if c == '"':
            quoted = not quoted
            i += 1
            continue
        if c in " \t\r" and not quoted:
            if out:  # git keeps inner blank space, each character of it as one space
                pending_space += " " if c != "\r" else ""
            i += 1
            continue
        out.append(pending_space + c)
        pending_space = ""
        i += 1
    return "".join(out), i


def exclude_files(repo: Repository) -> list[str]:
    """The paths of the repository-wide exclude files, lowest precedence first:
    `core.excludesFile` (or its default) and `info/exclude`. They may not exist."""
    configured = config_value(config_files(repo), "core", "excludesfile")
    if configured is None:
        global_file = os.path.join(_xdg_config_home(), "git", "ignore")
    elif configured == "":
        global_file = None  # set empty: no global exclude file
    else:
        global_file = os.path.join(repo.top, os.path.expanduser(configured))
    info = os.path.join(repo.common_dir, "info", "exclude")
    return [p for p in (global_file, info) if p]


def watched_files(root: str) -> list[str]:
    """Every file whose content decides the repository-wide excludes of a project at `root`
    (exclude files and configuration files, present or not): for records that must be
    invalidated when one of them changes (fast_record)."""
    repo = find_repository(root)
    if repo is None:
        return []
    return [*config_files(repo), *exclude_files(repo)]
