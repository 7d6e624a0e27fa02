"""The run, stage by stage; `cli`, `migrate`, `api` and `verify` call this and nothing else.

    discover → scan (read, prefilter, class headers; cached) → index → analyze (rules, per-file
    ignores, suppressions; cached) → choose the helper (which one fixes use; only the files whose
    fixes it changes are analysed again) → fix or diff (optional; starts from the findings above)
    → baseline → RunResult

Suppressions and their DTL902 findings are settled inside `analysis.analyze`, per file, before
any fix: what `--fix` acts on is exactly what a check reports. Every byte written into the
user's project goes through the run's `ProjectWriter` and is listed in `RunResult.writes`.
"""

from __future__ import annotations

import gc
import json
import os
import re
import time
import warnings
from contextlib import contextmanager
from dataclasses import field
from functools import lru_cache
from pathlib import Path
from typing import TYPE_CHECKING, Callable, Iterable

from dtype_lint import __version__
from dtype_lint.analysis.index.class_index import (
    ModuleFile,
    ModuleHeader,
    ModuleTable,
    QuantizableLayerIndex,
    Reads,
    dtype_functions,
    extract_header,
    from_imported,
)
from dtype_lint.core import digests, trees
from dtype_lint.core.config import Config
from dtype_lint.core.discovery import DiscoveryError, Found, changed_since, discover_files, import_root, module_name
from dtype_lint.core.file_stamp import file_stamp as _stamp
from dtype_lint.core.file_stamp import stamp_of
from dtype_lint.core.findings import Finding
from dtype_lint.core.prefilter import WordStart, for_rules, has_suppression
from dtype_lint.core.records import record
from dtype_lint.core.source import MAX_SOURCE_BYTES, READ_ERRORS, FileText, read_bytes, read_file
from dtype_lint.core.writer import ProjectWriter, WriteError, WriteRecord, remove_stale_temps
from dtype_lint.ecosystems.registry import helper_of, plugins
from dtype_lint.run import run_memo
from dtype_lint.run.cache import Cache
from dtype_lint.run.fast_record import forget as forget_validated_record
from dtype_lint.run.fast_record import save_record
from dtype_lint.run.file_analysis import (
    analyze,
    enabled_rules,
    parse_error,
    reads_helper_callers,
    reads_helpers,
    safe_read,
)
from dtype_lint.run.memory_cache import RunStore
from dtype_lint.run.project_files import ProjectFiles
from dtype_lint.run.stamp_memo import StampMemo
from dtype_lint.run.workers import effective_jobs, parallel_map, worker_state

if TYPE_CHECKING:
    from dtype_lint.fix.fixer import FixOutcome
    from dtype_lint.fix.helper_home import HelperChoice
    from dtype_lint.fix.helper_template import HelperLocation

# The fix stage's modules (the fixer, the helper's home and template, the dtype evaluator under
# them) are imported where a run uses them: a check that plans no fix and sets no helper, as
# pre-commit's run on an edited file, never does.


class UserError(Exception):
    """A bad request (missing path, bad baseline, unusable helper): exit 2, nothing written."""


@record
class RunOptions:
    """What a run is asked to do beyond its configuration: the paths, fixing, the cache, baselines."""
    paths: list[str] = field(default_factory=lambda: ["."])
    changed_since: str | None = None
    jobs: int | None = None
    use_cache: bool = True
    fix: bool = False  # write the fixes
    diff: bool = False  # compute the fixes, write nothing, return them as a diff
    unsafe_fixes: bool = False
    baseline: str | None = None
    write_baseline: str | None = None
    progress: Callable[[int, int, str], None] | None = None
    # An uncached run's entries kept in memory for a later run of this process over a copy of the
    # tree (run/memory_cache.py: `migrate --series` re-checks its scratch copy with them).
    store: "RunStore | None" = None
    # Given when the run's settings are its configuration file's alone (no flag overrides one, no
    # --unsafe-fixes), as a later plain run on named files has them: renders a file's findings as
    # such a run prints them (fast_path.render_outputs; the run layer imports no report code).
    # Only then does a run on the whole project keep its answers for the first such run after it
    # (run_memo.keep_answers).
    plain_render: Callable | None = None


@record
class RunResult:
    """What a run found, fixed and wrote."""
    config: Config
    findings: list[Finding]  # what remains, after suppressions, fixes and the baseline
    files: list[str]  # the files in scope
    analyzed: int  # files parsed and checked (the rest could not hold a site)
    elapsed_s: float
    writer: ProjectWriter
    fixed: list[Finding] = field(default_factory=list)  # findings whose fix was written
    outcomes: list[FixOutcome] = field(default_factory=list)
    helper: HelperLocation | None = None  # the helper this run's fixes were routed through
    # The helpers the run creates (or, with --diff, would): one per package in a monorepo.
    created_helpers: list[HelperLocation] = field(default_factory=list)
    # Which helper fixes use and why (configured, the preset's default, inferred); None when no
    # finding's fix needs one.
    helper_choice: HelperChoice | None = None
    diff: str = ""
    baselined: int = 0
    # Things the user should know that are not findings (a run that checked nothing, a configured
    # class that matches nothing...): printed on stderr by the CLI.
    warnings: list[str] = field(default_factory=list)
    # A warning's detail (its full text), printed under it with `--verbose`: a warning is one
    # short line a person reads at a glance.
    warning_details: dict[str, str] = field(default_factory=dict)
    index: QuantizableLayerIndex | None = None  # the class index the run analysed against
    # Display path -> (real path, stamp) of each file as analysed: the fix stage starts from the
    # findings of a file whose stamp is unchanged instead of analysing it again.
    checked_stamps: dict[str, tuple[str, str]] = field(default_factory=dict)

    @property
    def writes(self) -> list[WriteRecord]:
        return self.writer.records


def run(config: Config, options: RunOptions) -> RunResult:
    started = time.perf_counter()
    _require_rules(config)
    try:
        with _gc_tuned(), warnings.catch_warnings():
            trees.ignore_parser_warnings()  # the parser's warnings about the user's code (trees.py)
            return _run(config, options, started)
    finally:
        trees.clear()  # the trees this run shared go with it
        forget_validated_record()  # what the fast path handed over serves this run only
        run_memo.forget()


