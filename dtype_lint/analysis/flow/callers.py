"""Callers traced one step for generically typed holders.

A helper that takes `layer: nn.Module` (or `Any`, or no annotation) says nothing about the layer
it reads; its callers do. For a parameter typed that way, `GenericHolders.passed` gives the
arguments the calls of its function in the same file pass for it (`_project(self.o_proj, x)`),
each with the calling function, so the rules can judge the layer where it is built and report the
read with the call as evidence. One step: a caller's own generically typed parameter is not
followed further, and callers in other files are not seen (docs/quantizability.md#known-limits).
"""

from __future__ import annotations

import ast
import functools
from collections.abc import Sequence

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


class GenericHolders:
    """The calls of each function of one file, by name. `functions`: the file's rule.Candidate
    list (every function, with its class)."""

    def __init__(self, functions: Sequence[AnalysedFunction]):
        self._functions = functions

    @functools.cached_property
    def _calls(self) -> dict[str, list[tuple[ast.Call, AnalysedFunction]]]:
        calls: dict[str, list[tuple[ast.Call, AnalysedFunction]]] = {}
        for function in self._functions:
            for node in function.walk.of(ast.Call):
                func = node.func
                if isinstance(func, ast.Name):
                    calls.setdefault(func.id, []).append((node, function))
                elif isinstance(func, ast.Attribute) and isinstance(func.value, ast.Name) \
                        and func.value.id == function.scope.self_name:
                    calls.setdefault(f"self.{func.attr}", []).append((node, function))
        return calls

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
        for call, caller in self._calls.get(key, []):
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
