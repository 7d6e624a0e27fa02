"""The pre-commit replay: a run on named files whose answer was kept, printed again with nothing
but the standard library's built-in modules imported.

Pre-commit runs `dtype-lint check FILE` after every save. When nothing the answer depends on
changed since the last run on the same files (a `touch`, a `git stash` round trip, a hook run
twice), the run memo (run_memo.py) already held that answer, but reading it cost the fast path's
imports (regexes, JSON, hashlib, tomllib, the reporters and their dataclasses): three times the
interpreter's own start-up. This index holds what the replay needs, ready to use:

- the configuration file the fast path chose, by path and content stamp (the parsed settings are
  the answer's: the exclude verdict and the report are kept, not computed again), the size and
  mtime of every input of dtype-lint's code stamp (fast_record.tool_paths: its modules and their
  folders), and the fast path's record as it was found true: the files that
  decided the project-level warnings and the project's file list (.gitignore files, git's excludes)
  and every folder of the project with its mtime;
- one entry per (current folder, named files, `--force-exclude`), as the run memo keys them: the
  stamp of every file the answer read (the named files and every file their analysis read; what a
  census of the whole tree read for it, such as the compiled-code census a planned fix asks, by
  the census's name: kept once in `replay-answers/g-<name>.bin`, so that an entry for a file
  with a fixable finding does not bring every file of the project into the index each replay
  loads), and
  the report already rendered for each output a run on those files printed (`text` or `concise`,
  `-q` or not; `--color auto` and `never` are the same on a pipe), with the warnings and whether
  any finding was reported. The run that keeps an answer renders only the output it was asked
  for; a replay asked for another one declines, the run memo's replay (fast_path.py) prints it
  and adds it beside the others while the answer is the same (every file it read unchanged).

Files are checked by their `stat` data first: size, mtime, ctime, inode and device as they were
when the stamp was taken. Equal, the file is taken as unchanged; otherwise it is hashed again and
compared with its stamp (a `touch` costs one hash, not a miss). An edit that keeps size and mtime
(`touch -r`, `cp -p`, `rsync -t`) still moves the ctime, which no user call can set; an edit in
the same clock tick as the stamp (git's "racy" case) is ruled out by keeping no stat data for a
file changed less than `RACY_NS` before the stamp was taken: such a file is always hashed.

The first run on named files after a run on the whole project has no entry: that run kept none
for them. So a cached run on the whole project (`check .` at the project root, run_memo.keep_answers)
keeps its answers: the project part (the index's) in `replay-answers.bin`, and in 64 shards by
file under `replay-answers/` (a replay loads the shards of the files it is given: at ten times
vLLM all of them are about 5 MB), each rewritten only when it changed. For each file it analysed, the
stamp (and stat data) of every file that analysis read, and for a file with findings its report
as a plain run on it alone prints it (rendered by the front end, in every output the replay
serves, with the folder the run was in and the path it showed: the paths in a report are spelled
from there). A run on named files each of which has a clean answer, none of
those files changed, prints what the full run would ("All checks passed! (N files checked)",
nothing with `-q`, in `text` and `concise` alike) and exits 0; a run on one file with findings,
from that folder and spelled that way, prints its report and exits 1 (0 with `--exit-zero`). A
file whose analysis read more than MAX_ANSWER_READS files itself has no answer, nor has a file
with findings when the helper its fixes name was not settled by the tree (run_memo._helper_settled).
What a census of the whole tree read for a file with findings (a fix planned asks the
compiled-code census, which tests every file) is kept once, in `g-<name>.bin` beside the shards
(the group's name is its content's digest, class_index.Reads.groups), for every answer that names
it; a file the census only passed over by a test of its text may have changed while it fails that
test still (core/passed_over.py), as in the index's entries; a group file that neither the answers
(their list, `groups.txt`) nor an entry of the index names is removed; a run on named files writes
a group only where none is kept, and a replay removes one it cannot read (`_keep_group`). A clean
answer that used one is not kept (vLLM 0.34.0: 8 of 303 files): the fast path's clean verdict
would stamp every file it read. The fast path reads the clean answers for a set of named files
that mixes them with files no rule can match (answered_clean), and keeps its verdict as an entry
with what the answers read.

The index is written by the full run that keeps a run memo entry (run_memo.keep), sealed with the
per-user cache key (cache_seal.quick_seal) over a context naming this format and the interpreter
(marshal's format is the interpreter's), and rewritten whole; an index of another format, another
Python, another key, or an edited one is no index. The reader imports only `os`, `sys`,
`marshal`, `_blake2` and dtype-lint's standard-library-only helpers; anything it cannot vouch for
returns None and the fast path (fast_path.py) goes on as before.
"""

