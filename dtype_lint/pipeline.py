"""The run, stage by stage; `cli`, `migrate`, `api` and `verify` call this and nothing else.

    discover → scan (read, prefilter, class headers; cached) → index → analyze (rules, per-file
    ignores, suppressions; cached) → helper (which one fixes use) → fix or diff (optional) →
    baseline → RunResult

Suppressions and their DTL902 findings are settled inside `analysis.analyze`, per file, before
any fix: what `--fix` acts on is exactly what a check reports. Every byte written into the
user's project goes through the run's `ProjectWriter` and is listed in `RunResult.writes`.
"""

from __future__ import annotations

import hashlib
import json
import os
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

from . import __version__
from .analysis import analyze, enabled_rules, parse_error, reads_helper_callers, safe_read
from .cache import Cache
from .config import Config
from .discovery import DiscoveryError, changed_since, discover, import_root, module_name
from .findings import Finding
from .fixer import FixOutcome, failed, fix_text
from .helper import HelperError, HelperLocation
from .helper_home import HelperChoice, choose_helper, configured_location
from .index import ModuleHeader, QuantizableLayerIndex, extract_header
from .prefilter import for_rules, has_suppression
from .source import MAX_SOURCE_BYTES, READ_ERRORS, FileText, read_bytes, read_file
from .workers import effective_jobs, parallel_map, worker_state
from .writer import ProjectWriter, WriteError, WriteRecord, remove_stale_temps


class UserError(Exception):
    """A bad request (missing path, bad baseline, unusable helper): exit 2, nothing written."""


@dataclass
class RunOptions:
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


@dataclass
class RunResult:
    config: Config
    findings: list[Finding]  # what remains, after suppressions, fixes and the baseline
    files: list[str]  # the files in scope
    analyzed: int  # files parsed and checked (the rest could not hold a site)
    elapsed_s: float
    writer: ProjectWriter
    fixed: list[Finding] = field(default_factory=list)  # findings whose fix was written
    outcomes: list[FixOutcome] = field(default_factory=list)
    helper: HelperLocation | None = None  # the helper this run's fixes were routed through
    # Which helper fixes use and why (configured, the preset's default, inferred); None when no
    # finding's fix needs one.
    helper_choice: HelperChoice | None = None
    diff: str = ""
    baselined: int = 0
    # Things the user should know that are not findings (a run that checked nothing, a configured
    # class that matches nothing...): printed on stderr by the CLI.
    warnings: list[str] = field(default_factory=list)
    index: QuantizableLayerIndex | None = None  # the class index the run analysed against

    @property
    def writes(self) -> list[WriteRecord]:
        return self.writer.records


def run(config: Config, options: RunOptions) -> RunResult:
    t0 = time.perf_counter()
    _require_rules(config)
    jobs = effective_jobs(options.jobs)
    staging = config.root / config.cache_dir / "tmp"
    writer = ProjectWriter(config.root, staging)
    if options.write_baseline:
        try:
            writer.check(options.write_baseline)  # before any fix is written, not after
        except WriteError as e:
            raise UserError(str(e)) from None
    temps: list[str] = []
    try:
        files, index_files = _discover(config, options.paths, temps)
    except DiscoveryError as e:
        raise UserError(str(e)) from None
    unnamed = [p for p in files if not _encodable(p)]
    if unnamed:
        files = [p for p in files if _encodable(p)]
        index_files = [p for p in index_files if _encodable(p)]
    if config.helper:  # a bad `helper` setting is an error on every run, not only when fixing
        try:
            configured_location(config, index_files)
        except HelperError as e:
            raise UserError(str(e)) from None
    if options.fix:
        remove_stale_temps(staging)
        for folder, names in _by_folder(temps).items():
            remove_stale_temps(folder, names)
    cache = Cache(config.root / config.cache_dir, key=f"{__version__}-{code_stamp()}-{config.fingerprint()}",
                  enabled=options.use_cache)
    scan = _scan(index_files, config, cache, jobs, options.progress)
    index = build_index(list(scan.headers.values()), config)
    warnings = _unmatched_classes(config, index) if index_files else []

    in_scope = files
    if options.changed_since is not None:
        try:
            changed = changed_since(options.changed_since, config.root)
        except DiscoveryError as e:
            raise UserError(str(e)) from None
        in_scope = [p for p in files if os.path.realpath(p) in changed]
    targets = [p for p in in_scope if scan.passes.get(p) or scan.suppressing.get(p)
               or (p in scan.headers and reads_helper_callers(enabled_rules(config, p), index, scan.headers[p].module))]
    findings = [parse_error(p, scan.errors[p]) for p in in_scope if p in scan.errors]
    findings += [parse_error(_shown(p), "the file name is not valid UTF-8; skipped") for p in unnamed]
    findings += _analyze(targets, scan, index, config, cache, jobs, options.progress)
    cache.save(writer)
    findings = [f for f in findings if config.enabled(f.code, f.path)]
    result = RunResult(config, sorted(findings, key=Finding.sort_key), in_scope, len(targets), 0.0, writer,
                       warnings=warnings, index=index)
    result.warnings += _nothing_checked(files, in_scope, options)
    _settle_helper(result, index, index_files, options)

    if options.fix or options.diff:
        _fix_stage(result, index, files, options, jobs)
    if options.write_baseline:
        _write_baseline(result, options.write_baseline)
    elif options.baseline:
        _apply_baseline(result, options.baseline)
    writer.close()
    result.elapsed_s = time.perf_counter() - t0
    return result


