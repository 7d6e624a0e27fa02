"""The pre-commit fast path: a run on named files that cannot hold a site ends before the engine.

Pre-commit runs `dtype-lint check --no-progress FILE...` after every edit, and most edited files
hold no site. Before the pipeline, the rules or rich are imported (0.1-0.2 s of a 0.2 s run), this
module reads the named files and decides whether any of them could give a finding. When none can,
it prints what the full run would print ("All checks passed! (N files checked)", or nothing with
`-q`) and exits 0. When one can, the answer the last full run on the same files kept
(run_memo.py) is printed instead, if nothing it depends on changed; otherwise it returns None and
the full run follows, as if it had not been here (and keeps its answer for the next one).

A file cannot give a finding when the last cached run on the whole project analysed it and found
none, and nothing that analysis read changed since (replay_index.answered_clean), or when:
- no rule's own prefilter passes on it (its marker AND one of its patterns: `prefilter.Prefilter`);
- it holds no suppression comment (an unused one is DTL902);
- it imports no name that may be an input-dtype helper another module defines (DTL005 reports
  such calls whatever the caller's text): each `from M import n` / `import M.n as x` is followed
  to M's files in the project, and through their re-exports; a helper-shaped `def n` there, a
  star import, or anything unreadable sends the run to the engine;
- it reads as UTF-8 without a BOM or a coding cookie (anything else: the engine decodes it).

What it needs about the project comes from a record the last full run wrote into the cache folder
(`fast-path.json`, see fast_record.py): the rules' markers and patterns (so no rule is imported),
the stamps of the configuration file and of the files that decided the run's project-level
warnings (there were none, or the record is not written), every folder of the project with its
stamp (a file added, removed or renamed anywhere changes its folder's stamp) and, from that walk,
where each top-level module name lives. Any mismatch (another dtype-lint, another configuration,
a changed folder) means no fast path: the full run then writes a fresh record.

Only a plain check is taken: `check` with file paths and `--exit-zero`, `--no-progress`, `-q`,
`--force-exclude` (when no named file is excluded),
`--color never|auto` (not on a terminal) and `--output-format text|concise`; any other flag,
a folder, a missing file, no project configuration (no pyproject.toml above the files), a
cache folder the full run refuses (run/cache_folder.py) or `--no-cache` goes to the full run.
The record and the memo are sealed (run/cache_seal.py): an edited or foreign one is none.
"""

from __future__ import annotations

import functools
import os
import re
import sys
import time

from dtype_lint.core.prefilter import Prefilter, has_suppression
from dtype_lint.core.safe_read import MAX_SOURCE_BYTES, read_bytes
from dtype_lint.core.text_facts import helper_shaped_bodies
from dtype_lint.run import run_memo
from dtype_lint.run.cache_folder import cache_folder_problem
from dtype_lint.run.fast_record import RECORD_NAME, forget, load_record, validated_key
from dtype_lint.run.replay_index import plain_check

DEFAULT_CACHE_DIR = ".dtype_lint_cache"
_MAX_HOPS = 12  # re-exports followed, as the class index does

_already_tried = False  # set while `dtype_lint.entry.main` hands over to the command line


def try_clean_exit(argv: list[str]) -> int | None:
    """The exit code of a run on `argv` when it provably finds nothing (its output printed), else
    None. `cli.main` calls it too, for callers that start there (not again after the console
    entry point, `dtype_lint.entry.main`, did)."""
    if _already_tried:
        return None
    forget()
    run_memo.forget()
    try:
        code = _clean_exit(argv)
    except (OSError, ValueError, UnicodeError, RecursionError):
        code = None  # anything odd is the full run's to report
    if code is not None:
        forget()  # what it validated serves only the full run it would fall back to
        run_memo.forget()
    return code


