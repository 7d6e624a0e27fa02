"""The project-wide class index: which classes are quantizable layers, resolved across files.

Building it must not cost a parse of every file (DESIGN.md §7: a full libcst parse of vLLM takes
minutes, even `ast.parse` seconds). A class hierarchy needs only two kinds of statement, `import`
and `class` headers, so `extract_header` finds those lines with a regex, cuts each logical
statement out by bracket counting, and parses just those snippets. Headers are cached per file.
"""

from __future__ import annotations

import ast
import hashlib
import re
import textwrap
from dataclasses import dataclass, field

from .findings import Evidence
from .source import iter_code

_STMT = re.compile(r"^[ \t]*(?:class|from|import)\b", re.M)


@dataclass
class ModuleHeader:
    """What one module binds by import and which classes it defines with which bases."""

    module: str
    path: str
    is_package: bool
    imports: dict[str, str] = field(default_factory=dict)  # local name -> qualified target
    classes: dict[str, tuple[list[str], int]] = field(default_factory=dict)  # name -> (bases, line)
    # Top-level functions that may be input-dtype helpers (their text reads a weight's dtype or
    # `params_dtype` and returns): name -> hash of that text. Other files' findings depend on what
    # such a function decides, so the hash is part of the header (and of every cached finding's key).
    functions: dict[str, str] = field(default_factory=dict)

    def to_dict(self) -> dict:
        return {
            "module": self.module,
            "path": self.path,
            "is_package": self.is_package,
            "imports": self.imports,
            "classes": {k: [v[0], v[1]] for k, v in self.classes.items()},
            "functions": self.functions,
        }

    @classmethod
    def from_dict(cls, d: dict) -> "ModuleHeader":
        return cls(
            d["module"], d["path"], d["is_package"], dict(d["imports"]),
            {k: (list(v[0]), v[1]) for k, v in d["classes"].items()},
            dict(d.get("functions", {})),
        )


_TOP_DEF = re.compile(r"^(?:async[ \t]+)?def[ \t]+(\w+)[ \t]*\(", re.M)
# The next line that starts a top-level statement: not indented, not a comment, not the closing
# bracket of a signature black put at column 0.
_TOP_NEXT = re.compile(r"\n(?=[^\s#)\]}])")


def dtype_functions(text: str) -> dict[str, str]:
    """Top-level functions whose text could make them input-dtype helpers, without a parse:
    name -> short hash of the function's text."""
    if "dtype" not in text:
        return {}
    out = {}
    for m in _TOP_DEF.finditer(text):
        end = _TOP_NEXT.search(text, m.end())
        body = text[m.start(): end.start() if end else len(text)]
        if "dtype" in body and "return" in body and ("weight" in body or "params_dtype" in body):
            out[m.group(1)] = hashlib.sha1(body.encode("utf-8", "surrogatepass")).hexdigest()[:12]
    return out


def extract_header(text: str, module: str, path: str, is_package: bool) -> ModuleHeader:
    header = ModuleHeader(module, path, is_package, functions=dtype_functions(text))
    snippets = []
    line_no, last = 1, 0
    for m in _STMT.finditer(text):
        start = m.start()
        line_no += text.count("\n", last, start)
        last = start
        snippet = _logical_statement(text, start)
        if not _fast_path(snippet, line_no, header):
            snippets.append((line_no, textwrap.dedent(snippet)))
    if not snippets:
        return header
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
    return header


# A snippet that does not parse: not code (a docstring line), null bytes, absurd nesting.
_UNPARSABLE = (SyntaxError, ValueError, RecursionError, MemoryError)
# Matched against stripped snippets. Linear by construction: no two adjacent parts can match
# the same characters (a group after `\s+` starts with a non-space), so a long line that
# fails at its end is not retried split by split (`from a import b` + 200,000 spaces + `;`).
_SIMPLE_FROM = re.compile(r"from\s+(\.*)(\w[\w.]*)?\s+import\s+([\w,][\w\s,]*)$")
_SIMPLE_IMPORT = re.compile(r"import\s+([\w.,][\w.\s,]*)$")
_SIMPLE_CLASS = re.compile(r"class\s+(\w+)(?:\s*\(([\w.\s,]*)\))?\s*:\s*pass$")
_AS = re.compile(r"^([\w.]+)(?:\s+as\s+(\w+))?$")


def _fast_path(snippet: str, line: int, header: ModuleHeader) -> bool:
    """Record a one-line import or a plain class header without parsing; False: needs ast."""
    snippet = snippet.strip()
    m = _SIMPLE_FROM.match(snippet)
    if m:
        base = resolve_relative(header.module, header.is_package, m.group(2) or None, len(m.group(1)))
        if base is None:
            return True
        for part in m.group(3).split(","):
            a = _AS.match(part.strip())
            if a is None or "." in a.group(1):
                return False
            header.imports[a.group(2) or a.group(1)] = f"{base}.{a.group(1)}" if base else a.group(1)
        return True
    m = _SIMPLE_IMPORT.match(snippet)
    if m:
        for part in m.group(1).split(","):
            a = _AS.match(part.strip())
            if a is None:
                return False
            if a.group(2):
                header.imports[a.group(2)] = a.group(1)
            else:
                head = a.group(1).split(".")[0]
                header.imports.setdefault(head, head)
        return True
    m = _SIMPLE_CLASS.match(snippet)
    if m:
        bases = [b.strip() for b in (m.group(2) or "").split(",") if b.strip()]
        header.classes.setdefault(m.group(1), (bases, line))
        return True
    return False