def _run(config: Config, options: RunOptions, t0: float) -> RunResult:
    started_ns = time.time_ns()  # every file this run stamps is read after it
    from dtype_lint.core.project_style import project_style
    from dtype_lint.run.cache_folder import cache_folder_problem

    jobs = effective_jobs(options.jobs)
    # The project's style is read afresh by each run (an in-process caller's earlier run may have
    # read an older pyproject.toml): the cache key and the fixes this run plans read the same.
    project_style.cache_clear()
    folder_problem = cache_folder_problem(config.root, config.cache_dir)
    if folder_problem is not None and options.use_cache:
        raise UserError(folder_problem)
    messages: list[str] = []  # what discovery could not read (a .gitignore that is a FIFO...)
    options = _with_cache_key(options, messages)
    # Without a usable cache folder (--no-cache over a refused one) a fix's temp files go beside
    # their targets, never into a package or through a link.
    staging = config.root / config.cache_dir / "tmp" if folder_problem is None else None
    writer = ProjectWriter(config.root, staging)
    if options.write_baseline:
        from dtype_lint.run.outputs import check_output

        problem = check_output(options.write_baseline, "--write-baseline", config, paths=options.paths,
                               baseline=options.baseline)
        if problem:
            raise UserError(problem)
        try:
            writer.check(options.write_baseline)  # before any fix is written, not after
        except WriteError as error:
            raise UserError(str(error)) from None
    temps: list[str] = []
    try:
        layout = _Layout(reuse=options.use_cache and not options.fix)
        found, index_found = _discover(config, options.paths, temps, messages, layout)
    except DiscoveryError as error:
        raise UserError(str(error)) from None
    unnamed = [f.path for f in found if not _encodable(f.path)]
    if unnamed:
        whole = index_found is found
        found = [f for f in found if _encodable(f.path)]
        index_found = found if whole else [f for f in index_found if _encodable(f.path)]
    files = [f.path for f in found]
    # A bad `helper` setting is an error on every run, not only when fixing; one that pins an
    # ecosystem's own helper (its helper plug-in's `HELPER_NAME`) is that ecosystem's
    # home, judged where a shared-helper fix needs it (choose_helper).
    if config.helper and not _pins_ecosystem_helper(config.helper):
        from dtype_lint.fix.helper_home import configured_location
        from dtype_lint.fix.helper_template import HelperError, refuse_template_names

        try:
            refuse_template_names(config.helper, config.template)
            configured_location(config, _Paths(index_found))
        except HelperError as error:
            raise UserError(str(error)) from None
    if options.fix:
        remove_stale_temps(staging if staging is not None else os.curdir)  # None listed the current folder
        for folder, names in _by_folder(temps).items():
            remove_stale_temps(folder, names)
    stamp_memo = config.root / config.cache_dir / "code-stamp.json" if options.use_cache else None
    cache: Cache  # the in-memory one (run/memory_cache.py) is a Cache that keeps its entries in the process
    if options.store is not None and not options.use_cache:
        cache = options.store.cache(config.fingerprint(), config.root)
    else:
        # The key names the folder of a cache that is read and written: an unused one is not
        # computed (hashing the tool's own code costs about 10 ms a run).
        key = f"{__version__}-{code_stamp(stamp_memo)}-{config.fingerprint()}" if options.use_cache else "off"
        cache = Cache(config.root / config.cache_dir, key=key, enabled=options.use_cache, root=config.root)
    # Stamps key the cache and its records, and tell the fix stage that a file is still the one
    # checked: a `--no-cache` check reads none of them, and stamping re-reads and hashes each
    # file analysed or whose header is read (vLLM: 396 files).
    # Stamps by stat data (run/stamp_memo.py): a cached run reads and hashes only what changed.
    memo = StampMemo(config.root / config.cache_dir, started_ns) if options.use_cache else None
    project = _Project(index_found, found, cache, stamped=cache.enabled or options.fix or options.diff,
                       header_functions=reads_helpers(config), memo=memo)
    cache.stamp_many(project.stamp, project.stamps_of)
    index = build_index(project.table, config)
    if cache.enabled:  # the storage model's answers of earlier runs, while what they read holds
        from dtype_lint.run.facts_cache import FactsStore

        index.disk_memo = FactsStore(cache, project)
    with index.reading() as looked:
        wanted = _looked_for(config, index) if index_found else []
    needles = sorted({_needle(n) for n in wanted} | _engine_needles(config, wanted, index))
    # A directory run reads every file anyway: it looks for the names on the way. A run on named
    # files (pre-commit) reads only those, and the rest of the project only when a name is needed.
    full = found is index_found
    scan = _scan(found, config, cache, jobs, options.progress, needles, summary=full, stamp=project.stamp)
    if needles and not full:
        _scan_for_names(index_found, config, cache, jobs, needles, scan)
    project.take_scan_words(scan)
    with index.reading() as looked_more:
        warnings = _unmatched_classes(config, index, wanted, project, scan) if index_found else []
    # What decided that there is no such warning: the fast path trusts it while these are unchanged.
    looked.update(looked_more)
    looked.files.update((real, scan.stamps.get(real) or project.stamp(real)) for real in scan.hits)

    in_scope = files
    if options.changed_since is not None:
        try:
            changed = changed_since(options.changed_since, config.root)
        except DiscoveryError as error:
            raise UserError(str(error)) from None
        in_scope = [f.path for f in found if f.real in changed]
    targets = _targets(found, set(in_scope), scan, index, config, full)
    findings = [parse_error(p, scan.errors[p]) for p in in_scope if p in scan.errors]
    findings += [parse_error(_shown(p), "the file name is not valid UTF-8; skipped") for p in unnamed]
    findings += _analyze(targets, scan, index, project, config, cache, jobs, options.progress)
    cache.save(writer)
    if cache.started:  # a new version's or settings' folder: those no run uses any more go
        from dtype_lint.run.cache_clean import remove_stale_folders

        remove_stale_folders(cache.base, cache.dir)
    if memo is not None:
        memo.save(writer, whole=full)
    layout.save(writer)
    if options.use_cache:
        save_record(config, writer, looked.all_files(),
                    valid=bool(index_found) and not warnings and not config.helper)
    findings = [f for f in findings if config.enabled(f.code, f.path)]
    result = RunResult(config, sorted(findings, key=Finding.sort_key), in_scope, len(targets), 0.0, writer,
                       warnings=list(dict.fromkeys(messages)) + warnings, index=index,
                       checked_stamps={p: (project.real_of(p), project.stamp(project.real_of(p))) for p in targets})
    result.warnings += _nothing_checked(files, in_scope, options, config)
    choose_helper_stage(result, index, _Paths(index_found), options)

    if options.fix or options.diff:
        _fix_stage(result, index, files, options, jobs)
    if options.write_baseline:
        _write_baseline(result, options.write_baseline)
    elif options.baseline:
        _apply_baseline(result, options.baseline)
    run_memo.keep(result, options, cache, project, scan, targets, layout.kept,
                  lambda p: any(r.reads_helper_callers for r in enabled_rules(config, p)), started_ns)
    if full:
        run_memo.keep_answers(result, options, cache, project, targets, layout, started_ns)
    writer.close()
    result.elapsed_s = time.perf_counter() - t0
    return result


def _with_cache_key(options: RunOptions, messages: list[str]) -> RunOptions:
    """`options`, uncached when no cache key can be kept (run/cache_seal.py): nothing read from
    the cache could be trusted, nothing written to it could be read back. Said in `messages`."""
    if not options.use_cache:
        return options
    from dataclasses import replace

    from dtype_lint.run.cache_seal import problem

    why = problem()
    if why is None:
        return options
    messages.append(f"running without a cache: no cache key can be kept ({why}); set XDG_STATE_HOME to a "
                    "writable folder, or pass --no-cache to say so")
    return replace(options, use_cache=False)


class _Paths:
    """The display paths of a run's files, iterated as needed (a helper's home is found among the
    first few: no list of every path of the project)."""

    def __init__(self, files):
        self._files = files

    def __iter__(self):
        return (f.path for f in self._files)


@contextmanager
def _gc_tuned():
    """Collect garbage far less often during a run: a run allocates millions of AST nodes and
    keeps many alive (headers, facts of shared files), none of them in reference cycles worth
    finding early, and every full collection walks them all. The objects alive before the run
    (modules, the configuration) are moved out of the collector's sight."""
    threshold = gc.get_threshold()
    gc.freeze()
    gc.set_threshold(100_000, 50, 100)
    try:
        yield
    finally:
        gc.set_threshold(*threshold)
        gc.unfreeze()


# ---- discovery and scan -----------------------------------------------------------------------


def _require_rules(config: Config) -> None:
    """A configuration that enables no rule would check nothing and pass: refuse it."""
    if enabled_rules(config):
        return
    from dtype_lint.rules import codes

    where = "the command line" if config.source == "defaults" else f"{config.source} or the command line"
    raise UserError(
        f"no rule is enabled: select = {json.dumps(config.select)} and ignore = {json.dumps(config.ignore)} "
        f"(from {where}) leave none of "
        f"{', '.join(codes())}, so nothing would be checked; select at least one rule")


def _nothing_checked(files: list[str], in_scope: list[str], options: RunOptions, config: Config) -> list[str]:
    """Why a run checked no file, for the user: never a silent pass over nothing. Named files
    that `force-exclude` left out are what the user asked for (pre-commit committing only
    excluded files): no warning."""
    if not files and config.force_exclude and all(os.path.isfile(p) for p in options.paths):
        return []
    if not files:
        where = ", ".join(f"`{p}`" for p in options.paths)
        return [f"no Python files found under {where} (after the default excludes, `exclude` and .gitignore)"]
    if not in_scope and options.changed_since is not None:
        return [f"no Python file changed since `{options.changed_since}`; nothing to check"]
    return []


def _encodable(path: str) -> bool:
    """A name every later stage can print, hash and store (os.walk gives undecodable bytes as
    lone surrogates)."""
    try:
        path.encode("utf-8")
        return True
    except UnicodeEncodeError:
        return False


def _shown(path: str) -> str:
    return os.fsencode(path).decode("utf-8", "backslashreplace")


def _by_folder(paths: list[str]) -> dict[str, list[str]]:
    out: dict[str, list[str]] = {}
    for path in paths:
        out.setdefault(os.path.dirname(path), []).append(os.path.basename(path))
    return out


def _discover(config: Config, paths: list[str], temps: list[str] | None = None,
              messages: list[str] | None = None, layout: "_Layout | None" = None
              ) -> "tuple[list[Found], list[Found] | ProjectFiles]":
    """(files to check, files of the project whose modules the index may look up). Named files
    (pre-commit passes only the staged ones) are checked against the modules of their whole
    project, so a layer defined in an unstaged file still resolves: one walk of the project,
    which reads nothing. `layout`: where that walk may come from the record of the last one, and
    where a new record waits to be written (layout_cache.py)."""
    excludes = tuple(config.exclude)
    rel = os.path.relpath(config.root)
    root = rel if not rel.startswith("..") else str(config.root)
    if (layout is not None and config.source != "defaults" and len(paths) == 1
            and os.path.abspath(paths[0]) == os.path.abspath(config.root) and os.path.isdir(paths[0])):
        # The whole project, walked as a run on named files walks it: the same record serves.
        whole = layout.project_files(config, paths[0], temps, messages)
        if isinstance(whole, list):  # always, without `front` (only named files make a ProjectFiles)
            return whole, whole
    files = discover_files(paths, excludes, config.root, temps=temps, force_exclude=config.force_exclude,
                           messages=messages)
    if (config.source != "defaults" or _holds_engine(config)) and any(os.path.isfile(p) for p in paths):
        named = {f.real for f in files}
        rest: list[Found] | ProjectFiles
        if layout is None:
            rest = discover_files([root], excludes, config.root, temps=temps, messages=messages)
        else:
            rest = layout.project_files(config, root, temps, messages, front=files)
            if isinstance(rest, ProjectFiles):
                return files, rest  # the named files, then the record's others (project_files.py)
        return files, files + [f for f in rest if f.real not in named]
    return files, files