# ---- discovery and scan -----------------------------------------------------------------------


def _require_rules(config: Config) -> None:
    """A configuration that enables no rule would check nothing and pass: refuse it."""
    if enabled_rules(config):
        return
    from .rules import ALL_RULES

    where = "the command line" if config.source == "defaults" else f"{config.source} or the command line"
    raise UserError(
        f"no rule is enabled: select = {json.dumps(config.select)} and ignore = {json.dumps(config.ignore)} "
        f"(from {where}) leave none of "
        f"{', '.join(r.code for r in ALL_RULES)}, so nothing would be checked; select at least one rule")


def _nothing_checked(files: list[str], in_scope: list[str], options: RunOptions) -> list[str]:
    """Why a run checked no file, for the user: never a silent pass over nothing."""
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
    for p in paths:
        out.setdefault(os.path.dirname(p), []).append(os.path.basename(p))
    return out


def _discover(config: Config, paths: list[str], temps: list[str] | None = None) -> tuple[list[str], list[str]]:
    """(files to check, files whose class headers the index needs). Named files (pre-commit passes
    only the staged ones) are checked against the class index of their whole project, so a layer
    defined in an unstaged file still resolves."""
    files = discover(paths, tuple(config.exclude), config.root, temps)
    index_files = files
    if config.source != "defaults" and any(os.path.isfile(p) for p in paths):
        seen = {os.path.realpath(f) for f in files}
        rel = os.path.relpath(config.root)
        root = rel if not rel.startswith("..") else str(config.root)
        index_files = files + [f for f in discover([root], tuple(config.exclude), config.root, temps)
                               if os.path.realpath(f) not in seen]
    return files, index_files


@dataclass
class _Scan:
    headers: dict[str, ModuleHeader] = field(default_factory=dict)
    hashes: dict[str, str] = field(default_factory=dict)
    passes: dict[str, bool] = field(default_factory=dict)
    suppressing: dict[str, bool] = field(default_factory=dict)
    errors: dict[str, str] = field(default_factory=dict)
    stamps: dict[str, str] = field(default_factory=dict)

    @property
    def digest(self) -> str:
        """Changes whenever any class header changes: part of every cached finding's key."""
        parts = sorted(f"{h.module}:{self.hashes.get(p, '')};" for p, h in self.headers.items())
        return hashlib.sha1("".join(parts).encode()).hexdigest()[:16]


def _stamp(path: str) -> str:
    try:
        st = os.stat(path)
        return f"{st.st_mtime_ns}:{st.st_size}"
    except OSError:
        return "missing"


