"""Where a project applies a quantizer to a model, and which of its model classes that reaches.

A call's first argument is the model: `self` (a method of the model class), a local built by a
class of the tree (`model = TinyModel(...)`), or a parameter, followed one step to the calls of
its function in the tree (`swap_linears(model)`). A function that builds a bitsandbytes layer and
swaps it in (`setattr(module, name, bnb.nn.Linear4bit(...))`) applies it to its first parameter.
A parameter that no call in the tree passes is a library's API (the model is its caller's, outside
the tree): not an application to this tree. Anything else (an attribute, a model a function
returns) cannot be told: an `Application` with no classes and the reason, which the family turns
into a low-confidence finding, never a silent pass.
"""

from __future__ import annotations

import ast
from functools import cached_property

from dtype_lint.analysis.function_walk import parent_map, walk
from dtype_lint.analysis.index.class_index import dotted
from dtype_lint.core.ast_walk import enclosing_function
from dtype_lint.core.records import record
from dtype_lint.ecosystems.hf.family import ENGINE_PACKAGES
from dtype_lint.ecosystems.quantizers.applications_fabric import fabric_applications
from dtype_lint.ecosystems.quantizers.catalogue import (
    FABRIC_CONVERT,
    FABRIC_SETUP,
    LIBRARY_PACKAGES,
    LIGHTNING_PACKAGES,
    QUANTIZER_PACKAGES,
    QUANTIZER_WORDS,
    Application,
    Quantizer,
    applied_by,
    fabric_class,
    fabric_plugin,
    swapped_in,
)

_FOLLOW_DEPTH = 2  # parameter → caller's argument → its caller's
# What a swapping function fills in the layer it builds (not a swap into the model).
_LAYER_PARTS = frozenset({"weight", "bias", "compute_dtype", "quant_state"})
_REWRAPS = FABRIC_SETUP | {FABRIC_CONVERT}  # `model = fabric.setup(model)`: the same model


@record
class _File:
    module: str
    path: str
    imports: dict[str, str]
    tree: ast.Module

    @cached_property
    def parents(self) -> dict[int, ast.AST]:
        """id(node) -> its parent, for the few calls that apply or swap in a quantizer."""
        return parent_map(self.tree)


def applications(resolver) -> list[Application]:
    """Every application in the tree, computed once per run."""
    return census(resolver.index)


def census(index) -> list[Application]:
    """`applications`, from the class index alone: what it reads is the tree's, not a file's, so a
    parallel run builds it before its workers fork and each inherits it (run/pipeline.py)."""
    return index.cached_facts(("quantizer applications",), lambda: _scan(index), census=True)


def census_needed(modules) -> bool:
    """Will the analysis of these modules ask for the census? Surely when one is an engine's: the
    Hugging Face family leaves an engine's layers to the others, and this family asks at its first
    `nn.Linear`. Of 26 trees, 11 analyse in parallel: the 7 engines' asked; of the others, vLLM-Omni
    did (its modules are `vllm_omni`'s: not told here) and the Hugging Face trees did not."""
    return any(module.split(".", 1)[0] in ENGINE_PACKAGES for module in modules)


def _imports_from(imports: dict[str, str], packages: tuple[str, ...]) -> bool:
    return any(target == package or target.startswith(package + ".") for target in imports.values()
               for package in packages)


def _load(index, module: str, header) -> _File | None:
    from dtype_lint.core.source import read_file

    try:
        tree = ast.parse(read_file(header.path).text)
    except (OSError, SyntaxError, ValueError, UnicodeError):
        return None
    return _File(module, header.path, header.imports, tree)


def _scan(index) -> list[Application]:
    found: list[Application] = []
    for module, header in list(index.modules.naming(QUANTIZER_WORDS, skip_tops=LIBRARY_PACKAGES)):
        # Lightning by any name (`import lightning as L`): its plugin may be spelled through it
        # one `startswith` an import (a longer name of that prefix costs only a walk of the calls)
        lightning = any(target.startswith(LIGHTNING_PACKAGES) for target in header.imports.values())
        if not lightning and not _imports_from(header.imports, QUANTIZER_PACKAGES):
            continue
        loaded = _load(index, module, header)
        if loaded is None:
            continue
        swapping: dict[int, tuple[ast.AST, Quantizer, ast.Call]] = {}
        plugins: list[ast.Call] = []  # Lightning's bitsandbytes plugin, and the file's `Fabric(...)` calls
        fabrics: list[ast.Call] = []
        # Every call of the file resolved (vLLM's bitsandbytes loader: 19,000 nodes), its
        # enclosing function looked up only for a call that swaps a layer in.
        for node in walk(loaded.tree):
            if not isinstance(node, ast.Call) or not (name := dotted(node.func)):
                continue
            qualname = index.resolve(module, name, loaded.imports)
            quantizer = applied_by(qualname)
            if quantizer is not None and (node.args or node.keywords):
                model = node.args[0] if node.args else node.keywords[0].value
                found.append(_application(index, loaded, quantizer, node, model))
                continue
            if lightning and (fabric_plugin(qualname) or fabric_class(qualname)):
                (plugins if fabric_plugin(qualname) else fabrics).append(node)
                continue
            swap = swapped_in(qualname)
            if swap is None:
                continue
            function = _enclosing_function(loaded, node)
            if function is not None and _swaps(function) and id(function) not in swapping:
                swapping[id(function)] = (function, swap, node)
        for function, swap, node in swapping.values():
            found.append(_swap_application(index, loaded, swap, function, node))
        if plugins:
            found.extend(fabric_applications(index, loaded, plugins, fabrics, _model_of))
    return found