def _holds_engine(config: Config) -> bool:
    """Is the project a checkout of an engine the preset names (its root holds the `vllm`
    package)? Without a configuration a run on named files is otherwise checked against those
    files alone, and in the engine's own tree that judged its layers by the catalogue shipped for
    another release instead of the checkout's backends (#39). The project's walk is the one a run
    with a configuration makes; with the cache it is kept (layout_cache.py), and the backends'
    answers with the stamps of what they read (facts_cache.py), so pre-commit pays for them once."""
    from dtype_lint.ecosystems.presets import PRESETS

    engines = {qualname.split(".", 1)[0] for qualname in PRESETS[config.preset]["quantizable"]}
    return any(os.path.isfile(os.path.join(config.root, engine, "__init__.py")) for engine in engines)


@record
class _Layout:
    """The project walk (of a run on named files, or on the project root), kept against folder
    stamps (layout_cache.py).
    `reuse`: a run with the cache on and no `--fix` (which also collects the temp files a killed
    run left, so it always walks)."""

    reuse: bool
    pending: tuple[str, dict] | None = None  # (record path, record): written with the cache
    # The file list came from its record (no link, no unreadable .gitignore in the way), every
    # folder of which the fast path's record watches: what the run memo needs to trust that
    # record's folder stamps for it (run_memo.py).
    kept: bool = False
    # Every folder the file list depends on, with the mtime this run saw (from its record or the
    # walk) and its listing's hash; None when the list may not be kept (a link, an unreadable
    # .gitignore in the way).
    folders: list[tuple[str, int, str]] | None = None

    def project_files(self, config: Config, root: str, temps: list[str] | None,
                      messages: list[str] | None, front: list[Found] | None = None) -> "list[Found] | ProjectFiles":
        """The project's files; with `front` (the named files) from the record, these and the
        record's others as a `ProjectFiles` (layout_cache.load)."""
        from dtype_lint.run import layout_cache

        excludes = tuple(config.exclude)
        root_abs = os.path.abspath(config.root)
        record_path = os.path.join(root_abs, config.cache_dir, layout_cache.RECORD_NAME)
        if self.reuse:
            untracked: list[str] = []
            folders: list[tuple[str, int, str]] = []
            kept = layout_cache.load(record_path, root, root_abs, excludes, untracked, front, folders)
            if kept is not None:
                self.kept, self.folders = not untracked, folders
                return kept
        return self.walked(config, root, temps, messages)

    def walked(self, config: Config, root: str, temps: list[str] | None, messages: list[str] | None) -> list[Found]:
        """The project walked, its record kept for the end of the run (when it may be reused)."""
        from dtype_lint.run import layout_cache

        root_abs = os.path.abspath(config.root)
        files, record = layout_cache.walk(root, root_abs, tuple(config.exclude), temps, messages)
        if record is not None and self.reuse:
            self.pending = (os.path.join(root_abs, config.cache_dir, layout_cache.RECORD_NAME), record)
            self.folders = [(folder, mtime, listing) for folder, mtime, listing in record["folders"]]
        return files

    def save(self, writer) -> None:
        if self.pending is not None:
            from dtype_lint.run import layout_cache

            layout_cache.save(*self.pending, writer)


# The stamp of every file in a run that reads no stamp (`_Project.stamped`): no file's real one.
UNSTAMPED = ""


class _Project:
    """The files of a run: display path <-> real path, module table, stamps. Maps over every
    file of the project are built only when a run needs them (a run on one named file in a
    project of 24,000 files looks up a few hundred); a `ProjectFiles` (a run on named files, the
    project's files from their record) answers those lookups without them."""

    def __init__(self, index_found: "list[Found] | ProjectFiles", found: list[Found], cache: Cache,
                 stamped: bool = True, header_functions: bool = True, memo: "StampMemo | None" = None):
        self.cache = cache
        self.memo = memo  # stamps kept by stat data (run/stamp_memo.py), on a cached run
        self.header_functions = header_functions  # extract_header's `functions` (file_analysis.reads_helpers)
        self.stamped = stamped  # False: no stage reads a stamp, each is UNSTAMPED
        self._index_found = index_found
        self._found = found
        self._lazy = index_found if isinstance(index_found, ProjectFiles) else None
        self._by_path: dict[str, Found] | None = None
        self._by_real: dict[str, str] | None = None
        self.stamps: dict[str, str] = {}  # real path -> stamp, for files stat'ed this run
        self.new_headers: list[tuple[str, str, str, dict]] = []
        self.table = ModuleTable(index_found, self._load_header, self._holds)
        # The scan's answers to the censuses' word tests (_Scan.word_tests).
        self._word_tests: tuple[WordTest, ...] = ()

    def take_scan_words(self, scan: "_Scan") -> None:
        self._word_tests = scan.word_tests

    def _at(self, path: str) -> Found | None:
        if self._lazy is not None:
            return self._lazy.at_path(path)
        return self.by_path.get(path)

    @property
    def by_path(self) -> dict[str, Found]:
        if self._by_path is None:
            self._by_path = {f.path: f for f in self._index_found}
            self._by_path.update((f.path, f) for f in self._found)
        return self._by_path

    @property
    def module(self) -> dict[str, str]:
        return {p: f.module for p, f in self.by_path.items()}

    def module_of(self, path: str) -> str | None:
        f = self._at(path)
        return f.module if f is not None else None

    def stamp(self, real: str) -> str:
        if not self.stamped:
            return UNSTAMPED
        s = self.stamps.get(real)
        if s is None:
            s = self.stamps[real] = self.memo.stamp(real) if self.memo is not None else _stamp(real)
        return s

    def stamps_of(self, reals: list[str]) -> list[str]:
        """`[self.stamp(real) for real in reals]`, the memo asked for the unknown ones at once."""
        if not self.stamped:
            return [UNSTAMPED] * len(reals)
        known = self.stamps
        todo = [real for real in reals if real not in known]
        if todo:
            taken = self.memo.stamps(todo) if self.memo is not None else list(map(_stamp, todo))
            known.update(zip(todo, taken))
        return [known[real] for real in reals]

    def real_of(self, path: str) -> str:
        f = self._at(path)
        return f.real if f is not None else os.path.realpath(path)

    def display_of(self, real: str) -> str:
        if self._lazy is not None:
            d = self._lazy.display_of(real)
            return d if d is not None else real
        if self._by_real is None:
            # The first file of each real path (reversed: a later one is overwritten by it).
            listed = self._index_found if isinstance(self._index_found, list) else []  # (ProjectFiles: above)
            self._by_real = {f.real: f.path for f in reversed(listed)}
            self._by_real.update((f.real, f.path) for f in self._found)
        d = self._by_real.get(real)
        return d if d is not None else real

    def _load_header(self, mf: ModuleFile, module: str) -> ModuleHeader | None:
        stamp = self.stamp(mf.key)
        mf.stamp = stamp
        cached = self.cache.header(mf.key, stamp, module)
        if cached is not None:
            return ModuleHeader.from_dict(dict(cached, module=module, path=mf.path, is_package=mf.is_package))
        try:
            text = read_file(mf.path).text
        except READ_ERRORS:
            return None
        header = extract_header(text, module, mf.path, mf.is_package, self.header_functions)
        if self.cache.enabled:  # kept for the cache only
            self.new_headers.append((mf.key, stamp, module, header.to_dict()))
        return header

    def _holds(self, mf: ModuleFile, groups: "tuple[tuple[str, ...], ...] | Callable[[str], bool]") \
            -> tuple[bool, str] | None:
        """(does the file hold every word of some group, its stamp): ModuleTable.naming's test; or,
        for a predicate of a file's text, does it hold for this one (ModuleTable.holding's).
        The words are ASCII, so they are found in the bytes of any encoding a source file may
        have but UTF-16/32 (their NULs: not told here). The censuses' words were tested by the scan
        on the bytes it read (`_scan_job`): a file it read and found without them is not read again
        (a second read of every file of the tree was 3% of a cold check). A file read here is
        stamped from the same bytes, not read a second time for its stamp."""
        for test in self._word_tests:
            if test.test == groups and mf.key in test.read and mf.key not in test.held:
                return False, self.stamp(mf.key)
        try:
            data = read_bytes(mf.path, MAX_SOURCE_BYTES)
            text = FileText.decode(data).text if callable(groups) else ""
        except READ_ERRORS:
            return None
        if b"\0" in data:
            return None
        if self.stamped and mf.key not in self.stamps:
            self.stamps[mf.key] = stamp_of(data)
            if self.memo is not None:
                self.memo.took(mf.key, self.stamps[mf.key])
        stamp = self.stamp(mf.key)
        if callable(groups):
            return groups(text), stamp
        return any(all(word.encode() in data for word in group) for group in groups), stamp

    def save_headers(self, headers) -> None:
        for real, stamp, module, header in headers:
            self.cache.put_header(real, stamp, module, header)


