"""The project's files as the file-list record holds them (layout_cache.py), answered without a
record per file, for a run on named files.

Such a run (pre-commit) checks the named files against the modules of the whole project: 23,600
files at ten times vLLM, of which it looks up a few hundred module names, a few paths and the
listings of a few folders. Turning every row of the record into a `Found`, then building the
module table's and the path maps over all of them, grew with the project although one file
changed. `ProjectFiles` keeps the record's rows as loaded, one list of file names per folder with
the folder's display lead, real path and module prefix, and answers each question from the
folders it concerns: a module `a.b.c` is `c.py` (or `.pyi`) in a folder of prefix `a.b.`, or the
`__init__` of a folder of prefix `a.b.c.`, or one of the rows the record spells out (a file whose
module is not its folder's prefix and its stem, or whose stem holds a dot). The indexes over the
folders (3,000 at ten times vLLM) are built on first use.

The named files come first, and the record's rows of the same real files are left out, as
`pipeline._discover` orders them; iterating gives every file in that order, and each answer is
the one `class_index.ModuleFiles` and the maps of `pipeline._Project` give over that list.
"""

from __future__ import annotations

import bisect
import os

from dtype_lint.core.discovery import Found

_SEP = os.sep
_INITS = ("__init__.py", "__init__.pyi")


def _stem(name: str) -> str:
    return name[:-3] if name.endswith(".py") else name[:-4]