from __future__ import annotations

import marshal
import os
import sys
from _operator import attrgetter, ne
from itertools import compress, count

INDEX_NAME = "replay-index.bin"
ANSWERS_NAME = "replay-answers.bin"  # the project part; the answers are in ANSWERS_DIR's shards
ANSWERS_DIR = "replay-answers"
ANSWERS_GROUPS = "groups.txt"  # in ANSWERS_DIR: the names of the groups the answers name
SHARDS = 64
# An answer is kept only for a file whose analysis read at most this many files itself: the few
# that read every module of the project (vLLM 0.34.0: 8 of 303) would bring every file's stamp
# into the store each replay loads, for a replay that stats them all (a census's group is kept
# apart, once, and loaded only by the answers that name it).
MAX_ANSWER_READS = 1000
FORMAT = 2  # 2: answers may name groups (a census's reads, kept once in a file of their own)
MAX_ENTRIES = 8  # the most recent sets of named files, as the run memo keeps
RACY_NS = 2_000_000_000  # a file changed this close to its stamp is hashed on every replay
DEFAULT_CACHE_DIR = ".dtype_lint_cache"
_FLAGS = {"--exit-zero", "--no-progress", "--force-exclude"}
_COMMANDS = {"rule", "migrate", "doctor", "clean", "explain", "verify", "server", "-h", "--help", "--version"}
# The outputs an entry can hold: (format, quiet, colour) as the replay is asked for them.
VARIANTS = tuple((fmt, quiet, color) for fmt in ("text", "concise") for quiet in (False, True)
                 for color in ("never", "auto"))

StatKey = tuple  # (size, mtime_ns, ctime_ns, inode, device), or None: hash every time
# A stat result's StatKey, taken in C (`_operator` is built into the interpreter).
_stat_data = attrgetter("st_size", "st_mtime_ns", "st_ctime_ns", "st_ino", "st_dev")


def _context() -> str:
    return f"{INDEX_NAME} {FORMAT} {sys.implementation.cache_tag} {sys.version}"


def _answers_context() -> str:
    return f"{ANSWERS_NAME} {FORMAT} {sys.implementation.cache_tag} {sys.version}"


# ---- reading: the replay -----------------------------------------------------------------------


def plain_check(argv: list[str]) -> tuple[list[str], bool, str, str] | None:
    """(paths, quiet, colour, output format) of a plain `check` of files, or None for anything
    else: the replay and the fast path both read the arguments through it."""
    args = list(argv)
    if args and args[0] == "check":
        args = args[1:]
    elif not args or args[0] in _COMMANDS:
        return None
    paths: list[str] = []
    quiet, color, fmt = False, "auto", "text"
    i = 0
    while i < len(args):
        arg = args[i]
        if arg in _FLAGS:
            pass
        elif arg in ("-q", "--quiet"):
            quiet = True
        elif arg.startswith(("--color=", "--output-format=")) or (
                arg in ("--color", "--output-format") and i + 1 < len(args)):
            if "=" in arg:
                key, _, value = arg.partition("=")
            else:  # the value is the next argument
                key, value = arg, args[i + 1]
                i += 1
            if key == "--color":
                color = value
            elif value not in ("text", "concise"):
                return None
            else:
                fmt = value
        elif arg == "--":
            paths.extend(args[i + 1:])
            break
        elif arg.startswith("-"):
            return None
        else:
            paths.append(arg)
        i += 1
    if not paths or color not in ("auto", "never"):
        return None
    for path in paths:
        try:
            path.encode("utf-8")
        except UnicodeEncodeError:
            return None
        if not os.path.isfile(path):
            return None
    return paths, quiet, color, fmt


def replay(argv: list[str]) -> int | None:
    """The exit code of a run on `argv` whose kept answer still holds (printed), else None."""
    try:
        return _replay(argv)
    except (OSError, ValueError, UnicodeError, RecursionError, EOFError, TypeError, KeyError, IndexError,
            AttributeError):
        return None  # anything odd: the fast path and the full run decide


