"""The pre-commit fast path: a run on named files that cannot hold a site ends before the engine.

Pre-commit runs `dtype-lint check --no-progress FILE...` after every edit, and most edited files
hold no site. Before the pipeline, the rules or rich are imported (0.1-0.2 s of a 0.2 s run), this
module reads the named files and decides whether any of them could give a finding. When none can,
it prints what the full run would print ("All checks passed! (N files checked)", or nothing with
`-q`) and exits 0; otherwise it returns None and the full run follows, as if it had not been here.

A file cannot give a finding when:
- no rule's own prefilter passes on it (its marker AND one of its patterns: `prefilter.Prefilter`);
- it holds no suppression comment (an unused one is DTL902);
- it imports no name that may be an input-dtype helper another module defines (DTL005 reports
  such calls whatever the caller's text): each `from M import n` / `import M.n as x` is followed
  to M's files in the project, and through their re-exports; a helper-shaped `def n` there, a
  star import, or anything unreadable sends the run to the engine;
- it reads as UTF-8 without a BOM or a coding cookie (anything else: the engine decodes it).

What it needs about the project comes from a record the last full run wrote into the cache folder
(`fast-path.json`, see `save_record`): the rules' markers and patterns (so no rule is imported),
the stamps of the configuration file and of the files that decided the run's project-level
warnings (there were none, or the record is not written), every folder of the project with its
stamp (a file added, removed or renamed anywhere changes its folder's stamp) and, from that walk,
where each top-level module name lives. Any mismatch (another dtype-lint, another configuration,
a changed folder) means no fast path: the full run then writes a fresh record.

Only a plain check is taken: `check` with file paths and `--exit-zero`, `--no-progress`, `-q`,
`--color never|auto` (not on a terminal) and `--output-format text|concise`; any other flag,
a folder, a missing file, no project configuration (no pyproject.toml above the files) or
`--no-cache` goes to the full run.
"""

from __future__ import annotations

import json
import os
import re
import sys

import dtype_lint
from dtype_lint.engine.prefilter import Prefilter, has_suppression
from dtype_lint.engine.text_facts import helper_shaped_bodies

RECORD_NAME = "fast-path.json"
RECORD_FORMAT = 1
MAX_SOURCE_BYTES = 4 << 20  # as engine.source: a larger file is DTL900 in the full run
DEFAULT_CACHE_DIR = ".dtype_lint_cache"
# Folder names the layout walk never enters (discovery's defaults; a project's own excludes only
# shrink the project, so leaving them out here makes the fast path more careful, never wrong).
PRUNED = (".git", ".hg", ".svn", ".venv", "venv", ".tox", ".nox", "__pycache__", ".mypy_cache",
          ".pytest_cache", ".ruff_cache", ".dtype_lint_cache", "node_modules", "build", "dist",
          "site-packages", ".eggs")
_FLAGS = {"--exit-zero", "--no-progress"}
_COMMANDS = {"rule", "migrate", "doctor", "verify", "-h", "--help", "--version"}
_MAX_HOPS = 12  # re-exports followed, as the class index does

_already_tried = False  # set while `main` hands over to the command line


def main(argv: list[str] | None = None) -> int:
    """The console entry point: the fast path, else the command line."""
    global _already_tried
    argv = list(sys.argv[1:] if argv is None else argv)
    code = try_clean_exit(argv)
    if code is not None:
        return code
    from dtype_lint.cli import main as cli_main

    _already_tried = True
    try:
        return cli_main(argv)
    finally:
        _already_tried = False


def try_clean_exit(argv: list[str]) -> int | None:
    """The exit code of a run on `argv` when it provably finds nothing (its output printed), else
    None. `cli.main` calls it too, for callers that start there (not again after `main` did)."""
    if _already_tried:
        return None
    try:
        return _clean_exit(argv)
    except (OSError, ValueError, UnicodeError, RecursionError):
        return None  # anything odd is the full run's to report


def _clean_exit(argv: list[str]) -> int | None:
    options = _options(argv)
    if options is None:
        return None
    paths, quiet, color = options
    if color == "always" or (color == "auto" and sys.stdout.isatty()):
        return None
    config = _find_config(paths[0])
    if config is None:
        return None
    config_path, root, cache_dir = config
    record = _load_record(os.path.join(root, cache_dir, RECORD_NAME), config_path, root)
    if record is None:
        return None
    rules = Prefilter([_RuleText(m, tuple(p)) for _, m, p in record["rules"]])
    layout = _Layout(root, record["tops"])
    reals = set()
    for path in paths:
        real = os.path.realpath(path)
        reals.add(real)
        if _may_give_findings(path, rules, layout):
            return None
    if not quiet:
        n = len(reals)
        sys.stdout.write(f"All checks passed! ({n} file{'' if n == 1 else 's'} checked)\n")
    return 0


