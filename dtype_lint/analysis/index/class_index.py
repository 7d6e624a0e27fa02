"""The project's class index: which classes are quantizable layers, resolved across files.

Building it must not cost a parse of every file (a full libcst parse of vLLM takes
minutes, even `ast.parse` seconds). A class hierarchy needs only two kinds of statement, `import`
and `class` headers, so `extract_header` finds those lines with a regex, cuts each logical
statement out by bracket counting, and parses just those snippets.

Nor is it built for every file: `ModuleTable` maps each module name of the project to its file
(from discovery, no reading) and extracts a module's header the first time a lookup asks for it
(from the cache when the file is unchanged). What an analysis looked up is recorded (`Reads`),
so a cached result can be checked against exactly the files and module names it depended on.
"""

from __future__ import annotations

import ast
import bisect
import keyword
import os
import re
import textwrap
import unicodedata
import weakref
from collections.abc import Callable
from dataclasses import field
from functools import cache
from pathlib import Path
from sys import intern

from dtype_lint.core import digests
from dtype_lint.core.findings import Evidence
from dtype_lint.core.records import record
from dtype_lint.core.source import iter_code
from dtype_lint.core.text_facts import POSSESSIVE, LineStart

_STMT = LineStart(r"[ \t]*" + POSSESSIVE + r"[cfi](?:lass|rom|mport)\b")


@record
class ModuleHeader:
    """What one module binds by import and which classes it defines with which bases."""

    module: str
    path: str
    is_package: bool
    # local name -> qualified target, both interned (sys.intern): the headers a run reads import
    # the same names over and over (vLLM 0.34.0, cold: 20,960 entries, 5,700 distinct targets,
    # 5,100 distinct names): a string per entry held 6.8 MiB of the index alive, interned 5.1.
    imports: dict[str, str] = field(default_factory=dict)
    classes: dict[str, tuple[list[str], int]] = field(default_factory=dict)  # name -> (bases, line)
    # Top-level functions that may be input-dtype helpers (their text reads a weight's dtype or a
    # layer's model dtype attribute, and returns): name -> hash of that text. Other files' findings depend on what
    # such a function decides, so the hash is part of the header (and of every cached finding's key).
    functions: dict[str, str] = field(default_factory=dict)
    # Classes whose `class` line is indented (defined in a function, a class body or a block) and
    # which are the file's only class statement of their name: `classes` holds each under its
    # simple name, so a qualified name ending in it (`outer.<locals>.Inner`, `Outer.Inner`) can
    # only mean that one class (`QuantizableLayerIndex.class_location`). A name defined twice is
    # left out: which statement a qualified name means would take the nesting, not read here.
    nested: frozenset[str] = frozenset()

    def to_dict(self) -> dict:
        return {
            "module": self.module,
            "path": self.path,
            "is_package": self.is_package,
            "imports": self.imports,
            "classes": {k: [v[0], v[1]] for k, v in self.classes.items()},
            "functions": self.functions,
            "nested": sorted(self.nested),
        }

    @classmethod
    def from_dict(cls, d: dict) -> "ModuleHeader":
        return cls(
            d["module"], d["path"], d["is_package"], dict(d["imports"]),
            {k: (list(v[0]), v[1]) for k, v in d["classes"].items()},
            dict(d.get("functions", {})),
            frozenset(d.get("nested", ())),
        )


# `dtype_functions` is text-only, so that the pre-commit fast path can use it without this module.
from dtype_lint.core.text_facts import dtype_functions  # noqa: E402,F401


@cache
def _from_import_patterns() -> tuple[LineStart, re.Pattern[str]]:
    """`from M import ...` and the names in its list; compiled on first use (only a run that looks
    for helper callers across files needs them, not a pre-commit check of one edited file). Found
    newline first (a `^` under re.M made the scan of every file three times slower): a match
    spans lines only inside an import list's parentheses, where no line starts another import."""
    return (LineStart(r"[ \t]*from[ \t]+[\w.]+[ \t]+import[ \t]*(\([^)]*\)|[^\n]*)"),
            re.compile(r"(?:^|,)\s*(\w+)"))


def from_imported(text: str) -> list[str]:
    """The names a file imports with `from ... import`, without a parse (the names as defined,
    before any `as`). A superset is fine: it only decides which files get a closer look."""
    if "import" not in text:
        return []
    names = set()
    from_import, imported = _from_import_patterns()
    for _, match in from_import.finditer(text):
        body = re.sub(r"#[^\n]*", "", match.group(1)).strip("() \t\r\n\\")
        names.update(imported.findall(body))
    return sorted(names)


def extract_header(text: str, module: str, path: str, is_package: bool, functions: bool = True) -> ModuleHeader:
    """`functions`: find the helper-shaped functions (`ModuleHeader.functions`), which only the
    rules reading input-dtype helpers read (run/file_analysis.reads_helpers)."""
    header = ModuleHeader(module, path, is_package, functions=dtype_functions(text) if functions else {})
    snippets = []
    line_no, last = 1, 0
    class_count: dict[str, int] = {}  # class statements by name
    indented: dict[str, int] = {}  # indented class statements: name -> line
    for start, found in _STMT.finditer(text):
        line_no += text.count("\n", last, start)
        last = start
        if text.startswith("class", found.end() - 5):
            named = _CLASS_NAME.match(text, found.end())
            if named is not None:
                class_count[named.group(1)] = class_count.get(named.group(1), 0) + 1
                if text[start] in " \t\f":
                    indented[named.group(1)] = line_no
        snippet = _logical_statement(text, start)
        if not _fast_path(snippet, line_no, header):
            snippets.append((line_no, snippet))
    if snippets:
        _parse_snippets(snippets, header, module, is_package)
    if indented:
        header.nested = frozenset(name for name, line in indented.items() if class_count[name] == 1
                                  and name in header.classes and header.classes[name][1] == line)
    return header


_CLASS_NAME = re.compile(r"[ \t]+(\w+)")
_WORD = re.compile(r"\w+")
_IMPORT_KEYWORD = re.compile(r"\bimport\b")


def import_words(text: str) -> set[str]:
    """The words of the statements `extract_header` reads (its `import`, `from` and `class`
    statements, cut out alike; of a `from` statement, what follows its `import`), without parsing
    them: the last part of every target its `imports` records is among them (`from m import X`,
    `import a.b.c as d`: the name; `import a.b`: `a`).
    A statement holding other than ASCII gives its words as written (the fast path records them
    so) and normalised (NFKC, as the parser reads identifiers). A census that needs only which
    file may import a name reads these words instead of every header
    (analysis/storage/constructions.py)."""
    words: set[str] = set()
    for start, found in _STMT.finditer(text):
        snippet = _logical_statement(text, start)
        if not snippet.isascii():
            words.update(_WORD.findall(snippet))
            words.update(_WORD.findall(unicodedata.normalize("NFKC", snippet)))
            continue
        if text.startswith("from", found.end() - 4):
            # `from pkg.linear import X`: X, not `linear` (a module's last part is a name many
            # import from and few import)
            keyword_at = _IMPORT_KEYWORD.search(snippet)
            if keyword_at is not None:
                snippet = snippet[keyword_at.end():]
        words.update(_WORD.findall(snippet))
    return words