def _clean_exit(argv: list[str]) -> int | None:
    options = plain_check(argv)  # the replay's reading of the arguments: one definition
    if options is None:
        return None
    paths, quiet, color, fmt = options
    if color == "always" or (color == "auto" and sys.stdout.isatty()):
        return None
    config = _find_config(paths[0])
    if config is None:
        return None
    config_path, root, cache_dir, table = config
    if ("--force-exclude" in argv or table.get("force-exclude")) and _any_excluded(paths, root, table):
        return None  # the full run leaves it out, and counts the rest
    if cache_folder_problem(root, cache_dir) is not None:
        return None  # a cache folder the full run refuses: it says why (cache_folder.py)
    record_path = os.path.join(root, cache_dir, RECORD_NAME)
    record = load_record(record_path, config_path, root)
    if record is None:
        return None
    rules = Prefilter([_RuleText(m, tuple(p)) for _, m, p in record["rules"]])
    layout = _Layout(root, record["tops"])
    reals = set()
    may_give = []
    for path in paths:
        real = os.path.realpath(path)
        reals.add(real)
        if _may_give_findings(path, rules, layout):
            may_give.append(real)
    answers_read: list[str] = []
    if may_give:
        record_key = validated_key(record_path, config_path, root)
        if record_key is None:
            return None
        # Files the last run on the whole project analysed and found clean, nothing they read
        # changed since (replay_index.answered_clean), are as clean as those no rule can match.
        from dtype_lint.run.replay_index import answered_clean

        clean_read = answered_clean(os.path.join(root, cache_dir), [record_path, *record_key], may_give)
        if clean_read is None:
            # The full run keeps its answer for these files; unchanged since, it is printed again.
            # The answer is rendered for the replay index only as asked: the other outputs are
            # rendered by the run that asks for them (kept beside this one, replay_index._add).
            run_memo.hand_over(root, cache_dir, record_path, record_key, paths, "--force-exclude" in argv, record,
                               _OutputRenderer(fmt, quiet))
            return _replay(quiet, color, fmt, "--exit-zero" in argv)
        answers_read = clean_read
    n = len(reals)
    output = f"All checks passed! ({n} file{'' if n == 1 else 's'} checked)\n"
    if not quiet:
        sys.stdout.write(output)
    record_key = validated_key(record_path, config_path, root)
    if record_key is not None:
        # Kept for the next run on these files, which then replays it (run/replay_index.py).
        from dtype_lint.run.replay_index import keep_clean

        try:
            keep_clean(record, [record_path, *record_key], os.path.join(root, cache_dir), paths,
                       "--force-exclude" in argv, [*paths, *layout.read_files(), *answers_read], output)
        except Exception:  # noqa: BLE001 - the answer is printed: a replay not kept is only slower
            pass
    return 0


def _replay(quiet: bool, color: str, fmt: str, exit_zero: bool) -> int | None:
    """Print the run memo's answer as `cli._check` prints a run's (the report, then the warnings)
    and return the exit code, or None when there is none to trust (run_memo.py)."""
    if fmt not in ("text", "concise") or sys.stdout.isatty():
        return None  # a terminal (`--color never`) is written to by rich, as the full run does
    checked_ns = time.time_ns()  # every stamp `load` checks is taken after it
    entry = run_memo.load()
    if entry is None:
        return None
    from dtype_lint.core.findings import Finding

    try:
        found = [Finding.from_dict(d) for d in entry["findings"]]
    except (TypeError, KeyError, ValueError, AttributeError):
        return None
    import io
    from types import SimpleNamespace

    from dtype_lint.cli_output import EXIT_CLEAN, EXIT_ERROR, EXIT_FINDINGS, _printable, _render

    args = SimpleNamespace(unsafe_fixes=False, quiet=quiet, color=color, statistics=False, statistics_table=False,
                           output_format=fmt)
    out = io.StringIO()  # printed once all of it is made: a failure falls back with nothing printed
    try:
        # `text` and `concise` read no rule metadata: the rules are not imported for it.
        _render(found, [], args, entry["checked"], entry["analyzed"], 0.0, _read_source, out, rules={})
    except Exception:  # an entry of another shape: the full run's to report
        return None
    try:
        sys.stdout.write(out.getvalue())
        sys.stdout.flush()
    except BrokenPipeError:  # as cli.main: the reader left; no traceback
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return EXIT_ERROR
    for warning in entry["warnings"]:
        print(f"dtype-lint: warning: {_printable(warning)}", file=sys.stderr)
    _keep_replayed_output(entry, found, quiet, fmt, checked_ns)
    return EXIT_CLEAN if exit_zero or not found else EXIT_FINDINGS


