"""A per-project cache: one small entry per file, so a run reads and writes only what it touches.

One folder per (tool version, code stamp, config fingerprint) under the cache directory:

    scan.json     per file checked by a directory run: stamp, prefilter verdict, suppression
                  comment, and which looked-for class names its text contains
    h/<hash>      one module's class header (imports, classes and bases), by file and stamp
    f/<hash>      one file's findings, with what the analysis read: the files (and their stamps)
                  whose headers or code it used, and the module names it looked up (and which
                  file defined each, or none)
    s/<hash>      one answer of the storage model (run/facts_cache.py), with what it read
    g/<c>-<hash>  what a census about the whole tree read (class_index.Reads.groups), named by
                  the census (`c`) and its content's digest: kept once, named by every entry
                  whose computation used the census, and checked once a run however many
                  entries name it; the GROUPS_KEPT most recently used of each census are kept.
                  (sealed in marshal's format, `.bin`: `Cache._seal_group` says why)

Files are named by their real path relative to the project root, so a file reached as `x.py`,
`./x.py`, `../proj/x.py` or through a symlink is one entry, whatever the current directory, and
findings keep paths relative to the root (respelled for each run). A pre-commit run on one file
reads that file's entry and the headers its analysis needs, and writes one entry back: nothing
that grows with the project. Entries are written atomically (see writer.write_cache); an entry
that is missing, unreadable, foreign or of the wrong shape is a miss, never an error.

Every file is sealed (run/cache_seal.py): an HMAC-SHA256 (a group: keyed BLAKE2b) under a
per-user key kept outside the cache folder, over the folder's key and the payload. An entry
edited by whoever can write the folder (a restored CI cache, a shared folder), or moved from a
folder computed under other settings, is a miss: a cached fix is applied only when this user's
dtype-lint computed it under the current code and settings. Without a key (no writable state
folder) the pipeline runs uncached.
"""

from __future__ import annotations

import json
import marshal
import os
import sys
from pathlib import Path

from dtype_lint.core import digests
from dtype_lint.run.cache_seal import quick_seal, quick_unseal_dict, read_quick_sealed_dict, seal, unseal

# The findings entries whose reads a run keeps in memory: fewer files read than this (nearly all;
# a few read every module of the project, 36,000 files at ten times vLLM).
KEPT_READS = 1000
# Any entry larger than this is not ours (scan.json of a 24,000-file tree is about 3 MB).
MAX_ENTRY_BYTES = 64 << 20
FORMAT = "v2"
GITIGNORE = b"# created by dtype-lint\n*\n"  # the cache folder's own, while it holds only ours (`save`)
# A census made again (a file it read changed) is a new group. The entries that name an older one
# are misses from then on, unless the change is undone or the census would pass over the file
# still (core/passed_over.py): kept, every edit of a file a census read left a group behind (6.8
# MB each at ten times vLLM). A run that finds a group unchanged marks it used (its mtime); when a
# group is written, all but this many of its census's most recently used are removed. Removing one
# is always sound: an entry naming a group that is gone is a miss.
GROUPS_KEPT = 3
# A group entry's name: the census's digest, then the content's (`_group`); its file, in marshal's
# format (`Cache._seal_group`).
GROUP_SUFFIX = ".bin"
GROUP_FORMAT = 1
_GROUP_NAME_CHARS = frozenset("0123456789abcdef-")