def _parse_snippets(snippets: list[tuple[int, str]], header: ModuleHeader, module: str, is_package: bool) -> None:
    """Record the class headers and imports of the statements the fast path could not read."""
    # Most are imports of names in brackets, one a line (black's): read by text when they all are,
    # as ast reads them, in the same order (vLLM 0.34.0: 2,762 of the 3,090 statements, 377,000
    # characters parsed, a sixth of reading the headers).
    read = _all_bracketed(snippets)
    if read is not None:
        for from_module, level, names in read:  # as record_import does, from the text
            base = resolve_relative(module, is_package, from_module, level)
            if base is not None:
                for name, asname in names:
                    header.imports[asname or name] = intern(f"{base}.{name}") if base else name
        return
    snippets = [(line, textwrap.dedent(s)) for line, s in snippets]
    # One parse for the whole file's headers; per-snippet parses only if some snippet is not code
    # (a docstring line that starts with "from", say).
    try:
        trees = [(0, ast.parse("".join(s for _, s in snippets)))]
        lines = [line for line, s in snippets for _ in range(s.count("\n"))]
    except _UNPARSABLE:
        trees, lines = [], []
        for line, s in snippets:
            try:
                trees.append((line, ast.parse(s)))
            except _UNPARSABLE:
                continue
    for base_line, tree in trees:
        for node in tree.body:
            line = base_line or (lines[node.lineno - 1] if node.lineno - 1 < len(lines) else 0)
            if isinstance(node, ast.ClassDef):
                bases = [b for b in (dotted(e) for e in node.bases) if b]
                header.classes.setdefault(node.name, (bases, line))
            else:
                record_import(node, header.imports, module, is_package)


# A snippet that does not parse: not code (a docstring line), null bytes, absurd nesting.
_UNPARSABLE = (SyntaxError, ValueError, RecursionError, MemoryError)
# `from module import (names)`, spaces and tabs outside the brackets, line breaks too inside: only
# what the tokenizer reads as white space (`\s` would take a vertical tab, which it refuses).
_BRACKETED_FROM = re.compile(r"from[ \t]+(\.*)(\w[\w.]*)?[ \t]+import[ \t]*\(([\w \t\n,]*)\)")
_ALIAS = re.compile(r"(\w+)(?:[ \t\n]+as[ \t\n]+(\w+))?")
_BRACKETED = tuple[str | None, int, list[tuple[str, str | None]]]


def _all_bracketed(snippets: list[tuple[int, str]]) -> list[_BRACKETED] | None:
    """What _bracketed_import reads of each snippet; None from the first it does not read."""
    read = []
    for _, snippet in snippets:
        each = _bracketed_import(snippet)
        if each is None:
            return None
        read.append(each)
    return read


def _bracketed_import(snippet: str) -> _BRACKETED | None:
    """(module, level, [(name, asname)]) of `from module import (name, name as asname,)` as ast
    reads it: ASCII names that are not keywords, at most one comma after the last, a first line
    that textwrap.dedent leaves unindented; None for anything else (ast reads it)."""
    if not snippet.isascii() or not _dedents_flush(snippet):
        return None
    match = _BRACKETED_FROM.fullmatch(snippet.strip(" \t\n"))
    if match is None:
        return None
    module, level = match.group(2), len(match.group(1))
    if module is None and not level:  # `from  import (x)`: no module
        return None
    if module is not None and not all(_name(part) for part in module.split(".")):
        return None
    parts = match.group(3).split(",")
    if len(parts) > 1 and not parts[-1].strip():
        parts.pop()  # the comma after the last name
    names = []
    for part in parts:
        alias = _ALIAS.fullmatch(part.strip(" \t\n"))
        if alias is None or not _name(alias.group(1)) or (alias.group(2) is not None and not _name(alias.group(2))):
            return None
        names.append((intern(alias.group(1)), intern(alias.group(2)) if alias.group(2) is not None else None))
    return module, level, names


def _dedents_flush(snippet: str) -> bool:
    """Does textwrap.dedent take all of the first line's indentation (so the statement parses at
    the top level)? Yes when every line it counts starts with it: one holding more than spaces
    and tabs."""
    indent = snippet[:len(snippet) - len(snippet.lstrip(" \t"))]
    return not indent or all(line.startswith(indent) for line in snippet.split("\n") if line.strip(" \t"))


def _name(word: str) -> bool:
    """Can the parser read this word as a name an import binds or names?"""
    return word.isidentifier() and not keyword.iskeyword(word) and word != "__debug__"


# Matched against stripped snippets. Linear by construction: no two adjacent parts can match
# the same characters (a group after `\s+` starts with a non-space), so a long line that
# fails at its end is not retried split by split (`from a import b` + 200,000 spaces + `;`).
_SIMPLE_FROM = re.compile(r"from\s+(\.*)(\w[\w.]*)?\s+import\s+([\w,][\w\s,]*)$")
_SIMPLE_IMPORT = re.compile(r"import\s+([\w.,][\w.\s,]*)$")
_SIMPLE_CLASS = re.compile(r"class\s+(\w+)(?:\s*\(([\w.\s,]*)\))?\s*:\s*pass$")
_AS = re.compile(r"^([\w.]+)(?:\s+as\s+(\w+))?$")


# What the fast path read of an absolute import statement, by its text: each header repeats the
# others' imports (vLLM 0.34.0: 13,220 import statements in the 785 headers of a cold check,
# 3,974 distinct), and each was matched, split and interned again. A relative import reads
# differently in each module: not kept. Bounded: a ten-times tree has ten times the texts, and
# each kept text is memory until the run ends. The first 1,024 serve 89% of the hits 8,192 did on
# vLLM 0.34.0 (the imports every module repeats come first) for 18 M of the 100 M instructions
# saved, and keep the peak RSS where it was without them (8,192 raised it by 0.4 MB).
_IMPORT_READS: dict[str, tuple[tuple[str, str, bool], ...]] = {}
_IMPORT_READS_MAX = 1024


def _fast_path(snippet: str, line: int, header: ModuleHeader) -> bool:
    """Record a one-line import or a plain class header without parsing; False: needs ast."""
    snippet = snippet.strip()
    kept = _IMPORT_READS.get(snippet)
    if kept is not None:
        _record(kept, header.imports)
        return True
    read = _import_read(snippet, header.module, header.is_package)
    if read is not None:
        reads, whole, absolute = read
        _record(reads, header.imports)
        if whole and absolute and len(_IMPORT_READS) < _IMPORT_READS_MAX:
            _IMPORT_READS[snippet] = tuple(reads)
        return whole
    match = _SIMPLE_CLASS.match(snippet)
    if match:
        bases = [b.strip() for b in (match.group(2) or "").split(",") if b.strip()]
        header.classes.setdefault(match.group(1), (bases, line))
        return True
    return False


