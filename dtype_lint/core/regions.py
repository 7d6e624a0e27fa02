"""Parse only what can hold a site: a file's text with the bodies of the functions no rule reads
blanked, line and column numbers kept.

Most of a file that passes the prefilter is code no rule looks at: the functions without a site
line (a line a rule's own pattern matches) whose bodies give no class fact. `reduce()` replaces
each such outermost function's body by one `pass` and empty lines, so every kept node has the
line and column it has in the whole file (findings, fixes and suppressions are unchanged), and
`ast.parse` of the result costs about what the kept lines cost.

What is kept whole:
- every module-level and class-level statement other than a `def` (imports, assignments,
  `if TYPE_CHECKING:`, guards, class statements, decorators, signatures);
- a function or method holding a line a rule's pattern matches (`keep_lines`);
- a method the class facts read (`class_facts.visit_method`): one assigning an attribute of its
  first parameter (`self.x = ...`, or filling one: `.append(`, `add_module(`, `setattr(`,
  `x["k"] = `), naming `quant_method`/`create_weights`/`__init__` (a quant
  method obtained, weights created, a base's `__init__` called), testing `isinstance`/`issubclass`
  of one of its other parameters, or a short body that may be a getter (one `return` after an
  optional docstring). A `def` at column 0 is not a method: only the site lines keep it.
- with `lazy_classes` (analysed files), none of that in a top-level class without a site line:
  its whole body is blanked (one `pass` and blank lines, from its first body line to its last;
  `Reduced.classes`, checked like a blanked function), its facts are read from the class's own
  text when an analysis asks for them, and what reads a file's functions from the tree reads
  such a class back where it must (rule.RuleFacts.blanked_class_functions: the callers of a
  function, a finding's scope; what a file compiles is read from its whole tree). On vLLM 0.34.0
  this was a tenth of the parsed text (signatures, short methods, class attributes): 1.3 G of a
  cold check's 18.6 G; on Transformers 5.25.0 4.4 G of 29.5 G. A class whose body cannot be cut
  (unbalanced brackets or triple quotes, a backslash continuation) has its methods blanked one by
  one instead.

Functions are found by text (a `def` line, its header up to the `:` that ends it, the body up to
the next code line indented no deeper), so a body is blanked only when that is certain: its
brackets and triple quotes balance, no line continues with a backslash, the signature holds no
string with a quote or backslash in it, and the body has at least MIN_BLANKED_LINES lines. The parse of the
reduced text is then checked (`check()`): every blanked `def` must be a function whose body is
the one `pass` put there. Anything else (a `def` inside a string, a syntax error anywhere) sends
the caller back to the whole file, which also makes a real syntax error in kept code DTL900.

A file read only for its class facts (not analysed) is not parsed as a file at all when every
class statement in it is plainly top-level (`class_regions()`): each class is parsed from its own
text, reduced the same way, below blank lines that keep its line numbers, when its facts are
first asked for (class_facts.build_class_file_facts, trees.parse_class); its functions and the
module tree only if something asks for them. A module-level function another file's analysis
follows a call into is read the same way (`function_region()`, trees.parse_function): its own
lines, decorators to the end of its body, when text alone can tell which `def` the module's tree
would give; else the module is parsed.

A syntax error inside a blanked body (or, in a file read for its class facts, outside the classes
asked about) is not seen: that code cannot hold a site, and the project's other linters (and
Python) report it, as they do for files the prefilter passes over.

What may read a blanked function is guarded where it is looked up: `ClassFacts.methods` and
`FileFacts.functions` are `Defs` maps, which hand out the real function when a blanked one is
read (a value flow followed into a method or a function): its own lines are parsed then, where
they stand (trees.whole_function). The fix planner's walk of every name of a module reads the
whole tree unless the blanked text cannot hold the names it decides on
(trees.whole_unless_absent).
"""

from __future__ import annotations

import ast
import re
from bisect import bisect_left
from dataclasses import field
from functools import lru_cache

from dtype_lint.core.records import record
from dtype_lint.core.source import split_lines  # noqa: F401 - trees and tests read it here
from dtype_lint.core.text_facts import POSSESSIVE

TYPE_CHECKING = False  # typing.TYPE_CHECKING without importing typing (the scan's path, as core/prefilter.py)
if TYPE_CHECKING:
    from typing import Any, Iterable