def _replay(argv: list[str]) -> int | None:
    options = plain_check(argv)
    if options is None:
        return None
    paths, quiet, color, fmt = options
    if sys.stdout.isatty():
        return None  # a terminal is written to by rich, as the full run does
    found = _configuration(paths[0])
    if found is None:
        return None
    config_path, config_stamp = found
    root = os.path.dirname(config_path)
    from dtype_lint.run.cache_folder import cache_folder_problem

    if cache_folder_problem(root, DEFAULT_CACHE_DIR) is not None:
        return None
    index = load(os.path.join(root, DEFAULT_CACHE_DIR, INDEX_NAME)) or {}
    entry = None
    if index.get("root") == root and index.get("config") == (config_path, config_stamp):
        entry = index["entries"].get((os.getcwd(), tuple(paths), "--force-exclude" in argv))
    if entry is None:
        # No run on these files kept an answer: the last run on the whole project may have.
        return _replay_answers(root, (config_path, config_stamp), paths, (fmt, quiet, color), "--exit-zero" in argv)
    # The answer's own files first: after an edit one of them differs, and the run is declined
    # before the stat of every module of dtype-lint and every folder of the project. A file the
    # answer's analyses only passed over may differ while it fails the census's test still.
    passed = entry.get("passed", {})
    if not all(_unchanged_or_passed(path, key, stamp, passed.get(path))
               for path, (key, stamp) in entry["files"].items()):
        return None
    folder = os.path.join(root, DEFAULT_CACHE_DIR)
    if not all(_group_unchanged(folder, name) for name in entry.get("groups", ())):
        return None
    if not _project_unchanged(index):
        return None
    text = entry["out"].get((fmt, quiet, color))
    if text is None:
        return None  # an output no run on these files printed yet: the run memo's replay renders it
    sys.stdout.write(text)
    sys.stdout.flush()
    for line in entry["warnings"]:
        sys.stderr.write(line)
    return 0 if "--exit-zero" in argv or not entry["found"] else 1


def _unchanged_or_passed(path: str, key: StatKey | None, stamp: str, tests) -> bool:
    """Is the file at `path` what `stamp` says (`unchanged`), or, when an answer's census only
    passed it over by `tests`, does it fail them still (core/passed_over.py)?"""
    if unchanged(path, key, stamp, "source"):
        return True
    if tests is None:
        return False
    from dtype_lint.core.passed_over import still_passed_over

    return still_passed_over(path, tests)


def _project_unchanged(header: dict) -> bool:
    """Is what an index or the tree's answers hold about the project still true: dtype-lint's
    code, the files the fast path's record watches and every folder's mtime?"""
    if not _same_stat_data(header["tool_paths"], header["tool_stats"]):
        return False  # dtype-lint's code changed (fast_record.tool_stamp's inputs)
    if not all(unchanged(path, key, stamp, kind) for path, (key, stamp, kind) in header["watched"].items()):
        return False
    return _folders_unchanged(header["folders"], header["mtimes"])


def _replay_answers(root: str, config: tuple[str, str], paths: list[str], variant: tuple[str, bool, str],
                    exit_zero: bool) -> int | None:
    """The exit code of a run on named files that the last run on the whole project analysed
    (see the module docstring), its output printed; None when one of them has no answer or
    anything an answer read changed."""
    folder = os.path.join(root, DEFAULT_CACHE_DIR)
    answers = load_answers(os.path.join(folder, ANSWERS_NAME))
    if answers is None or answers["root"] != root or answers["config"] != config:
        return None
    reals = {os.path.realpath(path) for path in paths}
    if len(paths) == 1:
        real = next(iter(reals))
        shard = _shard(folder, answers, real)
        hit = shard["found"].get(real) if shard is not None else None
        if hit is not None:
            # A file with findings: its report as that run showed it, from the same folder and
            # spelled the same (the report's paths are that spelling's), in an output it rendered.
            cwd, shown, out, ids, groups = hit
            text = marshal.loads(out).get(variant)
            if (cwd != os.getcwd() or shown != paths[0] or text is None or shard is None
                    or not _unchanged_reads(shard, ids) or not all(_group_unchanged(folder, g) for g in groups)
                    or not _project_unchanged(answers)):
                return None
            sys.stdout.write(text)
            sys.stdout.flush()
            return 0 if exit_zero else 1
    quiet = variant[1]
    if _clean_reads(folder, answers, reals) is None or not _project_unchanged(answers):
        return None
    if not quiet:
        n = len(reals)
        sys.stdout.write(f"All checks passed! ({n} file{'' if n == 1 else 's'} checked)\n")
        sys.stdout.flush()
    return 0


def _shard_of(real: str) -> str:
    """The name of the shard that holds the answer of the file `real`."""
    from dtype_lint.core.file_stamp import blake2b

    return f"{blake2b(real.encode('utf-8', 'surrogatepass'), digest_size=2).digest()[0] % SHARDS:02d}.bin"


def _shard(folder: str, answers: dict, real: str) -> dict | None:
    """The shard holding the answer of `real`, written with the answers' project part."""
    shard = load_answers(os.path.join(folder, ANSWERS_DIR, _shard_of(real)))
    return shard if shard is not None and shard.get("token") == answers["token"] else None


def _group_file(folder: str, name: str) -> str:
    return os.path.join(folder, ANSWERS_DIR, f"g-{name}.bin")