def _header_job(path: str) -> tuple[str, dict | None, bool, bool, str | None]:
    """(path, header, prefilter verdict, holds a suppression, error) for one file."""
    try:
        text = read_file(path).text
    except READ_ERRORS as e:
        return path, None, False, False, f"cannot read: {e}"
    module = module_name(path, worker_state()["root"])
    header = extract_header(text, module, path, os.path.basename(path) == "__init__.py").to_dict()
    # The path is left out of the hash: the same file named `x.py` or `./x.py` is the same header.
    hashed = {k: v for k, v in header.items() if k != "path"}
    header["hash"] = hashlib.sha1(json.dumps(hashed, sort_keys=True).encode()).hexdigest()[:16]
    prefilter = worker_state()["prefilter"]
    return path, header, prefilter.might_match(text), has_suppression(text), None


def _init_scan(prefilter, root: Path) -> None:
    worker_state().update(prefilter=prefilter, root=root)


def _scan(paths: list[str], config: Config, cache: Cache, jobs: int, progress) -> _Scan:
    scan = _Scan()
    misses = []
    for p in paths:
        scan.stamps[p] = _stamp(p)
        hit = cache.header(p, scan.stamps[p])
        try:
            header, passes = hit
            scan.headers[p], scan.passes[p] = ModuleHeader.from_dict(header), passes
        except (TypeError, KeyError, ValueError, AttributeError):  # a miss, or an entry of another shape
            misses.append(p)
            continue
        scan.hashes[p] = header.get("hash", "")
        scan.suppressing[p] = bool(header.get("suppressions"))
    prefilter = for_rules(tuple(enabled_rules(config)))
    for path, header, passes, suppressing, err in parallel_map(
            _header_job, misses, jobs, init=_init_scan, initargs=(prefilter, config.root), progress=progress, stage="index",
            parallel=jobs > 1 and len(misses) >= 64):
        if err:
            scan.errors[path] = err
            continue
        scan.headers[path], scan.passes[path] = ModuleHeader.from_dict(header), passes
        scan.hashes[path] = header["hash"]
        scan.suppressing[path] = suppressing
        header["suppressions"] = suppressing
        cache.put_header(path, scan.stamps[path], header, passes)
    return scan


def _unmatched_classes(config: Config, index: QuantizableLayerIndex) -> list[str]:
    """No silent passes: configured class names the scanned tree neither defines nor imports."""
    out = []
    for key, names in (("quantizable", config.quantizable), ("exempt-classes", config.exempt_classes),
                       ("not-quantizable", config.not_quantizable)):
        missing = [n for n in names if not index.mentions(n)]
        if missing:
            out.append(f"`{key}` names classes the checked files neither define nor import: "
                       f"{', '.join(missing)} (check the spelling and the module path)")
    from .presets import PRESETS

    preset = PRESETS[config.preset]["quantizable"]
    if preset and not any(index.mentions(n) for n in preset):
        out.append(f"none of the `{config.preset}` preset's layer classes is defined or imported here; "
                   "quantizable layers are inferred from the code alone (`preset = \"generic\"` says so "
                   "without this warning)")
    return out


def build_index(headers: list[ModuleHeader], config: Config) -> QuantizableLayerIndex:
    return QuantizableLayerIndex(headers, config.all_quantizable, config.all_exempt_classes, config.all_not_quantizable)


# ---- analysis -------------------------------------------------------------------------------


def _init_analysis(index: QuantizableLayerIndex, config: Config) -> None:
    worker_state().update(index=index, config=config)


def _analyze_job(path: str) -> tuple[str, list[dict], list[str]]:
    st = worker_state()
    deps: set[str] = set()
    found = analyze_path(path, st["index"], st["config"], deps)
    return path, [f.to_dict() for f in found], sorted(deps)


def analyze_path(path: str, index: QuantizableLayerIndex, config: Config, deps: set[str] | None = None) -> list[Finding]:
    """The findings of one file on disk (DTL900 when it cannot be read)."""
    try:
        text = read_file(path).text
    except READ_ERRORS as e:
        return [parse_error(path, f"cannot read: {e}")]
    return analyze(path, text, index, config, module_name(path, config.root), deps=deps)