class Cache:
    def __init__(self, directory: Path, key: str, enabled: bool = True, root: Path | None = None):
        self.enabled = enabled
        self.base = Path(directory)
        self.dir = self.base / f"{FORMAT}-{key}"
        # What every entry's seal covers besides its payload: an entry is genuine only in the
        # folder (code stamp, settings fingerprint) it was computed for.
        self.context = self.dir.name
        self.root = os.path.realpath(root if root is not None else self.base.parent)
        self._lead = os.path.join(self.root, "")
        self._scan: dict | None = None
        self._scan_names: list[str] = []
        self._scan_dirty = False
        self._pending: dict[str, bytes] = {}
        # What the findings entries this run found true or wrote read, by real path: (the file's
        # stamp, real path -> stamp), for those that read few files (`findings_reads`, asked for
        # each analysed file by a run on the whole project, reads no entry again).
        self._reads: dict[str, tuple[str, dict[str, str] | None]] = {}
        # Groups (class_index.Reads.groups): the name of each one's entry by its token, and each
        # entry checked this run by name (its reads, None when one changed).
        self._group_names: dict[str, str] = {}
        self.started = False  # whether `save` made the folder
        self._groups_checked: dict[str, object] = {}
        # Each group entry's payload, read once a run (named by its content, it cannot change),
        # and the files passed over of each entry read (`_passed_of`): a group is asked for when
        # it is checked and again when the replay index keeps it.
        self._group_payloads: dict[str, object] = {}
        self._many: tuple | None = None  # (stamp_of, the same over a list): `stamp_many`
        self._passed_read_of: dict[int, tuple[dict, dict[str, tuple[str, frozenset]] | None]] = {}

    def stamp_many(self, stamp_of, stamps_of) -> None:
        """`stamps_of(reals)` gives `[stamp_of(real) for real in reals]` at once (pipeline's
        project: the stamp memo read once, the stat data compared in one loop): used where an
        entry is checked with that very `stamp_of` against the files a census passed over."""
        self._many = (stamp_of, stamps_of)

    def _stamps(self, stamp_of, reals: list[str]) -> list[str]:
        many = self._many
        return many[1](reals) if many is not None and stamp_of == many[0] else list(map(stamp_of, reals))

    # ---- keys: real paths, stored relative to the project root ---------------------------------
    def rel(self, real: str) -> str:
        """The stored form of a real path: relative to the root (posix) when inside it."""
        root = self.root
        if real.startswith(root) and real[len(root):len(root) + 1] == os.sep:
            rel = real[len(root) + 1:]
            return rel if os.sep == "/" else rel.replace(os.sep, "/")
        return real

    def real(self, rel: str) -> str:
        if os.sep == "/":  # os.path.join's checks, for each of the thousands of files an entry names
            return rel if rel.startswith("/") else self._lead + rel
        return rel if os.path.isabs(rel) else os.path.join(self.root, *rel.split("/"))

    def _entry(self, kind: str, rel: str) -> Path:
        if kind == "g":  # named by its census and content already, so that its census can be told
            return self.dir / kind / f"{rel}{GROUP_SUFFIX}"
        return self.dir / kind / (digests.sha1(rel.encode("utf-8", "surrogatepass")).hexdigest()[:24] + ".json")

    # ---- the scan summary --------------------------------------------------------------------
    def _scan_data(self) -> dict:
        if self._scan is None:
            self._scan = {}
            loaded = self._load("", "scan.json") if self.enabled else None
            if isinstance(loaded, dict) and isinstance(loaded.get("files"), dict) \
                    and isinstance(loaded.get("names"), list):
                self._scan = loaded["files"]
                self._scan_names = [n for n in loaded["names"] if isinstance(n, str)]
        return self._scan

    def scan_entry(self, real: str, stamp: str, names: list[str]):
        """(passes the prefilter, holds a suppression, looked-for names in its text, helper links,
        the censuses' word tests) of an unchanged file, or None. `names`: the names looked for now;
        hits recorded for another list are not reused (None is returned when `names` is not empty).
        Helper links: (names of the functions it defines that may be input-dtype helpers, names it
        imports with `from`: none kept for a file the prefilter passes or holding a suppression,
        which is analysed whatever it imports). Word tests: run/pipeline.py's `WordTest`s, as `put_scan` keeps them."""
        if not self.enabled:
            return None
        entry = self._scan_data().get(self.rel(real))
        if not (isinstance(entry, list) and len(entry) == 6 and entry[0] == stamp
                and isinstance(entry[1], bool) and isinstance(entry[2], bool) and _links_shaped(entry[4])
                and isinstance(entry[5], int)):
            return None
        # A file without links (nearly all) shares one record: the scan of ten times vLLM keeps
        # 23,600 of them.
        hits, links = entry[3], (entry[4][0], entry[4][1]) if entry[4][0] or entry[4][1] else _NO_LINKS
        if names:
            if names != self._scan_names or not isinstance(hits, list):
                return None
            return entry[1], entry[2], [h for h in hits if isinstance(h, str)], links, entry[5]
        return entry[1], entry[2], [], links, entry[5]

    def put_scan(self, real: str, stamp: str, passes: bool, suppressing: bool, names: list[str],
                 hits: list[str], links: tuple[list[str], list[str]], words: int = 0) -> None:
        if not self.enabled:
            return
        data = self._scan_data()
        if names and names != self._scan_names:
            # Hits of another list of names are meaningless now: keep the verdicts only.
            for entry in data.values():
                if isinstance(entry, list) and len(entry) == 6:
                    entry[3] = None
            self._scan_names = list(names)
        data[self.rel(real)] = [stamp, passes, suppressing, hits if names else None, [links[0], links[1]], words]
        self._scan_dirty = True

    # ---- class headers -------------------------------------------------------------------
    def header(self, real: str, stamp: str, module: str) -> dict | None:
        if not self.enabled:
            return None
        rel = self.rel(real)
        entry = self._load("h", rel)
        if isinstance(entry, dict) and entry.get("k") == rel and entry.get("s") == stamp \
                and entry.get("m") == module and _header_shaped(entry.get("h")):
            return entry["h"]
        return None

    def put_header(self, real: str, stamp: str, module: str, header: dict) -> None:
        if self.enabled:
            rel = self.rel(real)
            body = {k: v for k, v in header.items() if k != "path"}
            self._put(f"h/{rel}", {"k": rel, "s": stamp, "m": module, "h": body})

    # ---- findings -------------------------------------------------------------------------
    def findings(self, real: str, stamp: str, stamp_of, table, display_of) -> list[dict] | None:
        """Cached findings of an unchanged file whose analysis read only unchanged things (see
        `unchanged_reads`); `display_of(real)` the path to show for a file."""
        if not self.enabled:
            return None
        rel = self.rel(real)
        entry = self._load("f", rel)
        if not (isinstance(entry, dict) and entry.get("k") == rel and entry.get("s") == stamp):
            return None
        found = entry.get("f")
        if not (isinstance(found, list) and all(_finding_shaped(d) for d in found)):
            return None
        reads = self.unchanged_reads(entry, stamp_of, table)
        if reads is None:
            return None
        self._keep_reads(real, stamp, reads)
        try:
            return [_respell(d, display_of, self.real) for d in found]
        except (KeyError, TypeError, AttributeError):
            return None

    def put_findings(self, real: str, stamp: str, findings: list[dict], reads, real_of) -> None:
        """`reads`: what the file's analysis read (class_index.Reads; the file itself is left
        out, its stamp is the entry's own); `real_of(path)`: the real path of a file as this run
        shows it (for evidence paths)."""
        if not self.enabled:
            return
        rel = self.rel(real)
        stored = [_respell(d, self.rel, real_of) for d in findings]
        self._put(f"f/{rel}", {"k": rel, "s": stamp, "f": stored, **self.stored_reads(reads, skip=real)})
        self._keep_reads(real, stamp, reads, skip=real)

    def _keep_reads(self, real: str, stamp: str, reads, skip: str | None = None) -> None:
        # Of an entry that read more (or a group), only that it did (None): `findings_reads`
        # with a limit then declines without loading it again.
        files = reads.files
        if reads.passed:  # passed over by a census: a dependency as much as a file read
            files = {**{key: kept for key, (kept, _test) in reads.passed.items()}, **files}
        if reads.groups or len(files) >= KEPT_READS:
            self._reads[real] = (stamp, None)
        else:
            self._reads[real] = (stamp, {k: v for k, v in files.items() if k != skip} if skip in files else files)

    # ---- what an entry's computation read (findings here, the storage model's answers in
    # ---- run/facts_cache.py): stored and checked one way --------------------------------
    def stored_reads(self, reads, skip: str | None = None) -> dict:
        """A computation's reads (class_index.Reads) as an entry stores them: paths relative to
        the root. `skip`: a file left out (a findings entry's own)."""
        stored: dict[str, object] = {
            "files": {self.rel(k): v for k, v in sorted(reads.files.items()) if k != skip},
            "modules": {m: (None if k is None else self.rel(k)) for m, k in sorted(reads.modules.items())},
            "listings": {self.rel(k): v for k, v in sorted(reads.listings.items())},
            "enumerations": dict(sorted(reads.enumerations.items())),
        }
        if reads.passed:
            # Each file passed over with its stamp and its test, by number: a census's one test
            # serves its thousands of files.
            tests: dict = {}
            # (a set's order is per process: by `repr`, so that the entry's bytes, and a group's
            # name, its content's digest, are the same in every run)
            stored["passed"] = {self.rel(k): [stamp, sorted(tests.setdefault(test, len(tests))
                                                            for test in sorted(failed, key=repr))]
                                for k, (stamp, failed) in sorted(reads.passed.items()) if k != skip}
            stored["tests"] = [test if isinstance(test, str) else [list(group) for group in test] for test in tests]
        if reads.groups:
            stored["groups"] = {name: self._group(group, name) for name, group in sorted(reads.groups.items())}
        return stored

    def _group(self, group, census: str) -> str:
        """The name of the entry (`g/`) holding a group's reads, kept once: by its census's and its
        content's digests, so every run and worker that builds the same census names the same entry."""
        name = self._group_names.get(group.token)
        if name is None:
            stored = self.stored_reads(group)
            payload = json.dumps(stored, separators=(",", ":"), sort_keys=True)
            data = payload.encode("utf-8", "surrogatepass")
            name = (digests.blake2b(census.encode("utf-8", "surrogatepass"), digest_size=4).hexdigest() + "-"
                    + digests.blake2b(data, digest_size=16).hexdigest())
            self._group_names[group.token] = name
            # Named by its content: one on disk holds the same, unless this run found it untrue
            # (edited or foreign), when it is written again. A pre-commit run that builds the
            # census again writes nothing (at ten times vLLM the entry is 6.8 MB).
            checked = name in self._groups_checked
            if (self._groups_checked[name] is None) if checked else not self._entry("g", name).exists():
                sealed = self._seal_group(stored)
                if sealed is not None:
                    self._pending[f"g/{name}"] = sealed
        return name

    def _group_entry(self, name: str):
        """The payload of the group entry `name`: written this run (pending) or on disk (None for
        a name `_group` does not make: an entry names a file only by such a name)."""
        got = self._group_payloads.get(name)
        if got is None:
            pending = self._pending.get(f"g/{name}")
            if pending is not None:
                got = self._unseal_group(pending)
            elif _group_name(name):
                got = read_quick_sealed_dict(self._entry("g", name), self._group_context(), MAX_ENTRY_BYTES)
            if got is not None:
                self._group_payloads[name] = got
        return got

    # A group entry is the one entry of thousands of files (a census's reads: 23,600 at ten times
    # vLLM, 2.2 MB), read by every run that checks an answer using the census (a pre-commit run on
    # an edited file with a fix planned). As sealed JSON, its HMAC-SHA256 and its parse were 250 M
    # instructions of such a run; in marshal's format, sealed with keyed BLAKE2b (cache_seal's
    # quick seal, as the stamp memo and the replay index), 130 M. marshal's format is the
    # interpreter's: the seal's context names it, and another interpreter's group is a miss.
    # (Its name stays the digest of its canonical JSON: the same in every run and worker.)
    def _group_context(self) -> str:
        return f"{self.context} group {GROUP_FORMAT} {sys.implementation.cache_tag} {sys.version}"

    def _seal_group(self, stored: dict) -> bytes | None:
        return quick_seal(marshal.dumps(stored), self._group_context())

    def _unseal_group(self, raw: bytes) -> dict | None:
        return quick_unseal_dict(raw, self._group_context())

    def unchanged_reads(self, entry: dict, stamp_of, table):
        """The reads an entry stores (class_index.Reads, real paths) when every one is unchanged:
        each file's stamp (`stamp_of(real)`), the file defining each module looked up, and the
        digests of each folder listing and named enumeration of the module `table`; None when one
        changed or the entry is ill-shaped."""
        from dtype_lint.analysis.index.class_index import Reads

        files, modules = entry.get("files"), entry.get("modules")
        listings, enumerations = entry.get("listings"), entry.get("enumerations")
        if not (isinstance(files, dict) and isinstance(modules, dict) and isinstance(listings, dict)
                and isinstance(enumerations, dict)):
            return None
        reads = Reads()
        for dep, dep_stamp in files.items():
            real = self.real(dep)
            if not isinstance(dep_stamp, str) or stamp_of(real) != dep_stamp:
                return None
            reads.files[real] = dep_stamp
        for module, dep in modules.items():
            if dep is not None and not isinstance(dep, str):
                return None
            now = table.first_key(module)
            if (None if now is None else self.rel(now)) != dep:
                return None
            reads.modules[module] = None if dep is None else self.real(dep)
        for folder, digest in listings.items():
            real = self.real(folder)
            if not isinstance(digest, str) or table.listing(real) != digest:
                return None
            reads.listings[real] = digest
        for name, digest in enumerations.items():
            if not isinstance(digest, str) or table.enumeration(name) != digest:
                return None
            reads.enumerations[name] = digest
        if ("passed" in entry or "tests" in entry) and not self._unchanged_passed(entry, reads, stamp_of):
            return None
        groups = entry.get("groups", {})
        if not isinstance(groups, dict):
            return None
        for name, group_name in groups.items():
            group = self._checked_group(group_name, stamp_of, table)
            if group is None:
                return None
            reads.groups[name] = group
        return reads

    def _unchanged_passed(self, entry: dict, reads, stamp_of) -> bool:
        """Is each file the entry's computation passed over unchanged, or does it fail the same
        tests still (class_index.Reads.passed, core/passed_over.py)? Kept in `reads` with its
        stamp now."""
        from dtype_lint.core.passed_over import still_passed_over

        passed = self._passed_of(entry)
        if passed is None:
            return False
        for (real, (kept, tests)), stamp in zip(passed.items(), self._stamps(stamp_of, list(passed))):
            if stamp != kept and not still_passed_over(real, tests):
                return False
            reads.passed[real] = (stamp, tests)
        return True

    def _passed_of(self, entry: dict) -> dict[str, tuple[str, frozenset]] | None:
        """Real path -> (stamp, the tests it failed) of each file an entry stores as passed over
        (`stored_reads`), or None when ill-shaped. Read once per entry a run: a group's is asked
        when it is checked and again when the replay index keeps it (23,600 files at ten times
        vLLM)."""
        kept = self._passed_read_of.get(id(entry))
        if kept is not None and kept[0] is entry:
            return kept[1]
        got = self._read_passed(entry)
        self._passed_read_of[id(entry)] = (entry, got)  # (the entry held: its id is not reused)
        return got

    def _read_passed(self, entry: dict) -> dict[str, tuple[str, frozenset]] | None:
        from dtype_lint.core.passed_over import as_test, is_test

        passed, stored_tests = entry.get("passed", {}), entry.get("tests", [])
        if not (isinstance(passed, dict) and isinstance(stored_tests, list) and all(map(is_test, stored_tests))):
            return None
        tests = [as_test(test) for test in stored_tests]
        # One set of tests for the thousands of files that failed the same, each list of test
        # numbers checked once (23,600 files at ten times vLLM, a handful of lists).
        sets: dict[tuple, frozenset] = {}
        out: dict[str, tuple[str, frozenset]] = {}
        real = self.real
        for dep, kept in passed.items():
            if not (type(kept) is list and len(kept) == 2 and type(kept[0]) is str and type(kept[1]) is list):
                return None
            failed = tuple(kept[1])
            those = sets.get(failed)
            if those is None:
                if not _names_tests(failed, len(tests)):
                    return None
                those = sets[failed] = frozenset(tests[i] for i in failed)
            out[real(dep)] = (kept[0], those)
        return out

    def _checked_group(self, name, stamp_of, table):
        """The reads of the group entry `name` when all are unchanged, else None: checked once a
        run, however many entries hold it."""
        if not isinstance(name, str):
            return None
        if name not in self._groups_checked:
            entry = self._group_entry(name)
            reads = self.unchanged_reads(entry, stamp_of, table) if isinstance(entry, dict) else None
            if reads is not None:
                # Kept again under the same name (stored_reads), also where a file it passed over
                # changed and fails its test still: the entry holds what it held then, and each
                # run finds it unchanged the same way (`group_reads` gives the stamps of now).
                reads.token = f"g-{name}"
                self._group_names[reads.token] = name
                if f"g/{name}" not in self._pending:
                    _mark_used(self._entry("g", name))
            self._groups_checked[name] = reads
        return self._groups_checked[name]

    def findings_reads(self, real: str, limit: int | None = None) -> tuple[str, dict[str, str]] | None:
        """(the file's stamp, real path -> stamp of every file its analysis read) of the findings
        entry of `real` this run wrote or found, or None (run/run_memo.py keeps these); None too
        when it read more than `limit` files."""
        if not self.enabled:
            return None
        kept = self._reads.get(real)
        if kept is not None and kept[1] is not None:
            return (kept[0], kept[1]) if limit is None or len(kept[1]) <= limit else None
        if kept is not None and limit is not None and limit < KEPT_READS:
            return None
        entry = self._findings_entry(real)
        if entry is None:
            return None
        if limit is not None and (entry.get("groups") or len(entry.get("files") or ()) > limit):
            return None
        files = self._files_read(entry)
        return None if files is None else (entry["s"], files)

    def findings_parts(self, real: str, limit: int | None = None) -> tuple[str, dict[str, str], dict, list[str]] | None:
        """(the file's stamp, real path -> stamp of every file the findings entry of `real` read
        itself, the tests of those it only passed over, the names of the group entries it
        names): what the replay keeps of an entry whose analysis used a census of the whole
        tree, its groups once for all entries (`group_reads`). None when the entry cannot be read
        or read more than `limit` files itself."""
        entry = self._findings_entry(real) if self.enabled else None
        if entry is None:
            return None
        groups = entry.get("groups", {})
        if not (isinstance(groups, dict) and all(isinstance(name, str) for name in groups.values())):
            return None
        got = self._reads_of({k: v for k, v in entry.items() if k != "groups"})
        if got is None or (limit is not None and len(got[0]) > limit):
            return None
        return entry["s"], got[0], got[1], sorted(set(groups.values()))

    def _findings_entry(self, real: str) -> dict | None:
        """The findings entry of `real`, written this run (pending) or on disk, or None."""
        rel = self.rel(real)
        pending = self._pending.get(f"f/{rel}")
        entry = self._decode(pending) if pending is not None else self._load("f", rel)
        if not (isinstance(entry, dict) and entry.get("k") == rel and isinstance(entry.get("s"), str)):
            return None
        return entry

    def group_reads(self, name: str) -> tuple[dict[str, str], dict] | None:
        """(real path -> stamp of every file the group entry `name` read, the tests of those it
        only passed over), or None when it cannot be read. A group this run found unchanged
        gives its files as the run found them: a file it passed over that changed and fails its
        test still has its stamp of now, as the files the answer read otherwise have."""
        checked = self._groups_checked.get(name)
        if checked is not None:
            return _files_and_tests(checked)
        group = self._group_entry(name)
        return self._reads_of(group) if isinstance(group, dict) else None

    def _reads_of(self, entry: dict) -> tuple[dict[str, str], dict] | None:
        """(real path -> stamp of every file `entry` read, its groups' included; the tests of
        those it only passed over), or None when it or a group entry is ill-shaped."""
        files = self._files_read(entry)
        tests: dict = {}
        strict: set[str] = set()
        if files is None or not self._passed_read(entry, tests, strict):
            return None
        for key in strict:
            tests.pop(key, None)
        return files, tests

    def _passed_read(self, entry, tests: dict, strict: set[str]) -> bool:
        """Add the tests of the files `entry` (and its groups) passed over to `tests`, and the
        files it read otherwise to `strict`; False when it or a group entry is ill-shaped."""
        files, groups, passed = entry.get("files"), entry.get("groups", {}), self._passed_of(entry)
        if not (isinstance(files, dict) and isinstance(groups, dict)) or passed is None:
            return False
        for real, (_stamp, those) in passed.items():
            tests[real] = tests[real] | those if real in tests else those
        strict.update(map(self.real, files))
        for name in groups.values():
            group = self._group_entry(name) if isinstance(name, str) else None
            if not (isinstance(group, dict) and self._passed_read(group, tests, strict)):
                return False
        return True

    def _files_read(self, entry) -> dict[str, str] | None:
        """Real path -> stamp of every file an entry read, its groups' included; None when it or
        a group entry is ill-shaped or missing."""
        files, groups, passed = entry.get("files"), entry.get("groups", {}), entry.get("passed", {})
        if not (isinstance(files, dict) and all(isinstance(v, str) for v in files.values())
                and isinstance(groups, dict) and isinstance(passed, dict)
                and all(isinstance(v, list) and v and isinstance(v[0], str) for v in passed.values())):
            return None
        out: dict[str, str] = {}
        for name in groups.values():
            group = self._group_entry(name) if isinstance(name, str) else None
            more = self._files_read(group) if isinstance(group, dict) else None
            if more is None:
                return None
            out.update(more)
        out.update((self.real(dep), kept[0]) for dep, kept in passed.items())
        out.update((self.real(dep), s) for dep, s in files.items())
        return out

    # ---- other entries (run/facts_cache.py) ------------------------------------------------
    def entry(self, kind: str, name: str):
        """The payload of the entry `name` of `kind`, or None (disabled, missing, not ours)."""
        if not self.enabled:
            return None
        return self._load(kind, name)

    def put_entry(self, kind: str, name: str, data) -> None:
        if self.enabled:
            self._put(f"{kind}/{name}", data)

    # ---- where entries are kept: sealed files here, memory in run/memory_cache.py ---------
    def _load(self, kind: str, rel: str):
        """The payload of an entry (`kind` "" : the scan summary), or None."""
        path = self.dir / rel if not kind else self._entry(kind, rel)
        return _read_json(path, self.context)

    def _encode(self, data) -> bytes | None:
        return encode(data, self.context)

    def _decode(self, raw: bytes):
        return decode(raw, self.context)

    def _put(self, name: str, data) -> None:
        sealed = self._encode(data)
        if sealed is not None:  # no key: nothing is kept (the pipeline then runs uncached anyway)
            self._pending[name] = sealed

    def take_entries(self, kind: str) -> list[tuple[str, bytes]]:
        """The entries of `kind` waiting to be written, removed from this cache (a worker process
        hands them to the parent, which writes them: `add_entries`)."""
        prefix = f"{kind}/"
        taken = [(name, data) for name, data in self._pending.items() if name.startswith(prefix)]
        for name, _ in taken:
            del self._pending[name]
        return taken

    def add_entries(self, entries: list[tuple[str, bytes]]) -> None:
        if self.enabled:
            self._pending.update(entries)

    # ---- writing ---------------------------------------------------------------------------
    def save(self, writer) -> None:
        """Write what this run computed through the run's writer. The cache folder gets a
        `.gitignore` of `*` only while it holds nothing but dtype-lint's own files (so never the
        project root, never a folder of the user's; a run killed after making the folder leaves
        it for the next run to add)."""
        if not self.enabled:
            return
        if not (self._pending or self._scan_dirty):
            _mark_used(self.dir)  # a run that found everything unchanged used it all the same (cache_clean)
            return
        from dtype_lint.core.writer import WriteError

        try:
            new = not self.dir.exists()
            writer.make_dirs(self.dir / "h", "cache")
            writer.make_dirs(self.dir / "f", "cache")
            for kind in ("s", "g"):
                if any(name.startswith(f"{kind}/") for name in self._pending):
                    writer.make_dirs(self.dir / kind, "cache")
            gitignore = self.base / ".gitignore"
            if not gitignore.exists() and all(_ours(name) for name in os.listdir(self.base)):
                writer.write(gitignore, GITIGNORE, "cache", create=True)
            for name, data in self._pending.items():
                kind, _, rel = name.partition("/")
                writer.write_cache(self._entry(kind, rel), data)
            scan = encode({"names": self._scan_names, "files": self._scan}, self.context) if self._scan_dirty else None
            if scan is not None:
                writer.write_cache(self.dir / "scan.json", scan)
            self.started = new  # the run then removes stale folders (cache_clean.remove_stale_folders)
            self._remove_old_groups([name[2:] for name in self._pending if name.startswith("g/")])
        except (OSError, WriteError):
            pass  # a read-only checkout still lints; it just does not cache
        self._pending.clear()
        self._scan_dirty = False

    def _remove_old_groups(self, written: list[str]) -> None:
        """Remove all but the GROUPS_KEPT most recently used group entries of each census of the
        groups `written` (see GROUPS_KEPT)."""
        censuses = {name.partition("-")[0] for name in written}
        if not censuses:
            return
        folder = self.dir / "g"
        by_census: dict[str, list[tuple[bool, int, str]]] = {}
        with os.scandir(folder) as entries:
            for entry in entries:
                name = entry.name[:-len(GROUP_SUFFIX)] if entry.name.endswith(GROUP_SUFFIX) else ""
                census = name.partition("-")[0]
                if _group_name(name) and census in censuses:
                    try:
                        used = entry.stat().st_mtime_ns
                    except OSError:
                        continue
                    # (one written now first, whatever the clocks say; then the most recently used)
                    by_census.setdefault(census, []).append((name not in written, -used, name))
        for groups in by_census.values():
            for _old, _used, name in sorted(groups)[GROUPS_KEPT:]:
                try:
                    os.unlink(folder / f"{name}{GROUP_SUFFIX}")
                except OSError:
                    pass