def _group_unchanged(folder: str, name: str) -> bool:
    """Is every file the group `name` read (a census of the whole tree: class_index.Reads.groups)
    unchanged, or, for one it only passed over by its text, does it fail the census's test still?"""
    path = _group_file(folder, name)
    group = load(path, _answers_context())
    if group is None:
        _remove_unreadable(path)
        return False
    lead = group["lead"]  # the folder the paths are spelled from: a third of the file's bytes less
    paths, keys = [lead + path for path in group["paths"]], group["keys"]
    try:  # every file's stat data in one loop that stays in C: thousands of files
        now = list(map(_stat_data, map(os.stat, paths)))
    except OSError:
        now = None  # one is gone: told file by file
    if now == keys:
        return True
    passed, tests, stamps = group["passed"], group["tests"], group["stamps"]
    # The files whose stat data moved (a touched or edited one among thousands), found in C.
    changed = range(len(paths)) if now is None else compress(count(), map(ne, now, keys))
    return all(_unchanged_or_passed(paths[i], None, stamps[i], tests[passed[i]] if passed[i] >= 0 else None)
               for i in changed)


def _remove_unreadable(path: str) -> None:
    """A group file this process cannot read (edited, foreign, of another interpreter) is removed:
    a run on named files writes a group only where none is kept (`keep`)."""
    try:
        os.unlink(path)
    except OSError:
        pass  # gone already, or a read-only checkout: the replay declines all the same


def _unchanged_reads(shard: dict, ids) -> bool:
    table = shard["table"]
    return all(unchanged(path, key, stamp, "source") for path, key, stamp in map(table.__getitem__, ids))


def _clean_reads(folder: str, answers: dict, reals) -> list[str] | None:
    """Every file the clean answers of the files `reals` read, when each has one and all of those
    files are unchanged; else None."""
    read: list[str] = []
    for real in reals:
        shard = _shard(folder, answers, real)
        ids = shard["clean"].get(real) if shard is not None else None
        if shard is None or ids is None or not _unchanged_reads(shard, ids):
            return None
        read += (shard["table"][i][0] for i in ids)
    return read


def answered_clean(cache_folder: str, record_id: list, reals: list[str]) -> list[str] | None:
    """For the fast path, whose record (`record_id`) was just found true: the files read by the
    clean answers of `reals` kept by the last run on the whole project under that record, when
    each has one and all of them are unchanged; else None."""
    answers = load_answers(os.path.join(cache_folder, ANSWERS_NAME))
    if answers is None or answers["record"] != record_id:
        return None
    return _clean_reads(cache_folder, answers, reals)


def _configuration(first_path: str) -> tuple[str, str] | None:
    """(configuration file, its content stamp) as the fast path would choose it, when the index
    can vouch for the choice: the nearest pyproject.toml that names dtype-lint, else the nearest
    pyproject.toml; None where another kind of settings file is in the way or the file sets its
    own cache folder (read then by the fast path, which parses it)."""
    folder = os.path.dirname(os.path.realpath(first_path))
    nearest: tuple[str, bytes] | None = None
    chosen: tuple[str, bytes] | None = None
    from dtype_lint.core.safe_read import read_bytes

    while True:
        if any(os.path.exists(os.path.join(folder, name)) for name in ("dtype-lint.toml", ".dtype-lint.toml")):
            return None
        candidate = os.path.join(folder, "pyproject.toml")
        if os.path.isfile(candidate):
            data = read_bytes(candidate, 1 << 20)
            nearest = nearest or (candidate, data)
            if b"dtype-lint" in data:
                # The index says whether its [tool.dtype-lint] table is what the fast path chose:
                # a pyproject.toml that names the tool elsewhere is then another configuration.
                chosen = (candidate, data)
                break
        parent = os.path.dirname(folder)
        if parent == folder:
            break
        folder = parent
    chosen = chosen or nearest
    if chosen is None or b"cache-dir" in chosen[1]:
        return None
    return chosen[0], content_stamp(chosen[1])


def content_stamp(data: bytes) -> str:
    """fast_record.stamp of a file holding `data` (a configuration file of at most 1 MiB)."""
    from dtype_lint.core.file_stamp import blake2b

    return f"{len(data)}:{blake2b(data, digest_size=16).hexdigest()}"


def load(path: str, context: str | None = None) -> dict | None:
    """The index at `path` (or the tree's answers, under their `context`), or None (missing,
    another format or interpreter, not sealed by us)."""
    from dtype_lint.run.cache_seal import read_quick_sealed_dict

    index = read_quick_sealed_dict(path, context or _context())
    return index if index is not None and index.get("format") == FORMAT else None


_answers_loaded: dict[str, tuple] = {}  # path -> (its stat data, its payload) when last loaded