def _options(argv: list[str]) -> tuple[list[str], bool, str] | None:
    """(paths, quiet, colour) of a plain `check` of files, or None for anything else."""
    args = list(argv)
    if args and args[0] == "check":
        args = args[1:]
    elif not args or args[0] in _COMMANDS:
        return None
    paths: list[str] = []
    quiet, color = False, "auto"
    i = 0
    while i < len(args):
        a = args[i]
        if a in _FLAGS:
            pass
        elif a in ("-q", "--quiet"):
            quiet = True
        elif a in ("--color", "--output-format") and i + 1 < len(args):
            value = args[i + 1]
            i += 1
            if a == "--color":
                color = value
            elif value not in ("text", "concise"):
                return None
        elif a.startswith(("--color=", "--output-format=")):
            key, _, value = a.partition("=")
            if key == "--color":
                color = value
            elif value not in ("text", "concise"):
                return None
        elif a == "--":
            paths.extend(args[i + 1:])
            break
        elif a.startswith("-"):
            return None
        else:
            paths.append(a)
        i += 1
    if not paths or color not in ("auto", "never"):
        return None
    for p in paths:
        try:
            p.encode("utf-8")
        except UnicodeEncodeError:
            return None
        if not os.path.isfile(p):
            return None
    return paths, quiet, color


def _find_config(first_path: str) -> tuple[str, str, str] | None:
    """(configuration file, project root, cache folder) as config.find_pyproject finds them: the
    nearest pyproject.toml with a [tool.dtype-lint] table, else the nearest pyproject.toml. None
    when there is none (zero configuration: the full run) or another kind of settings file is in
    the way."""
    d = os.path.dirname(os.path.realpath(first_path))
    first = None
    chosen = None
    table: dict = {}
    while True:
        if any(os.path.exists(os.path.join(d, n)) for n in ("dtype-lint.toml", ".dtype-lint.toml")):
            return None
        candidate = os.path.join(d, "pyproject.toml")
        if os.path.isfile(candidate):
            first = first or candidate
            with open(candidate, "rb") as f:
                data = f.read((1 << 20) + 1)
            if b"dtype-lint" in data:
                import tomllib

                try:
                    tool = tomllib.loads(data.decode("utf-8")).get("tool", {})
                except (tomllib.TOMLDecodeError, UnicodeDecodeError):
                    return None
                if not isinstance(tool, dict):
                    return None
                if "dtype-lint" in tool:
                    chosen, table = candidate, tool["dtype-lint"]
                    break
        parent = os.path.dirname(d)
        if parent == d:
            break
        d = parent
    chosen = chosen or first
    if chosen is None or not isinstance(table, dict):
        return None
    cache_dir = table.get("cache-dir", DEFAULT_CACHE_DIR)
    if not isinstance(cache_dir, str):
        return None
    return chosen, os.path.dirname(chosen), cache_dir


class _RuleText:
    """What the prefilter reads of a rule, from the record."""

    def __init__(self, marker: str, patterns: tuple[str, ...]):
        self.marker, self.patterns = marker, patterns


# ---- the record -------------------------------------------------------------------------------


def stamp(path: str) -> str:
    st = os.stat(path)
    return f"{st.st_mtime_ns}:{st.st_size}"


def tool_stamp() -> str:
    """Changes when dtype-lint's code changes (as pipeline.code_stamp, without importing it)."""
    import zlib

    top = os.path.dirname(dtype_lint.__file__)
    folders = [top]
    rules = _rules_folder()
    if rules:
        folders.append(rules)
    parts = [dtype_lint.__version__]
    for base in folders:
        for folder, dirs, names in os.walk(base):
            dirs[:] = sorted(d for d in dirs if d not in {"kernels_ref", "fixtures", "rules", "__pycache__"})
            for name in sorted(names):
                if name.endswith(".py"):
                    st = os.stat(os.path.join(folder, name))
                    parts.append(f"{os.path.relpath(os.path.join(folder, name), base)}:{st.st_mtime_ns}:{st.st_size}")
    return f"{zlib.crc32(';'.join(parts).encode('utf-8', 'surrogatepass')):08x}-{len(parts)}"


def _rules_folder() -> str | None:
    import importlib.util

    spec = importlib.util.find_spec("dtype_lint.rules")
    locations = list(spec.submodule_search_locations or []) if spec is not None else []
    return locations[0] if locations else None