@record
class WordTest:
    """A census's test of each file (ModuleTable.naming's: every word of one of the groups in its
    bytes; or ModuleTable.holding's: a predicate of its text), made by the scan on what it reads,
    so that the census does not read the file again."""
    test: "tuple[tuple[str, ...], ...] | Callable[[str], bool]"
    skip_tops: frozenset[str] = frozenset()  # modules of these top-level packages are not tested
    # real paths tested; once the scan is over, the very set of the scan's `scanned` where every
    # file was tested (two more sets of every path were 0.25 MiB at 1x); neither changes after it
    read: set[str] = field(default_factory=set)
    held: set[str] = field(default_factory=set)  # ... of which those that pass (or hold a NUL: not told)

    @staticmethod
    def packed(held: "tuple[bool | None, ...]") -> int:
        """The answers of a file to the scan's tests (`_scan_job`), as the scan summary keeps them:
        bit i is set when test i was made, bit i + 4 when the file passed it (a small int, shared)."""
        return sum((1 << i) | ((1 << (i + 4)) if holds else 0) for i, holds in enumerate(held) if holds is not None)

    def unpack(self, index: int, real: str, packed: int) -> None:
        """Record the answer of test `index` that `packed` holds for the file `real`."""
        if packed >> index & 1:
            self.read.add(real)
            if packed >> (index + 4) & 1:
                self.held.add(real)

    def for_scan(self) -> tuple:
        if callable(self.test):
            return self.test, self.skip_tops
        return tuple(tuple(word.encode() for word in group) for group in self.test), self.skip_tops


@record
class _Scan:
    """What the scan learnt of each file: the prefilters' answers, suppressions, read errors, names, stamps.
    A record per file lives as long as the run, so each keeps only what is not the common answer
    (vLLM 0.27.1: 219 of 2,360 files pass the prefilter, none holds a suppression, none has helper
    links): three dicts of every path were 150 KiB at 1x."""
    passes: set[str] = field(default_factory=set)  # paths the prefilter passes
    suppressing: set[str] = field(default_factory=set)  # paths holding a suppression comment
    errors: dict[str, str] = field(default_factory=dict)
    hits: dict[str, list[str]] = field(default_factory=dict)  # real path -> looked-for names in its text
    # path -> (functions it defines that may be input-dtype helpers, names it imports with `from`:
    # read only of a file the prefilter does not pass and holding no suppression, `_scan_job`);
    # a file with neither is not listed
    links: dict[str, tuple[list[str], list[str]]] = field(default_factory=dict)
    # real path -> stamp of the files scanned (none without a cache: `Project.stamp` then stamps
    # a file when it is asked for)
    stamps: dict[str, str] = field(default_factory=dict)
    scanned: set[str] = field(default_factory=set)  # real paths of the files scanned
    # The censuses' tests (_Project._holds) on what is read here: the quantizer census's
    # QUANTIZER_WORDS (held by few files of a tree: vLLM 0.34.0, 76 of 3,540) and the compiled-code
    # census's `might_compile` (analysis/compiled_elsewhere.py: 4 files).
    word_tests: tuple[WordTest, ...] = ()

    def note(self, path: str, passes: bool, suppressing: bool, links) -> None:
        """Record the scan's answers for the file at `path` (see the class docstring)."""
        if passes:
            self.passes.add(path)
        if suppressing:
            self.suppressing.add(path)
        if links[0] or links[1]:
            self.links[path] = links


def _needle(qualname: str) -> str:
    """`top:Name` for `top.x.y.Name`: what the text of a file importing it must contain."""
    return f"{qualname.split('.', 1)[0]}:{qualname.rsplit('.', 1)[-1]}"


def _engine_needles(config: Config, wanted: list[str], index: QuantizableLayerIndex) -> set[str]:
    """`top:` for the engine of each preset class looked for, unless the project holds that
    package itself: a file naming the engine is read for its imports, which decide whether the
    project uses it (_unmatched_classes's warning)."""
    return {f"{engine}:" for engine in _preset_engines(config, wanted) if index.modules.get(engine) is None}


def _preset_engines(config: Config, wanted: list[str]) -> set[str]:
    from dtype_lint.ecosystems.presets import PRESETS

    return {n.split(".", 1)[0] for n in PRESETS[config.preset]["quantizable"] if n in wanted}


def _imports_maybe(needles: list[str], text: str, module: str) -> list[str]:
    """The needles (`top:Name`) of the classes a file with this text could import, in order. An
    import names the class, and names its top-level package too unless it is relative (only
    possible inside that package). The package is tested once, first: the preset's dozen classes
    of one engine were each searched for in every file of a tree that never names the engine
    (transformers 5.25.0: 2% of a cold check)."""
    if not needles:
        return []
    top_here = module.split(".", 1)[0]
    named: dict[str, bool] = {}
    out = []
    for needle in needles:
        top, _, name = needle.partition(":")
        present = named.get(top)
        if present is None:
            present = named[top] = top == top_here or _top_word(top).search(text) is not None
        if present and name in text:
            out.append(needle)
    return out


@lru_cache(maxsize=64)
def _top_word(top: str) -> WordStart:
    r"""`(?<!\w)top\b`, searched from its literal (a pattern that starts with a lookbehind made re
    try every position of the text: a tenth of a cold check of transformers 5.25.0, every file of
    which was searched for `vllm`, the engine whose preset classes it does not define)."""
    return WordStart(re.escape(top) + r"\b")


def _scan_job(item: tuple[str, str]) -> tuple[str, bool, bool, list[str], tuple, tuple, str | None]:
    """(path, prefilter verdict, holds a suppression, looked-for names it may import, helper
    links, for each census's word test whether it may hold its words (None: not tested), error)."""
    path, module = item
    try:
        data = read_bytes(path, MAX_SOURCE_BYTES)
        ft = FileText.decode(data)
    except READ_ERRORS as error:
        return path, False, False, [], ([], []), (), f"cannot read: {error}"
    st = worker_state()
    # As _Project._holds tests it: every word of one group in the bytes, told only without a NUL.
    # Not for a module of a library the census passes over whatever it holds (ModuleTable.naming's
    # `skip_tops`): its answer was never read, and a file not tested here is read again should
    # anything ask (`_Project._holds`). Transformers 5.25.0 and diffusers 0.42.1 are all such
    # modules for the quantizer census: six passes over every byte of the tree (57 MB, 28 MB) for nothing.
    top = module.split(".", 1)[0]
    text = ft.text
    nul = None
    held: list[bool | None] = []
    for test, skip_tops in st["words"]:
        if top in skip_tops:
            held.append(None)
            continue
        if nul is None:
            nul = b"\0" in data
        held.append(nul or (test(text) if callable(test) else any(all(word in data for word in group)
                                                                   for group in test)))
    words = tuple(held)
    hits = _imports_maybe(st["needles"], text, module)
    # Helper links serve only the rules that report calls of helpers defined elsewhere (DTL005);
    # with none enabled they are never read, and the cache key (the configuration's fingerprint,
    # `select` included) keeps these empty links from a run that later enables one. The names a
    # file imports are read only of a file analysed for no other reason (`_targets`,
    # run_memo: a file the prefilter passes or holding a suppression is analysed whatever it
    # imports): with every rule on, a third of vLLM 0.34.0's files, its largest.
    passes = st["prefilter"].might_match(text)
    suppressing = has_suppression(text, data if ft.encoding == "utf-8" else None)
    links = (sorted(dtype_functions(text)), [] if passes or suppressing else from_imported(text)) \
        if st["links"] else NO_LINKS
    return path, passes, suppressing, hits, links, words, None


# The links of a file that has none, shared (read only): a record per file of the scan, 23,600
# at ten times vLLM, each with two empty lists of its own, was 3.8 MiB.
NO_LINKS: tuple[tuple, tuple] = ((), ())


def _init_scan(prefilter, needles, links: bool = True, words: tuple = ()) -> None:
    worker_state().update(prefilter=prefilter, needles=needles, links=links, words=words)


