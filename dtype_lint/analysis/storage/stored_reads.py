"""Which casts to `self.<name>` (a dtype an object may have stored) can be sites, before a parse.

DTL001 reads `x.to(self.dtype)` as a site when the object stored its layer's weight dtype under
that name in another method (`self.dtype = self.proj.weight.dtype`: layers.LayerResolver.
stored_dtype) or has a getter of it returning one (`dtype_getter`). Both first resolve `self` to
the class the method belongs to and ask that class's MRO, and both answers can be had from the
class index and the MRO's file texts alone: whether a file of the MRO may assign `<name>` a value
naming a weight (`may_store_weight`), and whether one defines a function of that name. Asked
here, a file whose only matches are such casts in classes that can hold neither is not parsed at
all (on vLLM 0.34.0 such casts were the only reason to parse 38 of the 303 files analysed:
`x.to(self.dtype)` in model code).

The classes are every class statement of the file's header (nested ones too: the index locates
a method's class by that entry, or not at all, and a class it does not locate has no facts to
store a dtype in). Only where the text shows that `self` can stand for nothing else: `self` never
bound by assignment or annotation (which the resolver would follow to another class), no
module-level function taking `self` (it may be patched onto a class of another module, rule.
RuleFacts._patched), a module with a header. Anything else keeps every match, as does a cast
whose argument goes on past the name (`self.dtype.x`, `self.head_dtype()`) or reads through
another object (`self.tower.dtype`: its class is known only from the parse).
"""

from __future__ import annotations

import functools
import re
import unicodedata
from typing import TYPE_CHECKING

from dtype_lint.core.source import READ_ERRORS, read_file
from dtype_lint.core.text_facts import may_weight_assign, word_char
from dtype_lint.ecosystems.registry import model_dtype_attributes

if TYPE_CHECKING:
    from dtype_lint.analysis.index.class_index import QuantizableLayerIndex

# Names a getter is not followed for (LayerResolver.dtype_getter): a getter named `dtype` is
# reported where it returns (DTL001), and a model's dtype attributes are not getters of a weight.
PLAIN_DTYPE_ATTRIBUTES = frozenset({"dtype", "torch_dtype", *model_dtype_attributes()})

# Between tokens the text may hold white space or a backslash line continuation. Each pattern
# starts with a literal (a line feed, a keyword), which re skips to: one starting with `\b` or
# `^` (re.M) is tried at every character, and four such passes over the hundred files of vLLM
# 0.34.0 that hold such casts cost more than the parses they saved (+1.8 G instructions).
_GAP = r"[\s\\]"
# `self =`, `self: T`, `self :=`: a binding the resolver follows (an assignment, an annotation,
# a parameter's annotation); `==` is a comparison. (A name ending in `self` is told by the
# character before.)
_SELF_BOUND = re.compile(rf"self{_GAP}*(?::|=(?!=))")
# `def f(self` at column 0: a module-level function a patch may make another class's method.
_MODULE_DEF_SELF = re.compile(rf"\n(?:async{_GAP}+)?def{_GAP}+\w+{_GAP}*\({_GAP}*self\b")
# What may follow the name for the cast's argument to be `self.<name>` itself.
_ENDS_ARGUMENT = re.compile(r"\s*[),]")


def _self_bound(code: str) -> bool:
    """Could the resolver take a class for `self` from a binding in the code (FunctionScope: an
    annotated parameter, an annotated or assigned local, a walrus)? Told by what stands before
    `self =` / `self:`: a statement's start (a line's, or after `;` or `:`), a chained `=`, or,
    before `self:`, a signature's `(`, `,` or `*`. Not `a == self:`, `for x in self:`,
    `lambda self:`, `x.self = ...`, a keyword argument `f(x, self=y)`: none binds a name. (A
    method's own `self` is its class whatever binds it; this is about every other function.)"""
    for match in _SELF_BOUND.finditer(code):
        at = match.start() - 1
        if word_char(code[at]):
            continue  # a longer name (`myself =`)
        if match.group(0)[-1] == ":" and code.startswith("=", match.end()):
            return True  # `(self := ...)`
        while at > 0 and (code[at] in " \t\f" or (code[at] == "\n" and code[at - 1] == "\\")):
            at -= 1 if code[at] != "\n" else 2  # blanks, and line continuations
        if code[at] in "\n;:" or (code[at] == "=" and match.group(0)[-1] == "="):
            return True  # a statement's start, a chained assignment
        if match.group(0)[-1] == ":":
            while at > 0 and code[at] in _BLANK:
                at -= 1
            if code[at] in "(,*":
                return True  # a parameter's annotation
    return False


