"""Lightning Fabric's bitsandbytes precision plugin as a quantizer application (catalogue.py).

`plugins = BitsandbytesPrecision("nf4", dtype)` handed to `fabric = L.Fabric(..., plugins=plugins)`
(the plugin itself, a name assigned it in the same function, or a list holding either) applies
bitsandbytes to the models that Fabric builds under `with fabric.init_module(...)` (the classes of
the tree constructed in the block) and to the model given to `fabric.setup(...)`,
`fabric.setup_module(...)` or its precision's `convert_module(...)`. The Fabric is followed into
the functions of the same file it is handed to (`fabric.launch(main)` calls `main(fabric)`), two
steps at most. The mode, when a literal, picks the storage; otherwise both packing ones are named.

What cannot be told is an `Application` with the reason, never a silent pass: a plugin handed to
no `Fabric(plugins=...)` of its function (a `Trainer`'s, a parameter's), a Fabric kept where a name
does not follow it, a Fabric none of whose models is seen, `ignore_modules` (the layers it keeps
float cannot be told from the class), a model built under `init_module` by a factory.
"""

from __future__ import annotations

import ast

from dtype_lint.analysis.function_walk import walk
from dtype_lint.analysis.index.class_index import dotted
from dtype_lint.core.ast_walk import enclosing_function
from dtype_lint.ecosystems.quantizers.catalogue import (
    FABRIC_ANY_MODE,
    FABRIC_CONVERT,
    FABRIC_INIT,
    FABRIC_LAUNCH,
    FABRIC_MODES,
    FABRIC_PLUGIN_CLASS,
    FABRIC_SETUP,
    Application,
    Quantizer,
)

_FOLLOW_DEPTH = 2  # the Fabric's function → a function of the file it is handed to → one more


def fabric_applications(index, loaded, plugins: list[ast.Call], fabrics: list[ast.Call], model_of) -> list[Application]:
    """The applications of the plugins constructed in `loaded` (applications.py's parsed file;
    `fabrics`: its `Fabric(...)` calls); `model_of` adds the classes a model expression can be
    (applications.py's, which follows a name's assignments and a parameter's callers)."""
    found: list[Application] = []
    for plugin in plugins:
        quantizer = _quantizer(plugin)
        function = enclosing_function(loaded.parents, plugin)
        package = loaded.module.split(".", 1)[0]
        unknown = Application(quantizer, loaded.path, plugin.lineno, ast.unparse(plugin.func), package)
        if any(keyword.arg == "ignore_modules" and not _is_none(keyword.value) for keyword in plugin.keywords) \
                or len(plugin.args) > 2 and not _is_none(plugin.args[2]):
            unknown.unknown = "its `ignore_modules` keeps some `nn.Linear` layers float: which cannot be told here"
            found.append(unknown)
            continue
        names = {target.id for node in [loaded.parents.get(id(plugin))] if isinstance(node, ast.Assign)
                 for target in node.targets if isinstance(target, ast.Name)}
        reached = [fabric for fabric in fabrics if enclosing_function(loaded.parents, fabric) is function
                   and _takes(fabric, plugin, names)]
        if not reached:
            unknown.unknown = "it is handed to no `Fabric(plugins=...)` of its function"
            found.append(unknown)
            continue
        before = len(found)
        # the names the Fabrics are kept in (`fabric = L.Fabric(...)` in two branches: one name)
        kept = dict.fromkeys(assigned.targets[0].id for fabric in reached
                             if isinstance(assigned := loaded.parents.get(id(fabric)), ast.Assign)
                             and len(assigned.targets) == 1 and isinstance(assigned.targets[0], ast.Name))
        seen: set[tuple[int, str]] = set()
        for name in kept:
            _uses(index, loaded, function, name, quantizer, found, 0, seen, model_of)
        if len(found) == before:
            unknown.unknown = "the `Fabric` it is handed to builds or sets up no model this analysis follows"
            found.append(unknown)
    return found


def _quantizer(plugin: ast.Call) -> Quantizer:
    mode = plugin.args[0] if plugin.args else next((k.value for k in plugin.keywords if k.arg == "mode"), None)
    if isinstance(mode, ast.Constant) and isinstance(mode.value, str):
        return FABRIC_MODES.get(mode.value, FABRIC_ANY_MODE)
    return FABRIC_ANY_MODE


def _is_none(node: ast.expr) -> bool:
    return isinstance(node, ast.Constant) and node.value is None