def _analyze(targets: list[str], scan: _Scan, index, config, cache: Cache, jobs: int, progress) -> list[Finding]:
    digest = scan.digest
    findings: list[Finding] = []
    todo = []
    def stamp_of(path: str) -> str:
        return scan.stamps[path] if path in scan.stamps else _stamp(path)

    for p in targets:
        hit = cache.findings(p, scan.stamps[p], digest, stamp_of)
        try:
            findings.extend([Finding.from_dict(d) for d in hit])
        except (TypeError, KeyError, ValueError, AttributeError):  # a miss, or an entry of another shape
            todo.append(p)
    for path, dicts, deps in parallel_map(_analyze_job, todo, jobs, init=_init_analysis, initargs=(index, config),
                                          progress=progress, stage="analyze", parallel=jobs > 1 and len(todo) >= 4):
        cache.put_findings(path, scan.stamps[path], digest, dicts, {d: stamp_of(d) for d in deps})
        findings.extend(Finding.from_dict(d) for d in dicts)
    return findings


def reanalyze(result: RunResult, path: str, text: str) -> list[Finding]:
    """The findings of another version of a file of this run, against the run's class index."""
    return analyze(path, text, result.index, result.config, module_name(path, result.config.root))


def code_stamp() -> str:
    """Changes when dtype-lint's own code changes (an editable install under development), so a
    cache never outlives the rules that produced it."""
    import dtype_lint
    import dtype_lint.rules

    h = hashlib.sha1()
    for pkg in (dtype_lint, dtype_lint.rules):
        d = os.path.dirname(pkg.__file__)
        for name in sorted(os.listdir(d)):
            if name.endswith(".py"):
                st = os.stat(os.path.join(d, name))
                h.update(f"{name}:{st.st_mtime_ns}:{st.st_size};".encode())
    return h.hexdigest()[:10]


# ---- fixing ---------------------------------------------------------------------------------


def selected(f: Finding, unsafe: bool) -> bool:
    """Would the current settings apply this finding's fix?"""
    return f.fix is not None and (f.fix.safe or unsafe)


@dataclass
class _FileFix:
    outcome: FixOutcome
    file: FileText | None  # how to encode the result (None: unreadable)
    data: bytes  # the bytes the fix was computed from


def _init_fix(index, config, unsafe) -> None:
    worker_state().update(index=index, config=config, unsafe=unsafe)


def _fix_job(path: str) -> _FileFix:
    st = worker_state()
    return fix_path(path, st["index"], st["config"], st["unsafe"])


def fix_path(path: str, index: QuantizableLayerIndex, config: Config, unsafe: bool) -> _FileFix:
    try:
        data = read_bytes(path, MAX_SOURCE_BYTES)
        ft = FileText.decode(data)
    except READ_ERRORS as e:
        return _FileFix(failed(path, "", f"cannot read: {e}", []), None, b"")
    module = module_name(path, config.root)
    outcome = fix_text(path, ft.text, lambda t: analyze(path, t, index, config, module), unsafe)
    return _FileFix(outcome, ft, data)


def helper_location(config: Config, files: list[str]) -> HelperLocation:
    """Where the configured helper (or the preset's default) lives. Raises HelperError."""
    return configured_location(config, files)


def _settle_helper(result: RunResult, index, files: list[str], options: RunOptions) -> None:
    """Decide which helper the fixes route through, before anything is fixed or reported.

    An inferred helper changes the fixes (their import names it), so the files holding them are
    analysed again with it. When no helper can be used, a fixing run stops (exit 2, nothing
    written); a check keeps the findings but drops those fixes, saying why, so that `[*]` and
    "fixable" promise only what `--fix` would do."""
    needing = [f for f in result.findings if f.fix is not None and f.fix.imports]
    if not needing:
        return
    try:
        choice = choose_helper(result.config, files, needing)
    except HelperError as e:
        raise UserError(str(e)) from None
    result.helper_choice = choice
    if choice.location is None:
        if (options.fix or options.diff) and any(selected(f, options.unsafe_fixes) for f in needing):
            raise UserError(choice.error)
        for f in needing:
            f.fix, f.no_fix_reason = None, f"the fix needs the shared helper, which cannot be located: {choice.error}"
        result.warnings.append(choice.error)
        return
    if choice.inferred:
        paths = {f.path for f in needing}
        fresh = [f for p in sorted(paths) for f in analyze_path(p, index, choice.config)
                 if choice.config.enabled(f.code, f.path)]
        result.findings = sorted([f for f in result.findings if f.path not in paths] + fresh, key=Finding.sort_key)
        result.config = choice.config
        if options.fix or options.diff:
            result.warnings.append(choice.note)


