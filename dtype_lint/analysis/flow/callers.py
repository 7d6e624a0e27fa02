"""Callers traced one step for generically typed holders.

A helper that takes `layer: nn.Module` (or `Any`, or no annotation) says nothing about the layer
it reads; its callers do. For a parameter typed that way, `GenericHolders.passed` gives the
arguments the calls of its function in the same file pass for it (`_project(self.o_proj, x)`),
each with the calling function (for a layer reached through the parameter, `indexer.weights_proj`,
the same attributes of the argument: `self.indexer.weights_proj`), so the rules can judge
the layer where it is built and report the read with the call as evidence. One step: a
caller's own generically typed parameter is not followed further, and callers in other files
are not seen (docs/quantizability.md#known-limits). A caller whose body a reduced parse blanked
(it holds no site line), or whose class it blanked whole, is read back whole, only when its text
names the callee.
"""

from __future__ import annotations

import ast
import dataclasses
import functools
import re
from collections.abc import Callable, Sequence

from dtype_lint.analysis.analysed_function import AnalysedFunction
from dtype_lint.analysis.index.class_facts import annotation_name

# What an annotation names when it says only "a module": no layer class to resolve.
GENERIC_ANNOTATIONS = frozenset({
    "nn.Module", "torch.nn.Module", "Module", "Any", "typing.Any", "object", "nn.modules.module.Module",
})


def generically_typed(fn: ast.FunctionDef | ast.AsyncFunctionDef, name: str) -> bool:
    """`name` is a parameter of `fn` annotated with nothing more than a module (or nothing)."""
    args = fn.args
    for arg in args.posonlyargs + args.args + args.kwonlyargs:
        if arg.arg == name:
            return arg.annotation is None or annotation_name(arg.annotation) in GENERIC_ANNOTATIONS
    return False


def _key(call: ast.Call, function: AnalysedFunction) -> str | None:
    """How a call names its callee: `name` (a module-level function) or `self.name` (a method
    called on the caller's own `self`); None for any other call."""
    func = call.func
    if isinstance(func, ast.Name):
        return func.id
    if isinstance(func, ast.Attribute) and isinstance(func.value, ast.Name) \
            and func.value.id == function.scope.self_name:
        return f"self.{func.attr}"
    return None


def handed_root(layer: ast.expr) -> ast.Name | None:
    """The name a layer expression starts from, when it is a name or a chain of attributes of one
    (`layer`, `indexer.weights_proj`): the parameter whose callers say what the layer is."""
    node = layer
    while isinstance(node, ast.Attribute):
        node = node.value
    return node if isinstance(node, ast.Name) else None


def with_root(layer: ast.expr, arg: ast.expr) -> ast.expr:
    """`layer` with its root name replaced by the argument a caller hands for it, located at the
    argument (`indexer.weights_proj` with `indexer` handed `self.indexer`: `self.indexer.weights_proj`)."""
    if isinstance(layer, ast.Name):
        return arg
    assert isinstance(layer, ast.Attribute)
    return ast.copy_location(ast.Attribute(value=with_root(layer.value, arg), attr=layer.attr, ctx=ast.Load()), arg)


class GenericHolders:
    """The calls of each function of one file, by name. `functions`: the file's rule.Candidate
    list (every function, with its class); `source`: the file's (path, text), to read a caller
    whose body a reduced parse blanked (core/regions.py): it holds no site line, so its calls
    are not in the tree, and only the callers of a function asked about are read back."""

    def __init__(self, functions: Sequence[AnalysedFunction], source: tuple[str, str] | None = None,
                 blanked_classes: Callable[[re.Pattern], Sequence[AnalysedFunction]] | None = None):
        """`blanked_classes(callee)`: the functions, read back whole, of the classes a reduced
        parse blanked whole whose text `callee` matches (rule.RuleFacts.blanked_class_functions)."""
        self._functions = functions
        self._source = source
        self._blanked_classes = blanked_classes
        self._blanked: dict[str, list[tuple[ast.Call, AnalysedFunction]]] = {}

    @functools.cached_property
    def _calls(self) -> dict[str, list[tuple[ast.Call, AnalysedFunction]]]:
        calls: dict[str, list[tuple[ast.Call, AnalysedFunction]]] = {}
        for function in self._functions:
            for node in function.walk.of(ast.Call):
                key = _key(node, function)
                if key is not None:
                    calls.setdefault(key, []).append((node, function))
        return calls

    def _blanked_calls(self, key: str) -> list[tuple[ast.Call, AnalysedFunction]]:
        """The calls keyed `key` in the functions whose bodies the reduced parse blanked, each
        read back whole (trees.whole_function) only where its text names the callee."""
        if self._source is None:
            return []
        known = self._blanked.get(key)
        if known is None:
            known = self._blanked[key] = self._read_blanked_calls(key)
        return known

    def _read_blanked_calls(self, key: str) -> list[tuple[ast.Call, AnalysedFunction]]:
        assert self._source is not None
        from dtype_lint.core import regions, trees

        path, text = self._source
        lines = regions.split_lines(text)
        callee = re.compile(rf"(?<![\w.]){re.escape(key)}\s*\(" if "." not in key
                            else rf"\b{re.escape(key.split('.', 1)[0])}\s*\.\s*{re.escape(key.split('.', 1)[1])}\s*\(")
        out = []
        for function in self._functions:
            last = getattr(function.fn, regions.BLANKED, 0)
            if not last or not callee.search("".join(lines[function.fn.lineno - 1:last])):
                continue
            whole = trees.whole_function(path, text, function.fn)
            caller = dataclasses.replace(function, fn=whole)  # type: ignore[type-var]
            out += [(node, caller) for node in caller.walk.of(ast.Call) if _key(node, caller) == key]
        for caller in self._blanked_classes(callee) if self._blanked_classes is not None else ():
            out += [(node, caller) for node in caller.walk.of(ast.Call) if _key(node, caller) == key]
        return out

    def passed(self, function: AnalysedFunction, param: str) -> list[tuple[ast.expr, AnalysedFunction, ast.Call]]:
        """(argument, calling function, call) for each call in the file that passes `param` of
        `function` (a rule.Candidate): a module-level function called by name, or a method called
        on `self` from a method of the same class."""
        function_node = function.fn
        if function.class_qualname is not None:
            if function.scope_name.count(".") != 1:
                return []
            key, skip = f"self.{function_node.name}", 1
        elif function.scope_name == function_node.name:
            key, skip = function_node.name, 0
        else:
            return []
        positional = [a.arg for a in function_node.args.posonlyargs + function_node.args.args][skip:]
        out = []
        for call, caller in [*self._calls.get(key, []), *self._blanked_calls(key)]:
            if caller.fn is function_node or (skip and caller.class_qualname != function.class_qualname):
                continue
            arg = next((k.value for k in call.keywords if k.arg == param), None)
            if arg is None and param in positional:
                position = positional.index(param)
                if position < len(call.args) and not any(isinstance(a, ast.Starred) for a in call.args[:position + 1]):
                    arg = call.args[position]
            if arg is not None:
                out.append((arg, caller, call))
        return out