def _import_read(snippet: str, module: str, is_package: bool) \
        -> tuple[list[tuple[str, str, bool]], bool, bool] | None:
    """What a one-line import records in `imports`, in order: (name, target, only if the name is
    not bound yet); whether that is all of it (else ast reads the statement, after the names
    read here are recorded); whether it is absolute (what it records is the same in any module).
    None: not an import the fast path reads."""
    reads: list[tuple[str, str, bool]] = []
    match = _SIMPLE_FROM.match(snippet)
    if match:
        level = len(match.group(1))
        base = resolve_relative(module, is_package, match.group(2) or None, level)
        if base is None:
            return reads, True, False
        for part in match.group(3).split(","):
            a = _AS.match(part.strip())
            if a is None or "." in a.group(1):
                return reads, False, level == 0
            reads.append((intern(a.group(2) or a.group(1)), intern(f"{base}.{a.group(1)}" if base else a.group(1)),
                          False))
        return reads, True, level == 0
    match = _SIMPLE_IMPORT.match(snippet)
    if match:
        for part in match.group(1).split(","):
            a = _AS.match(part.strip())
            if a is None:
                return reads, False, True
            if a.group(2):
                reads.append((intern(a.group(2)), intern(a.group(1)), False))
            else:
                head = intern(a.group(1).split(".")[0])
                reads.append((head, head, True))
        return reads, True, True
    return None


def _record(reads: "tuple[tuple[str, str, bool], ...] | list[tuple[str, str, bool]]", imports: dict[str, str]) -> None:
    """Bind what an import read: `import a.b` binds `a` only where nothing bound it yet."""
    for name, target, if_unbound in reads:
        if if_unbound:
            imports.setdefault(name, target)
        else:
            imports[name] = target


_NOT_PLAIN = re.compile(r"[\"'#\\\[\]{}]")  # a string, comment, continuation or other bracket


def _logical_statement(text: str, start: int) -> str:
    """The statement at start: up to the end of line at bracket depth 0 (class: up to its colon)."""
    end = text.find("\n", start)
    line = text[start:] if end < 0 else text[start:end]
    stripped = line.strip()
    is_class = stripped.startswith("class")
    # Fast path: one physical line with balanced brackets and no string or comment.
    # (Substring tests, not a generator over the characters: the generator was most of a fast path.)
    if '"' not in line and "'" not in line and "#" not in line and "\\" not in line \
            and line.count("(") == line.count(")") and "[" not in line:
        if not is_class:
            return line + "\n"
        if stripped.endswith(":"):
            return line + " pass\n"
    # Second fast path: an import continued in brackets up to the first `)` (black's multi-line
    # `from a import (`), with no string, comment, backslash or other bracket on the way; what the
    # character walk below would return, without walking.
    if not is_class and "(" in line:
        close = text.find(")", start)
        stop = text.find("\n", close) if close >= 0 else -1
        stop = len(text) if close >= 0 and stop < 0 else stop
        if 0 <= close and stop - start <= 4000 and line.index("(") < close - start:
            body = text[start:stop]
            if body.count("(") == 1 and body.count(")") == 1 and _NOT_PLAIN.search(body) is None:
                return body + "\n"
    depth = 0
    continued = -1
    stop = len(text)
    for i, c in iter_code(text, start):
        if i - start > 4000:  # a runaway (unbalanced) statement: give up on it
            stop = i
            break
        if c in "([{":
            depth += 1
        elif c in ")]}":
            depth -= 1
        elif c == "\\":
            continued = i + 1
        elif c == "\n" and depth <= 0 and i != continued:
            stop = i
            break
        elif c == ":" and is_class and depth == 0:
            return text[start:i] + ": pass\n"
    return text[start:stop] + "\n"


def record_import(node: ast.AST, into: dict[str, str], module: str, is_package: bool) -> None:
    if isinstance(node, ast.Import):
        for alias in node.names:
            if alias.asname:
                into[alias.asname] = alias.name
            else:
                head = intern(alias.name.split(".")[0])
                into.setdefault(head, head)
    elif isinstance(node, ast.ImportFrom):
        base = resolve_relative(module, is_package, node.module, node.level)
        if base is None:
            return
        for alias in node.names:
            if alias.name == "*":
                continue
            into[alias.asname or alias.name] = intern(f"{base}.{alias.name}") if base else alias.name


def resolve_relative(module: str, is_package: bool, target: str | None, level: int) -> str | None:
    if level == 0:
        return target or ""
    parts = module.split(".") if module else []
    if not is_package:
        parts = parts[:-1]
    if level - 1 > len(parts):
        return None
    parts = parts[: len(parts) - (level - 1)]
    if target:
        parts.append(target)
    return ".".join(parts)


def dotted(node: ast.AST) -> str | None:
    """`a.b.C` for Name/Attribute chains; Generic[...] subscripts are reduced to their base."""
    if isinstance(node, ast.Subscript):
        return dotted(node.value)
    parts = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    if isinstance(node, ast.Name):
        parts.append(node.id)
        return ".".join(reversed(parts))
    return None


# Groups of words (ASCII), as a census tests a file's bytes for them: does it hold every word of
# one group? (ModuleTable.naming.)
WordGroups = tuple[tuple[str, ...], ...]


# One (stamp, tests) pair per set of tests for the files a census passed over unstamped
# (`Reads.pass_over`): a handful of test sets a process.
_UNSTAMPED_PAIRS: dict[tuple[str, frozenset], tuple[str, frozenset]] = {}