def load_answers(path: str) -> dict | None:
    """The project part of the tree's answers, or one of their shards, at `path` (`load`), read
    once a process while the file stays as it was: the replay and then the fast path both look
    there on an edited file's run (at ten times vLLM the project part is 330 KB: every folder's
    mtime)."""
    key = stat_key(path)
    kept = _answers_loaded.get(path)
    if key is not None and kept is not None and kept[0] == key:
        return kept[1]
    answers = load(path, _answers_context())
    _answers_loaded[path] = (key, answers)
    return answers


def stat_key(path: str) -> StatKey | None:
    try:
        return _stat_data(os.stat(path))
    except OSError:
        return None


def unchanged(path: str, key: StatKey | None, stamp: str | None, kind: str) -> bool:
    """Is the file at `path` still what `stamp` says? By its stat data when `key` is kept and
    equal, else by its stamp taken again (`kind`: "source", file_stamp.file_stamp; "small",
    fast_record's stamp of a configuration or ignore file, None when missing)."""
    if key is not None and stat_key(path) == key:
        return True
    return current_stamp(path, kind) == stamp


def current_stamp(path: str, kind: str) -> str | None:
    if kind == "source":
        from dtype_lint.core.file_stamp import file_stamp

        return file_stamp(path)
    from dtype_lint.core.file_stamp import small_file_stamp

    try:
        return small_file_stamp(path)  # fast_record.stamp, as the record's files are stamped
    except OSError:
        return None


def _same_stat_data(paths: tuple, kept: tuple) -> bool:
    try:
        return tuple(map(_size_and_mtime, paths)) == kept
    except OSError:
        return False


def _size_and_mtime(path: str) -> tuple[int, int]:
    st = os.stat(path)
    return st.st_size, st.st_mtime_ns


def _folders_unchanged(folders: tuple, mtimes: tuple) -> bool:
    """Every folder of the project as the record found it (a file added, removed or renamed
    anywhere changes its folder's mtime): one stat each, in a loop that stays in C."""
    try:
        return tuple(map(_mtime, folders)) == mtimes
    except OSError:
        return False


def _mtime(folder: str) -> int:
    return os.stat(folder).st_mtime_ns


# ---- writing: the full run that keeps a run memo entry -------------------------------------------


def keep(handoff: dict, entry_files: dict[str, str], findings, checked: int, analyzed: int,
         warnings: list[str], writer, started_ns: int, passed: dict | None = None,
         groups: dict[str, tuple[dict[str, str], dict] | None] | None = None, known=None) -> None:
    """Add the answer run_memo.keep just kept to the index (see the module docstring); `handoff`
    is the fast path's (run_memo.hand_over), `started_ns` when the run that took the stamps of
    `entry_files` started; `passed`: the tests of each of those files the answer's analyses only
    passed over (core/passed_over.py); `groups`: the censuses of the whole tree they used besides,
    by name, with their reads (`Cache.group_reads`; None: kept already), each kept once beside
    the answers' shards (`g-<name>.bin`) for the entries that name it; `known(path)`: the
    settled stat data the run already took of a file, else None (run/stamp_memo.StampMemo.stat_data:
    a group's files were all stat-ed to check their stamps, 23,600 at ten times vLLM)."""
    record = handoff.get("fast_record")
    if record is None or handoff.get("config") is None:
        return
    render = handoff.get("render")
    if render is None or not _indexable(record, handoff["config"], os.path.dirname(handoff["memo"])):
        return  # nothing would be kept: not rendered either
    # The front end that handed over renders (fast_path.render_outputs: the run layer does not
    # import the report code); before the stamps, as it reads the named files.
    rendered = render(findings, checked, analyzed, warnings)
    if rendered is None:
        return
    out, warning_lines = rendered
    entry = {"out": out, "found": bool(findings), "warnings": warning_lines, "passed": passed or {},
             "groups": tuple(sorted(groups or ()))}
    key = (handoff["key"][0], tuple(handoff["key"][1]), handoff["key"][2])

    def write(path: str, data: bytes) -> None:
        writer.write_cache(path, data)

    cache_folder = os.path.dirname(handoff["memo"])
    written = {name: reads for name, reads in (groups or {}).items() if reads is not None}
    if _add(record, handoff["config"], handoff["record"], cache_folder, key, entry, entry_files, write, started_ns) \
            and written:
        try:
            writer.make_dirs(os.path.join(cache_folder, ANSWERS_DIR), "cache")
        except Exception:  # noqa: BLE001 - a read-only checkout still lints; the entry is then declined
            return
        for name, reads in written.items():
            # A run on named files writes a group only where none is kept: see `_keep_group`.
            if not os.path.isfile(_group_file(cache_folder, name)):
                _keep_group(cache_folder, name, reads, started_ns, write, known)
        _remove_unnamed_groups(cache_folder)