# Which rules may run on a reduced tree is each rule's declaration (`regions = "sites"`: it reads
# the candidate functions (site lines), the class facts, module-level statements, and functions
# reached through `Defs`, guarded); a rule that walks the whole tree (file guards, module globals,
# helper facts) keeps the default "whole-file", and a run enabling it parses every file whole
# (dtype_lint/core/rule_registry.py, run/file_analysis.py's `reducible`).
# A blanked body must save something: shorter bodies are kept (a `pass` costs about a line).
MIN_BLANKED_LINES = 4
# A body of at most this many lines with a `return` is kept: it may be a getter the class facts read.
GETTER_LINES = 15

_DEF = re.compile(r"def[ \t]+\w")  # matched where `str.find` finds the word; the line is checked
_DEF_LINE = re.compile(r"([ \t\f]*)(?:async[ \t]+)?def[ \t]")
_FIRST_PARAM = re.compile(r"def[ \t]+\w+[ \t]*\([ \t\r\n]*(\w+)")
# `isinstance(param, ...)`: a storage method's dispatch on the class of a parameter it is given.
# (The word boundary is checked behind a literal, so that the search skips ahead to `is`.)
_DISPATCH = re.compile(r"is(?<!\wis)(?:instance|subclass)\(\s*(\w+)\s*,")
# A line starting `return`: the first line matched, the others searched from their line feed
# (a `^` under MULTILINE is tried at every character; text_facts.LineStart).
_RETURN_FIRST = re.compile(r"[ \t]*return\b")
_RETURN_AFTER = re.compile(r"\n[ \t]*return\b")


BLANKED = "_dtype_lint_blanked"  # set on a blanked FunctionDef node: the last line of its real body


@record
class Reduced:
    """A file's text with the bodies of the functions no rule reads blanked, and where they were."""
    text: str
    blanked: list[tuple[int, int, int]] = field(default_factory=list)  # (def, `pass`, last body line), 1-based
    kept_chars: int = 0
    removed: list[tuple[int, int]] = field(default_factory=list)  # offsets of the blanked bodies' text
    lazy: list = field(default_factory=list)  # ClassRegion of each class whose facts its own text gives
    # (class line, `pass` line, last body line) of each class whose whole body was blanked
    classes: list[tuple[int, int, int]] = field(default_factory=list)


