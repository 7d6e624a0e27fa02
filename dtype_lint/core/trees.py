"""One parse per file per run: the trees of the files parsed last, shared by every consumer.

A file analysed in a run is also read by other analyses for its class bodies (class facts), its
helper-shaped functions (helper facts) and its predicates; each used to parse it again (vLLM
0.27.1: 806 whole-module parses of 659 texts). `parse(path, text)` returns the tree already made
for that very text, else parses and keeps it among the last few (a bounded number of bytes of
source, so that a tree ten times larger does not keep ten times the trees). Trees are shared
read-only: no consumer changes one. An analysed file's own tree is let go when its analysis ends
(`release`): what other files read of it is kept with their facts (analysis/index/class_index.py
cached_facts). `clear()` at the end of a run lets them all go.

`parse_reduced(path, text, spans)` parses only what can hold a site or give a class fact
(core/regions.py): the bodies of the other functions are blanked, every kept node where it is
in the whole file. A reduced tree answers for the whole one only where its reads are known
(`regions = "sites"`, core/rule_registry.py); a blanked function read through `regions.Defs` is parsed then from
its own lines (`whole_function`), and a class of a file read for its class facts from its own
text (`parse_class`).
"""

from __future__ import annotations

import ast
import bisect
import re
import warnings
from collections import OrderedDict

from dtype_lint.core import regions

# Source bytes whose trees are kept: a tree costs about 60 times its source (a 100 KB module's is
# about 6 MB), so this bounds the store near 200 MB only for pathological inputs and near a few
# dozen MB on real trees (their shared files are small).
MAX_KEPT_CHARS = 1 << 20
# A kept tree serves rarely: a file's tree is released once its analysis is over (`release`), and
# shared files' facts are kept by the facts cache, not here. Counted per run (cold, `-j 1`), with
# 8 files it served vLLM 0.27.1 no parse at 1x or 10x and 6 with `--select ALL`, Transformers
# 5.25.0 3, vLLM 0.34.0 2, sglang 0.5.23 1; with one file, none of the default rules' and 2 with
# every rule on. That costs Transformers 3 parses (+0.5% parsed characters), vLLM 0.34.0 2
# (+3.0%), sglang 1 (+1.1%), and lowers the default rules' peak RSS against 4 files by 0.5-0.8
# MiB (vLLM 0.27.1 and 0.34.0, Transformers) and 3.1 MiB (sglang); every rule on vLLM 0.27.1
# peaks at 58.8 MiB (4 files: 57.2, 8: 60.5).
MAX_KEPT_FILES = 1

WHOLE = "whole"  # the kind of a whole-file tree; a reduced tree's kind is its kept spans
# Source attribute set on a reduced module: (path, text), for the whole tree when one is needed.
SOURCE = "_dtype_lint_source"
REMOVED = "_dtype_lint_removed"  # ... and the offsets of the text its blanked bodies held
LAZY = "_dtype_lint_lazy"  # ... and class line -> ClassRegion of the classes read from their own text
# ... and class line -> (ClassRegion, last line) of the classes whose whole body was blanked: the
# functions they hold are not in the tree (RuleFacts.blanked_class_functions reads them back)
BLANKED_CLASSES = "_dtype_lint_blanked_classes"

def ignore_parser_warnings() -> None:
    """Let the parser's warnings about the code it reads go unshown: `"\\d"` (an invalid escape
    sequence: a SyntaxWarning, shown by default from Python 3.12, a DeprecationWarning before),
    and any other the compiler gives, are the linted project's, not what dtype-lint reports; shown, they
    filled a run's stderr with Python's warnings about lines of the user's files (ipex-llm 2.2.0
    with every rule on: 24 lines on each run). Nor does `-W error` make such a file unreadable.
    A run keeps them unshown (run/pipeline.py `run`, `cli.main` for the other commands, each
    worker started apart); the caller's own filters are restored after a run."""
    warnings.filterwarnings("ignore", category=SyntaxWarning)
    warnings.filterwarnings("ignore", message=r"invalid (octal )?escape sequence", category=DeprecationWarning)