def keep_clean(record: dict, record_id: list, cache_folder: str, paths: list[str], force_exclude: bool,
               read: list[str], output: str) -> None:
    """Keep the fast path's verdict that the named files cannot give a finding (fast_path.py), so
    that a later run on them replays it: `read` holds every file the verdict read (the named files
    and the modules their imports were followed to), `output` what it printed without `-q`."""
    import time

    from dtype_lint.core.file_stamp import file_stamp

    entry = {"out": {variant: ("" if variant[1] else output) for variant in VARIANTS}, "found": False,
             "warnings": []}
    started_ns = time.time_ns()
    files = {}
    for path in read:
        real = os.path.realpath(path)
        files[real] = file_stamp(real)
    key = (os.getcwd(), tuple(paths), force_exclude)
    _add(record, tuple(record["config"]), record_id, cache_folder, key, entry, files, _write_atomic, started_ns)


def _add(record: dict, config: tuple, record_id: list, cache_folder: str, key: tuple, entry: dict,
         entry_files: dict[str, str], write, started_ns: int) -> bool:
    """Add an answer whose files were stamped after `started_ns` to the index. Its stamps are not
    taken again (a tenth of a pre-commit run on a file whose answer read every file of vLLM): a
    file's stat data is kept only when it has not changed since RACY_NS before then, so that its
    stamp is of what the stat data describes (keep_answers does the same); one changed during the
    run is hashed by each replay, which then finds it changed."""
    import time

    if not _indexable(record, config, cache_folder):
        return False
    header = _header(record, config, record_id, time.time_ns())
    if header is None:
        return False
    files = {path: (settled_stat_key(path, started_ns), stamp) for path, stamp in entry_files.items()}
    entry["files"] = files
    path = os.path.join(cache_folder, INDEX_NAME)
    old = load(path)
    entries = {}
    if old is not None and old.get("record") == record_id and old.get("config") == config:
        entries = dict(old["entries"])  # answers under another record are dropped with it
    kept = entries.pop(key, None)
    if kept is not None and {path: stamp for path, (_key, stamp) in kept["files"].items()} == entry_files \
            and kept["found"] == entry["found"] and kept["warnings"] == entry["warnings"] \
            and kept.get("groups", ()) == entry.get("groups", ()):
        # The same answer (every file it read as it was, under the same record and settings):
        # the outputs other runs rendered for it still hold beside this run's.
        entry["out"] = {**kept["out"], **entry["out"]}
    entries[key] = entry
    while len(entries) > MAX_ENTRIES:
        entries.pop(next(iter(entries)))
    _write_sealed(path, {"format": FORMAT, **header, "entries": entries}, _context(), write)
    return True