def reduce(text: str, keep_lines: list[tuple[int, int]] | None = None, lazy_classes: bool = False) -> Reduced | None:
    """The text with the bodies of outermost functions that hold no line of `keep_lines`
    (inclusive (first, last) spans, 1-based) and give no class fact replaced by `pass`;
    None when nothing would be blanked. Offsets, not lines: the scan runs on every analysed file.
    With `lazy_classes`, the methods of a top-level class that holds no kept line are blanked
    whatever the class facts read (`Reduced.lazy`: its facts are then read from the class's own
    text, parsed when they are first asked for)."""
    if "def" not in text or "\r" in text:
        return None  # (a text with CR line ends is parsed whole: they are rare)
    keep = sorted(keep_lines or ())
    lazy: list[ClassRegion] = []
    if lazy_classes:
        regions = class_regions(text) or []
        lazy = [region for i, region in enumerate(regions)
                if not _region_kept(keep, text, region, regions[i + 1] if i + 1 < len(regions) else None)]
    lazy_at = 0  # the next lazy class, by offset
    pieces: list[str] = []
    blanked: list[tuple[int, int, int]] = []
    prev = 0  # the text up to here is in `pieces`
    line, line_off = 1, 0  # the line number at offset line_off
    pos = 0  # where the next `def` is looked for: past the previous outermost function's body
    removed = 0
    removed_spans: list[tuple[int, int]] = []
    # Searched from the end of each body, not found in it and passed over (defs in it are nested);
    # the word by `str.find`, which skips ahead faster than the regex engine's search for it.
    classes: list[tuple[int, int, int]] = []
    tried = -1  # the last lazy class whose whole body was tried
    while (pos := text.find("def", pos)) >= 0:
        found = _DEF.match(text, pos)
        if found is None:
            pos += 1
            continue
        pos = found.end()
        while lazy_at < len(lazy) and lazy[lazy_at].end <= found.start():
            lazy_at += 1
        if lazy_at < len(lazy) and tried < lazy_at and lazy[lazy_at].body <= found.start():
            # The first `def` of a class no rule reads: its whole body goes (methods, class
            # attributes, short methods alike); its facts come from its own text.
            tried = lazy_at
            region = lazy[lazy_at]
            if _balanced(text, region.body, region.end):
                line += text.count("\n", line_off, region.body)
                newlines = text.count("\n", region.body, region.end)
                pieces.append(text[prev:region.body])
                pieces.append(" pass" + "\n" * newlines)
                removed += (region.end - region.body) - (5 + newlines)
                removed_spans.append((region.body, region.end))
                classes.append((region.class_line, line, line + newlines - (text[region.end - 1] == "\n")))
                prev = pos = line_off = region.end
                line += newlines
                continue
        start = text.rfind("\n", 0, found.start()) + 1
        match = _DEF_LINE.match(text, start)
        if match is None or match.end() != found.start() + 4:
            continue  # not a `def` statement's line (`undefined`, a string, `x = 1; def ...`)
        line += text.count("\n", line_off, start)  # (from the end of the last body counted)
        line_off = start
        indent = match.group(1)
        header = _header_end(text, start)
        if header is None:
            continue
        body_start, header_lines = header
        pos = body_end = _body_end(text, body_start, len(indent))
        code_end = _code_end(text, body_start, body_end)
        marks = _marks(text, start, code_end)  # its brackets for _balanced, and its line ends
        newlines = marks.count(b"\n") - header_lines
        body_lines = newlines + (code_end == body_start or text[code_end - 1] != "\n")
        body_line = line + header_lines
        line_off = code_end  # the body's line ends are not counted again for the next `def`
        line = body_line + newlines
        if body_lines < MIN_BLANKED_LINES:
            continue
        start_line = body_line - header_lines
        last_line = body_line + body_lines - 1
        if _spans_kept(keep, start_line, last_line):
            continue
        while lazy_at < len(lazy) and lazy[lazy_at].end <= start:
            lazy_at += 1
        in_lazy = lazy_at < len(lazy) and lazy[lazy_at].start <= start
        if indent and not in_lazy and _class_fact(text[body_start:code_end], text[start:body_start], body_lines - 1):
            continue  # maybe a method: the class facts read it (a `def` at column 0 is not one)
        if not _balanced(text, start, code_end, marks):
            continue
        pieces.append(text[prev:body_start])
        pieces.append(f"{indent} pass" + "\n" * newlines)
        removed += (code_end - body_start) - (len(indent) + 5 + newlines)
        prev = code_end
        blanked.append((start_line, body_line, last_line))
        removed_spans.append((body_start, code_end))
    if not blanked and not classes:
        return None
    if lazy:  # each class with a blanked body in it (the bodies are in order: a bisection, not a scan)
        starts = [start for start, _ in removed_spans]
        lazy = [region for region in lazy
                if (i := bisect_left(starts, region.start)) < len(starts) and starts[i] < region.end]
    pieces.append(text[prev:])
    return Reduced("".join(pieces), blanked, len(text) - removed, removed_spans, lazy, classes)


def _class_fact(body: str, header: str, lines: int) -> bool:
    """Could class_facts.visit_method read something in this method body?"""
    # The words it reads (see the module docstring), each looked for by `in` (no generator).
    if "quant_method" in body or "create_weights" in body or "__init__" in body \
            or (lines < GETTER_LINES and _may_be_getter(body)):
        return True
    first = _FIRST_PARAM.search(header)
    if first is None:
        return True
    self_name = first.group(1)
    if _self_fact(self_name).search(body):
        return True
    if "setattr(" in body and _set_self(self_name).search(body):  # `setattr(self, "x", A(...))`
        return True
    if "isinstance" not in body and "issubclass" not in body:
        return False
    params = set(_WORD.findall(header, first.end()))  # `isinstance(param, ...)` of a parameter after `self`
    return any(m.group(1) in params for m in _DISPATCH.finditer(body))


_WORD = re.compile(r"\w+")


