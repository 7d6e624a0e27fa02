"""The answer of the last full run on the same named files, replayed by a pre-commit run that
changes nothing it depends on.

When a named file can hold a site, the fast path (fast_path.py) falls back to the full run, which
pays for the whole engine even when nothing changed since the last run on those files (a
`touch`, a `git stash` round trip, a hook run twice): at ten times vLLM about 0.15 s of imports,
the project's file list and the checks of the cached findings, for findings the cache already
holds. That full run keeps its answer in `run-memo.json` in the cache folder, one entry per
(current folder, named files, `--force-exclude`): the findings as reported, the counts of files
checked and analysed, the warnings, and what they depend on:

- the fast path's record (fast_record.py), by its file's mtime and size, as this run found it
  true at its start and left it at its end: while the fast path finds that same record true, the
  configuration, dtype-lint's code, the .gitignore files and git's excludes, and the mtime of
  every folder of the project are as they were, so the project's file list is the one this run
  had, and with it every module name, which file defines it and each folder's listing (the
  memo is kept only when that list came from the walk's record, layout_cache.py, which is never
  kept where a link or an unreadable .gitignore is in the way, and when the fast path's record
  lists every folder of it);
- the stamp of each named file and of every file its analysis read (its findings entry's,
  cache.py): with the file list the same, these are all that a cached findings entry is checked
  against;
- the helper's file, when it exists: the findings' fixes depend on whether it can be used. The
  memo is kept only when the helper is the preset's and its place was settled by the tree
  (a dotted module inside the project, or an existing file), never by what is installed
  (helper_template._refuse_foreign).

It is kept only by the run the fast path fell back to (the same arguments: the fast path takes
only flags that change no finding), when every named file was either analysed (its findings entry
lists what it read) or cannot hold a site by its own text (no rule's prefilter, no suppression,
and no `from` import where a rule that follows them, DTL005, is enabled), no named file was
unreadable, no fix was made and nothing but cache entries was written. The replay prints
through the same report code and warnings as `cli._check`; the formats are the fast path's own
(`text`, `concise`), which read no rule metadata, so no rule is imported.

An answer that read more than MAX_MEMO_FILES files (one that used a census of the whole tree, at
ten times vLLM 36,000 files) is kept by the replay index only, which checks a census's files by
their stat data; checking it here would hash every one.

A run on the whole project keeps no memo entry (no named files) but its answers for each file it
analysed, for the first run on named files after it (keep_answers, run/replay_index.py).

The memo is sealed as the cache's entries are (run/cache_seal.py): a memo edited to hide a
finding is not replayed.
"""

from __future__ import annotations

import json
import os

from dtype_lint.core.file_stamp import file_stamp

MEMO_NAME = "run-memo.json"
FORMAT = 1
MAX_ENTRIES = 8  # the most recent sets of named files; an older one is a miss, never wrong
MAX_MEMO_FILES = 1000  # the most files an answer kept here may have read (see `keep`)

# What the fast path hands the full run it falls back to: where the memo lives, the arguments,
# and the record it found true. Cleared with the fast path's own state (fast_record.forget)
# by its callers.
_handoff: dict | None = None


def forget() -> None:
    global _handoff
    _handoff = None


def hand_over(root: str, cache_dir: str, record_path: str, record_key: tuple[int, int], paths: list[str],
              force_exclude: bool, record: dict | None = None, render=None) -> None:
    """`record`: the fast path's record as it found it true (the replay index copies what it
    checks, run/replay_index.py); `render(findings, checked, analyzed, warnings)`: the outputs
    the replay prints, rendered by the front end (fast_path.render_outputs)."""
    global _handoff
    _handoff = {"memo": os.path.join(root, cache_dir, MEMO_NAME), "record": [record_path, *record_key],
                "key": [os.getcwd(), list(paths), force_exclude], "fast_record": record,
                "config": tuple(record["config"]) if record is not None else None, "render": render}


def handed_over() -> dict | None:
    """What the fast path handed over (hand_over), or None."""
    return _handoff


def _key_name(key: list) -> str:
    from dtype_lint.core import digests

    return digests.sha1(json.dumps(key).encode("utf-8", "surrogatepass")).hexdigest()[:24]


def _entries(path: str) -> dict:
    from dtype_lint.run.cache import _read_json

    data = _read_json(path, MEMO_NAME)
    if isinstance(data, dict) and data.get("format") == FORMAT and isinstance(data.get("entries"), dict):
        return data["entries"]
    return {}


def load() -> dict | None:
    """The kept answer for the handed-over run: {"findings": [finding dicts], "checked": files
    checked, "analyzed": files analysed, "warnings": [...]}, or None when there is none or
    anything it depends on changed (fast_path.py prints it)."""
    h = _handoff
    if h is None:
        return None
    entry = _entries(h["memo"]).get(_key_name(h["key"]))
    if not (isinstance(entry, dict) and entry.get("key") == h["key"] and entry.get("record") == h["record"]):
        return None
    files, dicts, warnings = entry.get("files"), entry.get("findings"), entry.get("warnings")
    if not (isinstance(files, dict) and isinstance(dicts, list) and isinstance(warnings, list)
            and all(isinstance(w, str) for w in warnings) and type(entry.get("checked")) is int
            and type(entry.get("analyzed")) is int):
        return None
    for real, stamp in files.items():
        if file_stamp(real) != stamp:
            return None
    return entry