def _load_record(path: str, config_path: str, root: str) -> dict | None:
    try:
        with open(path, "rb") as f:
            if not os.path.isfile(path):
                return None
            record = json.loads(f.read(64 << 20))
    except (OSError, ValueError):
        return None
    if not (isinstance(record, dict) and record.get("format") == RECORD_FORMAT and record.get("root") == root
            and record.get("config") == [config_path, _stamp_or_none(config_path)]
            and record.get("tool") == tool_stamp()):
        return None
    files, dirs = record.get("files"), record.get("dirs")
    if not (isinstance(files, dict) and isinstance(dirs, dict) and isinstance(record.get("tops"), dict)
            and isinstance(record.get("rules"), list)):
        return None
    for real, s in files.items():
        if _stamp_or_none(real) != s:
            return None
    for rel, ns in dirs.items():
        try:
            if os.stat(os.path.join(root, rel)).st_mtime_ns != ns:
                return None
        except OSError:
            return None
    return record


def _stamp_or_none(path: str) -> str | None:
    try:
        return stamp(path)
    except OSError:
        return None


def layout_of(root: str) -> tuple[dict[str, int], dict[str, list[str]], list[str]]:
    """(every folder of the project -> its mtime, top-level module name -> the folders it is
    found in, the .gitignore files seen). A name is top-level in a folder without `__init__.py`
    (and the root's own name when the root is a package); that is a superset of the modules the
    class index knows, which is what the fast path needs: it may only look at more files."""
    dirs: dict[str, int] = {}
    tops: dict[str, list[str]] = {}
    ignores: list[str] = []
    root = os.path.abspath(root)
    if os.path.exists(os.path.join(root, "__init__.py")):
        tops.setdefault(os.path.basename(root), []).append("..")
    todo = [root]
    while todo:
        folder = todo.pop()
        rel = os.path.relpath(folder, root)
        try:
            dirs[rel] = os.stat(folder).st_mtime_ns
            entries = list(os.scandir(folder))
        except OSError:
            continue
        names = {e.name for e in entries}
        loose = "__init__.py" not in names
        for e in entries:
            try:
                is_dir = e.is_dir(follow_symlinks=False)
            except OSError:
                continue
            if is_dir:
                if e.name in PRUNED or e.name.endswith(".egg-info"):
                    continue
                todo.append(e.path)
                if loose:
                    tops.setdefault(e.name, []).append(rel)
            elif e.name.endswith(".py") and loose:
                tops.setdefault(e.name[:-3], []).append(rel)
            elif e.name == ".gitignore":
                ignores.append(e.path)
    for v in tops.values():
        v.sort()
    return dirs, tops, ignores


def save_record(config, writer, rules, looked_up_files: dict[str, str], valid: bool) -> None:
    """Write the record a later fast path trusts (see the module docstring), or remove a stale
    one. `looked_up_files`: real path -> stamp of every file read to decide the run's
    project-level warnings; `valid`: the run had none of those warnings and no configured helper
    to check (both are reported on every run: the fast path could not)."""
    root = os.path.abspath(str(config.root))
    base = os.path.join(root, config.cache_dir)
    path = os.path.join(base, RECORD_NAME)
    if not os.path.isdir(base):
        return  # the cache folder is made by the cache (with its .gitignore), never here
    if not valid or config.source == "defaults":
        if os.path.exists(path):
            try:
                os.unlink(path)
            except OSError:
                pass
        return
    config_path = os.path.abspath(config.source)
    if _load_record(path, config_path, root) is not None:
        return  # still true: the walk below is not repeated
    dirs, tops, ignores = layout_of(root)
    files = dict(looked_up_files)
    for p in ignores:
        files[p] = _stamp_or_none(p)
    record = {
        "format": RECORD_FORMAT, "root": root, "config": [config_path, _stamp_or_none(config_path)],
        "tool": tool_stamp(), "files": files, "dirs": dirs, "tops": tops,
        "rules": [[r.code, r.marker, list(r.patterns)] for r in rules],
    }
    try:
        writer.write_cache(path, json.dumps(record, separators=(",", ":")).encode("utf-8", "surrogatepass"))
    except OSError:
        pass  # a read-only checkout still lints; it just has no fast path


# ---- can a file give a finding? ---------------------------------------------------------------


_COOKIE = re.compile(rb"^[ \t\f]*#.*?coding[:=]", re.M)


def _may_give_findings(path: str, rules: Prefilter, layout: "_Layout") -> bool:
    with open(path, "rb") as f:
        data = f.read(MAX_SOURCE_BYTES + 1)
    if len(data) > MAX_SOURCE_BYTES or data.startswith(b"\xef\xbb\xbf"):
        return True
    head = data.split(b"\n", 2)
    if _COOKIE.search(b"\n".join(head[:2])):
        return True
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        return True  # DTL900, or a codec the engine knows
    if has_suppression(text) or rules.might_match(text):
        return True
    return layout.may_call_helper(text, os.path.abspath(path))