@lru_cache(maxsize=64)
def _self_fact(self_name: str) -> re.Pattern:
    # `self.x = ...`, `self.x: T = ...`, `a = self.x = ...` (not `self.x == y`), and the statements
    # that put a layer into an attribute of `self` without one (analysis/index/construction_forms.py):
    # `self.layers.append(`/`.extend(`/`.insert(`, `self.add_module(`, `self.heads["k"] = `.
    # One pattern with a literal first, so that the search skips from one `self.` to the next
    # (alternatives with different first characters are tried at every character); the name is
    # taken whole, as each alternative's `\w+` ends only where no word character follows.
    # (`myself.x = 1` matches too: one more kept method.)
    me = re.escape(self_name)
    return re.compile(rf"{me}\.\w+{POSSESSIVE}(?:[ \t]*(?::[^=\n]*)?=(?!=)|\.(?:append|extend|insert)\(|"
                      rf"\[[^\]\n]*\][ \t]*=(?!=)|(?<=\.add_module)\(|(?<=\.register_module)\()")


@lru_cache(maxsize=64)
def _set_self(self_name: str) -> re.Pattern:
    return re.compile(rf"setattr\([ \t]*{re.escape(self_name)}\b")


_DOCSTRING = re.compile(r"[ \t]*[rRuU]?(\"\"\"|\'\'\')")


def _may_be_getter(body: str) -> bool:
    """Could this body be one `return` after an optional docstring (class_facts._single_return)?"""
    if "return" not in body or not (_RETURN_FIRST.match(body) or _RETURN_AFTER.search(body)):
        return False
    code = [line for line in body.splitlines() if line.strip() and not line.lstrip().startswith("#")]
    first = code[0].lstrip()
    if first.startswith("return"):
        return True
    doc = _DOCSTRING.match(code[0])
    if doc is None:
        return first.startswith(("'", '"', "r'", 'r"', "u'", 'u"', "(", "f'", 'f"'))  # some other string: unsure
    quote = doc.group(1)
    rest = body[body.index(quote) + 3:]
    if quote not in rest:
        return True
    after = [line for line in rest[rest.index(quote) + 3:].splitlines()[1:]
             if line.strip() and not line.lstrip().startswith("#")]
    return not after or after[0].lstrip().startswith(("return", "'", '"', "r'", 'r"')) or \
        "\\" in rest[:rest.index(quote)]  # (an escaped quote may end the docstring elsewhere)


def check(tree: ast.Module, reduced: Reduced) -> bool:
    """Is every blanked function in the reduced tree, with the one `pass` put there as its body?
    Marks those nodes (`BLANKED`) for `Defs`. False: the text was not cut where the parser would."""
    expected = {first: (pass_line, last) for first, pass_line, last in reduced.blanked}
    classes = {line: pass_line for line, pass_line, _ in reduced.classes}
    found = 0
    todo: list[Any] = list(tree.body)  # statements: each read as its kind says (mypy cannot tell from it)
    kinds = _CHECK_KINDS
    while todo:
        node = todo.pop()
        kind = kinds.get(type(node))
        if kind is None:
            kind = _check_kind(node)
        if kind is _CHECK_DEF:
            where = expected.get(node.lineno)
            if where is not None:
                pass_line, last = where
                body = node.body
                if len(body) != 1 or not isinstance(body[0], ast.Pass) or body[0].lineno != pass_line:
                    return False
                setattr(node, BLANKED, last)
                found += 1
                continue
            todo.extend(node.body)  # a blanked def is never nested in a kept one, but be sure
        elif kind is _CHECK_CLASS:
            class_pass = classes.get(node.lineno)
            if class_pass is not None:
                body = node.body
                if len(body) != 1 or not isinstance(body[0], ast.Pass) or body[0].lineno != class_pass:
                    return False
                found += 1
                continue
            todo.extend(node.body)
        elif kind:  # a compound statement: the blocks its class has
            for name in kind:
                if name == "handlers" or name == "cases":
                    for handler in getattr(node, name, None) or ():
                        todo.extend(handler.body)
                else:
                    todo.extend(getattr(node, name, None) or ())
    return found == len(expected) + len(classes)


# A statement class -> what `check` reads of its instances: a def, a class, or the names of the
# blocks it holds in that order ("body", "orelse", "finalbody", then the handlers' and the cases'
# bodies; none for a simple statement). Decided once per class, from `isinstance` of its first
# instance and the fields the class declares: a test of three kinds and five `getattr`s for every
# statement of every reduced tree: vLLM 0.34.0 cold -j1 22.78 -> 22.55 G instructions.
_CHECK_DEF, _CHECK_CLASS = ("def",), ("class",)
_BLOCK_FIELDS = ("body", "orelse", "finalbody", "handlers", "cases")
_CHECK_KINDS: dict[type, tuple[str, ...]] = {}