def _files_and_tests(reads) -> tuple[dict[str, str], dict]:
    """`Cache._reads_of` of checked reads (class_index.Reads): every file with its stamp, and
    the tests of those only passed over (by it or a group it holds) and not read otherwise."""
    tests: dict = {}
    strict: set[str] = set()
    todo = [reads]
    while todo:
        one = todo.pop()
        for real, (_stamp, those) in one.passed.items():
            tests[real] = tests[real] | those if real in tests else those
        strict.update(one.files)
        todo.extend(one.groups.values())
    for real in strict:
        tests.pop(real, None)
    return dict(reads.all_files()), tests


def _mark_used(path: Path) -> None:
    """Set the mtime of a group entry or of the cache folder to now, the run having used it: the
    most recently used groups are those `Cache._remove_old_groups` keeps, and a folder used within
    cache_clean.STALE_DAYS stays (where the folder is read-only, it stays as it is)."""
    try:
        os.utime(path)
    except OSError:
        pass


def _group_name(name) -> bool:
    """Is `name` one `Cache._group` makes (hex digits either side of one dash)?"""
    return (isinstance(name, str) and len(name) == 41 and name[8] == "-"
            and _GROUP_NAME_CHARS.issuperset(name) and name.count("-") == 1)


def _names_tests(failed: tuple, count: int) -> bool:
    """Are `failed`, the numbers of the tests a stored passed-over file failed, each one of the
    `count` tests (and is there one)?"""
    return bool(failed) and all(type(i) is int and 0 <= i < count for i in failed)


