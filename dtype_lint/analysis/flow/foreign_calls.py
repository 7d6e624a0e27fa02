"""The calls of a module-level function in the other files of the project, one step.

A file that imports the function by name (`from pkg.mod import helper`, also through a package's
re-export) or imports its module (`from pkg import mod` then `mod.helper(...)`) and calls it: for
each such call, the layer it hands over (its first argument, or a `layer=`/`module=`/`linear=`
keyword) resolved in the calling file's own context, and whether some reachable backend may give
that layer a non-compute storage (the question DTL001 asks of a cast).

Only files whose text names the function are parsed; what was read is recorded in the index (a
change to a calling file invalidates the findings that read it), but a file that starts calling
the function does not by itself invalidate them (no file listing is recorded).
"""

from __future__ import annotations

import ast
import os

from dtype_lint.core.findings import Evidence
from dtype_lint.core.records import record

# Enough for a helper imported across a tree (vLLM's MLA helper has three calling files).
MAX_FILES = 40


@record(frozen=True)
class ForeignCall:
    """A call in another file that hands a layer to the function, and whether a backend may pack that layer."""
    path: str
    line: int
    layer: str  # the expression handed over ("self.kv_b_proj")
    may_be_packed: bool
    why: tuple[Evidence, ...] = ()


def _layer_arg(call: ast.Call) -> ast.expr | None:
    if call.args and not isinstance(call.args[0], ast.Starred):
        return call.args[0]
    return next((k.value for k in call.keywords if k.arg in ("layer", "module", "linear")), None)


def calls_elsewhere(project, qualname: str, here_module: str, config_params: tuple[str, ...]) -> list[ForeignCall]:
    """Every call of the function `qualname` (module.function) in another file of the project."""
    index = project.index
    load = project.load_file
    module, _, name = qualname.rpartition(".")
    if not module or load is None:
        return []

    def build() -> list[ForeignCall]:
        out: list[ForeignCall] = []
        files = 0
        for other, path in index.modules.module_paths():
            if other == here_module:
                continue
            text = load(path)
            if not text or name not in text:
                continue
            header = index.modules.get(other)  # recorded: a change to this file is a change here
            if header is None:
                continue
            direct = {local for local, target in header.imports.items()
                      if target == qualname or index.canonical(target) == qualname}
            via_module = {local for local, target in header.imports.items() if target == module}
            if not direct and not via_module:
                continue
            files += 1
            if files > MAX_FILES:
                break
            out.extend(_calls_in(project, other, header, text, direct, via_module, name, config_params))
        return out

    return index.cached_facts(("calls elsewhere", qualname, here_module), build)


def _calls_in(project, module: str, header, text: str, direct: set[str], via_module: set[str], name: str,
              config_params) -> list[ForeignCall]:
    from dtype_lint.analysis.function_walk import iter_functions
    from dtype_lint.analysis.index.class_facts import FunctionScope
    from dtype_lint.analysis.storage.layers import LayerResolver
    from dtype_lint.analysis.storage.verdicts import NON_COMPUTE
    from dtype_lint.core import trees

    try:
        tree = trees.parse(header.path, text)
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return []
    resolver = LayerResolver(project, module, header.imports, header.path, config_params)
    out = []
    for function_node, class_q, _scope_name in iter_functions(tree, module):
        scope = None
        for node in ast.walk(function_node):
            if not isinstance(node, ast.Call):
                continue
            func = node.func
            if not ((isinstance(func, ast.Name) and func.id in direct)
                    or (isinstance(func, ast.Attribute) and func.attr == name and isinstance(func.value, ast.Name)
                        and func.value.id in via_module)):
                continue
            arg = _layer_arg(node)
            if arg is None:
                out.append(ForeignCall(header.path, node.lineno, "", True))
                continue
            scope = scope or FunctionScope(function_node, class_q)
            inst = resolver.resolve(arg, scope)
            text_of = ast.unparse(arg)
            if inst.qualname is None and inst.config != "none":
                out.append(ForeignCall(header.path, node.lineno, text_of, True))  # unresolved: it may be
                continue
            verdict = resolver.quantizable(inst, text_of, None, NON_COMPUTE)
            out.append(ForeignCall(header.path, node.lineno, text_of, verdict is not None,
                                   verdict[1] if verdict else ()))
    return out


def describe(call: ForeignCall) -> str:
    return f"{os.path.basename(call.path)}:{call.line} hands it `{call.layer or '?'}`"