def _keep_replayed_output(entry: dict, found: list, quiet: bool, fmt: str, checked_ns: int) -> None:
    """Add the output just replayed from the run memo to the replay index (run/replay_index.py),
    beside the outputs the run that kept the answer rendered: a run memo replay happens when the
    index lacks this output (only the output a run prints is rendered for it), and the next
    such run is then the index's."""
    from dtype_lint.run.replay_index import keep

    handoff = run_memo.handed_over()
    if handoff is None:
        return
    try:
        keep({**handoff, "render": _OutputRenderer(fmt, quiet)}, entry["files"], found, entry["checked"],
             entry["analyzed"], entry["warnings"], _IndexWriter(), checked_ns)
    except Exception:  # noqa: BLE001 - the answer is printed: an output not kept is only slower next time
        pass


class _IndexWriter:
    """What replay_index.keep writes through outside a run: the atomic write a run's writer makes."""

    @staticmethod
    def write_cache(path: str, data: bytes) -> None:
        from dtype_lint.core.writer import write_atomic

        write_atomic(path, data)


class _OutputRenderer:
    """`render(findings, checked, analyzed, warnings)` for replay_index.keep: the one output this
    run prints (its format, with or without `-q`), so a run that keeps an answer renders it once
    more, not in every variant the replay could be asked for."""

    def __init__(self, fmt: str, quiet: bool):
        self.fmt, self.quiet = fmt, quiet

    def __call__(self, findings, checked: int, analyzed: int, warnings: list[str]):
        return render_outputs(findings, checked, analyzed, warnings, ((self.fmt, self.quiet),))


def render_outputs(findings, checked: int, analyzed: int, warnings: list[str],
                   variants: tuple[tuple[str, bool], ...] | None = None) -> tuple[dict, list[str]] | None:
    """(the outputs the replay index keeps, the warning lines), rendered as `_replay` renders the
    run memo's answer, which prints what `cli._check` prints for these formats; None when it
    cannot be rendered. `variants`: the (format, quiet) pairs to render, by default every one
    the replay serves (replay_index.VARIANTS)."""
    import io
    from types import SimpleNamespace

    from dtype_lint.cli_output import _printable, _render
    from dtype_lint.core.findings import Finding
    from dtype_lint.run.replay_index import VARIANTS

    if variants is None:
        variants = tuple(dict.fromkeys((fmt, quiet) for fmt, quiet, _color in VARIANTS))
    found = [Finding.from_dict(f.to_dict()) for f in findings]
    out: dict[tuple[str, bool, str], str] = {}
    for fmt, quiet in variants:
        args = SimpleNamespace(unsafe_fixes=False, quiet=quiet, color="never", statistics=False,
                               statistics_table=False, output_format=fmt)
        buffer = io.StringIO()
        try:
            _render(found, [], args, checked, analyzed, 0.0, _read_source, buffer, rules={})
        except Exception:  # noqa: BLE001 - what cannot be rendered is not kept
            return None
        # Off a terminal `auto` is `never` whatever the environment says (NO_COLOR,
        # FORCE_COLOR, $COLUMNS: reporters/_console.make_console), and the replay serves only
        # pipes and files: rendered once for both.
        out[(fmt, quiet, "never")] = out[(fmt, quiet, "auto")] = buffer.getvalue()
    return out, [f"dtype-lint: warning: {_printable(w)}\n" for w in warnings]


def _read_source(path: str) -> str | None:
    """analysis.file_analysis.safe_read, without importing the analysis."""
    from dtype_lint.core.source import READ_ERRORS, read_file

    try:
        return read_file(path).text
    except READ_ERRORS:
        return None




def _find_config(first_path: str) -> tuple[str, str, str, dict] | None:
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
            try:
                data = read_bytes(candidate, 1 << 20)
            except (OSError, ValueError):
                return None  # a FIFO, a device, too large: the full run says so
            if b"dtype-lint" in data:
                from dtype_lint.core import toml_docs

                try:
                    tool = toml_docs.loads(data.decode("utf-8")).get("tool", {})
                except (toml_docs.reader().TOMLDecodeError, UnicodeDecodeError):
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
    return chosen, os.path.dirname(chosen), cache_dir, table