_kept: "OrderedDict[str, tuple[str, ast.Module, object, int]]" = OrderedDict()  # text, tree, kind, size
_chars = 0
parses = 0  # module parses made here, whole or reduced (benchmarks and tests read it)
parsed_chars = 0  # characters given to ast.parse here (a reduced text counts its kept characters)
reduced_parses = 0


def parse(path: str, text: str, keep: bool = True) -> ast.Module:
    """The whole tree of `text` (the content of `path`); raises what `ast.parse` raises. `keep`
    False: a kept tree serves, but one made here is not kept."""
    hit = _kept.get(path)
    if hit is not None and hit[0] == text and hit[2] == WHOLE:
        _kept.move_to_end(path)
        return hit[1]
    tree = _parse(text, path, len(text))
    return _keep(path, text, tree, WHOLE, len(text)) if keep else tree


def parse_reduced(path: str, text: str, spans: list[tuple[int, int]] | None = None,
                  lazy_classes: bool = False, keep: bool = True) -> ast.Module:
    """The tree of `text` with the bodies of the functions that hold no line of `spans` (sites)
    and give no class fact blanked (regions.reduce); the whole tree when nothing is blanked or
    the reduced text does not parse as expected. Raises what `ast.parse` of the whole text raises.
    With `spans` None (a file read for its class facts only), any tree kept for the text serves.
    `keep` False: a tree made here is not kept (a caller that reads it once)."""
    key = tuple(sorted(spans)) if spans is not None else None
    hit = _kept.get(path)
    if hit is not None and hit[0] == text and (hit[2] == WHOLE or key is None or hit[2] == key):
        _kept.move_to_end(path)
        return hit[1]
    reduced = regions.reduce(text, list(key or ()), lazy_classes)
    if reduced is not None:
        try:
            tree = _parse(reduced.text, path, reduced.kept_chars)
        except (SyntaxError, ValueError, RecursionError, MemoryError):
            tree = None  # the whole text says what is wrong, or that the cut was wrong
        if tree is not None and regions.check(tree, reduced):
            global reduced_parses
            reduced_parses += 1
            setattr(tree, SOURCE, (path, text))
            setattr(tree, REMOVED, reduced.removed)
            if reduced.lazy:
                lazy = {region.class_line: region for region in reduced.lazy}
                setattr(tree, LAZY, lazy)
                if reduced.classes:
                    setattr(tree, BLANKED_CLASSES, {line: (lazy[line], last) for line, _, last in reduced.classes})
            return _keep(path, text, tree, key if key is not None else (), reduced.kept_chars) if keep else tree
    return parse(path, text, keep)


def whole_of(tree: ast.Module) -> ast.Module:
    """The whole-file tree of a tree `parse_reduced` made (the tree itself when it is whole, or
    when the whole text does not parse: the blanked code is then beyond the analysis)."""
    source = getattr(tree, SOURCE, None)
    if source is None:
        return tree
    try:
        return parse(*source)
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return tree


def whole_unless_absent(tree: ast.Module, names) -> ast.Module:
    """The whole-file tree, unless the blanked bodies' text is ASCII and holds none of `names`:
    then they bind and use no name that contains one of them (a non-ASCII text may spell an
    identifier in characters the parser normalises), and the reduced tree tells every use of those."""
    source = getattr(tree, SOURCE, None)
    if source is None:
        return tree
    text = source[1]
    for start, end in getattr(tree, REMOVED, ()):
        body = text[start:end]
        if not body.isascii() or any(name in body for name in names):
            return whole_of(tree)
    return tree