def keep_answers(record: dict, record_id: list, cache_folder: str, clean: dict[str, dict[str, str]],
                 found: dict[str, tuple[str, list, dict[str, str], list[str]]], render, started_ns: int, writer,
                 groups: dict[str, tuple[dict[str, str], dict]] | None = None, known=None) -> None:
    """Keep the answers of a run on the whole project (see the module docstring), taken by a run
    that started at `started_ns`: `clean` maps each file it analysed without a finding to the
    stamp of every file that analysis read (the file's own included); `found` each file with
    findings to (its path as the run showed it, its findings, what they depend on), its reports
    rendered by `render(findings, checked, analyzed, warnings)` (fast_path.render_outputs), and
    the names of the groups its analysis used besides (a census of the whole tree), whose reads
    `groups` holds (file -> stamp, the tests of the files only passed over): each is kept once, in
    `g-<name>.bin` beside the shards (`known` as `keep`'s).
    The project part goes to ANSWERS_NAME, the answers to SHARDS shards by file (a replay reads
    those of its files: at ten times vLLM all of them are about 5 MB), each rewritten only when it
    changed."""
    import time

    config = tuple(record["config"])
    if not _indexable(record, config, cache_folder):
        return
    header = _header(record, config, record_id, time.time_ns())
    if header is None:
        return
    path = os.path.join(cache_folder, ANSWERS_NAME)
    folder = os.path.join(cache_folder, ANSWERS_DIR)
    old = load_answers(path)
    _answers_loaded.clear()  # rewritten below, or left as it is
    same = old is not None and {k: v for k, v in old.items() if k != "token"} == {"format": FORMAT, **header}
    token = old["token"] if old is not None and same else f"{time.time_ns()}-{os.getpid()}"
    shards: dict[str, dict] = {}
    cwd = os.getcwd()

    def shard_of(real: str) -> dict:
        name = _shard_of(real)
        if name not in shards:
            shards[name] = {"format": FORMAT, "token": token, "table": [], "clean": {}, "found": {}, "numbers": {}}
        return shards[name]

    def ids_of(shard: dict, read: dict[str, str]) -> tuple[int, ...]:
        table, number = shard["table"], shard["numbers"]
        ids = []
        for dep, stamp in read.items():
            i = number.get(dep)
            if i is None:
                # The run stamped every file it read after it started: one unchanged since
                # (RACY_NS before the start, as the index's) still holds what its stamp says,
                # so its stat data may vouch for it. Any other is hashed on each replay.
                i = number[dep] = len(table)
                table.append((dep, settled_stat_key(dep, started_ns), stamp))
            ids.append(i)
        return tuple(ids)

    for real, read in sorted(clean.items()):
        if len(read) <= MAX_ANSWER_READS:
            shard = shard_of(real)
            shard["clean"][real] = ids_of(shard, read)
    old_shards: dict[str, dict | None] = {}

    def old_shard(name: str) -> dict | None:
        if name not in old_shards:
            old_shards[name] = load(os.path.join(folder, name), _answers_context()) if same else None
        return old_shards[name]

    groups = groups or {}
    used: set[str] = set()
    for real, (shown, findings, read, names) in sorted(found.items()):
        if len(read) > MAX_ANSWER_READS or not all(name in groups for name in names):
            continue
        out = _rendered_before(old_shard(_shard_of(real)), real, cwd, shown, read, names)
        if out is None:
            # The report a plain run on this file alone prints, in every output the replay serves:
            # kept marshalled, so that loading a shard builds none of its reports' strings.
            answer = render(findings, 1, 1, [])
            if answer is None or answer[1]:
                continue
            out = marshal.dumps(answer[0])
        shard = shard_of(real)
        shard["found"][real] = (cwd, shown, out, ids_of(shard, read), tuple(names))
        used.update(names)
    try:
        writer.make_dirs(folder, "cache")
    except Exception:  # noqa: BLE001 - a read-only checkout still lints; it just has no replay
        return
    _keep_groups(cache_folder, {name: groups[name] for name in used}, started_ns, writer, known)
    for name in (f"{i:02d}.bin" for i in range(SHARDS)):
        shard = shards.get(name) or {"format": FORMAT, "token": token, "table": [], "clean": {}, "found": {}}
        shard.pop("numbers", None)
        if old_shard(name) != shard:
            _write_sealed(os.path.join(folder, name), shard, _answers_context(), writer.write_cache)
    if not same:  # after its shards: a reader of the old project part finds them of another token
        _write_sealed(path, {"format": FORMAT, **header, "token": token}, _answers_context(), writer.write_cache)


def _keep_groups(folder: str, groups: dict[str, tuple[dict[str, str], dict]], started_ns: int, writer,
                 known=None) -> None:
    """Write each group the answers name (`g-<name>.bin` beside the shards in the cache folder
    `folder`: its files with their stat data and stamps, the tests of those only passed over)
    where the file there differs, list their names (ANSWERS_GROUPS), and remove the group files
    nothing names now; `known` as `keep`'s."""
    for name, reads in groups.items():
        _keep_group(folder, name, reads, started_ns, writer.write_cache, known)
    try:
        writer.write_cache(os.path.join(folder, ANSWERS_DIR, ANSWERS_GROUPS),
                           "".join(f"{name}\n" for name in sorted(groups)).encode("ascii"))
    except OSError:
        return
    _remove_unnamed_groups(folder, set(groups))


def _remove_unnamed_groups(folder: str, answers_name: set[str] | None = None) -> None:
    """Remove the group files that neither the answers (their list, ANSWERS_GROUPS, unless
    `answers_name` says) nor an entry of the index name: a group is named by its content, so an
    edit of a file a census read names a new one, and the old one (at ten times vLLM 5 MB) would
    stay."""
    answers = os.path.join(folder, ANSWERS_DIR)
    if answers_name is None:
        from dtype_lint.core.safe_read import read_bytes

        try:
            answers_name = set(read_bytes(os.path.join(answers, ANSWERS_GROUPS), 1 << 20).decode("ascii").split())
        except (OSError, ValueError):
            answers_name = set()
    index = load(os.path.join(folder, INDEX_NAME)) or {}
    named = answers_name | {name for entry in index.get("entries", {}).values() for name in entry.get("groups", ())}
    try:
        names = os.listdir(answers)
    except OSError:
        return
    for entry in names:
        if entry.startswith("g-") and entry.endswith(".bin") and entry[2:-4] not in named:
            try:
                os.unlink(os.path.join(answers, entry))
            except OSError:
                pass