def _fix_stage(result: RunResult, index, files: list[str], options: RunOptions, jobs: int) -> None:
    unsafe = options.unsafe_fixes
    todo = [f for f in result.findings if selected(f, unsafe)]
    paths = sorted({f.path for f in todo})
    if not paths:
        return
    helper = None
    if any(f.fix.imports for f in todo) and result.helper_choice is not None:
        helper = result.helper_choice.location
    fixes = parallel_map(_fix_job, paths, jobs, init=_init_fix, initargs=(index, result.config, unsafe),
                         progress=options.progress, stage="fix", parallel=jobs > 1 and len(paths) >= 4)
    # A fix that cannot land is refused before anything is written (DTL901, its sites remain):
    # a file that would import the helper from outside its package layout, and (when writing)
    # a file the writer would refuse. The helper is then created only when a fix will use it.
    if helper is not None:
        fixes = [_refuse(ff, result, helper_import_problem(ff.outcome.path, helper, result.config.root))
                 if _imports_helper(ff.outcome) else ff for ff in fixes]
    if not options.diff:
        fixes = [_refuse(ff, result, _write_problem(result.writer, ff)) if ff.outcome.changed else ff
                 for ff in fixes]
    needs_helper = helper is not None and not helper.exists and any(_imports_helper(ff.outcome) for ff in fixes)
    result.helper = helper
    if options.diff:
        result.diff = _diff(result, helper if needs_helper else None, fixes)
        return
    if needs_helper:
        _create_helper(result.writer, helper)
    outcomes = []
    for ff in fixes:
        o = ff.outcome
        if o.changed:
            try:
                result.writer.write(o.path, ff.file.encode(o.text), "fix", expect=ff.data)
            except WriteError as e:
                o = failed(o.path, o.original, str(e), _pre_fix(result.findings, o.path))
        outcomes.append(o)
    by_path = {o.path for o in outcomes}
    left = [f for f in result.findings if f.path not in by_path]
    for o in outcomes:
        left.extend(o.remaining)
        if o.changed:
            result.fixed.extend(o.applied)
    result.outcomes = outcomes
    result.findings = sorted(left, key=Finding.sort_key)


def _pre_fix(findings: list[Finding], path: str) -> list[Finding]:
    return [f for f in findings if f.path == path]


def _imports_helper(o: FixOutcome) -> bool:
    return o.changed and any(f.fix.imports for f in o.applied)


def _refuse(ff: _FileFix, result: RunResult, why: str | None) -> _FileFix:
    if not why:
        return ff
    o = ff.outcome
    return _FileFix(failed(o.path, o.original, why, _pre_fix(result.findings, o.path)), ff.file, ff.data)


def _write_problem(writer: ProjectWriter, ff: _FileFix) -> str | None:
    try:
        writer.check(ff.outcome.path, expect=ff.data)
    except WriteError as e:
        return str(e)
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


def _create_helper(writer: ProjectWriter, helper: HelperLocation) -> None:
    files = [(m, b"", "package marker for the helper") for m in helper.package_markers]
    files.append((helper.path, helper.source.encode("utf-8"), "helper"))
    try:
        writer.create_files(files, "folder for the helper")
    except WriteError as e:
        raise UserError(f"cannot create the helper: {e}") from None


def _diff(result: RunResult, helper: HelperLocation | None, fixes: list[_FileFix]) -> str:
    import difflib

    parts = []
    if helper is not None:
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
    from .baseline import BaselineError, write_baseline

    try:
        write_baseline(path, result.findings, result.config.root,
                       lambda p, data: result.writer.write(p, data, "baseline"))
    except (BaselineError, WriteError) as e:
        raise UserError(str(e)) from None
    result.baselined = len(result.findings)
    result.findings = []


def _apply_baseline(result: RunResult, path: str) -> None:
    from .baseline import Baseline, BaselineError

    try:
        baseline = Baseline.load(path)
    except (OSError, ValueError, BaselineError) as e:
        raise UserError(f"cannot read baseline {path}: {e}") from None
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