def _respell(d: dict, path_of, real_of) -> dict:
    """A finding dict with its evidence paths mapped (stored form <-> this run's display form)."""
    evidence = [dict(e, path=path_of(real_of(e["path"])) if e["path"] else "") for e in d["evidence"]]
    return dict(d, evidence=evidence)


def encode(data, context: str) -> bytes | None:
    """A cache file's bytes: the JSON payload sealed for `context` (cache_seal.seal: its MAC
    under this user's key, a line break, the payload); None when there is no key."""
    return seal(json.dumps(data, separators=(",", ":")).encode("utf-8", "surrogatepass"), context)


def decode(raw: bytes, context: str):
    """The payload of a cache file, or None when it is not one this user's dtype-lint sealed for
    `context`, intact."""

    def reject(constant: str):
        raise ValueError(f"{constant} is not a cache value")

    # The seal tells our own file from a truncated, edited, foreign or moved one.
    payload = unseal(raw, context)
    if payload is None:
        return None
    try:
        return json.loads(payload, parse_constant=reject)
    except (ValueError, RecursionError):
        return None


def _read_json(path: str | os.PathLike, context: str):
    """The payload in `path`, or None: missing, not a regular file (never blocks on a FIFO), too
    large, not sealed by us for `context`, not UTF-8 JSON, or holding NaN/Infinity."""
    from dtype_lint.core.safe_read import read_bytes

    try:
        data = read_bytes(path, MAX_ENTRY_BYTES)
    except (OSError, ValueError):
        return None
    return decode(data, context)