def _any_excluded(paths: list[str], root: str, table: dict) -> bool:
    """Would `force-exclude` leave out one of the named files? (Discovery's own test.)"""
    from pathlib import Path

    from dtype_lint.core.discovery import path_excluded

    patterns = []
    for key in ("exclude", "extend-exclude"):
        value = table.get(key, [])
        if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
            return True
        patterns += value
    messages: list[str] = []
    excluded = any(path_excluded(p, tuple(patterns), Path(root), messages) for p in paths)
    return excluded or bool(messages)  # a .gitignore that could not be read: the full run says so


class _RuleText:
    """What the prefilter reads of a rule, from the record."""

    def __init__(self, marker: str | list[str], patterns: tuple[str, ...]):
        # JSON keeps a tuple of marker words as a list
        self.marker, self.patterns = (tuple(marker) if isinstance(marker, list) else marker), patterns


# ---- can a file give a finding? ---------------------------------------------------------------


_COOKIE = re.compile(rb"^[ \t\f]*#.*?coding[:=]", re.M)


def _may_give_findings(path: str, rules: Prefilter, layout: "_Layout") -> bool:
    try:
        data = read_bytes(path, MAX_SOURCE_BYTES)
    except (OSError, ValueError):
        return True  # a FIFO, a device, too large: the full run reports it (DTL900)
    if data.startswith(b"\xef\xbb\xbf"):
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


@functools.lru_cache(maxsize=1)
def _import_patterns() -> tuple[re.Pattern, ...]:
    """The import reader's regexes (`from` import, plain import, comment, `name as x`, `a.b as x`),
    compiled on first use: a run whose named file passes a rule's prefilter never reads imports,
    and compiling them was a fifth of this module's import."""
    return (re.compile(r"^[ \t]*from[ \t]+(\.*)[ \t]*([\w.]*)[ \t]+import[ \t]*(\([^)]*\)|(?:[^\n\\]|\\[\s\S])*)",
                       re.M),
            re.compile(r"^[ \t]*import[ \t]+((?:[^\n\\]|\\[\s\S])*)", re.M),
            re.compile(r"#[^\n]*"),
            re.compile(r"(\w+)(?:\s+as\s+(\w+))?"),
            re.compile(r"([\w.]+)(?:\s+as\s+(\w+))?"))


def import_bindings(text: str) -> tuple[dict[str, list[tuple[int, str, str]]], bool]:
    """(local name -> [(relative level, module, name)], whether the text may star-import or holds
    an import this reader does not understand). `import a.b as c` binds c to (0, "a", "b"); a
    plain `import a.b` binds only the package, never a helper, and is left out."""
    out: dict[str, list[tuple[int, str, str]]] = {}
    unsure = False
    if "import" not in text:
        return out, unsure
    from_import, plain_import, comment, name_as, dotted_as = _import_patterns()
    for match in from_import.finditer(text):
        level, module = len(match.group(1)), match.group(2)
        body = comment.sub("", match.group(3)).replace("\\\n", " ").strip("() \t\r\n")
        for part in body.split(","):
            part = part.strip(" \t\r\n()")
            if not part:
                continue
            bound_name = name_as.fullmatch(part)
            if bound_name is None:
                unsure = True  # `*`, or text this reader does not follow
                continue
            out.setdefault(bound_name.group(2) or bound_name.group(1), []).append((level, module, bound_name.group(1)))
    for match in plain_import.finditer(text):
        body = comment.sub("", match.group(1)).replace("\\\n", " ")
        for part in body.split(";")[0].split(","):
            part = part.strip()
            bound_name = dotted_as.fullmatch(part)
            if bound_name is None:
                if part:
                    unsure = True
                continue
            dotted, alias = bound_name.group(1), bound_name.group(2)
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

    def read_files(self) -> list[str]:
        """The module files the verdict read (what it depends on besides the named files)."""
        return list(self._texts)

    def text(self, path: str) -> str | None:
        if path not in self._texts:
            try:
                self._texts[path] = read_bytes(path, MAX_SOURCE_BYTES).decode("utf-8")
            except (OSError, ValueError):  # UnicodeDecodeError is a ValueError
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
            for lvl, mod, bound_name in bindings.get(name, ()):
                if self._reaches_helper(f, lvl, mod, bound_name, hops + 1, seen):
                    return True
        return False