def whole_function(path: str, text: str, blanked: ast.FunctionDef | ast.AsyncFunctionDef) \
        -> ast.FunctionDef | ast.AsyncFunctionDef:
    """The function a blanked node stands for: its own lines parsed where they are in `text`
    (decorators to the last line of its body, below blank lines and, for a method, an `if 1:`
    that keeps its indentation), so its nodes have the lines and columns of the whole file's;
    from the whole tree if that does not give the same function."""
    last = getattr(blanked, regions.BLANKED, 0)
    first = min([blanked.lineno] + [d.lineno for d in blanked.decorator_list])
    lines = regions.split_lines(text)
    if first >= 2 and last >= first:
        indented = blanked.col_offset > 0
        snippet = "\n" * (first - 1 - indented) + ("if 1:\n" if indented else "") + "".join(lines[first - 1:last])
        try:
            tree = _parse(snippet, path, len(snippet) - first)
        except (SyntaxError, ValueError, RecursionError, MemoryError):
            tree = None
        if tree is not None:
            top = tree.body[0] if tree.body else None
            node = top.body[0] if indented and isinstance(top, ast.If) else top
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.lineno == blanked.lineno \
                    and node.name == blanked.name and node.col_offset == blanked.col_offset \
                    and len(tree.body) == 1 \
                    and (not indented or len(top.body if isinstance(top, ast.If) else node.body) == 1):
                return node
    return _from_whole(path, text, blanked)


def stub_of(fn: ast.FunctionDef | ast.AsyncFunctionDef) -> ast.FunctionDef | ast.AsyncFunctionDef:
    """A blanked node standing for the method `fn` of a class parsed from its own text: its
    decorators and signature (the same nodes), its body one `pass`, marked as `regions.check`
    marks a blanked function, so that `Defs` (and `whole_function`) read the real one back from
    its lines when it is asked for. `fn` itself when it is blanked already."""
    if regions.is_blanked(fn):
        return fn
    stub = type(fn).__new__(type(fn))
    stub.__dict__.update(fn.__dict__)
    first = fn.body[0]
    stub.body = [ast.Pass(lineno=first.lineno, col_offset=first.col_offset, end_lineno=first.lineno,
                          end_col_offset=first.col_offset + 4)]
    setattr(stub, regions.BLANKED, fn.end_lineno or fn.lineno)
    return stub


def _from_whole(path: str, text: str, blanked: ast.FunctionDef | ast.AsyncFunctionDef) \
        -> ast.FunctionDef | ast.AsyncFunctionDef:
    try:
        tree = parse(path, text)
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return blanked  # a syntax error in code that cannot hold a site: left to other linters
    todo = list(tree.body)
    while todo:
        node = todo.pop()
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            if node.lineno == blanked.lineno and node.name == blanked.name:
                return node
            continue
        for name in ("body", "orelse", "finalbody"):
            todo.extend(getattr(node, name, None) or ())
        for handler in getattr(node, "handlers", None) or ():
            todo.extend(handler.body)
        for case in getattr(node, "cases", None) or ():
            todo.extend(case.body)
    return blanked


def parse_function(path: str, text: str, name: str) -> "ast.FunctionDef | ast.AsyncFunctionDef | str | None":
    """The module-level function `name` of `text` (the content of `path`), parsed from its own
    lines where they stand (regions.function_region): its nodes have the whole file's lines and
    columns. None when the text defines no function of that name; regions.UNTOLD when its text
    alone cannot tell, or that text does not parse as that one function (the caller then reads
    the module's tree)."""
    region = regions.function_region(text, name)
    if not isinstance(region, regions.DefRegion):
        return region
    snippet = region.snippet(text)
    try:
        tree = _parse(snippet, path, len(snippet) - (region.first_line - 1))
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return regions.UNTOLD
    node = tree.body[0] if len(tree.body) == 1 else None
    if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.name == name \
            and node.lineno == region.class_line:
        return node
    return regions.UNTOLD