class Reads:
    """What one computation read through the index: module names looked up (→ the key of the
    file that defines each, None when none does) and the files whose headers or code it read
    (key → stamp). Keys are the files' real paths."""

    __slots__ = ("modules", "files", "passed", "listings", "enumerations", "groups", "token")

    def __init__(self) -> None:
        self.modules: dict[str, str | None] = {}
        self.files: dict[str, str] = {}
        # Files a census passed over by their text alone (ModuleTable.naming, holding): key ->
        # (stamp, the tests it failed: word groups, or a predicate's name; two censuses may pass
        # over one file). Such a file counts as unchanged while its stamp is the same or it fails
        # every one of them still (core/passed_over.py).
        self.passed: dict[str, tuple[str, frozenset[WordGroups | str]]] = {}
        # Folders whose modules were enumerated (real path → ModuleTable.listing digest): a file
        # added there changes what the enumeration sees.
        self.listings: dict[str, str] = {}
        # Enumerations over the whole project's module names (ENUMERATIONS name → digest of the
        # names selected): a module added anywhere that the enumeration selects is a change.
        self.enumerations: dict[str, str] = {}
        # The reads of a census about the whole tree this computation used, by the census's name,
        # held by reference (a `group`: its `token` set): at ten times vLLM the quantizer
        # applications' census reads 36,000 files, and every file using it held a copy, in memory,
        # in its cache entry and in each later run's check of that entry (run/cache.py keeps a
        # group once and checks it once a run).
        self.groups: dict[str, Reads] = {}
        self.token: str | None = None

    def update(self, other: "Reads") -> None:
        self.modules.update(other.modules)
        self.files.update(other.files)
        for key, (stamp, tests) in other.passed.items():
            self.pass_over(key, stamp, tests)
        self.listings.update(other.listings)
        self.enumerations.update(other.enumerations)
        if other.groups:
            self.groups.update(other.groups)

    def all_files(self) -> dict[str, str]:
        """Every file read, those passed over and those of the groups included."""
        if not self.groups and not self.passed:
            return self.files
        out: dict[str, str] = {}
        for group in self.groups.values():
            out.update(group.all_files())
        out.update((key, stamp) for key, (stamp, _tests) in self.passed.items())
        out.update(self.files)
        return out

    def pass_over(self, key: str, stamp: str, tests: frozenset) -> None:
        """Record that a census passed over the file `key` by `tests` (each it failed)."""
        kept = self.passed.get(key)
        pair = (stamp, tests if kept is None or kept[1] == tests else kept[1] | tests)
        if not stamp:
            # Unstamped (a run without a cache stamps nothing): the thousands of files a census
            # passed over by the same tests hold equal pairs, and one tuple serves them all
            # (vLLM 0.27.1, cold: 4,500 of them, 0.3 MiB until the run ends).
            pair = _UNSTAMPED_PAIRS.setdefault(pair, pair)
        self.passed[key] = pair

    def count(self) -> int:
        """How many files were read or passed over (a group's: GROUP_MIN_FILES)."""
        return len(self.files.keys() | self.passed.keys()) if self.passed else len(self.files)


# A census whose building read at least this many files is replayed by reference (Reads.groups).
GROUP_MIN_FILES = 256
_group_tokens = iter(range(1 << 62))


def as_group(reads: Reads) -> Reads:
    """`reads` marked as a group: its token names it in this process and in the workers'
    results sent back (pickled, a copy: the token tells the copies apart from other groups)."""
    reads.token = f"{os.getpid()}-{next(_group_tokens)}"
    return reads


PLATFORM_MODULES = "platform modules"
_PLATFORM_PARTS = frozenset({"platform", "platforms"})

# The enumerations of the project's module names an analysis may depend on, by the name its reads
# record them under (a kept answer is checked by selecting again, so the test lives here, by name):
# the modules one of whose dotted parts is in the set.
ENUMERATIONS = {
    # modules named `platform`/`platforms`, or inside a package of that name (analysis/storage/platforms.py)
    PLATFORM_MODULES: _PLATFORM_PARTS,
}
# Every module of the project and its first file: what a census of the whole table read
# (`ModuleTable.items`, `module_paths`, `naming`, `holding`), recorded as one digest of them all,
# not a lookup per module: a file created (a migration's helper) must be a change to every answer
# that walked the whole table, as a module whose first file moved.
ALL_MODULES = "all modules"


def all_modules_digest(first_keys: dict[str, str]) -> str:
    """The ALL_MODULES digest of module -> the key of its first file: a module whose first file
    moved is a change too (sorted: the eager list and the file-list record need not list the
    modules in one order)."""
    return digests.sha1("\n".join(sorted(f"{m}\t{k}" for m, k in first_keys.items()))
                        .encode("utf-8", "surrogatepass")).hexdigest()[:16]


@record(slots=True)  # one per module a run looks up (vLLM 0.34.0: 4,100)
class ModuleFile:
    """Where a module lives: the path shown for it, its key (real path) and its stamp, once read."""

    path: str
    key: str
    is_package: bool
    stamp: str | None = None


class ModuleFiles:
    """Module name -> the project's files of that name, in discovery order, from a list of
    (display path, key, module name). run/project_files.py answers the same questions from the
    project's file-list record without a tuple per file."""

    def __init__(self, files=()):
        # module -> its first file, and the rare later files of the same name: (path, key, module).
        first: dict[str, tuple] = {}
        self._more: dict[str, list[tuple]] = {}
        for file in files:
            if file[2] in first:
                self._more.setdefault(file[2], []).append(file)
            else:
                first[file[2]] = file
        self._first = first
        # By field (0: display path, 1: key): the firsts' field values sorted, and the discovery
        # position of each, built on the first prefix question. A run asks about one folder per
        # family or platform package, and a tree of ten copies of a project asks ten times as
        # often over ten times as many files: a scan of every module per question grew with the
        # square of the tree.
        self._sorted: dict[int, tuple[list[str], list[int], list[tuple]]] = {}

    def _starting(self, at: int, prefix: str) -> list[tuple]:
        """(module, its first file) of the firsts whose field `at` starts with `prefix`, in
        discovery order: the sorted values that do form one run, found by bisection."""
        by = self._sorted.get(at)
        if by is None:
            firsts = list(self._first.items())
            order = sorted(range(len(firsts)), key=lambda i: firsts[i][1][at])
            by = self._sorted[at] = ([firsts[i][1][at] for i in order], order, firsts)
        values, order, firsts = by
        low = high = bisect.bisect_left(values, prefix)
        while high < len(values) and values[high].startswith(prefix):
            high += 1
        return [firsts[i] for i in sorted(order[low:high])]

    def first(self, module: str) -> tuple | None:
        return self._first.get(module)

    def files_of(self, module: str) -> list[tuple]:
        first = self._first.get(module)
        return [first, *self._more.get(module, ())] if first is not None else []

    def firsts(self):
        """(module, its first file) of every module, in discovery order."""
        return self._first.items()

    def first_keys(self) -> dict[str, str]:
        """Module -> the key of its first file, in discovery order."""
        return {m: f[1] for m, f in self._first.items()}

    def firsts_under_key(self, prefix: str):
        """`firsts` whose file's key starts with `prefix` (in no particular order)."""
        return self._starting(1, prefix)

    def firsts_under_path(self, prefix: str):
        """`firsts` whose file's display path starts with `prefix`, in discovery order."""
        return self._starting(0, prefix)

    def firsts_with_part(self, parts: frozenset[str]):
        """`firsts` of the modules one of whose dotted parts is in `parts`, in discovery order."""
        return [(m, f) for m, f in self._first.items() if not parts.isdisjoint(m.split("."))]


_NO_FILES: list[ModuleFile] = []  # never changed