def _scan(found: list[Found], config: Config, cache: Cache, jobs: int, progress, needles: list[str],
          summary: bool = True, stamp=_stamp) -> _Scan:
    """Read and prefilter the files to check. `summary`: use the cache's scan summary (files
    unchanged since it saw them are not read); a run on a few named files reads them instead
    of loading a summary of the whole project. `stamp(real)`: a file's stamp (`_Project.stamp`)."""
    scan = _Scan()
    misses = []
    stamps = {}
    known: list[tuple[str, int]] = []  # (real path, its tests' answers) of the files the summary answers for
    if not cache.enabled:
        # No cache to key (`--no-cache`): a file is stamped when something asks (`Project.stamp`:
        # the analysed files and those whose headers are read), not the whole tree up front: each
        # stamp reads and hashes the file once more (vLLM: 2,360 files, about 0.1 s).
        misses = list(found)
        found = []
    for f in found:
        taken = stamps[f.path] = stamp(f.real)
        hit = cache.scan_entry(f.real, taken, needles) if summary else None
        if hit is None:
            misses.append(f)
            continue
        passes, suppressing, hits, links, packed = hit
        scan.note(f.path, passes, suppressing, links)
        if hits:
            scan.hits[f.real] = hits
        known.append((f.real, packed))
    rules = tuple(enabled_rules(config))
    prefilter = for_rules(rules)
    links = any(r.reads_helper_callers for r in rules)
    # A whole-project run tests the censuses' words on the bytes it reads (a run on named files
    # reads few, and need not import the quantizers' catalogue for them).
    if summary:
        from dtype_lint.core.compile_text import might_compile
        from dtype_lint.ecosystems.quantizers.catalogue import LIBRARY_PACKAGES, QUANTIZER_WORDS

        # LIBRARY_PACKAGES: the quantizer census's `skip_tops` (ecosystems/quantizers/applications.py)
        scan.word_tests = (WordTest(QUANTIZER_WORDS, LIBRARY_PACKAGES), WordTest(might_compile))
        # A file the summary answers for is not read: its answers were kept with it (a warm run
        # that analyses an edited file asks the censuses about every file of the tree).
        for real, packed in known:
            for index, test in enumerate(scan.word_tests):
                test.unpack(index, real, packed)
    # Always in this process: reading and prefiltering is about 0.1 ms a file, and two workers
    # gained nothing even on 23,600 files (benchmarks/README.md, "-j").
    results = parallel_map(_scan_job, [(f.path, f.module) for f in misses], jobs, init=_init_scan,
                           initargs=(prefilter, needles, links, tuple(test.for_scan() for test in scan.word_tests)),
                           progress=progress, stage="scan",
                           parallel=False)
    for f, (path, passes, suppressing, hits, links, held, err) in zip(misses, results):
        if err:
            scan.errors[path] = err
            continue
        for test, holds in zip(scan.word_tests, held):
            if holds is not None:
                test.read.add(f.real)
                if holds:
                    test.held.add(f.real)
        scan.note(path, passes, suppressing, links)
        if hits:
            scan.hits[f.real] = hits
        if summary and path in stamps:
            cache.put_scan(f.real, stamps[path], passes, suppressing, needles, hits, links, WordTest.packed(held))
    scan.stamps = {f.real: stamps[f.path] for f in found}
    scan.scanned = {f.real for f in found} | {f.real for f in misses}
    for test in scan.word_tests:
        if test.read == scan.scanned:  # every file tested (the usual case): one set for both
            test.read = scan.scanned
    return scan


def _targets(found: list[Found], in_scope: set[str], scan: _Scan, index, config: Config, full: bool) -> list[str]:
    """The files to analyse: those the prefilter passes or that hold a suppression, and those
    calling an input-dtype helper another module defines, for the rules that report such calls.
    On a whole-project run the scan saw every file: only a file importing (by name) a function
    some file defines with a helper's text gets its header read. A run on named files reads the
    headers of those files (and of what they import) instead."""
    helpers = {n for defs, _ in scan.links.values() for n in defs} if full else None
    out = []
    for f in found:
        p = f.path
        if p not in in_scope or p in scan.errors:
            continue
        if p in scan.passes or p in scan.suppressing:
            out.append(p)
        elif (froms := scan.links.get(p, ((), ()))[1]) and (helpers is None or not helpers.isdisjoint(froms)):
            if reads_helper_callers(enabled_rules(config, p), index, f.module):
                out.append(p)
    return out


def _scan_for_names(index_found: "list[Found] | ProjectFiles", config: Config, cache: Cache, jobs: int,
                    needles: list[str], scan: _Scan) -> None:
    """The looked-for names in every file of the project (a run on named files needs them only
    when a configured class is not defined in the project)."""
    found = [f for f in index_found if f.real not in scan.scanned]
    extra = _scan(found, config, cache, jobs, None, needles)
    scan.hits.update(extra.hits)
    # The rest of the project was read for its words too: the named files were not (their own
    # scan tests none), and are read again if the census asks.
    scan.word_tests = extra.word_tests


def _looked_for(config: Config, index: QuantizableLayerIndex) -> list[str]:
    """Configured and preset class names the project does not define: whether some file imports
    them decides the warnings below, and only their files' headers are read for it."""
    from dtype_lint.ecosystems.presets import PRESETS

    out = [n for names in (config.quantizable, config.exempt_classes, config.not_quantizable)
           for n in names if not index.defines(n)]
    preset = PRESETS[config.preset]["quantizable"]
    if preset and not any(index.defines(n) for n in preset):
        out += list(preset)
    return out


def _unmatched_classes(config: Config, index: QuantizableLayerIndex, wanted: list[str], project: "_Project",
                       scan: _Scan) -> list[str]:
    """No silent passes: configured class names the scanned tree neither defines nor imports."""
    imported: set[str] = set()
    if wanted:
        winners = project.table.winners()
        for real in sorted(scan.hits):
            module = winners.get(real)
            header = project.table.get(module) if module is not None else None
            if header is not None and module is not None and project.table.first_key(module) == real:
                imported.update(header.imports.values())

    def mentioned(n: str) -> bool:
        return n not in wanted or n in imported

    out = []
    for key, names in (("quantizable", config.quantizable), ("exempt-classes", config.exempt_classes),
                       ("not-quantizable", config.not_quantizable)):
        missing = [n for n in names if not mentioned(n)]
        if missing:
            out.append(f"`{key}` names classes the checked files neither define nor import: "
                       f"{', '.join(missing)} (check the spelling and the module path)")
    from dtype_lint.ecosystems.presets import PRESETS, imports_from, layer_packages

    preset = PRESETS[config.preset]["quantizable"]
    # Only where the project is the preset's engine or writes code on its layers (a file that can
    # hold a site imports from their package): an HF package, another engine's tree, or a project
    # that only drives the engine (`from vllm import LLM`) is not degraded by lacking its classes.
    engines = {n.split(".", 1)[0] for n in preset}
    packages = layer_packages(preset)

    def uses_engine() -> bool:
        return any(imports_from(target, packages) for target in imported) or \
            any(index.modules.get(engine) is not None for engine in engines)

    if preset and not any(mentioned(n) for n in preset) and uses_engine():
        out.append(f"none of the `{config.preset}` preset's layer classes is defined or imported here; "
                   "quantizable layers are inferred from the code alone (`preset = \"generic\"` says so "
                   "without this warning)")
    return out


def build_index(headers: "list[ModuleHeader] | ModuleTable", config: Config) -> QuantizableLayerIndex:
    index = QuantizableLayerIndex(headers, config.all_quantizable, config.all_exempt_classes,
                                  config.all_not_quantizable)
    # Where an engine the project imports without containing it is chosen from (its environment,
    # its pins, the setting): core/engine_source.py, asked only when a layer needs it.
    index.engine_project = (str(config.root), config.engine_release, _describe_installed)
    return index


def fix_text(*args, **kwargs) -> FixOutcome:
    """fixer.fix_text, its module imported on the first fix (a name of this module: tests
    record the fix stage's calls through it)."""
    from dtype_lint.fix.fixer import fix_text as fix

    return fix(*args, **kwargs)


def _describe_installed(source) -> dict | None:
    """installed_engine.describe_installed, its module (and the catalogue's data classes it
    imports) imported on the first ask: most runs never ask."""
    from dtype_lint.run.installed_engine import describe_installed

    return describe_installed(source)


# ---- analysis -------------------------------------------------------------------------------

# Below this many bytes of files to analyse, worker processes cost more than they save: each
# parses again the files the analyses share. Measured on 2 cores (benchmarks/README.md, "-j"):
# even at 3.3 MB, ahead from 4.2 MB (vLLM's 148 files).
ANALYZE_PARALLEL_BYTES = 4 << 20
# The files to analyse are handed out in path order, in this many runs of consecutive files per
# worker: files of one folder share the class files, headers and backends they read, and a worker
# that gets a folder's files reads those once. With 8 runs per worker (runs of 10 files at vLLM's
# 1x) both workers read nearly everything: 6% more instructions in all than one process, 2 runs
# per worker about none more (benchmarks/README.md, "-j").
ANALYZE_CHUNKS_PER_JOB = 2
# Files of this many bytes or more are analysed first, the largest first; the others keep path
# order. A run's peak memory is what its analyses keep (class facts, headers) plus the tree of the
# file being analysed: analysed last, vLLM 0.27.1's 352 KB `gpu_model_runner.py` added a 6.3 MiB
# tree to nearly all the rest (peak RSS 42.0 MiB with `-j 1`, 39.9 MiB with the default `-j`,
# whose first worker took it); analysed first, 39.3 / 36.1 MiB. Only the few largest move (2 of
# the 219 files analysed there, 5 of sglang 0.5.23's 376: 58.0 -> 56.7 MiB with `-j 1`): from
# 128 KiB, Transformers 5.25.0's 12 largest went to the first worker together and its peak rose
# 43.9 -> 46.9 MiB; sorting every file by size cost `-j 1` 0.7% more instructions and the
# default `-j` 3%, the runs of consecutive files losing their folders (benchmarks/README.md,
# "peak memory at 1x").
ANALYZE_FIRST_BYTES = 192 << 10