def parse_class(path: str, text: str, region: "regions.ClassRegion", parse_file,
                reduce: bool = True) -> ast.ClassDef | None:
    """The class statement of `region` (regions.class_regions), parsed from its own text where it
    stands in the file (reduced as a file is, unless `reduce` is False); from `parse_file()` (the
    module's tree) when that text alone is not that class; None when the module does not parse."""
    snippet = region.snippet(text)
    padding = region.first_line - 1
    tree = None
    reduced = regions.reduce(snippet) if reduce else None
    if reduced is not None:
        try:
            tree = _parse(reduced.text, path, reduced.kept_chars - padding)
        except (SyntaxError, ValueError, RecursionError, MemoryError):
            tree = None
        if tree is not None and not regions.check(tree, reduced):
            tree = None
    if tree is None:
        try:
            tree = _parse(snippet, path, len(snippet) - padding)
        except (SyntaxError, ValueError, RecursionError, MemoryError):
            tree = None
    if tree is not None and len(tree.body) == 1 and isinstance(tree.body[0], ast.ClassDef) \
            and tree.body[0].lineno == region.class_line and tree.body[0].name == region.name:
        return tree.body[0]
    try:
        module = parse_file()
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return None
    found = None
    todo = list(reversed(module.body))
    while todo:  # in order, as class_facts.build_file_facts registers them: the last definition wins
        stmt = todo.pop()
        if isinstance(stmt, ast.ClassDef) and stmt.name == region.name:
            found = stmt
        elif isinstance(stmt, (ast.If, ast.Try)):
            todo.extend(reversed(stmt.body + stmt.orelse))
    return found


# ast.parse holds the parser's own tree beside the Python one it builds from it: a big module's
# parse peaked at twice its tree (a 236,000-character kernel: 15 MiB for a 7 MiB tree, the run's
# peak). A text over two pieces long is parsed piece by piece, each piece's parser tree gone before
# the next is made: whole top-level statements, and a big class member by member. A piece starts
# a statement at the indentation of the ones it follows, outside brackets and strings (else the
# piece before it does not parse, and the text is parsed whole), so the pieces' statements are
# those of the whole text, with its lines and columns.
PIECE_CHARS = 32 << 10
_TOP = re.compile(r"\n(?=[A-Za-z_@])(?!(?:else|elif|except|finally)\b)")
_MEMBER = re.compile(r"\n([ \t]+)(?:def|async|class|@)")


def _parse_in_pieces(text: str, path: str) -> ast.Module | None:
    """ast.parse's tree of `text`, parsed piece by piece; None when that is not sure to be it
    (text with other line ends than \\n and \\r\\n, a future import that changes the grammar,
    a warning from the parser) or a piece does not parse (then the whole text says what is wrong,
    or the cut was wrong)."""
    if len(text) < 2 * PIECE_CHARS or text.count("\r") != text.count("\r\n") or "barry_as_FLUFL" in text:
        return None
    cuts = [m.start() + 1 for m in _TOP.finditer(text) if _cuttable(text, m.start())] + [len(text)]
    body: list[ast.stmt] = []
    # A text the parser warns about (`"\\d"`) is parsed whole: its warnings are then given once,
    # in the parser's own way (an error where the filters say so).
    try:
        with warnings.catch_warnings(record=True) as warned:
            warnings.simplefilter("always")
            start, line = 0, 1
            while start < len(text):
                # The statements up to PIECE_CHARS, or the one statement that is longer.
                end = cuts[bisect.bisect_right(cuts, start)]
                if end - start > 2 * PIECE_CHARS and (cls := _class_in_pieces(text, start, end, line, path)):
                    body.append(cls)
                else:
                    end = max(end, cuts[bisect.bisect_right(cuts, start + PIECE_CHARS) - 1])
                    body += ast.parse("\n" * (line - 1) + text[start:end], filename=path).body
                line += text.count("\n", start, end)
                start = end
    except (SyntaxError, ValueError):
        return None
    return None if warned else ast.Module(body=body, type_ignores=[])


def _cuttable(text: str, newline: int) -> bool:
    """Is the line that ends at `newline` blank? A statement started after a blank line is not
    the `def` or `class` of a decorator above (`@register(\\n    ...\\n)` then `class`), which a
    cut there would leave a piece of its own that does not parse."""
    return not text[text.rfind("\n", 0, newline) + 1:newline].strip(" \t\r\f")