def _keep_group(folder: str, name: str, reads: tuple[dict[str, str], dict], started_ns: int, write,
                known=None) -> None:
    """Write the group `name` (its files with their stat data and stamps, the tests of those
    only passed over) to `g-<name>.bin` in the cache folder `folder`, unless the file there holds
    the same; `known` as `keep`'s.

    A run on named files (`keep`) writes one only where none is kept. A group is named by what
    its census read, so the one kept names the same files and tests; only the stat data and the
    stamps of the files changed since it was written differ, and a replay takes each such file
    as it takes a touched one (by its stamp, or, passed over, by its census's test: one file
    read). Rewritten for them, the group cost every edited file's run at ten times vLLM 447 M
    instructions of its 2.5 G (3.3 MB loaded, compared, sealed and written again for the one
    file edited). A run on the whole project (`keep_answers`) brings it up to date."""
    files, passed = reads
    path = _group_file(folder, name)
    sets: dict[frozenset, int] = {}  # each set of tests once: thousands of files failed the same
    lead = os.path.join(os.path.dirname(os.path.abspath(folder)), "")
    if not all(dep.startswith(lead) for dep in files):
        lead = ""
    # For each file, the number of the tests it failed when only passed over (-1: read otherwise).
    group = {"format": FORMAT, "lead": lead, "paths": [dep[len(lead):] for dep in files],
             "keys": [(known and known(dep)) or settled_stat_key(dep, started_ns) for dep in files],
             "stamps": list(files.values()),
             "passed": [sets.setdefault(passed[dep], len(sets)) if dep in passed else -1 for dep in files]}
    group["tests"] = list(sets)
    if load(path, _answers_context()) != group:
        _write_sealed(path, group, _answers_context(), write)


def _rendered_before(old: dict | None, real: str, cwd: str, shown: str, read: dict[str, str],
                     groups: list[str]) -> bytes | None:
    """The report an old shard holds for this file, shown from the same folder the same way, when
    its analysis read the same files: the same answer under the same settings and dtype-lint
    prints the same (a warm run renders nothing)."""
    hit = old["found"].get(real) if old is not None else None
    if old is None or hit is None or hit[0] != cwd or hit[1] != shown or hit[4] != tuple(groups):
        return None
    table = old["table"]
    same = sorted((table[i][0], table[i][2]) for i in hit[3]) == sorted(read.items())
    return hit[2] if same else None


def _header(record: dict, config: tuple, record_id: list, now_ns: int) -> dict | None:
    """What the index and the tree's answers hold about the project (checked by
    `_project_unchanged`), or None when the record no longer holds."""
    watched = {}
    for path, stamp in record["files"].items():
        stat_data = settled_stat_key(path, now_ns)
        if current_stamp(path, "small") != stamp:
            return None
        watched[path] = (stat_data, stamp, "small")
    from dtype_lint.run.fast_record import tool_paths, tool_stamp, tool_stat_data

    if record["tool"] != tool_stamp():
        return None
    root = record["root"]
    lead = os.path.join(root, "")
    # The stat data the tool stamp was taken from: a module changed since is one it never saw.
    return {"root": root, "config": config, "record": record_id, "tool_paths": tuple(tool_paths()),
            "tool_stats": tool_stat_data(), "watched": watched,
            "folders": tuple(root if rel == "." else lead + rel for rel in record["dirs"]),
            "mtimes": tuple(record["dirs"].values())}


def _write_sealed(path: str, data: dict, context: str, write) -> None:
    from dtype_lint.run.cache_seal import quick_seal

    sealed = quick_seal(marshal.dumps(data), context)
    if sealed is None:
        return
    try:
        write(path, sealed)
    except OSError:
        pass  # a read-only checkout still lints; it just has no replay


def _indexable(record: dict, config: tuple, cache_folder: str) -> bool:
    """Can an answer under this record be kept? Not with a cache folder of the project's own
    choosing (the replay does not parse the configuration to find it)."""
    return config[1] is not None and os.path.join(record["root"], DEFAULT_CACHE_DIR) == cache_folder


def _write_atomic(path: str, data: bytes) -> None:
    """The fast path writes without a run's writer: the writer's atomic write (a temp file beside
    the index, renamed over it)."""
    from dtype_lint.core.writer import write_atomic

    write_atomic(path, data)


def settled_stat_key(path: str, now_ns: int) -> StatKey | None:
    """The stat data a replay (or run/stamp_memo.py) may trust for `path` with a stamp taken after
    `now_ns`; None when the file changed within RACY_NS of then (an edit in the same tick would
    keep it)."""
    key = stat_key(path)
    if key is None or max(key[1], key[2]) >= now_ns - RACY_NS:
        return None
    return key
