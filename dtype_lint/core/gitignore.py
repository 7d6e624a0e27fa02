""".gitignore files read as git reads them: negations, directory rules, nested files.

Patterns are parsed by the maintained `pathspec` library (git's wildmatch: `*`, `**`, `?`,
ranges, escapes, anchoring, trailing spaces); which pattern decides follows git's own algorithm
(gitignore(5)), applied here rather than through `GitIgnoreSpec.match_file`, which answers for
files only and lets `!build/keep.py` re-include a file of the excluded folder `build/`:
- the walk asks about each folder before entering it, and never enters an excluded one (git: "it
  is not possible to re-include a file if a parent directory of that file is excluded");
- for a folder or a file, the last pattern that matches that path itself decides; a pattern
  ending in `/` matches folders only (`!*/` re-includes every folder, no file);
- a `.gitignore` in a folder applies to the paths below it, relative to it, and decides over
  those of the folders above;
- inside a git work tree, `$GIT_DIR/info/exclude` and `core.excludesFile` (git_excludes.py) apply
  too, relative to the work tree's top, below every `.gitignore`.

A pattern with more than MAX_STAR_RUNS runs of `*` is not applied (a message says so): Python's
regular expressions backtrack, and `a*a*a*a*a*b` against a long name would hang the run.

Every `.gitignore` is read through the safe reader (source.read_bytes): a FIFO, a device
(`/dev/zero`) or a huge file is not read, and a message says so; bytes that are not UTF-8 are
kept as they are (a name on disk is matched byte for byte, as git does) and a message says so.
"""

from __future__ import annotations

import os
import warnings
from dataclasses import field

from dtype_lint.core.records import record
from dtype_lint.core.source import read_bytes

TYPE_CHECKING = False  # typing.TYPE_CHECKING without importing typing (the `re` import stays lazy)
if TYPE_CHECKING:
    import re

# A .gitignore is a few KB; anything this large is not one.
MAX_GITIGNORE_BYTES = 1 << 20
_DIR_MARK = "ps_d"


@record(frozen=True)
class _Pattern:
    """One pattern line of an ignore file, compiled."""
    include: bool  # True: ignore; False: a `!` negation
    regex: re.Pattern[str] | None  # compiled; None: matches every path ("*", "**")
    folders_only: bool  # "*/", "**/": every folder, no file


@record
class IgnoreFile:
    """The patterns of one .gitignore, and the folder (root-relative posix, "" for the root)
    they are relative to. `above`: for a file whose folder lies above the project root (a git
    work tree's exclude files), the root's posix path below that folder."""

    base: str
    patterns: list[_Pattern] = field(default_factory=list)
    above: str = ""

    def verdict(self, rel: str, is_dir: bool) -> bool | None:
        """Ignored (True), re-included (False) or untouched (None) by this file's patterns."""
        if self.above:
            rel = f"{self.above}/{rel}"
        elif self.base:
            if not rel.startswith(self.base + "/"):
                return None
            rel = rel[len(self.base) + 1:]
        probe = rel + "/" if is_dir else rel
        decided = None
        for pattern in self.patterns:
            if pattern.regex is None:
                if pattern.folders_only and not is_dir:
                    continue
                decided = pattern.include
                continue
            match = pattern.regex.search(probe)
            if match is None:
                continue
            mark = match.groupdict().get(_DIR_MARK)
            # A match through a folder mark matched that folder, not this path, unless the
            # folder is this path (the probe's own trailing slash).
            if mark is not None and not (is_dir and match.end(_DIR_MARK) == len(probe)):
                continue
            decided = pattern.include
        return decided


# Python's `re` backtracks: `a*a*a*a*a*b` against a long file name takes minutes, so a hostile
# .gitignore could hang every run. Up to this many `*` runs (`*` or `**`) a pattern costs at
# most milliseconds on a 255-character name; a pattern with more is not applied (and said so).
MAX_STAR_RUNS = 3


def star_runs(line: str) -> int:
    """The `*` runs of a pattern, outside `[...]` and escapes."""
    runs, i, n, in_class = 0, 0, len(line), False
    while i < n:
        c = line[i]
        if c == "\\":
            i += 2
            continue
        if in_class:
            in_class = c != "]"
        elif c == "[":
            in_class = True
        elif c == "*":
            runs += 1
            while i < n and line[i] == "*":
                i += 1
            continue
        i += 1
    return runs


