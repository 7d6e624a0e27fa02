"""Every construction of a class in the project: what `self` stands for in the class's methods.

A layer class's own methods, or a model class's, read `self.weight` / `self.proj.weight` on an
instance whose construction the resolver does not see (`self` is any instance). When the class
is built only in a few modules, each `C(...)` call there says which config reaches the instance:
built only with `quant_config=None` (a router gate subclass, a vision tower its one owner builds
without a config), no backend reaches it, whatever the class's own code could do with one.

`self_instance(resolver, qualname)` is that instance (config and constructor-parameter states
merged over every construction), or None when the project's use of the class is not all in
sight: a subclass, the class used other than called (`EntryClass = C`, a registry, `getattr`),
no construction at all, or more importing modules than `MAX_MODULES` (a shared class: every
model builds it). Asked only where a read would otherwise be reported (DTL003), and memoised on
the index per run.
"""

from __future__ import annotations

import ast

from dtype_lint.analysis.function_walk import parent_map, walk
from dtype_lint.analysis.index.class_index import dotted, import_words
from dtype_lint.analysis.storage.storage_model import ABSENT
from dtype_lint.core.findings import Evidence

MAX_MODULES = 8  # modules that may build the class, its own included; more: a shared class


def self_instance(resolver, qualname: str):
    """The Instance `self` stands for in `qualname`'s methods, read from its constructions
    (see the module docstring), or None."""
    index = resolver.index
    return index.cached_facts(("self-instance", qualname, resolver.config_params),
                              lambda: _build(resolver, qualname))


def _importers(index, name: str) -> list[tuple[str, str]]:
    """(importing module, import target) for every import, in any module, of a target whose last
    part is `name`. The census behind it (`_import_census`) is built once per run; only the
    modules whose import statements hold the word `name` have their headers read here."""
    loaded, words = index.cached_facts(("import-census",), lambda: _import_census(index), census=True)
    pairs = iter(loaded.get(name, ()))
    found = list(zip(pairs, pairs))
    for module in words.get(name, ()):
        header = index.modules.get(module)
        if header is not None:
            found.extend((module, target) for target in header.imports.values()
                         if target.rpartition(".")[2] == name)
    return found


def _import_census(index) -> tuple[dict[str, tuple[str, ...]], dict[str, tuple[str, ...]]]:
    """(last part of an import target -> importing module, target, importing module, ... in
    pairs, from the modules whose headers were read when it was built; word -> the other modules
    whose import statements hold that word, from their text, class_index.import_words). Flat: a
    tuple per pair cost more than its two references. Reading the words of a file instead of its
    header: vLLM 0.34.0 with every rule on extracted 2,932 headers here (of 3,580 in the run)
    only to learn what the few modules building one class import."""
    pairs: dict[str, list[str]] = {}
    words: dict[str, list[str]] = {}
    for module, header, held in index.modules.read_unread(import_words):
        if header is not None:
            for target in header.imports.values():
                pairs.setdefault(target.rpartition(".")[2], []).extend((module, target))
        else:
            for word in held:
                words.setdefault(word, []).append(module)
    return ({name: tuple(flat) for name, flat in pairs.items()},
            {word: tuple(modules) for word, modules in words.items()})


def _build(resolver, qualname: str):
    from dtype_lint.analysis.storage.layers import NONE, Instance, _Context, _merge

    index, project = resolver.index, resolver.project
    location = index.class_location(qualname)
    if location is None:
        return None
    own_module = location[0].module
    short = qualname.rpartition(".")[2]
    module_short = own_module.rpartition(".")[2]
    modules = {own_module}
    for name in (short, module_short):
        for module, target in _importers(index, name):
            canonical = index.canonical(target)
            if canonical == qualname or canonical == own_module:
                modules.add(module)
    if len(modules) > MAX_MODULES:
        return None
    config, env, passed, sites = None, None, None, []
    for module in sorted(modules):
        facts = project.file_facts(module)
        if facts is None or facts.tree is None:
            return None
        parents = parent_map(facts.tree)
        for node in walk(facts.tree):
            if isinstance(node, ast.ClassDef) and any(
                    dotted(b) and index.resolve(module, dotted(b), facts.imports) == qualname for b in node.bases):
                return None  # a subclass: `self` may be one of its instances, built elsewhere
            if not isinstance(node, (ast.Name, ast.Attribute)) or not isinstance(node.ctx, ast.Load):
                continue
            name = dotted(node)
            if not name or name.rpartition(".")[2] != short or index.resolve(module, name, facts.imports) != qualname:
                continue
            call = parents.get(id(node))
            if isinstance(call, ast.Attribute) or (isinstance(call, ast.Call) and call.func is not node):
                return None  # `C.from_config(...)`, `f(C)`: built where this cannot see
            if not isinstance(call, ast.Call):
                if isinstance(call, (ast.ImportFrom, ast.Import)) or _annotation(node, parents):
                    continue
                return None  # handed on as a value
            ctx = _context_at(call, parents, module, facts.imports, _Context)
            inst = resolver.construct(call, qualname, ctx)
            config = inst.config if config is None else _merge(config, inst.config)
            states = dict(inst.env)
            env = states if env is None else {k: _merge(v, states[k]) for k, v in env.items() if k in states}
            if inst.passed is not None and (passed is None or not passed.named):
                passed = inst.passed  # a config some construction names outweighs one only guessed
            sites.append((facts.path, call.lineno))
    if not sites or config is None:  # config is set with the first site
        return None
    where = ", ".join(f"{path}:{line}" for path, line in sites[:4]) + (" ..." if len(sites) > 4 else "")
    how = "without a quantization config" if config == NONE else "as its constructions pass it"
    step = Evidence(f"every construction of `{short}` in the project builds it {how} ({where})",
                    sites[0][0], sites[0][1])
    return Instance(qualname, config, tuple(sorted((env or {}).items())), (step,), passed, qualname)