def _header_shaped(h) -> bool:
    return isinstance(h, dict) and isinstance(h.get("imports"), dict) and isinstance(h.get("classes"), dict) \
        and all(isinstance(v, str) for v in h["imports"].values()) \
        and all(isinstance(v, list) and len(v) == 2 and isinstance(v[0], list) and isinstance(v[1], int)
                for v in h["classes"].values())


_NO_LINKS: tuple[tuple, tuple] = ((), ())
_INT, _STR, _BOOL = "int", "str", "bool"
_FINDING = {"code": _STR, "message": _STR, "path": _STR, "confidence": _STR, "no_fix_reason": _STR,
            "scope": _STR, "expression": _STR, "kind": _STR,
            "span": {"line": _INT, "col": _INT, "end_line": _INT, "end_col": _INT},
            "evidence": [{"message": _STR, "path": _STR, "line": _INT}],
            "fix": {"description": _STR, "safe": _BOOL, "unsafe_reason": _STR,
                    "edits": [{"start": _INT, "end": _INT, "text": _STR}], "imports": [[_STR]],
                    "aliases": [_STR], "binds": [_STR], "spelled": [_STR]}}


def _finding_shaped(d) -> bool:
    """A cached finding has the types `Finding.to_dict` gives (a `fix` may be null)."""
    return _fits(d, _FINDING)