def _check_kind(node: ast.AST) -> tuple[str, ...]:
    kind: tuple[str, ...]
    if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
        kind = _CHECK_DEF
    elif isinstance(node, ast.ClassDef):
        kind = _CHECK_CLASS
    elif isinstance(node, ast.stmt):
        kind = tuple(name for name in _BLOCK_FIELDS if name in type(node)._fields)
    else:
        kind = ()
    _CHECK_KINDS[type(node)] = kind
    return kind


def is_blanked(fn) -> bool:
    return getattr(fn, BLANKED, False)


class Defs(dict):
    """name -> function node of a class or module whose tree may be reduced: a blanked function
    read through it is replaced by the real one, `resolve(path, text, node)` (trees.whole_function:
    its own lines parsed then)."""

    __slots__ = ("source", "resolve")

    def __init__(self, source: "tuple[str, str] | None" = None, resolve=None):
        super().__init__()
        self.source = source  # (path, text) of the reduced tree's file
        self.resolve = resolve

    def _real(self, name, fn):
        if self.source is not None and getattr(fn, BLANKED, False):
            fn = self.resolve(*self.source, fn)
            dict.__setitem__(self, name, fn)
        return fn

    def __getitem__(self, name):
        return self._real(name, dict.__getitem__(self, name))

    def get(self, name, default=None):
        function_node = dict.get(self, name, default)
        return default if function_node is default else self._real(name, function_node)

    def values(self):
        return [self._real(name, fn) for name, fn in list(dict.items(self))]

    def items(self):
        return [(name, self._real(name, fn)) for name, fn in list(dict.items(self))]


def site_spans(text: str, patterns, matches: "Iterable[tuple[int, int]]" = ()) -> list[tuple[int, int]]:
    """(first, last) 1-based lines of every match of the rules' patterns ((literal, compiled)
    pairs: a pattern whose literal is not in the text is not searched), and of `matches`
    ((start, end) offsets found otherwise)."""
    matches = sorted([*matches, *((m.start(), m.end()) for literal, pattern in patterns
                                  if not literal or literal in text for m in pattern.finditer(text))])
    spans = []
    line, off = 1, 0
    for start, end in matches:
        line += text.count("\n", off, start)
        off = start
        spans.append((line, line + text.count("\n", start, end)))
    return spans


_SIMPLE_STRING = re.compile(r"'[^'\\\n\r]*'|\"[^\"\\\n\r]*\"")


def _plain_header() -> re.Pattern:
    # A header the line walk below would accept, matched at once: brackets nested properly (up to
    # _NESTING deep; only inside them a line may end), strings without a backslash or a line end
    # and none right after another, comments without a quote or backslash, and a `:` that ends
    # its last line. What it does not match is walked line by line (the same answers).
    # Each run of plain characters is one repeat of one class and what follows a run starts with
    # a character the run cannot take ("normal* (special normal*)*"): one way to match each
    # character, so no retries.
    string = r"""(?:'[^'\\\n\r]*'|"[^"\\\n\r]*")(?!['"])"""
    plain_in = r"""[^'"#\\()\[\]{}]*"""  # line ends allowed inside brackets
    special_in = r"""#[^\n'"\\]*(?=\n)|""" + string
    nested = ""
    for _ in range(_NESTING):
        content = rf"{plain_in}(?:(?:{special_in}{'|' + nested if nested else ''}){plain_in})*"
        nested = rf"\({content}\)|\[{content}\]|\{{{content}\}}"
    plain = r"""[^\n'"#\\()\[\]{}]*"""
    return re.compile(rf"""{plain}(?:(?:{string}|{nested}){plain})*:[ \t]*(?:#[^\n'"\\]*)?\n""")


_NESTING = 3  # deeper is rare (0.1% of vLLM 0.34.0 headers), and 4 took 3x as long to compile
_HEADER_LINES = 199  # the most lines the walk follows
# Compiling the pattern costs about 4 ms (29 M instructions, 4% of a pre-commit run of one edited
# file): the first headers of a run are walked, and the pattern compiled only once a run has
# walked this many (a whole tree has thousands; vLLM 0.34.0: 13,134).
_WALK_FIRST = 400
_plain_header_match = None
_walked = 0