def _init_analysis(index: QuantizableLayerIndex, config: Config, project: "_Project") -> None:
    worker_state().update(index=index, config=config, project=project)


def _analyze_job(path: str) -> tuple[str, list[dict], Reads, list, list]:
    st = worker_state()
    project: _Project = st["project"]
    with st["index"].reading() as reads:
        findings = analyze_path(path, st["index"], st["config"], project)
    found = [f.to_dict() for f in findings]
    if not project.cache.enabled:  # what the file read serves the cache only: not sent back
        return path, found, Reads(), [], []
    new, project.new_headers = project.new_headers, []
    # The storage model's new answers (run/facts_cache.py): a worker's cache is its own copy.
    answers = project.cache.take_entries("s") + project.cache.take_entries("g")  # and the groups they hold
    return path, found, reads, new, answers


def analyze_path(path: str, index: QuantizableLayerIndex, config: Config,
                 project: "_Project | None" = None) -> list[Finding]:
    """The findings of one file on disk (DTL900 when it cannot be read)."""
    try:
        text = read_file(path).text
    except READ_ERRORS as error:
        return [parse_error(path, f"cannot read: {error}")]
    if project is not None:
        module = project.module_of(path)
        if module is None:
            module = module_name(path, config.root)
        # The file's own header, from the text in hand: the index need not read the file again.
        is_pkg = os.path.basename(path) == "__init__.py"
        known: str = module
        functions = project.header_functions
        index.modules.seed(known, path, lambda: extract_header(text, known, path, is_pkg, functions),
                           project.stamp(project.real_of(path)))
    else:
        module = module_name(path, config.root)
    return analyze(path, text, index, config, module)


def _analyze(targets: list[str], scan: _Scan, index: QuantizableLayerIndex, project: "_Project", config: Config,
             cache: Cache, jobs: int, progress) -> list[Finding]:
    findings: list[Finding] = []
    todo = []
    project.stamps.update(scan.stamps)
    for target in targets:
        real = project.real_of(target)
        hit = cache.findings(real, project.stamp(real), project.stamp, project.table, project.display_of)
        if hit is None:  # a miss
            todo.append(target)
            continue
        try:
            findings.extend([Finding.from_dict(dict(d, path=target)) for d in hit])
        except (TypeError, KeyError, ValueError, AttributeError):  # a miss, or an entry of another shape
            todo.append(target)
    sizes = [_size(project.real_of(p)) for p in todo] if len(todo) > 1 else []
    todo = largest_first(todo, sizes)
    size = sum(sizes) if jobs > 1 else 0
    parallel = jobs > 1 and size >= ANALYZE_PARALLEL_BYTES
    if parallel:
        _before_fork(index, (project.module_of(p) or module_name(p, config.root) for p in todo))
        # The headers read so far, kept now: each worker would send its inherited list back.
        project.save_headers(project.new_headers)
        project.new_headers = []
    for path, dicts, reads, headers, answers in parallel_map(
            _analyze_job, todo, jobs, init=_init_analysis, initargs=(index, config, project), progress=progress,
            stage="analyze", parallel=parallel, chunks_per_job=ANALYZE_CHUNKS_PER_JOB):
        real = project.real_of(path)
        project.save_headers(headers)
        cache.add_entries(answers)
        cache.put_findings(real, project.stamp(real), dicts, reads, project.real_of)
        findings.extend(Finding.from_dict(d) for d in dicts)
    project.save_headers(project.new_headers)
    project.new_headers = []
    return findings


def _before_fork(index: QuantizableLayerIndex, modules: Iterable[str]) -> None:
    """The whole-tree census that each worker would build for itself, built here once when the
    analysis will ask for it: the forked workers inherit it. The quantizer applications' census
    reads every module's text (vLLM 0.34.0: 3,540), and both workers built it: this saves 1.4 G of
    the default run's 30.3 G instructions there (benchmarks/README.md, "-j"). Built when it will
    not be asked for, it costs as much (Transformers 5.25.0: +1.9 G in this process)."""
    from dtype_lint.ecosystems.quantizers.applications import census, census_needed

    if census_needed(modules):
        census(index)


def largest_first(paths: list[str], sizes: list[int]) -> list[str]:
    """`paths` (of `sizes` bytes) with those of ANALYZE_FIRST_BYTES or more first, the largest
    first (ties in their order); the others after them, in their order."""
    big = sorted((i for i, size in enumerate(sizes) if size >= ANALYZE_FIRST_BYTES), key=lambda i: -sizes[i])
    if not big:
        return paths
    first = set(big)
    return [paths[i] for i in big] + [p for i, p in enumerate(paths) if i not in first]


def _size(path: str) -> int:
    try:
        return os.path.getsize(path)
    except OSError:
        return 0


def reanalyze(result: RunResult, path: str, text: str) -> list[Finding]:
    """The findings of another version of a file of this run, against the run's class index."""
    assert result.index is not None, "a run's result carries the index it was checked against"
    return analyze(path, text, result.index, result.config, module_name(path, result.config.root))


def code_stamp(memo: str | os.PathLike | None = None) -> str:
    """Changes when dtype-lint's own code or shipped catalogues change (an editable install under
    development), so a cache never outlives the rules and data that produced it.

    `memo`: a file (in the cache folder) keeping the last stamp under the stat of every file it
    hashed (size, mtime, ctime, inode): a write to a file changes its ctime, so an unchanged stat
    is unchanged content, except for a second write in the same clock tick as the first one's
    stat; a stamp is kept only when every file is older than `_SETTLED_NS` (git's racy-index rule),
    so no later write can leave the stat it was kept under."""
    import dtype_lint
    import dtype_lint.rules

    files = []
    for pkg in (dtype_lint, dtype_lint.rules):
        if pkg.__file__ is None:  # a namespace package: no file of ours
            continue
        top = os.path.dirname(pkg.__file__)
        for folder, dirs, names in os.walk(top):
            # the sub-packages by stage hold the engine; kernels and fixtures never change findings
            dirs[:] = sorted(d for d in dirs if d not in {"kernels_ref", "fixtures", "rules", "__pycache__"})
            # os.path.relpath(path, top), once a folder (per file it was a third of the stamp)
            prefix = "" if folder == top else os.path.relpath(folder, top) + os.sep
            for name in sorted(names):
                # the shipped catalogues too: the storage model's answers read them
                if name.endswith(".py") or (name.startswith("catalogue-") and name.endswith(".json")):
                    files.append((f"{prefix}{name}", os.path.join(folder, name)))
    key = newest = None
    if memo is not None:
        try:
            stats = [os.stat(path) for _, path in files]
            listed = "\n".join(f"{path}:{st.st_size}:{st.st_mtime_ns}:{st.st_ctime_ns}:{st.st_ino}"
                                for (_, path), st in zip(files, stats))
            key = digests.sha1(listed.encode("utf-8", "surrogatepass")).hexdigest()
            newest = max((max(st.st_mtime_ns, st.st_ctime_ns) for st in stats), default=0)
            from dtype_lint.run.cache_seal import unseal

            # Sealed as the cache is (cache_seal.py): an edited memo could name the stamp of a
            # folder computed by other code.
            payload = unseal(read_bytes(memo, 1 << 16), "code-stamp.json")
            kept = json.loads(payload) if payload is not None else None
            if isinstance(kept, dict) and kept.get("key") == key and isinstance(kept.get("stamp"), str):
                return kept["stamp"]
        except (OSError, ValueError):
            pass
    h = digests.sha1()
    for rel, path in files:
        with open(path, "rb") as handle:  # the tool's own files: content, not mtime
            digest = digests.blake2b(handle.read(), digest_size=16).digest()
        h.update(f"{rel}:".encode() + digest + b";")
    stamp = h.hexdigest()[:10]
    if key is not None and memo is not None and newest is not None and newest < time.time_ns() - _SETTLED_NS:
        try:
            from dtype_lint.core.writer import write_atomic
            from dtype_lint.run.cache_seal import seal

            sealed = seal(json.dumps({"key": key, "stamp": stamp}).encode(), "code-stamp.json")
            if sealed is not None and os.path.isdir(os.path.dirname(os.path.abspath(memo))):
                write_atomic(memo, sealed)
        except OSError:
            pass
    return stamp


# A file written this recently may be written again within the same timestamp tick: its stat
# does not yet prove its content (code_stamp's memo waits for it).
_SETTLED_NS = 2_000_000_000


# ---- fixing ---------------------------------------------------------------------------------


def selected(f: Finding, unsafe: bool) -> bool:
    """Would the current settings apply this finding's fix?"""
    return f.fix is not None and (f.fix.safe or unsafe)


@record
class _FileFix:
    """A file's fix outcome, with the bytes it was computed from and how to encode the result."""
    outcome: FixOutcome
    file: FileText | None  # how to encode the result (None: unreadable)
    data: bytes  # the bytes the fix was computed from


def _init_fix(index, config, unsafe, created=None, configs=None) -> None:
    worker_state().update(index=index, config=config, unsafe=unsafe, created=created or {}, configs=configs or {})