def keep(result, options, cache, project, scan, targets: list[str], layout_kept: bool, reads_callers,
         started_ns: int) -> None:
    """Keep the answer of the run the fast path handed over, when it may be replayed (see the
    module docstring); otherwise leave the memo as it is (its entry for these files, if any, can
    no longer match the record or the stamps it checks). `reads_callers(path)`: does a rule
    enabled there report calls of helpers imported from elsewhere (whether the file is analysed
    then depends on other files)? `started_ns`: when the run started (every stamp it took is of
    a file read after it)."""
    h = _handoff
    if (h is None or not layout_kept or not _plain_cached_check(options, result, cache)
            or options.paths != h["key"][1] or scan.errors or os.getcwd() != h["key"][0]):
        return
    writer = result.writer
    if any(w.why != "cache" or w.path.endswith("/") for w in writer.records):
        return  # the run said it wrote something: a replay would not
    from dtype_lint.run.fast_record import _file_key

    record_path = h["record"][0]
    if [record_path, *(_file_key(record_path) or ())] != h["record"]:
        return  # the record was rewritten or removed (a warning): it no longer vouches for the layout
    files: dict[str, str] = {}
    # The files the analyses only passed over, by their census's test, and those read otherwise:
    # a replay takes one of the former as unchanged while it fails its test still.
    passed: dict = {}
    strict: set[str] = set()

    def add(real: str, stamp: str) -> bool:
        return files.setdefault(real, stamp) == stamp

    analysed = set(targets)
    # The censuses of the whole tree the analyses used (a fix planned asks the compiled-code
    # census): the replay index keeps each once, apart, for the entries that name it.
    groups: dict[str, tuple[dict[str, str], dict] | None] = {}
    for file in result.files:
        real = project.real_of(file)
        if file in analysed:
            parts = cache.findings_parts(real)
            if parts is None or parts[0] != project.stamp(real) or not add(real, parts[0]):
                return
            _stamp, own, only_passed, names = parts
            if not all(add(dep, s) for dep, s in own.items()):
                return
            for dep, tests in only_passed.items():
                passed[dep] = passed[dep] | tests if dep in passed else tests
            strict.update(dep for dep in own if dep not in only_passed)
            strict.add(real)
            for name in names:
                group = groups.get(name) or cache.group_reads(name)
                if group is None:
                    return
                groups[name] = group
        elif (file in scan.passes or file in scan.suppressing
              or (scan.links.get(file, ((), ()))[1] and reads_callers(file))):
            return  # left out for what other files hold now, which the memo does not follow
        elif not add(real, scan.stamps.get(real) or project.stamp(real)):
            return
        else:
            strict.add(real)
    helper: dict[str, str] = {}
    if not _helper_settled(result, helper) or not all(add(dep, s) for dep, s in helper.items()):
        return
    strict.update(helper)  # the fixes depend on its text, whatever a census made of it
    passed = {dep: test for dep, test in passed.items() if dep not in strict and dep in files}
    # The memo (checked by the fast path, which hashes what it checks) holds every file, those
    # of the groups included; the index, the groups by name.
    if any(group is None for group in groups.values()):
        return
    memo_files: dict[str, str] | None = dict(files)
    if len(files) + sum(len(group[0]) for group in groups.values() if group is not None) > MAX_MEMO_FILES:
        memo_files = None  # not kept here (below): not built either (36,000 files at ten times vLLM)
    if memo_files is not None:
        held = memo_files
        for group in groups.values():
            if group is None or not all(held.setdefault(dep, s) == s for dep, s in group[0].items()):
                return
    memo = h["memo"]
    if not os.path.isdir(os.path.dirname(memo)):
        return
    entries = _entries(memo)
    name = _key_name(h["key"])
    had = entries.pop(name, None) is not None
    # An answer that read more files than this is not kept here: the fast path checks a memo by
    # hashing every file it holds (at ten times vLLM a fixable file's answer read 36,000, and the
    # memo every edited file's run loads was 5.6 MB); the replay index serves it, a census's
    # files checked by their stat data.
    if memo_files is not None and len(memo_files) <= MAX_MEMO_FILES:
        entries[name] = {"key": h["key"], "record": h["record"], "files": memo_files,
                         "findings": [f.to_dict() for f in result.findings], "checked": len(result.files),
                         "analyzed": result.analyzed, "warnings": list(result.warnings)}
    if name in entries or had:
        # (an entry of an earlier version that read more goes too)
        entries = {k: e for k, e in entries.items() if len(e.get("files") or ()) <= MAX_MEMO_FILES}
        while len(entries) > MAX_ENTRIES:
            entries.pop(next(iter(entries)))
        from dtype_lint.run.cache import encode

        sealed = encode({"format": FORMAT, "entries": entries}, MEMO_NAME)
        if sealed is None:
            return  # no cache key: nothing may be kept (cache_seal.py)
        try:
            writer.write_cache(memo, sealed)
        except OSError:
            return  # a read-only checkout still lints; it just has no memo
    from dtype_lint.run import replay_index

    replay_index.keep(h, files, result.findings, len(result.files), result.analyzed, list(result.warnings), writer,
                      started_ns, passed, groups, project.memo.stat_data if project.memo is not None else None)