_BLANK = frozenset(" \t\n\r\f\\")


def may_store_weight(index: QuantizableLayerIndex, mro: list[str], name: str) -> bool:
    """Could a class of `mro` store `name` from a weight? Not when the file of every class we
    have the code of assigns no such attribute a value naming a weight (text_facts.
    may_weight_assign, a superset of weight_assigned_attributes): then `stored_dtype` finds
    nothing without parsing those classes (a class outside the tree has no facts to store it
    in). The headers the MRO was read from are recorded reads of the same files, so an answer
    kept across runs goes stale with them."""
    return _a_file_holds(index, mro, name, "weight-assigned attribute", may_weight_assign)


def may_define_function(index: QuantizableLayerIndex, mro: list[str], name: str) -> bool:
    """Could a class of `mro` have a method `name` (a getter)? Not when no file of a class we
    have the code of holds `def name` (NFKC-normalised where the text is not ASCII)."""
    return _a_file_holds(index, mro, name, "defined function", _defines)


def _a_file_holds(index: QuantizableLayerIndex, mro: list[str], name: str, fact: str, holds) -> bool:
    """Does `holds(text, name)` of the file of some class of `mro` (or is a file unreadable)?
    Each file's answer for each name is kept for the run (`cached_facts`, census)."""
    for ancestor in mro:
        location = index.class_location(ancestor)
        if location is None:
            continue
        path = location[0].path

        def build(path=path) -> bool | None:
            try:
                return holds(read_file(path).text, name)
            except READ_ERRORS:
                return None
        held = index.cached_facts((fact, path, name), build, census=True)
        if held is None or held:
            return True
    return False


def _defines(text: str, name: str) -> bool:
    code = "\n" + _normalised(text)
    return any(m.group(1) == name for m in _DEF_NAME.finditer(code)
               if not word_char(code[m.start() - 1]))


_DEF_NAME = re.compile(rf"def{_GAP}+(\w+)")


def _normalised(text: str) -> str:
    """The text as the tokenizer names its identifiers (NFKC), where that can differ."""
    return text if text.isascii() else unicodedata.normalize("NFKC", text)


class SelfReadGate:
    """One file's answer to "can this cast to `self.<name>` be a site?" (`keeps`)."""

    def __init__(self, text: str, module: str, index: QuantizableLayerIndex, plain: frozenset[str]):
        """`plain`: the names no getter is followed for (PLAIN_DTYPE_ATTRIBUTES)."""
        self.text = text
        self.index = index
        self.plain = plain
        self._names: dict[str, bool] = {}
        self.module = module

    @functools.cached_property
    def classes(self) -> list[str] | None:
        """The qualified names of the file's classes, or None where `self` may stand for another
        class. Found on the first cast to a bare `self.<name>` (most files with a gated match
        hold only casts to `self.<attr>.<name>`, which it keeps unasked)."""
        header = self.index.modules.get(self.module) if self.module else None
        if header is None:
            return None
        code = "\n" + _normalised(self.text)  # every line, the first too, after a line feed
        if _self_bound(code) or _MODULE_DEF_SELF.search(code):
            return None
        # Every class statement of the file is in its header (`classes`, nested ones too, by
        # name): a method's class the index locates is one of them, with the bases recorded
        # there; one it does not locate has no facts to store a dtype in.
        return [f"{self.module}.{name}" for name in header.classes]

    def keeps(self, match: re.Match[str]) -> bool:
        """False only when the match is a cast to `self.<name>` (one attribute, the whole
        argument) and no class a method of this file belongs to can store `<name>` from a weight
        or (for a name not in `plain`) have a getter of it."""
        found = match.group(0)
        chain = found[found.index("self", found.index("(")) + 4:]
        if chain.count(".") != 1 or not _ENDS_ARGUMENT.match(self.text, match.end()):
            return True
        classes = self.classes
        if classes is None:
            return True
        name = chain[1:]
        known = self._names.get(name)
        if known is None:
            known = self._names[name] = any(self._class_keeps(cls, name) for cls in classes)
        return known

    def _class_keeps(self, qualname: str, name: str) -> bool:
        mro = self.index.mro(qualname)
        return may_store_weight(self.index, mro, name) or \
            (name not in self.plain and may_define_function(self.index, mro, name))


def self_read_gate(text: str, module: str, index: QuantizableLayerIndex) -> SelfReadGate:
    """DTL001's gate of its casts to `self.<name>` (pattern_gates.py)."""
    return SelfReadGate(text, module, index, PLAIN_DTYPE_ATTRIBUTES)