def parse(lines: list[str], base: str, messages: list[str] | None = None, where: str = ".gitignore") -> IgnoreFile:
    try:  # pathspec 1.x
        from pathspec.patterns.gitignore.spec import GitIgnoreSpecPattern as Wildmatch
    except ImportError:  # pathspec 0.12
        from pathspec.patterns.gitwildmatch import GitWildMatchPattern as Wildmatch

    out = IgnoreFile(base)
    for number, line in enumerate(lines, 1):
        if star_runs(line) > MAX_STAR_RUNS:
            if messages is not None:
                messages.append(f"{where}:{number}: more than {MAX_STAR_RUNS} `*` in one pattern cannot be matched "
                                "safely; the pattern is not applied")
            continue
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", DeprecationWarning)
                regex, include = Wildmatch.pattern_to_regex(line)
        except (ValueError, TypeError):
            continue  # git skips a pattern it cannot parse
        if include is None or regex is None:
            continue  # blank line or comment
        if regex == ".":
            out.patterns.append(_Pattern(include, None, False))
        elif regex in (f"(?P<{_DIR_MARK}>/)",):
            out.patterns.append(_Pattern(include, None, True))
        else:
            import re

            out.patterns.append(_Pattern(include, re.compile(regex), False))
    return out


def read_ignore_file(path: str, base: str, messages: list[str] | None) -> IgnoreFile | None:
    """The patterns of the .gitignore at `path`, or None when it cannot be read (said in
    `messages`)."""
    try:
        data = read_bytes(path, MAX_GITIGNORE_BYTES)
    except FileNotFoundError:
        return None
    except (OSError, ValueError) as error:
        if messages is not None:
            reason = getattr(error, "strerror", None) or error
            messages.append(f"{path}: not read ({reason}); its patterns are not applied")
        return None
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as error:
        text = data.decode("utf-8", "surrogateescape")
        if messages is not None:
            messages.append(f"{path}: not UTF-8 (byte {error.start}); "
                            "its patterns are matched byte for byte, as git does")
    text = text.removeprefix("\ufeff")
    return parse(text.splitlines(), base, messages, path)


class GitIgnore:
    """The .gitignore files that apply to one walk: a stack from the project root down."""

    def __init__(self, files: list[IgnoreFile] | None = None):
        self.files = list(files or [])

    def ignored(self, rel: str, is_dir: bool) -> bool:
        decided = None
        for file in self.files:  # root first: a deeper file decides over the ones above
            v = file.verdict(rel, is_dir)
            if v is not None:
                decided = v
        return bool(decided)

    def below(self, folder_rel: str, ignore_file: IgnoreFile | None) -> "GitIgnore":
        return GitIgnore(self.files + [ignore_file]) if ignore_file is not None and ignore_file.patterns else self

    def __bool__(self) -> bool:
        return bool(self.files)


def repository_excludes(root: str, messages: list[str] | None) -> list[IgnoreFile]:
    """The exclude files of the git work tree holding `root` (absolute), lowest precedence
    first, with their patterns relative to its top; none outside a work tree."""
    from dtype_lint.core import git_excludes

    repo = git_excludes.find_repository(root)
    if repo is None:
        return []
    above = os.path.relpath(root, repo.top)
    above = "" if above == "." else above.replace(os.sep, "/")
    files = []
    for path in git_excludes.exclude_files(repo):
        f = read_ignore_file(path, "", messages)
        if f is not None and f.patterns:
            f.above = above
            files.append(f)
    return files


def for_folder(root: str, folder: str, messages: list[str] | None) -> GitIgnore:
    """The exclude files of the git work tree holding `root` (repository_excludes), then the
    .gitignore files of the folders from `root` down to `folder` (both absolute, `folder` inside
    `root`): those that apply to a walk starting at `folder`."""
    rel = os.path.relpath(folder, root)
    parts = [] if rel == "." else rel.split(os.sep)
    files = repository_excludes(root, messages)
    for i in range(len(parts) + 1):
        f = read_ignore_file(os.path.join(root, *parts[:i], ".gitignore"), "/".join(parts[:i]), messages)
        if f is not None and f.patterns:
            files.append(f)
    return GitIgnore(files)