_FROM = re.compile(r"^[ \t]*from[ \t]+(\.*)[ \t]*([\w.]*)[ \t]+import[ \t]*(\([^)]*\)|(?:[^\n\\]|\\[\s\S])*)", re.M)
_IMPORT = re.compile(r"^[ \t]*import[ \t]+((?:[^\n\\]|\\[\s\S])*)", re.M)
_COMMENT = re.compile(r"#[^\n]*")
_NAME_AS = re.compile(r"(\w+)(?:\s+as\s+(\w+))?")
_DOTTED_AS = re.compile(r"([\w.]+)(?:\s+as\s+(\w+))?")


def import_bindings(text: str) -> tuple[dict[str, list[tuple[int, str, str]]], bool]:
    """(local name -> [(relative level, module, name)], whether the text may star-import or holds
    an import this reader does not understand). `import a.b as c` binds c to (0, "a", "b"); a
    plain `import a.b` binds only the package, never a helper, and is left out."""
    out: dict[str, list[tuple[int, str, str]]] = {}
    unsure = False
    if "import" not in text:
        return out, unsure
    for m in _FROM.finditer(text):
        level, module = len(m.group(1)), m.group(2)
        body = _COMMENT.sub("", m.group(3)).replace("\\\n", " ").strip("() \t\r\n")
        for part in body.split(","):
            part = part.strip(" \t\r\n()")
            if not part:
                continue
            nm = _NAME_AS.fullmatch(part)
            if nm is None:
                unsure = True  # `*`, or text this reader does not follow
                continue
            out.setdefault(nm.group(2) or nm.group(1), []).append((level, module, nm.group(1)))
    for m in _IMPORT.finditer(text):
        body = _COMMENT.sub("", m.group(1)).replace("\\\n", " ")
        for part in body.split(";")[0].split(","):
            part = part.strip()
            nm = _DOTTED_AS.fullmatch(part)
            if nm is None:
                if part:
                    unsure = True
                continue
            dotted, alias = nm.group(1), nm.group(2)
            if alias and "." in dotted:
                module, _, name = dotted.rpartition(".")
                out.setdefault(alias, []).append((0, module, name))
    return out, unsure


class _Layout:
    """Where the project's modules are, from the record's top-level names: found by path."""

    def __init__(self, root: str, tops: dict[str, list[str]]):
        self.root = root
        self.tops = tops
        self._texts: dict[str, str | None] = {}

    def module_files(self, origin: str, level: int, module: str) -> list[str]:
        """The files that may define `module` as imported from the file `origin`."""
        parts = module.split(".") if module else []
        if level:
            base = os.path.dirname(origin)
            for _ in range(level - 1):
                base = os.path.dirname(base)
            bases = [os.path.join(base, *parts)]
        else:
            if not parts:
                return []
            bases = [os.path.join(self.root, where, *parts) for where in self.tops.get(parts[0], ())]
        out = []
        for b in bases:
            if parts:
                out.append(b + ".py")
            out.append(os.path.join(b, "__init__.py"))
        return [f for f in out if os.path.isfile(f)]

    def text(self, path: str) -> str | None:
        if path not in self._texts:
            try:
                with open(path, "rb") as f:
                    data = f.read(MAX_SOURCE_BYTES + 1)
                self._texts[path] = data.decode("utf-8") if len(data) <= MAX_SOURCE_BYTES else None
            except (OSError, UnicodeDecodeError):
                self._texts[path] = None
        return self._texts[path]

    def may_call_helper(self, text: str, path: str) -> bool:
        bindings, unsure = import_bindings(text)
        if unsure:
            return True
        seen: set[tuple[str, str]] = set()
        return any(self._reaches_helper(path, level, module, name, 0, seen)
                   for targets in bindings.values() for level, module, name in targets)

    def _reaches_helper(self, origin: str, level: int, module: str, name: str, hops: int, seen: set) -> bool:
        if hops > _MAX_HOPS:
            return True
        for f in self.module_files(origin, level, module):
            if (f, name) in seen:
                continue
            seen.add((f, name))
            text = self.text(f)
            if text is None:
                return True  # the engine would try to read it: let it
            if name not in text:
                continue
            if any(n == name for n, _ in helper_shaped_bodies(text)):
                return True
            bindings, unsure = import_bindings(text)
            if unsure:
                return True
            for lvl, mod, nm in bindings.get(name, ()):
                if self._reaches_helper(f, lvl, mod, nm, hops + 1, seen):
                    return True
        return False