class ModuleTable:
    """Module name → ModuleHeader, extracted on first lookup.

    `files`: (display path, key, module name) for every file of the project, in discovery order
    (or a `ModuleFiles` that answers for them); the first file of a module name that can be read
    defines it. `load(mf, module)` returns the header (and records the file's stamp in `mf`), or
    None when the file cannot be read. Every lookup is recorded in the open `Reads` frames (see
    QuantizableLayerIndex.reading)."""

    def __init__(self, files=(), load=None, holds=None):
        # ModuleFile objects are made only for the modules looked up.
        # A list of files, or what answers for them (ModuleFiles' methods: run/project_files.py).
        self._names = files if hasattr(files, "firsts_with_part") else ModuleFiles(files)
        self._listings: dict[str, str] = {}
        self._enumerated: dict[str, tuple[list[str], str]] = {}
        self._files: dict[str, list[ModuleFile]] = {}
        self._load = load
        # `holds(mf, groups)`: (does the file's text hold every word of one of the groups, its
        # stamp), or None when that cannot be told without the header (`naming`).
        self._holds = holds
        self._headers: dict[str, ModuleHeader | None] = {}
        self._where: dict[str, ModuleFile | None] = {}
        self.frames: list[Reads] = []
        self._tops: frozenset[str] | None = None

    @classmethod
    def of(cls, headers: list[ModuleHeader]) -> "ModuleTable":
        """A table of headers already extracted (one text, tests): nothing to load."""
        table = cls([(h.path, h.path, h.module) for h in headers])
        for header in headers:
            if header.module not in table._headers:
                table._headers[header.module] = header
                table._where[header.module] = ModuleFile(header.path, header.path, header.is_package, "")
        return table

    def get(self, module: str, default=None) -> ModuleHeader | None:
        header = self._header(module)
        if self.frames:
            module_file = self._where.get(module)
            for frame in self.frames:
                if module_file is None:
                    frame.modules[module] = None
                else:
                    frame.modules[module] = module_file.key
                    frame.files[module_file.key] = module_file.stamp or ""
        return header if header is not None else default

    def __getitem__(self, module: str) -> ModuleHeader:
        header = self.get(module)
        if header is None:
            raise KeyError(module)
        return header

    def __contains__(self, module: str) -> bool:
        return self.get(module) is not None

    def _header(self, module: str) -> ModuleHeader | None:
        try:
            return self._headers[module]
        except KeyError:
            pass
        header, where = None, None
        for module_file in self._module_files(module):
            header = self._load(module_file, module) if self._load is not None else None
            if header is not None:
                where = module_file
                break
        self._headers[module] = header
        self._where[module] = where
        return header

    def _module_files(self, module: str) -> list[ModuleFile]:
        mfs = self._files.get(module)
        if mfs is None:
            files = self._names.files_of(module)
            # (most names looked up are no module of the project: they share one empty list)
            mfs = self._files[module] = [ModuleFile(path, key, path.endswith(("__init__.py", "__init__.pyi")))
                                         for path, key, _ in files] if files else _NO_FILES
        return mfs

    def seed(self, module: str, path: str, extract: Callable[[], ModuleHeader], stamp: str) -> None:
        """The header of a file being analysed, `extract()`ed from the text in hand: used when the
        file defines its module, so that the file is not read again. Extracted only then: with
        every rule on, 975 of vLLM 0.34.0's 999 analysed files had their header read already (the
        storage model's constructions read every module's imports)."""
        if module in self._headers:
            return
        candidates = self._module_files(module)
        if candidates and candidates[0].path == path:
            candidates[0].stamp = stamp
            self._headers[module] = extract()
            self._where[module] = candidates[0]

    def first_key(self, module: str) -> str | None:
        """The key of the first file named `module`, without reading anything: what a recorded
        lookup is checked against (a file that could not be read is a change, to be safe)."""
        first = self._names.first(module)
        return first[1] if first is not None else None

    def path_of(self, module: str) -> str | None:
        """The display path of the first file named `module`, without reading anything."""
        first = self._names.first(module)
        return first[0] if first is not None else None

    def module_paths(self) -> list[tuple[str, str]]:
        """(module, display path) of the first file of every module, in discovery order."""
        self._record_census()
        return [(m, f[0]) for m, f in self._names.firsts()]

    def under(self, folder) -> list[tuple[str, ModuleHeader]]:
        """(module, header) of each module whose file lies under `folder` (a path as this run
        shows files), in discovery order; the enumeration is recorded as a read of the folder."""
        return list(self.iter_under(folder))

    def iter_under(self, folder):
        """`under`, a header at a time (a search that stops early reads only what it needed)."""
        folder = Path(folder)
        prefix = os.path.join(str(folder), "")
        mods = [m for m, f in self._names.firsts_under_path(prefix) if Path(f[0]).is_relative_to(folder)]
        if self.frames:
            real = os.path.realpath(folder)
            digest = self.listing(real)
            for frame in self.frames:
                frame.listings[real] = digest
        for mod in mods:
            header = self.get(mod)
            if header is not None:
                yield mod, header

    def listing(self, real_folder: str) -> str:
        """A digest of the module names and files under a folder (by real path): it changes when
        a file there is added, removed or renamed."""
        digest = self._listings.get(real_folder)
        if digest is None:
            prefix = os.path.join(real_folder, "")
            found = sorted(f"{m}\t{f[1]}" for m, f in self._names.firsts_under_key(prefix))
            digest = self._listings[real_folder] = digests.sha1(
                "\n".join(found).encode("utf-8", "surrogatepass")).hexdigest()[:16]
        return digest

    def enumerate(self, name: str) -> list[str]:
        """The module names of the project that ENUMERATIONS[name] selects, in discovery order,
        without reading anything; recorded as a read (a module added or gone is a change)."""
        names, digest = self._enumeration(name)
        for frame in self.frames:
            frame.enumerations[name] = digest
        return names

    def enumeration(self, name: str) -> str | None:
        """The digest of `enumerate(name)` now (what a recorded enumeration is checked against;
        None for a name this version does not know)."""
        if name == ALL_MODULES:
            return self._all_modules()
        return self._enumeration(name)[1] if name in ENUMERATIONS else None

    def _record_census(self) -> None:
        """A walk over every module is recorded as the ALL_MODULES enumeration: its digest holds
        each module's first file, so the walk records no lookup of a module it passes over by
        its text (at ten times vLLM, 23,600 lookups that each run checked again one by one,
        with the same answer as the digest's one comparison). The frames open when the walk
        starts get it; one a caller opens between two of its steps records what the caller
        computes there, not the walk."""
        if self.frames:
            digest = self._all_modules()
            for frame in self.frames:
                frame.enumerations[ALL_MODULES] = digest

    def _all_modules(self) -> str:
        """The ALL_MODULES digest: the one the file-list record keeps where it holds for this run
        (run/project_files.py: at ten times vLLM, 23,600 files are not listed again for it), else
        made from every module's first file."""
        got = self._enumerated.get(ALL_MODULES)
        if got is None:
            kept = getattr(self._names, "all_modules_digest", None)
            digest = kept() if kept is not None else None
            got = self._enumerated[ALL_MODULES] = ([], digest or all_modules_digest(self._names.first_keys()))
        return got[1]

    def _enumeration(self, name: str) -> tuple[list[str], str]:
        got = self._enumerated.get(name)
        if got is None:
            names = [m for m, _f in self._names.firsts_with_part(ENUMERATIONS[name])]
            # sorted: the eager list and the file-list record need not enumerate in one order
            got = self._enumerated[name] = (names, digests.sha1(
                "\n".join(sorted(names)).encode("utf-8", "surrogatepass")).hexdigest()[:16])
        return got

    # The whole table (the doctor's census of a tree): every module's header, read as needed.
    def items(self):
        self._record_census()
        for module in [m for m, _ in self._names.firsts()]:
            header = self.get(module)
            if header is not None:
                yield module, header

    def naming(self, groups: tuple[tuple[str, ...], ...], skip_tops: frozenset[str] = frozenset()):
        """`items()` without the headers of the files whose text holds no group of `groups` (every
        word of one group), which cannot bind what the caller looks for: a file importing from
        `transformers.integrations` holds both words. Reading a file for its words costs a
        seventh of extracting its header: of vLLM 0.34.0's 3,540 modules, 76 hold the quantizer
        packages' words and 3 import one. A file passed over counts as read all the same (its stamp is
        recorded), so a kept answer is checked against the same files as if every header had been read.
        `skip_tops`: top-level packages whose modules the caller ignores whatever they hold, neither
        read nor yielded (transformers' own files name `transformers.integrations` by the
        hundred: their headers were 3% of a cold check of that tree)."""
        self._record_census()
        passed_by = frozenset((groups,))  # one set for every file passed over
        for module in [m for m, _ in self._names.firsts()]:
            if skip_tops and module.split(".", 1)[0] in skip_tops:
                continue
            mfs: list[ModuleFile] = self._module_files(module) \
                if self._holds is not None and module not in self._headers else []
            told = self._holds(mfs[0], groups) if self._holds is not None and len(mfs) == 1 else None
            if told is not None and not told[0]:
                for frame in self.frames:
                    frame.pass_over(mfs[0].key, told[1], passed_by)
                continue
            header = self.get(module)
            if header is not None:
                yield module, header

    def holding(self, test: Callable[[str], bool], name: str):
        """(module, display path) of each module whose text may pass `test` (the same function
        each time: the run tests it on the text its scan reads, `holds`), without its header:
        `naming` for a caller that reads the text itself (the compiled-code census, which parses
        what `core/compile_text.might_compile` passes: of vLLM 0.34.0's 3,540 modules 687 say `jit`,
        4 pass, and reading the others' headers and texts was half of the census). Every module
        counts as read, as there; one that fails, as passed over by `name`, under which
        core/passed_over.PREDICATES knows `test` (Reads.passed)."""
        self._record_census()
        passed_by = frozenset((name,))
        for module in [m for m, _ in self._names.firsts()]:
            mfs: list[ModuleFile] = self._module_files(module) if self._holds is not None else []
            told = self._holds(mfs[0], test) if len(mfs) == 1 else None
            if told is None:
                header = self.get(module)
                if header is not None:
                    yield module, header.path
                continue
            for frame in self.frames:
                if told[0]:
                    frame.files[mfs[0].key] = told[1]
                else:
                    frame.pass_over(mfs[0].key, told[1], passed_by)
            if told[0]:
                yield module, mfs[0].path

    def read_unread(self, read: Callable[[str], object]):
        """`items()` for a census that needs only a little of each file: (module, header, None)
        for a module whose header is read already (or whose file cannot be told without it: several
        files, a NUL, a read error), else (module, None, read(text)) from its one file's text,
        without extracting its header. Every module counts as read, its file with its stamp, as
        `items()` records it."""
        self._record_census()
        got: list = []

        def keep(text: str) -> bool:
            got.append(read(text))
            return True
        for module in [m for m, _ in self._names.firsts()]:
            mfs: list[ModuleFile] = self._module_files(module) \
                if self._holds is not None and module not in self._headers else []
            got.clear()
            told = self._holds(mfs[0], keep) if len(mfs) == 1 else None
            if told is None:
                header = self.get(module)
                if header is not None:
                    yield module, header, None
                continue
            for frame in self.frames:
                frame.files[mfs[0].key] = told[1]
            yield module, None, got[0]

    def values(self):
        return [h for _, h in self.items()]

    def __iter__(self):
        return (m for m, _ in self.items())

    def __len__(self) -> int:
        return sum(1 for _ in self.items())

    def winners(self) -> dict[str, str]:
        """key → module of every file that could define its module name (the first of each name,
        unread). For the `mentions` search over files that are not read otherwise."""
        return {f[1]: m for m, f in self._names.firsts()}

    def loaded(self) -> list[ModuleHeader]:
        return [h for h in self._headers.values() if h is not None]

    def top_names(self) -> frozenset[str]:
        """The first part of every module's name (`vllm`): what a dotted name resolves under when
        its head is neither imported nor defined where it is used (QuantizableLayerIndex.resolve)."""
        if self._tops is None:
            self._tops = frozenset(m.split(".", 1)[0] for m, _ in self._names.firsts())
        return self._tops