def _member_cut(member: re.Pattern, text: str, start: int, end: int) -> re.Match | None:
    cut = member.search(text, start, end)
    while cut is not None and not _cuttable(text, cut.start()):
        cut = member.search(text, cut.end(), end)
    return cut


def _class_in_pieces(text: str, start: int, end: int, line: int, path: str) -> ast.ClassDef | None:
    """The class statement text[start:end] (from line `line`), its members parsed a piece at a
    time (each under an `if 1:` on the line above it); None when it is not one class whose body
    stands on its own lines at one indentation."""
    first = _MEMBER.search(text, start, end)
    if first is None:
        return None
    indent = first.group(1)
    member = re.compile(r"\n" + indent + r"(?=(?:def|async|class)\b|@)")
    cut = _member_cut(member, text, start + PIECE_CHARS, end)
    if cut is None:
        return None
    try:
        return _members_in_pieces(text, start, end, line, path, indent, member, cut.start() + 1)
    except (SyntaxError, ValueError):  # a cut in a string (a docstring's example): parsed whole
        return None


def _members_in_pieces(text: str, start: int, end: int, line: int, path: str, indent: str, member: re.Pattern,
                       piece: int) -> ast.ClassDef | None:
    head = ast.parse("\n" * (line - 1) + text[start:piece], filename=path).body
    if len(head) != 1 or not isinstance(head[0], ast.ClassDef):
        return None
    cls = head[0]
    at = start  # the start of the line of the class's first statement: its body's indentation
    for _ in range(cls.body[0].lineno - line):
        at = text.index("\n", at) + 1
    if not text.startswith(indent, at) or text[at + len(indent)] in " \t\f":
        return None
    line += text.count("\n", start, piece)
    while piece < end:
        cut = _member_cut(member, text, piece + PIECE_CHARS, end)
        stop = cut.start() + 1 if cut else end
        block = ast.parse("\n" * (line - 2) + "if 1:\n" + text[piece:stop], filename=path).body
        if len(block) != 1 or not isinstance(block[0], ast.If):
            return None
        cls.body += block[0].body
        line += text.count("\n", piece, stop)
        piece = stop
    last = cls.body[-1]
    cls.end_lineno, cls.end_col_offset = last.end_lineno, last.end_col_offset
    return cls


def _parse(text: str, path: str, chars: int) -> ast.Module:
    global parses, parsed_chars
    tree = _parse_in_pieces(text, path) or ast.parse(text, filename=path)
    parses += 1
    parsed_chars += chars
    return tree


def _keep(path: str, text: str, tree: ast.Module, kind, size: int) -> ast.Module:
    """Keep the tree of `size` parsed characters (a reduced tree costs what was parsed of it)."""
    global _chars
    hit = _kept.get(path)
    if hit is not None:
        _chars -= hit[3]
    _kept[path] = (text, tree, kind, size)
    _kept.move_to_end(path)
    _chars += size
    while _kept and (_chars > MAX_KEPT_CHARS or len(_kept) > MAX_KEPT_FILES):
        _, (_, _, _, old) = _kept.popitem(last=False)
        _chars -= old
    return tree


def release(path: str) -> None:
    """Let the tree kept for `path` go: its file's analysis is over. Kept, the trees of the last
    files analysed were most of the store (vLLM 0.34.0, cold `-j 1`: 9 of the 21 MiB of trees
    alive, the last of its big generated kernels the run's peak). A later file reads another's
    classes from the facts cache: dropping them took the peak RSS from 67 to 60 MiB for 3 parses
    more of 668 (instructions +0.2%; Transformers 5.25.0: 72 to 70 MiB, +0.3%, modeling_utils.py
    parsed again for a file analysed just after it)."""
    global _chars
    hit = _kept.pop(path, None)
    if hit is not None:
        _chars -= hit[3]


def clear() -> None:
    global _chars
    _kept.clear()
    _chars = 0