def _takes(fabric: ast.Call, plugin: ast.Call, names: set[str]) -> bool:
    """Is `plugin` (or a name assigned it) in the Fabric's `plugins=`?"""
    for keyword in fabric.keywords:
        if keyword.arg == "plugins":
            return any(node is plugin or isinstance(node, ast.Name) and node.id in names
                       for node in ast.walk(keyword.value))
    return False


def _root(node: ast.expr) -> str | None:
    """`fabric` for `fabric.setup` and `fabric._precision.convert_module`."""
    while isinstance(node, ast.Attribute):
        node = node.value
    return node.id if isinstance(node, ast.Name) else None


def _uses(index, loaded, function, fabric: str, quantizer: Quantizer, found: list[Application],
          depth: int, seen: set[tuple[int, str]], model_of) -> None:
    """The applications of the Fabric named `fabric` in `function` (None: the module's body), and in
    the functions of the file it is handed to (`seen`: each function and name once)."""
    if (id(function), fabric) in seen:
        return
    seen.add((id(function), fabric))
    scope = walk(function) if function is not None else walk(loaded.tree)
    package = loaded.module.split(".", 1)[0]
    for node in scope:
        if isinstance(node, (ast.With, ast.AsyncWith)):
            for item in node.items:
                call = item.context_expr
                if isinstance(call, ast.Call) and isinstance(call.func, ast.Attribute) and \
                        call.func.attr == FABRIC_INIT and _root(call.func) == fabric:
                    application = Application(quantizer, loaded.path, call.lineno, ast.unparse(call.func), package)
                    _built_under(index, loaded, node.body, application)
                    found.append(application)
            continue
        if not isinstance(node, ast.Call) or not isinstance(node.func, (ast.Attribute, ast.Name)):
            continue
        if isinstance(node.func, ast.Attribute) and _root(node.func) == fabric and node.args and \
                (node.func.attr in FABRIC_SETUP or node.func.attr == FABRIC_CONVERT and
                 isinstance(node.func.value, ast.Attribute)):
            application = Application(quantizer, loaded.path, node.lineno, ast.unparse(node.func), package)
            model_of(index, loaded, function, node.args[0], application, 0)
            found.append(application)
            continue
        if depth >= _FOLLOW_DEPTH:
            continue
        handed = _handed(loaded, node, fabric)
        if handed is not None and handed[0] is not function:
            _uses(index, loaded, handed[0], handed[1], quantizer, found, depth + 1, seen, model_of)


def _handed(loaded, call: ast.Call, fabric: str):
    """(the function of this file `call` hands the Fabric to, its parameter's name), or None:
    `fabric.launch(main, ...)` calls `main(fabric, ...)`; `helper(x, fabric)`, `helper(f=fabric)`."""
    position: int | None = 0
    keyword: str | None = None
    if isinstance(call.func, ast.Attribute) and call.func.attr == FABRIC_LAUNCH and _root(call.func) == fabric:
        callee = call.args[0] if call.args else None
    else:
        callee = call.func
        position = next((i for i, arg in enumerate(call.args) if isinstance(arg, ast.Name) and arg.id == fabric), None)
        keyword = next((k.arg for k in call.keywords if isinstance(k.value, ast.Name) and k.value.id == fabric), None)
    target = _function_named(loaded, callee) if position is not None or keyword is not None else None
    if target is None:
        return None
    parameters = [arg.arg for arg in target.args.posonlyargs + target.args.args + target.args.kwonlyargs]
    if position is not None and position < len(parameters):
        return target, parameters[position]
    if keyword is not None and keyword in parameters:
        return target, keyword
    return None


def _function_named(loaded, callee: ast.expr | None):
    if not isinstance(callee, ast.Name):
        return None
    return next((node for node in loaded.tree.body if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef))
                 and node.name == callee.id), None)


def _built_under(index, loaded, body: list[ast.stmt], application: Application) -> None:
    """The classes of the tree constructed in the `init_module` block: every `torch.nn.Linear` they
    build is the plugin's class there. A block that builds none of the tree's classes but assigns
    what a call returns: the model is a factory's, not told here."""
    factories = []
    for statement in body:
        for node in walk(statement):
            if not isinstance(node, ast.Call) or not (name := dotted(node.func)):
                continue
            qualname = index.resolve(loaded.module, name, loaded.imports)
            if index.class_location(qualname) is not None:
                application.classes.append(qualname)
            elif isinstance(loaded.parents.get(id(node)), ast.Assign) and \
                    not name.endswith(FABRIC_PLUGIN_CLASS):
                factories.append(name)
    if not application.classes and factories:
        application.unknown = f"the model built under it is what `{factories[0]}(...)` returns"