def _logical_statement(text: str, start: int) -> str:
    """The statement at start: up to the end of line at bracket depth 0 (class: up to its colon)."""
    end = text.find("\n", start)
    line = text[start:] if end < 0 else text[start:end]
    stripped = line.strip()
    is_class = stripped.startswith("class")
    # Fast path: one physical line with balanced brackets and no string or comment.
    if not any(c in line for c in "\"'#\\") and line.count("(") == line.count(")") and "[" not in line:
        if not is_class:
            return line + "\n"
        if stripped.endswith(":"):
            return line + " pass\n"
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
        for a in node.names:
            if a.asname:
                into[a.asname] = a.name
            else:
                head = a.name.split(".")[0]
                into.setdefault(head, head)
    elif isinstance(node, ast.ImportFrom):
        base = resolve_relative(module, is_package, node.module, node.level)
        if base is None:
            return
        for a in node.names:
            if a.name == "*":
                continue
            into[a.asname or a.name] = f"{base}.{a.name}" if base else a.name


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


def _join(module: str, name: str) -> str:
    return f"{module}.{name}" if module else name


@dataclass(frozen=True)
class ClassVerdict:
    """Whether a class is a quantizable layer (or exempt storage code), with the chain that says so."""

    yes: bool
    chain: tuple[Evidence, ...] = ()


class QuantizableLayerIndex:
    """Class → resolved bases across the scanned modules; answers `is this class quantizable?`."""

    def __init__(self, headers: list[ModuleHeader], quantizable: list[str], exempt: list[str],
                 not_quantizable: list[str] = ()):
        self.modules: dict[str, ModuleHeader] = {}
        for h in headers:
            self.modules.setdefault(h.module, h)
        self.quantizable = set(quantizable)
        self.exempt = set(exempt)
        self._not_quantizable = set(not_quantizable)
        # Preset names matched by simple name inside their own top package, for re-export paths
        # (`from vllm.model_executor.layers import X`) when that package is not in the scan.
        self._by_simple = {}
        for q in self.quantizable | self.exempt | self._not_quantizable:
            self._by_simple.setdefault((q.split(".")[0], q.rsplit(".", 1)[-1]), q)
        self._memo: dict[tuple[str, str], ClassVerdict] = {}
        # Facts of files parsed for their class bodies (facts.ProjectFacts), shared by every file
        # analysed against this index and gone with it.
        self.facts_cache: dict = {}
        self._imported: set[str] | None = None

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
        mod, _, name = qualname.rpartition(".")
        header = self.modules.get(mod)
        if header and name in header.classes:
            return header, name
        return None

    def bases(self, qualname: str) -> list[str]:
        loc = self.class_location(qualname)
        if loc is None:
            return []
        header, name = loc
        return [self.resolve(header.module, b) for b in header.classes[name][0]]

    def mro(self, qualname: str) -> list[str]:
        """The class and all its resolved ancestors, nearest first (a linearisation good enough for attribute facts)."""
        out, todo = [], [qualname]
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

    def mentions(self, qualname: str) -> bool:
        """Does the scanned tree define this class, or import it by this name?"""
        if self.class_location(self.canonical(qualname)) is not None:
            return True
        if self._imported is None:
            self._imported = {v for h in self.modules.values() for v in h.imports.values()}
        return qualname in self._imported

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
            return self._memo[key]
        self._memo[key] = ClassVerdict(False)  # cycle guard
        roots = {"quantizable": self.quantizable, "exempt": self.exempt, "not_quantizable": self._not_quantizable}[kind]
        verdict = ClassVerdict(False)
        short = qualname.rsplit(".", 1)[-1]
        if qualname in roots:
            verdict = ClassVerdict(True, (self._evidence(qualname, f"`{short}` is a configured {kind} class"),))
        elif self.class_location(qualname) is None and self._by_simple.get((qualname.split(".")[0], short)) in roots:
            match = self._by_simple[(qualname.split(".")[0], short)]
            verdict = ClassVerdict(True, (Evidence(f"`{short}` matches configured {kind} class `{match}` by name", "", 0),))
        elif depth < 32:
            for base in self.bases(qualname):
                sub = self._verdict(base, kind, depth + 1)
                if sub.yes:
                    step = self._evidence(qualname, f"`{short}` subclasses `{base.rsplit('.', 1)[-1]}`")
                    verdict = ClassVerdict(True, (step, *sub.chain))
                    break
        self._memo[key] = verdict
        return verdict

    def _evidence(self, qualname: str, message: str) -> Evidence:
        loc = self.class_location(qualname)
        if loc is None:
            return Evidence(message, "", 0)
        header, name = loc
        return Evidence(message, header.path, header.classes[name][1])