@record(frozen=True)
class CheckedFile:
    """What the check stage found in one file, and the stamp of the file it analysed."""

    findings: list[Finding]
    real: str
    stamp: str


def _fix_job(item: tuple[str, "CheckedFile | None"]) -> _FileFix:
    st = worker_state()
    path, checked = item
    config = st.get("configs", {}).get(path, st["config"])  # a monorepo package's own helper
    return fix_path(path, st["index"], config, st["unsafe"], checked, st.get("created"))


def fix_path(path: str, index: QuantizableLayerIndex, config: Config, unsafe: bool,
             checked: CheckedFile | None = None, created: dict[str, str] | None = None) -> _FileFix:
    """Fix one file. With `checked`, the first round applies the check stage's findings when the
    file is still the one it analysed (same stamp before and after reading it); otherwise, and for
    every later round, the text in hand is analysed. `created`: module -> text of a module the run
    will create (the helper), for the import graph."""
    from dtype_lint.fix.import_graph import ImportGraph

    try:
        before = _stamp(checked.real) if checked is not None else None
        data = read_bytes(path, MAX_SOURCE_BYTES)
        ft = FileText.decode(data)
    except READ_ERRORS as e:
        from dtype_lint.fix.fixer import failed

        return _FileFix(failed(path, "", f"cannot read: {e}", []), None, b"")
    from dtype_lint.core.project_style import line_length_for

    first = checked.findings if checked is not None and before == checked.stamp == _stamp(checked.real) else None
    module = module_name(path, config.root)
    graph = ImportGraph(index.modules, created) if isinstance(index.modules, ModuleTable) else None
    outcome = fix_text(path, ft.text, lambda t: analyze(path, t, index, config, module), unsafe, first=first,
                       line_length=line_length_for(config), graph=graph, module=module)
    return _FileFix(outcome, ft, data)


def helper_location(config: Config, files: list[str]) -> HelperLocation:
    """Where the configured helper (or the preset's default) lives. Raises HelperError."""
    from dtype_lint.fix.helper_home import configured_location

    return configured_location(config, files)


def choose_helper_stage(result: RunResult, index, files: Iterable[str], options: RunOptions) -> None:
    """The helper-choice stage: decide which helper the fixes route through, before anything is
    fixed or reported.

    An inferred helper changes the fixes whose import names another module, so only the files
    holding those are analysed again with it (none when every fix already imports the chosen
    helper). When no helper can be used, a fixing run stops (exit 2, nothing written); a check
    keeps the findings but drops those fixes, saying why, so that `[*]` and "fixable" promise only
    what `--fix` would do."""
    # Fixes through an ecosystem's own helper find it where that ecosystem keeps it (its "helper"
    # plug-in: the HF helper in the project's torch utilities).
    needing = [f for f in result.findings if f.fix is not None and f.fix.imports and helper_of(f) is None]
    if not needing:
        _refuse_unreachable_helper(result)  # the ecosystem helpers' fixes
        return
    from dtype_lint.ecosystems.presets import tree_on_preset
    from dtype_lint.fix.helper_home import choose_helper
    from dtype_lint.fix.helper_template import HelperError

    preset = result.config.preset
    try:
        choice = choose_helper(result.config, files, needing, lambda: tree_on_preset(preset, index.modules))
    except HelperError as e:
        raise UserError(str(e)) from None
    result.helper_choice = choice
    root = result.config.root
    chosen_for = {f.path: choice.for_path(f.path, root) for f in needing}  # one per package in a monorepo
    unplaced = [f for f in needing if chosen_for[f.path].location is None]
    if unplaced:
        if (options.fix or options.diff) and any(selected(f, options.unsafe_fixes) for f in unplaced):
            raise UserError(chosen_for[unplaced[0].path].error)
        for f in unplaced:
            error = chosen_for[f.path].error
            f.fix, f.no_fix_reason = None, f"the fix needs the shared helper, which cannot be located: {error}"
        result.warnings += list(dict.fromkeys(chosen_for[f.path].error for f in unplaced))
        if choice.location is None:
            return
    inferred = {p: c for p, c in chosen_for.items() if c.inferred and c.location is not None}
    if inferred:
        paths = {f.path for f in needing if f.path in inferred and f.fix is not None and
                 (inferred_at := inferred[f.path].location) is not None and  # (kept only with one)
                 any(tuple(i) != (inferred_at.module, inferred_at.func) for i in f.fix.imports)}
        fresh = [f for p in sorted(paths) for f in analyze_path(p, index, inferred[p].config)
                 if inferred[p].config.enabled(f.code, f.path)]
        result.findings = sorted([f for f in result.findings if f.path not in paths] + fresh, key=Finding.sort_key)
        if choice.inferred:
            result.config = choice.config
    _refuse_unreachable_helper(result)
    if inferred and (options.fix or options.diff):
        # Said only of a helper some fix still uses: where every one was refused, the refusals say why.
        for finding in result.findings:
            chosen = inferred.get(finding.path)
            if chosen is None or chosen.location is None or finding.fix is None or \
                    (chosen.location.module, chosen.location.func) not in map(tuple, finding.fix.imports):
                continue
            headline = chosen.headline or chosen.note
            if headline not in result.warnings:
                result.warnings.append(headline)
                result.warning_details[headline] = chosen.note


def _refuse_unreachable_helper(result: RunResult) -> None:
    """Drop the fixes of files that could not import their helper where their package is
    installed (helper_home.reach_problem_for): the findings stay, saying why."""
    root = result.config.root
    problems: dict[tuple[str, str], str] = {}
    for finding in result.findings:
        if finding.fix is None or not finding.fix.imports:
            continue
        ecosystem_helper = helper_of(finding)
        if ecosystem_helper is not None:  # an ecosystem helper's home, judged the same way
            location = ecosystem_helper.helper_location(finding, result.index, root)
        elif result.helper_choice is not None:
            location = result.helper_choice.for_path(finding.path, root).location
        else:
            continue
        if location is None:
            continue
        key = (finding.path, location.module)
        if key not in problems:
            from dtype_lint.fix.helper_home import ignored_helper_problem, reach_problem_for

            problems[key] = reach_problem_for(finding.path, location, root)
            if not location.exists and not problems[key]:
                problems[key] = ignored_helper_problem(location, root)
        if problems[key]:
            finding.fix, finding.no_fix_reason = None, f"the fix is refused: {problems[key]}"
    result.warnings += list(dict.fromkeys(f"{_shown(path)}: fixes refused: {problem}"
                                          for (path, _module), problem in problems.items() if problem))


def _fix_stage(result: RunResult, index, files: list[str], options: RunOptions, jobs: int) -> None:
    unsafe = options.unsafe_fixes
    todo = [f for f in result.findings if selected(f, unsafe)]
    paths = sorted({f.path for f in todo})
    if not paths:
        return
    helper = None
    helper_of: dict[str, HelperLocation] = {}  # each file's own (a monorepo's packages have one each)
    configs: dict[str, Config] = {}  # the files whose fixes are planned with another package's helper
    if any(f.fix is not None and f.fix.imports for f in todo) and result.helper_choice is not None:
        helper = result.helper_choice.location
        for path in paths:
            own = result.helper_choice.for_path(path, result.config.root)
            if own.location is not None:
                helper_of[path] = own.location
                if own.config is not result.config:
                    configs[path] = own.config
    created = {h.module: h.source for h in helper_of.values() if not h.exists}
    created.update(_ecosystem_helpers_to_create(todo, index, result.config.root))
    # The fix stage starts from the check stage's findings (fixer.fix_text's `first`).
    by_path: dict[str, list[Finding]] = {}
    for finding in result.findings:
        by_path.setdefault(finding.path, []).append(finding)
    items = [(p, CheckedFile(by_path.get(p, []), *result.checked_stamps[p]) if p in result.checked_stamps else None)
             for p in paths]
    fixes = parallel_map(_fix_job, items, jobs, init=_init_fix,
                         initargs=(index, result.config, unsafe, created, configs),
                         progress=options.progress, stage="fix", parallel=jobs > 1 and len(paths) >= 4)
    # A fix that cannot land is refused before anything is written (DTL901, its sites remain):
    # a file that would import the helper from outside its package layout, and (when writing)
    # a file the writer would refuse. The helper is then created only when a fix will use it.
    if helper is not None:
        fixes = [_refuse(ff, result, helper_import_problem(ff.outcome.path, helper_of[ff.outcome.path],
                                                           result.config.root))
                 if _imports_helper(ff.outcome) and ff.outcome.path in helper_of else ff for ff in fixes]
    if not options.diff:
        fixes = [_refuse(ff, result, _write_problem(result.writer, ff)) if ff.outcome.changed else ff
                 for ff in fixes]
    # The helpers to create: those a fix that lands imports (one per package in a monorepo).
    to_create = list({id(h): h for ff in fixes if _imports_helper(ff.outcome)
                      for h in [helper_of.get(ff.outcome.path)] if h is not None and not h.exists}.values())
    result.helper = helper
    result.created_helpers = to_create
    if options.diff:
        result.diff = _diff(result, to_create, fixes) + _ecosystem_helpers_diff(index, [ff.outcome for ff in fixes],
                                                                              result.config.root)
        return
    for location in to_create:
        _create_helper(result.writer, location)
    _settle_ecosystem_helpers(result, index, [ff.outcome for ff in fixes])
    outcomes = []
    from dtype_lint.fix.fixer import failed

    for fix in fixes:
        o = fix.outcome
        if o.changed:
            try:
                result.writer.write(o.path, fix.file.encode(o.text), "fix", expect=fix.data)
            except WriteError as error:
                o = failed(o.path, o.original, str(error), _pre_fix(result.findings, o.path))
        outcomes.append(o)
    settle(result, outcomes)