def keep_answers(result, options, cache, project, targets: list[str], layout, started_ns: int) -> None:
    """Keep the answers of a run on the whole project for the first run on named files after it
    (replay_index.keep_answers): each file it analysed, with the stamp of every file that
    analysis read (its findings entry's). Only where a named-file run would find the
    same: the run listed the whole project as a named-file run lists it (pipeline._Layout: from
    the walk's record or walked, every folder still as the run saw it and watched by the fast
    path's record, found true at the end), that record holds, the run's settings were the
    configuration file's alone (`options.plain_render`: `check . --ignore DTL001` finds a file
    clean that a plain run does not), and the run had no warning and made no fix. A file with
    findings is kept with its report as a plain run on it alone prints it, where the helper its
    fixes name was settled by the tree (as the memo's, `_helper_settled`)."""
    render = options.plain_render
    if (_handoff is not None or render is None or not _plain_cached_check(options, result, cache)
            or result.warnings or layout.folders is None):
        return
    config = result.config
    if config.source == "defaults":
        return
    from dtype_lint.run.fast_record import RECORD_NAME, _file_key, folder_mtime, load_record

    root = os.path.abspath(str(config.root))
    cache_folder = os.path.join(root, config.cache_dir)
    record_path = os.path.join(cache_folder, RECORD_NAME)
    record = load_record(record_path, os.path.abspath(config.source), root)
    record_key = _file_key(record_path)
    if record is None or record_key is None:
        return
    from dtype_lint.run.layout_cache import listed_alike

    if not listed_alike(layout.folders, tuple(config.exclude), folder_mtime):
        return  # the project's file list changed since the run listed it, or the record does not watch it
    from dtype_lint.run import replay_index

    reported: dict[str, list] = {}
    for finding in result.findings:
        reported.setdefault(finding.path, []).append(finding)
    helper: dict[str, str] = {}
    settled = bool(reported) and _helper_settled(result, helper)
    clean: dict[str, dict[str, str]] = {}
    found: dict[str, tuple[str, list, dict[str, str], list[str]]] = {}
    # The reads of the censuses of the whole tree the findings' analyses used (a fix planned
    # asks the compiled-code census), by group: kept once for every answer that names them.
    groups: dict[str, tuple[dict[str, str], dict] | None] = {}
    for file in targets:
        if file in reported and not settled:
            continue
        real = project.real_of(file)
        reads = cache.findings_reads(real, replay_index.MAX_ANSWER_READS - 1)
        names: list[str] = []
        if reads is None and file in reported:
            parts = cache.findings_parts(real, replay_index.MAX_ANSWER_READS - 1)
            if parts is not None:
                reads, names = (parts[0], parts[1]), parts[3]
                for name in names:
                    if name not in groups:
                        groups[name] = cache.group_reads(name)
        if reads is None or reads[0] != project.stamp(real):
            continue
        if file in reported:
            found[real] = (file, reported[file], {real: reads[0], **reads[1], **helper}, names)
        else:
            clean[real] = {real: reads[0], **reads[1]}
    replay_index.keep_answers(record, [record_path, *record_key], cache_folder, clean, found, render, started_ns,
                              result.writer, {name: got for name, got in groups.items() if got is not None},
                              project.memo.stat_data if project.memo is not None else None)


def _plain_cached_check(options, result, cache) -> bool:
    """A cached check that wrote no fix and reported every finding it made (no baseline, no
    `--changed-since`): what a later plain run on named files would print, the memo and the
    answers alike."""
    return (cache.enabled and not (options.fix or options.diff or options.baseline or options.write_baseline)
            and options.changed_since is None and not result.fixed)


def _helper_settled(result, files: dict[str, str]) -> bool:
    """Does the run's helper choice depend only on the tree (see the module docstring)? Adds the
    helper's file to `files` when it exists."""
    choice = result.helper_choice
    if choice is None:
        return True
    location = choice.location
    if choice.how != "preset" or location is None:
        return False
    path = os.path.realpath(location.path)
    root = os.path.realpath(result.config.root)
    if not path.startswith(root + os.sep):
        return False
    if location.exists:
        stamp = file_stamp(path)
        return files.setdefault(path, stamp) == stamp
    return "." in location.module