# The part of a qualified name that follows a function holding the class (Python's `__qualname__`).
LOCALS = "<locals>"


def _join(module: str, name: str) -> str:
    return f"{module}.{name}" if module else name


@record(frozen=True)
class ClassVerdict:
    """Whether a class is a quantizable layer (or exempt storage code), with the chain that says so."""

    yes: bool
    chain: tuple[Evidence, ...] = ()


# Parsed files (and censuses) kept for reuse per process: the analysis of vLLM 0.27.1 shares 49
# files; at 64 a ten-times tree peaked at 142 MiB instead of 529 with DTL001/DTL002 (issue #12).
# Since the storage model's dispatch tables no longer keep every analysis's facts alive, 24 holds
# the ten-times default run at 193 MiB instead of 256 for 2,230 parses instead of 2,190
# (benchmarks/README.md).
FACTS_CACHE_ENTRIES = 24
# Beside them, the facts of files built again after that list dropped them, in a recently-used
# list of their own: a base file that folders far apart share is not rebuilt for each (vLLM 0.34.0:
# 100 of 342 builds were rebuilds, linear.py seven times). Measured on vLLM 0.34.0, cold `-j 1`:
# | entries | default rules: instructions, peak RSS | `--select ALL` (whole trees kept) |
# | 1       | 25.7 G, 67.5 MiB                       | 108.4 G, 121 MiB                    |
# | 8       | 25.4 G, 68.7 MiB                       | 106.8 G, 126 MiB                    |
# | 24      | 25.1 G, 73.8 MiB                       | 105.0 G, 143 MiB                    |
# Eight take half of what 24 save for a quarter of their memory.
KEPT_FACTS_ENTRIES = 8