def _header_end(text: str, start: int) -> tuple[int, int] | None:
    """(offset of the body's first line, lines of the header) of the `def` at `start`, or None
    when the body is on the header's line or the header cannot be followed by text alone (a
    string with a quote or backslash in it, a line continued by a backslash)."""
    global _plain_header_match, _walked
    match = _plain_header_match
    if match is None:
        _walked += 1
        if _walked > _WALK_FIRST:
            match = _plain_header_match = _plain_header().match
    plain = match(text, start) if match is not None else None
    if plain is not None:  # most headers: one regex match, not a walk of Python string operations
        end = plain.end()
        lines = text.count("\n", start, end)
        if lines <= _HEADER_LINES:
            return end, lines
    depth = 0
    off = start
    for lines in range(1, _HEADER_LINES + 1):
        nl = text.find("\n", off)
        if nl < 0:
            return None  # no body line follows
        code = text[off:nl]
        if "'" in code or '"' in code:
            code = _SIMPLE_STRING.sub("''", code)
            if '"' in code or code.count("'") % 2 or "\'\'\'" in code:
                return None
        if "#" in code:
            code = code.split("#", 1)[0]  # no string is left: a `#` starts a comment
        if "\\" in code:
            return None
        depth += code.count("(") + code.count("[") + code.count("{")
        depth -= code.count(")") + code.count("]") + code.count("}")
        if depth < 0:
            return None
        if depth == 0:
            return (nl + 1, lines) if code.rstrip().endswith(":") else None
        off = nl + 1
    return None


_DEDENT: dict[int, re.Pattern] = {}


def _body_end(text: str, start: int, indent: int) -> int:
    """The offset of the first code line from `start` indented no deeper than `indent` (a
    comment or blank line never ends a body), or the text's end."""
    pattern = _DEDENT.get(indent)
    if pattern is None:
        # A newline first: the search skips from line end to line end.
        pattern = _DEDENT[indent] = re.compile(rf"\n[ \t\f]{{0,{indent}}}{POSSESSIVE}(?=[^ \t\f\n#])")
    found = pattern.search(text, start - 1)  # `start` begins a line: the newline before it
    return found.start() + 1 if found else len(text)


def _code_end(text: str, start: int, end: int) -> int:
    """The offset past the last code line in [start, end): trailing blank and comment lines are
    not the body's (the parser drops them)."""
    while end > start:
        before = text.rfind("\n", start, end - 1)
        line_start = before + 1 if before >= 0 else start
        line = text[line_start:end].strip()
        if line and not line.startswith("#"):
            return end
        end = line_start
    return start


def _region_kept(keep: list[tuple[int, int]], text: str, region: "ClassRegion", after: "ClassRegion | None") -> bool:
    """`_spans_kept(keep, region.first_line, last)` with reduce's `last` for a class (its class
    line plus the line ends in its text), those line ends counted only when a span needs them:
    not for one that starts by the class line, nor for one past the next region (`after`) by
    more than the class's decorator lines when the region ends before that one starts."""
    last = None
    for low, high in keep:
        if low > region.class_line:
            if after is not None and region.end <= after.start \
                    and low > region.class_line + after.first_line - region.first_line:
                return False  # past any `last` the text can give
            if last is None:
                last = region.class_line + text.count("\n", region.start, region.end)
            if low > last:
                return False
        if high >= region.first_line:
            return True
    return False


def _spans_kept(keep: list[tuple[int, int]], first: int, last: int) -> bool:
    for low, high in keep:  # sorted by first line; few per file
        if low > last:
            return False
        if high >= first:
            return True
    return False


def _marks(text: str, start: int, end: int) -> bytes:
    """The brackets, line feeds and single quotes of text[start:end], in order: its UTF-8 bytes
    stripped of the rest (UTF-8 puts no ASCII byte inside another character). One copy and one
    filtering pass answer what seven counts of the text would: a count reads each character for
    about eight instructions, these few bytes are counted at once."""
    return text[start:end].encode("utf-8", "surrogatepass").translate(None, _NOT_MARKS)


_NOT_MARKS = bytes(set(range(256)) - set(b"()[]{}\n'"))