def settle(result: RunResult, outcomes: list[FixOutcome]) -> None:
    """Account for applied fixes: their findings move to `fixed`, what they left stays."""
    by_path = {o.path for o in outcomes}
    left = [f for f in result.findings if f.path not in by_path]
    for outcome in outcomes:
        left.extend(outcome.remaining)
        if outcome.changed:
            result.fixed.extend(outcome.applied)
    result.outcomes = outcomes
    result.findings = sorted(left, key=Finding.sort_key)


def not_applied(outcome: FixOutcome, why: str) -> FixOutcome:
    """`outcome` as a fix a front end decided not to apply (a series cannot patch the file): the
    text as it was, every finding of the file (those the fix would have fixed, those it left) and
    DTL901 saying why."""
    from dtype_lint.fix.fixer import failed

    return failed(outcome.path, outcome.original, why, outcome.applied + outcome.remaining)


def _pre_fix(findings: list[Finding], path: str) -> list[Finding]:
    return [f for f in findings if f.path == path]


def _imports_helper(o: FixOutcome) -> bool:
    return o.changed and any(f.fix is not None and f.fix.imports for f in o.applied)


def _refuse(ff: _FileFix, result: RunResult, why: str | None) -> _FileFix:
    if not why:
        return ff
    from dtype_lint.fix.fixer import failed

    o = ff.outcome
    return _FileFix(failed(o.path, o.original, why, _pre_fix(result.findings, o.path)), ff.file, ff.data)


def _write_problem(writer: ProjectWriter, ff: _FileFix) -> str | None:
    try:
        writer.check(ff.outcome.path, expect=ff.data)
    except WriteError as error:
        return str(error)
    return None


def helper_import_problem(path: str, helper: HelperLocation, root: Path) -> str | None:
    """Why `from <helper module> import ...` would not reach the helper from `path`, or None.

    The file is imported from its import root (see discovery.module_name; a file outside any
    package, from its own folder). When that is where the helper's top-level package sits, the
    import resolves. From another import root it resolves through the installed project (tests
    or scripts next to `python/sglang`), unless that root has a module or package of the same
    top-level name of its own: there the import would find that one (a vendored copy, a
    second layout of the package) and fail, or call something else."""
    parts = helper.module.split(".")
    depth = len(parts) + (1 if helper.path.name == "__init__.py" else 0)
    base = os.path.realpath(helper.path.parent)
    for _ in range(depth - 1):
        base = os.path.dirname(base)
    # Where the file's package is installed alone (a monorepo's packages), it must reach it too.
    from dtype_lint.fix.helper_home import reach_problem_for

    unreachable = reach_problem_for(path, helper, root)
    if unreachable:
        return unreachable
    file_root = os.path.realpath(import_root(path, root) or os.path.dirname(os.path.abspath(path)))
    if file_root == base:
        return None
    for shadow in (os.path.join(file_root, parts[0]), os.path.join(file_root, parts[0] + ".py")):
        if os.path.exists(shadow):
            return (f"this file is imported from `{os.path.relpath(file_root, root)}`, whose own "
                    f"`{os.path.relpath(shadow, root)}` would be found for `{parts[0]}`: "
                    f"`from {helper.module} import {helper.func}` would not reach the helper in "
                    f"`{os.path.relpath(str(helper.path), root)}`")
    return None


def _pins_ecosystem_helper(helper: str) -> bool:
    func = helper.partition(":")[2]
    return any(getattr(ecosystem_helper, "HELPER_NAME", None) == func for ecosystem_helper in plugins("helper"))


def _ecosystem_helpers_to_create(todo: list[Finding], index, root: Path) -> dict[str, str]:
    """module -> text of each ecosystem helper module the fixes would create (the import graph
    must know it: importing it runs nothing of the project's, so it closes no cycle)."""
    created: dict[str, str] = {}
    for ecosystem_helper in plugins("helper"):
        for finding in todo:
            if finding.fix is not None and ecosystem_helper.owns_fix(finding):
                location = ecosystem_helper.helper_location(finding, index, root)
                if not location.exists:
                    created[location.module] = location.source
    return created


def _ecosystem_helpers_diff(index, outcomes, root: Path) -> str:
    """`--diff`'s view of what settling the ecosystem helpers would write: a new module, or the
    helper appended to an existing one."""
    import difflib

    parts = []
    for ecosystem_helper in plugins("helper"):
        for path, data, expect in ecosystem_helper.settle_helper(outcomes, index, root):
            old = [] if expect is None else expect.decode("utf-8").splitlines(keepends=True)
            parts.append("".join(difflib.unified_diff(
                old, data.decode("utf-8").splitlines(keepends=True),
                fromfile="/dev/null" if expect is None else f"a/{os.path.relpath(path)}",
                tofile=f"b/{os.path.relpath(path)}")))
    return "".join(parts)


def _settle_ecosystem_helpers(result: RunResult, index, outcomes) -> None:
    """Append each ecosystem's helper to its home (or create that), where an applied fix imports it."""
    for ecosystem_helper in plugins("helper"):
        for path, data, expect in ecosystem_helper.settle_helper(outcomes, index, result.config.root):
            try:
                if expect is None:
                    result.writer.create_files([(Path(path), data, "helper")], "folder for the helper")
                else:
                    result.writer.write(path, data, "helper", expect=expect)
            except WriteError as e:
                raise UserError(f"cannot add the {ecosystem_helper.HELPER_LABEL} to {path}: {e}") from None


def _create_helper(writer: ProjectWriter, helper: HelperLocation) -> None:
    files = [(m, b"", "package marker for the helper") for m in helper.package_markers]
    files.append((helper.path, helper.source.encode("utf-8"), "helper"))
    try:
        writer.create_files(files, "folder for the helper")
    except WriteError as error:
        raise UserError(f"cannot create the helper: {error}") from None


def _diff(result: RunResult, helpers: list[HelperLocation], fixes: list[_FileFix]) -> str:
    import difflib

    parts = []
    for helper in helpers:
        for marker in helper.package_markers:
            parts.append(f"--- /dev/null\n+++ b/{os.path.relpath(marker)}\n")
        parts.append("".join(difflib.unified_diff(
            [], helper.source.splitlines(keepends=True), fromfile="/dev/null",
            tofile=f"b/{os.path.relpath(helper.path)}")))
    parts += [ff.outcome.diff() for ff in fixes if ff.outcome.changed]
    result.outcomes = [ff.outcome for ff in fixes]
    return "".join(parts)


# ---- baseline ---------------------------------------------------------------------------------


def _write_baseline(result: RunResult, path: str) -> None:
    from dtype_lint.run.baseline import BaselineError, write_baseline

    try:
        write_baseline(path, result.findings, result.config.root,
                       lambda p, data: result.writer.write(p, data, "baseline"))
    except (BaselineError, WriteError) as error:
        raise UserError(str(error)) from None
    result.baselined = len(result.findings)
    result.findings = []


def _apply_baseline(result: RunResult, path: str) -> None:
    from dtype_lint.run.baseline import Baseline, BaselineError

    try:
        baseline = Baseline.load(path)
    except (OSError, ValueError, BaselineError) as error:
        raise UserError(f"cannot read baseline {path}: {error}") from None
    result.findings, result.baselined, _stale = baseline.filter(result.findings, result.config.root)


# ---- one text, no project (the API) -----------------------------------------------------------


def single_file_index(text: str, filename: str, config: Config) -> QuantizableLayerIndex:
    # The text is analysed as a standalone module named "", so its own classes are indexed
    # under that name whether or not `filename` exists on disk.
    header = extract_header(text, "", filename, os.path.basename(filename) == "__init__.py")
    return build_index([header], config)


def check_text(text: str, filename: str, config: Config) -> list[Finding]:
    index = single_file_index(text, filename, config)
    return analyze(filename, text, index, config, "", load_file=_no_files)


def fix_one_text(text: str, filename: str, config: Config, unsafe: bool) -> FixOutcome:
    index = single_file_index(text, filename, config)
    return fix_text(filename, text, lambda t: analyze(filename, t, index, config, "", load_file=_no_files), unsafe)


def _no_files(_path: str) -> None:
    return None


__all__ = ["RunOptions", "RunResult", "UserError", "run", "check_text", "fix_one_text", "selected",
           "analyze_path", "helper_location", "safe_read"]