def _annotation(node: ast.AST, parents: dict[int, ast.AST]) -> bool:
    """The name stands in an annotation (`proj: C`, `-> C`, `Optional[C]`): no object is made."""
    child, parent = node, parents.get(id(node))
    while isinstance(parent, (ast.Subscript, ast.BinOp, ast.Tuple, ast.Attribute)):
        child, parent = parent, parents.get(id(parent))
    if isinstance(parent, ast.AnnAssign):
        return parent.annotation is child
    if isinstance(parent, ast.arg):
        return parent.annotation is child
    if isinstance(parent, (ast.FunctionDef, ast.AsyncFunctionDef)):
        return parent.returns is child
    return False


def _context_at(call: ast.Call, parents: dict[int, ast.AST], module: str, imports: dict[str, str], context):
    """Where the call's arguments are evaluated: its enclosing function's parameters (unknown
    states) and single-assignment locals."""
    function_node = parents.get(id(call))
    while function_node is not None and not isinstance(
            function_node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
        function_node = parents.get(id(function_node))
    if function_node is None:
        return context(frozenset(), {}, {}, {}, module, imports)
    args = function_node.args
    params = frozenset(a.arg for a in args.posonlyargs + args.args + args.kwonlyargs
                       + [a for a in (args.vararg, args.kwarg) if a is not None])
    assigned: dict[str, list[ast.expr]] = {}
    if not isinstance(function_node, ast.Lambda):
        for node in ast.walk(function_node):
            if isinstance(node, ast.Assign):
                for target in node.targets:
                    for name in ast.walk(target):
                        if isinstance(name, ast.Name):
                            assigned.setdefault(name.id, []).append(
                                node.value if target is name else ast.Name(id="?", ctx=ast.Load()))
            elif isinstance(node, (ast.AnnAssign, ast.AugAssign)) and isinstance(node.target, ast.Name):
                assigned.setdefault(node.target.id, []).append(ast.Name(id="?", ctx=ast.Load()))
    locals_ = {name: values[0] for name, values in assigned.items() if len(values) == 1 and name not in params}
    return context(params, locals_, {}, {}, module, imports)


def _built_without_config(ctx, layer: ast.expr, function) -> bool:
    """`self...` of a class whose every construction in the project is in sight
    (analysis/storage/constructions.py), and those constructions leave no config to this layer: a
    `ReplicatedLinear` subclass built only with `quant_config=None`, a tower built without one."""
    root = layer
    while isinstance(root, ast.Attribute):
        root = root.value
    if not (isinstance(root, ast.Name) and root.id == function.scope.self_name and function.class_qualname):
        return False
    this = self_instance(ctx.layers, function.class_qualname)
    if this is None:
        return False
    inst = ctx.layers.resolve(layer, function.scope, this=this)
    return inst.qualname is not None and ctx.layers.quantizable(inst, ast.unparse(layer), None, ABSENT) is None


def _always_defines(ctx, obj: ast.expr, name: str, function) -> bool:
    """`obj` is `self.X` (or a chain to it) whose every assignment in its class builds an object
    of a class (or a subclass of one) whose MRO defines method `name`."""
    if not isinstance(obj, ast.Attribute):
        return False
    layers = ctx.layers
    owner = layers.resolve(obj.value, function.scope)
    if owner.qualname is None:
        return False
    found = layers.project.attr_origins(owner.qualname, obj.attr)
    if found is None or not found[1]:
        return False
    for origin in found[1]:
        if origin.kind != "call" or not origin.type_name:
            return False
        if not any(name in facts.methods for facts in
                   (layers.project.class_facts(q) for q in layers.index.mro(origin.type_name)) if facts):
            return False
    return True

def never_reaches(ctx, node: ast.AST, layer: ast.expr, function) -> bool:
    """No construction that runs together with the read at `node` gives `layer` a config (DTL003):
    every construction of the class passes none, the one that does is under the other outcome of a
    module-level flag, or the read is in the arm of a `hasattr(self.X, "m")` test that every
    construction of `self.X` makes true. `ctx` is the rule's context (`layers`, `tree`, `source`)."""
    from dtype_lint.analysis.guard_engine.module_flags import other_arm_builds
    from dtype_lint.analysis.guard_engine.never_runs import false_arm_of_method_check

    return (_built_without_config(ctx, layer, function) or other_arm_builds(ctx, node, layer, function)
            or false_arm_of_method_check(node, function.parents,
                                         lambda obj, name: _always_defines(ctx, obj, name, function)))