def _balanced(text: str, start: int, end: int, marks: bytes | None = None) -> bool:
    """Do text[start:end]'s brackets and triple quotes balance, with no line continued by a
    backslash? (`marks`: its _marks, when made already. No CR gets here: reduce and
    class_regions stop at one.)"""
    if marks is None:
        marks = _marks(text, start, end)
    # `'''` is counted only where a `'` is (formatted code seldom has one), a backslash-newline
    # only where a backslash is (one fast pass for a single character, a slower one for a pair).
    return (marks.count(b"(") == marks.count(b")") and marks.count(b"[") == marks.count(b"]")
            and marks.count(b"{") == marks.count(b"}") and text.count('"""', start, end) % 2 == 0
            and (b"'" not in marks or text.count("'''", start, end) % 2 == 0)
            and (text.find("\\", start, end) < 0 or text.find("\\\n", start, end) < 0))


@record(frozen=True)
class ClassRegion:
    """One top-level class statement's text: decorators to the last line of its body."""

    name: str
    first_line: int  # 1-based, its first decorator's line (else the class line)
    class_line: int
    start: int  # offsets in the file's text
    end: int
    body: int = -1  # offset of its body's first line

    def snippet(self, text: str) -> str:
        """Its text below blank lines: parsed alone, its nodes have the whole file's lines."""
        return "\n" * (self.first_line - 1) + text[self.start:self.end]


_CLASS = re.compile(r"class[ \t]+(\w+)")


def class_regions(text: str) -> list[ClassRegion] | None:
    """Every class statement of a module whose classes are all top-level, by text; None when
    that is not certain (an indented `class`: nested, under `if`, or in a string; CR line ends;
    a class line inside a triple-quoted string; a decorator or the line above it that is not
    plainly one): the module is then parsed whole."""
    if "\r" in text:
        return None
    # One search for the word, each then placed by its line start: a class statement at column 0,
    # or an indented `class` after the first line (the word is rare, lines are not: a search for
    # `\n[ \t\f]*class` stops at every line end).
    statements = []
    start = 0
    while (start := text.find("class", start)) >= 0:  # (str.find skips ahead faster than a regex)
        found = _CLASS.match(text, start)
        if found is None:
            start += 1
            continue
        line_start = text.rfind("\n", 0, start) + 1
        if line_start == start:
            statements.append(found)
        elif line_start and not text[line_start:start].strip(" \t\f"):
            return None
        start = found.end()
    regions = []
    line, off = 1, 0
    double = single = 0  # triple quotes before `off`
    for m in statements:
        start = m.start()
        double += text.count('"""', off, start)
        single += text.count("'''", off, start)
        if double % 2 or single % 2:
            return None
        line += text.count("\n", off, start)
        off = start
        first = _decorated_from(text, start)
        if first is None:
            return None
        first_line = line - text.count("\n", first, start)
        header = _header_end(text, start)  # the `:` that ends it, maybe lines below
        if header is None:
            return None
        end = _code_end(text, start, _body_end(text, header[0], 0))
        regions.append(ClassRegion(m.group(1), first_line, line, first, end, header[0]))
    return regions


class DefRegion(ClassRegion):
    """One module-level `def` statement's text (`class_line`: its `def` line)."""


# What function_region answers when the text alone cannot tell (the caller reads the parsed module).
UNTOLD = "untold"
_DEF_NAMED: dict[str, re.Pattern] = {}
_ASYNC = re.compile(r"async[ \t]+")
_DEF_NON_ASCII = re.compile(r"def[ \t]+[A-Za-z0-9_]*[^\x00-\x7f]")