class ProjectFiles:
    """`front` (the named files), then the record's files of other real paths.
    `dirs`: the record's [rel, real_dir, prefix, rows], in discovery order, a row being a file
    name, or [name, module] where the module is not the prefix and the stem (or the stem holds a
    dot); `odd`: the [folder, row] of each such row; `lead_of(rel)`: what discovery shows before a
    file name of folder `rel`."""

    def __init__(self, front: list[Found], dirs: list, odd: list, lead_of, firsts_digest: str | None = None):
        self.front = front
        # The record's own ALL_MODULES digest (class_index.all_modules_digest of its files alone).
        self._firsts_digest = firsts_digest
        self._dirs = dirs
        self._odd_at = odd
        self._lead_of = lead_of
        self._front_reals = {f.real for f in front}
        self._front_paths = {f.path: f for f in front}
        self._front_by_real = {f.real: f.path for f in front}
        self._front_modules: dict[str, list[Found]] = {}
        for f in front:
            self._front_modules.setdefault(f.module, []).append(f)
        self._leads: list[str | None] = [None] * len(dirs)
        self._by_prefix: dict[str, list[int]] | None = None
        self._odd: dict[str, list[tuple[int, int]]] | None = None
        self._by_rel: dict[str, int] | None = None
        self._sorted_leads: list[tuple[str, int]] | None = None
        self._by_real_dir: dict[str, int] | None = None
        self._lead_head = lead_of("")  # the root folder's lead
        self._files_of: dict[str, list[Found]] = {}

    # ---- one file of the record ------------------------------------------------------------

    def _lead(self, d: int) -> str:
        lead = self._leads[d]
        if lead is None:
            lead = self._leads[d] = self._lead_of(self._dirs[d][0])
        return lead

    def _real_lead(self, d: int) -> str:
        return self._dirs[d][1].rstrip(_SEP) + _SEP

    def _module(self, d: int, row) -> str:
        if row.__class__ is not str:
            return row[1]
        prefix = self._dirs[d][2]
        stem = _stem(row)
        return prefix[:-1] if stem == "__init__" else prefix + stem

    def _found(self, d: int, r: int) -> Found | None:
        """The file at row `r` of folder `d`, or None when it is a named file (it is in front)."""
        row = self._dirs[d][3][r]
        name = row if row.__class__ is str else row[0]
        real = self._real_lead(d) + name
        if real in self._front_reals:
            return None
        return Found(self._lead(d) + name, real, self._module(d, row))

    def __iter__(self):
        yield from self.front
        for d, entry in enumerate(self._dirs):
            for r in range(len(entry[3])):
                f = self._found(d, r)
                if f is not None:
                    yield f

    def __len__(self) -> int:
        return sum(1 for _ in self)

    def __bool__(self) -> bool:
        return bool(self.front) or any(entry[3] for entry in self._dirs)

    # ---- the folder indexes ----------------------------------------------------------------

    def _prefixes(self) -> dict[str, list[int]]:
        if self._by_prefix is None:
            by_prefix: dict[str, list[int]] = {}
            odd: dict[str, list[tuple[int, int]]] = {}
            for d, entry in enumerate(self._dirs):
                by_prefix.setdefault(entry[2], []).append(d)
            for d, r in self._odd_at:
                odd.setdefault(self._dirs[d][3][r][1], []).append((d, r))
            self._by_prefix, self._odd = by_prefix, odd
        return self._by_prefix

    def _folder_shown(self, lead: str) -> int | None:
        """The folder whose files are shown after `lead`: its `rel` is what follows the root's
        lead (a walk of `.` shows no `./`), checked against `lead_of` itself."""
        if self._by_rel is None:
            self._by_rel = {entry[0]: d for d, entry in enumerate(self._dirs)}
        head = self._lead_head
        rel = lead[len(head):-1] if lead.startswith(head) and len(lead) > len(head) else ""
        d = self._by_rel.get(rel)
        return d if d is not None and self._lead(d) == lead else None

    def _folder_at(self, real_dir: str) -> int | None:
        if self._by_real_dir is None:
            self._by_real_dir = {entry[1]: d for d, entry in enumerate(self._dirs)}
        return self._by_real_dir.get(real_dir)

    def _leads_sorted(self) -> list[tuple[str, int]]:
        if self._sorted_leads is None:
            self._sorted_leads = sorted((self._lead(d), d) for d in range(len(self._dirs)))
        return self._sorted_leads

    def _folders_under_real(self, prefix: str) -> list[int]:
        """The folders whose real path (with a separator after it) starts with `prefix`, in
        discovery order: one pass over them, cheaper than sorting them for the few listings a
        run asks for."""
        # A real folder ends with no separator (but "/"): `real + sep` starts with `prefix` when
        # `real` does, or when `real` is `prefix` without its last separator.
        folder = prefix[:-1] if prefix.endswith(_SEP) else None
        return [d for d, entry in enumerate(self._dirs) if entry[1] == folder or entry[1].startswith(prefix)]

    @staticmethod
    def _starting(pairs: list[tuple[str, int]], prefix: str) -> list[int]:
        """The folders whose key in `pairs` (sorted) starts with `prefix`, in discovery order."""
        low = bisect.bisect_left(pairs, (prefix,))
        out = []
        for key, d in pairs[low:]:
            if not key.startswith(prefix):
                break
            out.append(d)
        return sorted(out)

    def _row(self, d: int, name: str) -> int | None:
        rows = self._dirs[d][3]
        if name in rows:
            return rows.index(name)
        for r, row in enumerate(rows):
            if row.__class__ is not str and row[0] == name:
                return r
        return None

    # ---- the answers of pipeline._Project's maps -------------------------------------------

    def at_path(self, path: str) -> Found | None:
        """The file shown as `path` (the last named file of that name first)."""
        f = self._front_paths.get(path)
        if f is not None:
            return f
        head, sep, name = path.rpartition(_SEP)
        d = self._folder_shown(head + sep)
        r = self._row(d, name) if d is not None else None
        return self._found(d, r) if d is not None and r is not None else None

    def display_of(self, real: str) -> str | None:
        """The path shown for the file at `real` (the last named file of that real path first)."""
        shown = self._front_by_real.get(real)
        if shown is not None:
            return shown
        real_dir, name = os.path.split(real)
        d = self._folder_at(real_dir)
        r = self._row(d, name) if d is not None else None
        f = self._found(d, r) if d is not None and r is not None else None
        return f.path if f is not None else None

    # ---- class_index.ModuleFiles -----------------------------------------------------------

    def files_of(self, module: str) -> list[Found]:
        got = self._files_of.get(module)
        if got is None:
            got = self._files_of[module] = [*self._front_modules.get(module, ()), *self._record_files_of(module)]
        return got

    def _record_files_of(self, module: str) -> list[Found]:
        return [f for f in (self._found(d, r) for d, r in self._record_rows_of(module)) if f is not None]

    def _record_rows_of(self, module: str) -> list[tuple[int, int]]:
        """(folder, row) of each of the record's files of `module`, in discovery order."""
        by_prefix = self._prefixes()
        dirs = self._dirs
        odd = self._odd
        assert odd is not None  # _prefixes() builds it with the prefixes
        at: list[tuple[int, int]] = list(odd.get(module, ()))
        # The package: the `__init__` of a folder whose prefix is the module's ("" for module "").
        for d in by_prefix.get(module + "." if module else "", ()):
            rows = dirs[d][3]
            at += [(d, rows.index(n)) for n in _INITS if n in rows]
        # A module file: its stem holds no dot (the record spells out those that do).
        cut = module.rfind(".") + 1
        stem = module[cut:]
        if stem and stem != "__init__":
            for d in by_prefix.get(module[:cut], ()):
                rows = dirs[d][3]
                at += [(d, rows.index(n)) for n in (stem + ".py", stem + ".pyi") if n in rows]
        at.sort()
        return at

    def first(self, module: str) -> Found | None:
        files = self.files_of(module)
        return files[0] if files else None

    def firsts(self):
        seen: dict[str, Found] = {}
        for f in self:
            if f.module not in seen:
                seen[f.module] = f
        return seen.items()

    def first_keys(self) -> dict[str, str]:
        """Module -> the key (real path) of its first file, of every module in discovery order:
        `firsts` without a `Found` per file (the module table's digest of every module reads
        only these, class_index.ALL_MODULES: 23,600 files at ten times vLLM)."""
        out: dict[str, str] = {}
        for f in self.front:
            out.setdefault(f.module, f.real)
        front = self._front_reals
        for d, entry in enumerate(self._dirs):
            lead, prefix = self._real_lead(d), entry[2]
            for row in entry[3]:
                if row.__class__ is str:
                    name = row
                    stem = _stem(row)
                    module = prefix[:-1] if stem == "__init__" else prefix + stem
                else:
                    name, module = row[0], row[1]
                if module not in out and (lead + name) not in front:
                    out[module] = lead + name
        return out

    def all_modules_digest(self) -> str | None:
        """class_index.all_modules_digest of `first_keys()`, from the record's own where the
        named files leave every module's first file as the record has it (each named file is the
        record's first file of its module), else None: the caller makes it."""
        if not isinstance(self._firsts_digest, str):
            return None
        seen: set[str] = set()
        for f in self.front:
            if f.module not in seen:
                seen.add(f.module)
                if self._record_first_real(f.module) != f.real:
                    return None
        return self._firsts_digest

    def _record_first_real(self, module: str) -> str | None:
        """The real path of the record's first file of `module`, the named files' rows counted."""
        at = self._record_rows_of(module)
        if not at:
            return None
        d, r = at[0]
        row = self._dirs[d][3][r]
        return self._real_lead(d) + (row if row.__class__ is str else row[0])

    def _firsts_among(self, files):
        """(module, first file) of the modules whose first file is among `files` (in order)."""
        out: dict[str, Found] = {}
        for file in files:
            if file.module not in out:
                first = self.first(file.module)
                if first is not None and first.real == file.real:
                    out[file.module] = first
        return out

    def _rows_of(self, folders):
        for folder in folders:
            for r in range(len(self._dirs[folder][3])):
                f = self._found(folder, r)
                if f is not None:
                    yield f

    def firsts_under_key(self, prefix: str):
        files = [f for f in self.front if f.real.startswith(prefix)]
        files += self._rows_of(self._folders_under_real(prefix))
        return [(m, f) for m, f in self._firsts_among(files).items() if f.real.startswith(prefix)]

    def firsts_under_path(self, prefix: str):
        files = [f for f in self.front if f.path.startswith(prefix)]
        files += self._rows_of(self._starting(self._leads_sorted(), prefix))
        return [(m, f) for m, f in self._firsts_among(files).items() if f.path.startswith(prefix)]

    def firsts_with_part(self, parts: frozenset[str]):
        by_prefix = self._prefixes()
        odd = self._odd
        assert odd is not None  # _prefixes() builds it with the prefixes
        at: list[tuple[int, int]] = [p for m, ps in odd.items() if not parts.isdisjoint(m.split(".")) for p in ps]
        # A module has the part in its folder's prefix (every file of the folder) or is its stem
        # (a file `part.py`): the prefixes holding a part's text are split, the names are looked for
        # folder by folder.
        prefixes = list(by_prefix)
        matched = {prefix for part in parts for prefix in prefixes
                   if part in prefix and not parts.isdisjoint(prefix.split("."))}
        names = {p + ext for p in parts for ext in (".py", ".pyi")}
        odd_folders = {d for d, _ in self._odd_at}
        dirs = self._dirs
        for prefix in prefixes:
            folders = by_prefix[prefix]
            if prefix in matched:
                at += [(d, r) for d in folders for r, row in enumerate(dirs[d][3]) if row.__class__ is str]
                continue
            for folder in folders:
                rows = dirs[folder][3]
                if folder in odd_folders:  # a spelled-out row is a list: not hashable
                    rows = [row for row in rows if row.__class__ is str]
                if not names.isdisjoint(rows):
                    at += [(folder, dirs[folder][3].index(n)) for n in names if n in rows]
        at.sort()
        files = [f for f in self.front if not parts.isdisjoint(f.module.split("."))]
        files += [f for f in (self._found(d, r) for d, r in at) if f is not None]
        return list(self._firsts_among(files).items())