class QuantizableLayerIndex:
    """Class → resolved bases across the scanned modules; answers `is this class quantizable?`."""

    # Set by a run that has them, read with getattr (absent otherwise): the answers kept on disk
    # (run/facts_cache.FactsStore: `stored_facts`), and where an engine outside the tree is chosen from.
    disk_memo: object
    engine_project: tuple

    def __init__(self, headers: "list[ModuleHeader] | ModuleTable", quantizable: list[str], exempt: list[str],
                 not_quantizable: list[str] | tuple[str, ...] = ()):
        self.modules: ModuleTable = headers if isinstance(headers, ModuleTable) else ModuleTable.of(headers)
        self.quantizable = set(quantizable)
        self.exempt = set(exempt)
        self._not_quantizable = set(not_quantizable)
        # Preset names matched by simple name inside their own top package, for re-export paths
        # (`from vllm.model_executor.layers import X`) when that package is not in the scan.
        self._by_simple: dict[tuple[str, str], str] = {}
        for q in self.quantizable | self.exempt | self._not_quantizable:
            self._by_simple.setdefault((q.split(".")[0], q.rsplit(".", 1)[-1]), q)
        self._memo: dict[tuple[str, str], ClassVerdict] = {}
        # Facts of files parsed for their class bodies (facts.ProjectFacts), shared by every file
        # analysed against this index and gone with it, each with what building it read.
        self.facts_cache: dict = {}
        # Facts built again after the recently-used list dropped them (a base file that folders
        # far apart share: vLLM 0.34.0's linear.py was built seven times), kept apart from it.
        self.facts_kept: dict = {}
        self._dropped: set = set()  # keys the recently-used list dropped
        self.census_cache: dict = {}
        self._memo_reads: dict[tuple[str, str], Reads] = {}
        # Facts holding a tree parsed from a class's or a function's own text (class_facts:
        # ClassFacts, TextFunctions), weakly: the recently-used lists decide how long they live.
        # Each notes the last analysis that asked for it (`used`, a `facts_round`).
        self._fresh: list[weakref.ref] = []
        self.facts_round = 0

    # ---- what a computation read ---------------------------------------------------------
    def reading(self, alone: bool = False) -> "_Frame":
        """`with index.reading() as reads:` collects every module lookup and file read made
        inside, including those that memoised results made when they were first computed.
        `alone`: in `reads` only, not in the frames open around it (they get it as replayed)."""
        return _Frame(self.modules, alone)

    def replay(self, reads: Reads, group: str | None = None) -> None:
        """A memoised result is reused: what computing it read counts as read now (`group`: by
        reference, under that name)."""
        if group is not None:
            for frame in self.modules.frames:
                frame.groups[group] = reads
            return
        for frame in self.modules.frames:
            frame.update(reads)

    def stored_facts(self, key, build):
        """(value, reads) of `build()`, kept across runs where the run has a store on disk
        (`disk_memo`, run/facts_cache.py: it keeps the kinds it knows): a kept answer whose reads
        are unchanged is replayed into the open frames, else `build()` runs, its reads recorded
        there, and is kept."""
        store = getattr(self, "disk_memo", None)
        kept = store.get(key) if store is not None else None
        if kept is not None:  # (value, reads): the value itself may be None
            self.replay(kept[1])
            return kept
        with self.reading() as reads:
            value = build()
        if store is not None:
            store.put(key, value, reads)
        return value, reads

    def note_fresh(self, facts) -> None:
        """`facts` holds a tree `compact_facts` may let go (its `compact()`)."""
        self._fresh.append(weakref.ref(facts))

    def compact_facts(self) -> None:
        """A file's analysis is over: the facts noted (`note_fresh`) that it did not ask for let
        their trees go; those it asked for are kept through the next analysis, which in a
        folder's run most often asks again (let go at once, a cold check of vLLM 0.27.1 parsed
        37,700 characters again instead of 20,000: +0.18% instructions, for no less memory)."""
        done, self.facts_round = self.facts_round, self.facts_round + 1
        fresh, self._fresh = self._fresh, []
        for ref in fresh:
            facts = ref()
            if facts is None:
                continue
            if facts.used == done:
                self._fresh.append(ref)
            else:
                facts.compact()

    def kept_facts(self, key):
        """What `cached_facts(key, ...)` holds now (its reads replayed), else None; builds nothing
        and leaves the recently-used order as it is."""
        hit = self.facts_kept.get(key) or self.facts_cache.get(key)
        if hit is None:
            return None
        self.replay(hit[1])
        return hit[0]

    def cached_facts(self, key, build, census: bool = False):
        """`build()` once per key (a file's facts, a census), shared by every analysis against
        this index; the reads made by building it are replayed for every later user. The least
        recently used entries beyond FACTS_CACHE_ENTRIES are dropped (and rebuilt if asked for
        again): files are analysed in path order, so what one folder's files share is used
        together, and a tree ten times larger must not hold ten times the parsed files.
        `census`: a small answer kept for the run, outside the recently-used list: one about the
        whole tree (in that list the files analysed between two of its users pushed it out, and
        vLLM 0.34.0 built the quantizer applications' census of 3,540 modules twice), or a
        file's text fact that files far apart ask for (layers.LayerResolver._may_store_weight)."""
        cache = self.census_cache if census else self.facts_cache
        if census:
            hit = cache.get(key)
            if hit is None:
                # Alone: the frames open around it get it replayed below, by reference for a
                # group; recorded in them as well, the first file to ask (in pre-commit, the only
                # one) kept every file of the census twice in its entry, and checked each twice.
                with self.reading(alone=True) as reads:
                    value = build()
                # A census about the whole tree is replayed by reference (Reads.groups).
                group = repr(key) if reads.count() >= GROUP_MIN_FILES else None
                hit = cache[key] = (value, as_group(reads) if group else reads, group)
            self.replay(hit[1], hit[2])
            return hit[0]
        kept = self.facts_kept
        hit = kept.pop(key, None)
        if hit is not None:
            cache = kept
        else:
            hit = cache.pop(key, None)
        if hit is None:
            with self.reading() as reads:
                facts = build()
            hit = (facts, reads)
            if key in self._dropped:  # needed again after it was dropped: kept apart
                cache = kept
            while len(cache) >= (KEPT_FACTS_ENTRIES if cache is kept else FACTS_CACHE_ENTRIES):
                dropped = next(iter(cache))
                del cache[dropped]
                self._dropped.add(dropped)
        cache[key] = hit  # now the most recently used
        self.replay(hit[1])
        return hit[0]

    # ---- name resolution ---------------------------------------------------------------
    def resolve(self, module: str, name: str, local_imports: dict[str, str] | None = None) -> str:
        """Qualified, canonical name of a dotted name used in `module`."""
        head, _, rest = name.partition(".")
        header = self.modules.get(module)
        imports = local_imports if local_imports is not None else (header.imports if header else {})
        if header and head in header.classes and head not in imports:
            q = _join(module, head)
        elif head in imports:
            q = imports[head]
        elif header and head in header.classes:
            q = _join(module, head)
        else:
            q = head
        if rest:
            q = f"{q}.{rest}"
        return self.canonical(q)

    def canonical(self, qualname: str) -> str:
        """Follow re-exports (`pkg/__init__.py: from .linear import X`) to the defining module."""
        if LOCALS in qualname:  # a function's own class: nothing re-exports it
            return qualname
        for _ in range(12):
            mod, _, name = qualname.rpartition(".")
            header = self.modules.get(mod)
            if header is None or name in header.classes or name not in header.imports:
                return qualname
            nxt = header.imports[name]
            if nxt == qualname:
                return qualname
            qualname = nxt
        return qualname

    def class_location(self, qualname: str) -> tuple[ModuleHeader, str] | None:
        """(the defining module's header, the class's key in its `classes`), or None."""
        if LOCALS not in qualname:
            mod, _, name = qualname.rpartition(".")
            header = self.modules.get(mod)
            if header and name in header.classes:
                return header, name
            if header is not None or not mod:
                return None
        return self._nested_location(qualname)

    def _nested_location(self, qualname: str) -> tuple[ModuleHeader, str] | None:
        """A class defined in a function (`module.outer.<locals>.Inner`, the qualified name
        function_walk gives its methods) or in a class body (`module.Outer.Inner`): the module is
        the longest prefix the project has a file for, and the class is its header's only class
        statement of that name (ModuleHeader.nested). Only module names the project has are
        looked up (and so recorded as read): a failed lookup of another dotted name costs a
        dictionary probe per prefix."""
        parts = qualname.split(".")
        name = parts[-1]
        # A `<locals>` name's module ends before the first function holding locals; a class
        # body's name is tried from the longest prefix short of the class itself.
        stop = parts.index(LOCALS) - 1 if LOCALS in parts else len(parts) - 2
        for end in range(stop, -1, -1):  # down to "": the module of a text checked alone (api.check_source)
            mod = ".".join(parts[:end])
            if self.modules.path_of(mod) is None:
                continue
            header = self.modules.get(mod)
            inner = parts[end:-1]
            # a class body's path must name classes of the module; a function's is not checked
            if header is not None and name in header.nested and (
                    LOCALS in parts or all(part in header.classes for part in inner)):
                return header, name
            return None
        return None

    def bases(self, qualname: str) -> list[str]:
        loc = self.class_location(qualname)
        if loc is None:
            return []
        header, name = loc
        return [self.resolve(header.module, b) for b in header.classes[name][0]]

    def mro(self, qualname: str) -> list[str]:
        """The class and all its resolved ancestors, nearest first (a linearisation good enough for attribute facts)."""
        out: list[str] = []
        todo = [qualname]
        while todo:
            q = todo.pop(0)
            if q in out or len(out) > 64:
                continue
            out.append(q)
            todo.extend(self.bases(q))
        return out

    # ---- verdicts ----------------------------------------------------------------------
    def not_quantizable(self, qualname: str) -> bool:
        """Configured as never holding a repackable weight (embeddings), or a subclass of one."""
        return bool(self._not_quantizable) and self._verdict(qualname, "not_quantizable").yes

    def defines(self, qualname: str) -> bool:
        """Does the project define this class (directly or through re-exports)?"""
        return self.class_location(self.canonical(qualname)) is not None

    def mentions(self, qualname: str) -> bool:
        """Does the project define this class, or does a module whose header was read import it
        by this name? (The pipeline reads the headers of the files whose text names it.)"""
        if self.defines(qualname):
            return True
        return any(qualname in h.imports.values() for h in self.modules.loaded())

    def configured(self, qualname: str, kind: str = "quantizable") -> Evidence | None:
        """Evidence that this very class is named by configuration (not one of its bases)."""
        roots = {"quantizable": self.quantizable, "exempt": self.exempt, "not_quantizable": self._not_quantizable}[kind]
        short = qualname.rsplit(".", 1)[-1]
        if qualname in roots:
            return self._evidence(qualname, f"`{short}` is a configured {kind} class")
        match = self._by_simple.get((qualname.split(".")[0], short))
        if self.class_location(qualname) is None and match in roots:
            return Evidence(f"`{short}` matches configured {kind} class `{match}` by name", "", 0)
        return None

    def quantizable_verdict(self, qualname: str) -> ClassVerdict:
        return self._verdict(qualname, "quantizable")

    def exempt_verdict(self, qualname: str) -> ClassVerdict:
        return self._verdict(qualname, "exempt")

    def _verdict(self, qualname: str, kind: str, depth: int = 0) -> ClassVerdict:
        key = (qualname, kind)
        if key in self._memo:
            reads = self._memo_reads.get(key)
            if reads is not None:
                self.replay(reads)
            return self._memo[key]
        self._memo[key] = ClassVerdict(False)  # cycle guard
        with self.reading() as reads:
            verdict = self._compute_verdict(qualname, kind, depth)
        self._memo[key] = verdict
        self._memo_reads[key] = reads
        return verdict

    def _compute_verdict(self, qualname: str, kind: str, depth: int) -> ClassVerdict:
        roots = {"quantizable": self.quantizable, "exempt": self.exempt, "not_quantizable": self._not_quantizable}[kind]
        verdict = ClassVerdict(False)
        short = qualname.rsplit(".", 1)[-1]
        if qualname in roots:
            verdict = ClassVerdict(True, (self._evidence(qualname, f"`{short}` is a configured {kind} class"),))
        elif self.class_location(qualname) is None and self._by_simple.get((qualname.split(".")[0], short)) in roots:
            match = self._by_simple[(qualname.split(".")[0], short)]
            verdict = ClassVerdict(
                True, (Evidence(f"`{short}` matches configured {kind} class `{match}` by name", "", 0),))
        elif depth < 32:
            for base in self.bases(qualname):
                sub = self._verdict(base, kind, depth + 1)
                if sub.yes:
                    step = self._evidence(qualname, f"`{short}` subclasses `{base.rsplit('.', 1)[-1]}`")
                    verdict = ClassVerdict(True, (step, *sub.chain))
                    break
        return verdict

    def _evidence(self, qualname: str, message: str) -> Evidence:
        loc = self.class_location(qualname)
        if loc is None:
            return Evidence(message, "", 0)
        header, name = loc
        return Evidence(message, header.path, header.classes[name][1])


class _Frame:
    def __init__(self, table: ModuleTable, alone: bool = False):
        self._table = table
        self.reads = Reads()
        self._outer: list[Reads] | None = [] if alone else None

    def __enter__(self) -> Reads:
        if self._outer is not None:  # the open frames hear nothing until this one closes
            self._outer[:] = self._table.frames
            self._table.frames[:] = []
        self._table.frames.append(self.reads)
        return self.reads

    def __exit__(self, *exc) -> None:
        frames = self._table.frames
        if frames and frames[-1] is self.reads:
            frames.pop()
        else:
            frames[:] = [f for f in frames if f is not self.reads]
        if self._outer is not None:
            frames[:0] = self._outer