def function_region(text: str, name: str) -> "DefRegion | str | None":
    """The first module-level function `name` of a module, by text: the `def` a module's tree
    gives first (class_facts.build_file_facts: statements at column 0, and those under
    module-level `if`/`try`, first wins), decorators to the last line of its body. None when the
    text has no `def name` at all, UNTOLD when text alone cannot tell: an indented `def name`
    before the first at column 0 (a method, or a definition under `if` that would come first),
    one in a triple-quoted string, decorators or a header the text cannot follow, a body on the
    header's line, CR line ends, a `def` of a non-ASCII name (the parser normalises identifiers:
    `def ﬁx` defines `fix`)."""
    if "\r" in text or (not text.isascii() and _DEF_NON_ASCII.search(text) is not None):
        return UNTOLD
    pattern = _DEF_NAMED.get(name)
    if pattern is None:
        pattern = _DEF_NAMED[name] = re.compile(rf"def[ \t]+{re.escape(name)}(?!\w)")
    for found in pattern.finditer(text):
        start = text.rfind("\n", 0, found.start()) + 1
        prefix = text[start:found.start()]
        if prefix and not _ASYNC.fullmatch(prefix):
            indent = prefix.lstrip(" \t\f")
            if len(indent) < len(prefix) and (not indent or _ASYNC.fullmatch(indent)):
                return UNTOLD  # indented: a method, or a definition under `if` or `try` that may come first
            continue  # not a `def` statement (`undef name`, a comment, a one-line string)
        if text.count('"""', 0, start) % 2 or text.count("'''", 0, start) % 2:
            return UNTOLD
        first = _decorated_from(text, start)
        header = _header_end(text, start)
        if first is None or header is None or not _first_decorator(text, first):
            return UNTOLD
        line = text.count("\n", 0, start) + 1
        end = _code_end(text, start, _body_end(text, header[0], 0))
        return DefRegion(name, line - text.count("\n", first, start), line, first, end, header[0])
    return None


def _first_decorator(text: str, first: int) -> bool:
    """Is the line at `first` (a `def`, or the first decorator `_decorated_from` found for it)
    sure to be where the statement starts? Not when the code line above the blank and comment
    lines over it is a decorator (Python allows both between a decorator and its `def`: a
    transformers function has `@use_kernel_forward_from_hub(...)`, then a `# Copied from` line),
    or is inside brackets or a string that one opens; it is when that line ends what comes
    before: a statement, a body, or the last line of brackets a statement opened."""
    above = _code_line_above(text, first)
    if above is None:
        return True
    if text[above] == "@":
        return False
    if _balanced(text, above, first):
        return True
    opening = _opening_line(text, above, first, column0=False)  # the line that opens what `above` closes
    return opening is not None and not text[opening:first].lstrip().startswith("@")


_OPENING_LINES = 400  # the most lines _opening_line walks up


def _code_line_above(text: str, cur: int) -> int | None:
    """The offset of the nearest line above `cur` (a line start) that is neither blank nor a
    comment, or None."""
    while cur > 0:
        cur = text.rfind("\n", 0, cur - 1) + 1
        stripped = text[cur:text.find("\n", cur)].strip()
        if stripped and not stripped.startswith("#"):
            return cur
    return None


def _opening_line(text: str, cur: int, start: int, column0: bool = True) -> int | None:
    """The offset of the nearest line above `cur` whose text up to `start` balances (the line whose
    brackets the lines from `cur` close), or None: one that starts a statement at column 0, or with
    `column0` False any code line."""
    for _ in range(_OPENING_LINES):
        if cur <= 0:
            return None
        cur = text.rfind("\n", 0, cur - 1) + 1
        if column0:
            opens = text[cur] not in " \t\f\n#)]}"
        else:
            stripped = text[cur:text.find("\n", cur)].strip()
            opens = bool(stripped) and not stripped.startswith("#")
        if opens and _balanced(text, cur, start):
            return cur
    return None


def _decorated_from(text: str, start: int) -> int | None:
    """The offset of the first decorator of the class or `def` statement at `start` (`start` when
    it has none), or None when the lines right above it are not plainly decorators: the walk up stops at
    a blank or comment line or another statement; when it passed an `@` line, what it passed must
    be `@` lines and their continuations (indented, or closing a bracket), brackets balanced."""
    first = cur = start
    while cur > 0:
        above = text.rfind("\n", 0, cur - 1) + 1
        line = text[above:cur]
        stripped = line.strip()
        if not stripped or (stripped.startswith("#") and line[0] == "#"):
            if cur != first and not _balanced(text, cur, start):
                # Inside brackets or a string: a blank line in a decorator's arguments
                # (transformers' `@auto_docstring(custom_intro="""...""")`), or in a statement's.
                opening = _opening_line(text, cur, start)
                if opening is None:
                    return None
                if text[opening] == "@":
                    first = cur = opening
                    continue
            break
        if line[0] == "@":
            first = above
        elif line[0] not in " \t\f)]}":
            break  # another statement: what was passed (if anything) must be decorators
        cur = above
    if first != start and (cur != first or not _balanced(text, first, start)):
        return None
    return first