def _enclosing_function(loaded: _File, node: ast.AST):
    return enclosing_function(loaded.parents, node)


def _enclosing_class(loaded: _File, node: ast.AST) -> str | None:
    parts = []
    while id(node) in loaded.parents:
        node = loaded.parents[id(node)]
        if isinstance(node, ast.ClassDef):
            parts.append(node.name)
    return f"{loaded.module}.{'.'.join(reversed(parts))}" if parts else None


def _swaps(function) -> bool:
    """Does the function put a module into another (`setattr(m, name, layer)`, `m._modules[k] = layer`,
    `m.proj = layer`, `m[i] = layer`)?"""
    for node in walk(function):
        if isinstance(node, ast.Call) and dotted(node.func) == "setattr":
            return True
        # not `layer.weight = Params4bit(...)`: filling the new layer is no swap
        if isinstance(node, ast.Assign) and any(
                isinstance(target, ast.Subscript) or
                isinstance(target, ast.Attribute) and target.attr not in _LAYER_PARTS for target in node.targets):
            return True
    return False


def _swap_application(index, loaded: _File, swap: Quantizer, function, node: ast.Call) -> Application:
    arguments = function.args.posonlyargs + function.args.args
    application = Application(swap, loaded.path, node.lineno, ast.unparse(node.func), loaded.module.split(".", 1)[0])
    if not arguments:
        application.unknown = f"`{function.name}` swaps it into a module it takes no parameter for"
        return application
    _model_of(index, loaded, function, ast.Name(arguments[0].arg, ast.Load()), application, 0)
    return application


def _application(index, loaded: _File, quantizer: Quantizer, call: ast.Call, model: ast.expr) -> Application:
    application = Application(quantizer, loaded.path, call.lineno, ast.unparse(call.func),
                              loaded.module.split(".", 1)[0])
    _model_of(index, loaded, _enclosing_function(loaded, call), model, application, 0)
    return application


def _model_of(index, loaded: _File, function, model: ast.expr, application: Application, depth: int) -> None:
    """Add the classes `model` (an expression in `function` of `loaded`) can be to `application`,
    or say why they cannot be told."""
    text = ast.unparse(model)
    if isinstance(model, ast.Call) and (name := dotted(model.func)):
        qualname = index.resolve(loaded.module, name, loaded.imports)
        if index.class_location(qualname) is not None:
            application.classes.append(qualname)
            return
        application.unknown = application.unknown or f"the model is what `{name}(...)` returns"
        return
    if not isinstance(model, ast.Name):
        application.unknown = application.unknown or f"which model `{text}` is cannot be told here"
        return
    if function is None:
        values = _assigned(loaded.tree.body, model.id)
    else:
        parameters = [arg.arg for arg in function.args.posonlyargs + function.args.args + function.args.kwonlyargs]
        if model.id in parameters:
            if model.id == "self" and parameters[0] == "self":
                owner = _enclosing_class(loaded, function)
                if owner is not None:
                    application.classes.append(owner)
                    return
            _from_callers(index, loaded, function, parameters.index(model.id), application, depth)
            return
        values = _assigned(walk(function), model.id)
    if not values:
        application.unknown = application.unknown or f"`{text}` is not assigned a model here"
        return
    for value in values:
        _model_of(index, loaded, function, value, application, depth)


def _assigned(nodes, name: str) -> list[ast.expr]:
    """The values assigned `name`, but `model = fabric.setup(model)`: Fabric's setup (and its
    precision's `convert_module`) hands back the model it is given, whose classes are those of the
    other assignments."""
    return [node.value for node in nodes if isinstance(node, ast.Assign) and len(node.targets) == 1
            and isinstance(node.targets[0], ast.Name) and node.targets[0].id == name
            and not _rewraps(node.value, name)]


def _rewraps(value: ast.expr, name: str) -> bool:
    return isinstance(value, ast.Call) and isinstance(value.func, ast.Attribute) and value.func.attr in _REWRAPS \
        and bool(value.args) and isinstance(value.args[0], ast.Name) and value.args[0].id == name


def _from_callers(index, loaded: _File, function, position: int, application: Application, depth: int) -> None:
    """The models the calls of `function` in the tree pass at `position` (one step per depth); none
    found: a library's API, not an application to this tree."""
    if depth >= _FOLLOW_DEPTH:
        application.unknown = application.unknown or f"`{function.name}` is handed its model from too far away"
        return
    for caller_file in _files_naming(index, loaded, function.name):
        for node in walk(caller_file.tree):
            if not (isinstance(node, ast.Call) and (dotted(node.func) or "").rsplit(".", 1)[-1] == function.name):
                continue
            caller = _enclosing_function(caller_file, node)
            if caller is function:
                continue  # the recursion into children
            argument = node.args[position] if position < len(node.args) else None
            if argument is None or isinstance(argument, ast.Starred):
                continue
            _model_of(index, caller_file, caller, argument, application, depth + 1)


def _files_naming(index, loaded: _File, name: str) -> list[_File]:
    """This file and the files of the tree that import `name` from it."""
    files = [loaded]
    for module, header in index.modules.naming(((name,),)):
        if module != loaded.module and any(target == f"{loaded.module}.{name}" for target in header.imports.values()):
            other = _load(index, module, header)
            if other is not None:
                files.append(other)
    return files