def _fits(value, schema) -> bool:
    if schema == _INT:
        return type(value) is int
    if schema == _STR:
        return type(value) is str
    if schema == _BOOL:
        return type(value) is bool
    if isinstance(schema, list):
        return isinstance(value, list) and all(_fits(v, schema[0]) for v in value)
    if value is None and "edits" in schema:
        return True  # no fix
    return isinstance(value, dict) and all(k in value and _fits(value[k], sub) for k, sub in schema.items()
                                            if k in value or k in ("code", "message", "path", "span"))


# The files beside the format folders: the fast path's record, the run memo, the code stamp's
# memo, the project's file list, the files' stamps by stat data and the pre-commit replay's index
# and answers.
_OWN_FILES = frozenset({"tmp", "fast-path.json", "run-memo.json", "code-stamp.json", "project-files.json",
                        "stamps.bin", "replay-index.bin", "replay-answers.bin", "replay-answers"})


def _ours(name: str) -> bool:
    """A name dtype-lint puts in its cache folder (this format's, the single-file format's)."""
    from dtype_lint.core.writer import is_temp_name

    return name in _OWN_FILES or name.startswith(f"{FORMAT}-") or \
        (name.startswith("cache-") and name.endswith(".json")) or is_temp_name(name)


def _links_shaped(links) -> bool:
    return (isinstance(links, list) and len(links) == 2
            and all(isinstance(x, list) and all(isinstance(n, str) for n in x) for x in links))
