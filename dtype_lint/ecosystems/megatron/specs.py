"""Which classes a layer built through `build_module(...)` can be: the module specs of the tree.

megatron-core's shape (0.19.2, transformer/spec_utils.py): a layer's `__init__` is handed a
submodules dataclass (`submodules: MambaMixerSubmodules`) and builds each sublayer with
`self.in_proj = build_module(submodules.in_proj, ...)`; the class is the one a layer-specs file
names, `MambaMixerSubmodules(in_proj=TELayerNormColumnParallelLinear, ...)`, the field holding a
class, a `ModuleSpec(module=Class, ...)` or an import path `("package.module", "Class")`. So the
classes `self.in_proj` can be are the values every construction of that dataclass in the tree gives
the field. Where one cannot be read (a spec computed by a call, a dataclass no file of the tree
builds), the answer says so: the family reports such a layer with low confidence, never passes it.
"""

from __future__ import annotations

import ast
from dataclasses import field

from dtype_lint.analysis.index.class_index import dotted
from dtype_lint.core.records import record

BUILDER = "build_module"
SPEC_CLASS = "ModuleSpec"
# The parameter of `build_module` that takes the spec (megatron-core's name), when passed by keyword.
SPEC_PARAMETER = "spec_or_module"
# `Optional[X]`, `Union[X, None]`: the names of an annotation that are not the class.
_TYPING_WRAPPERS = frozenset({"Optional", "Union", "typing.Optional", "typing.Union", "None"})


@record(frozen=True)
class SpecClass:
    """One class a spec gives the layer (`qualname`), or a value that could not be read (None)."""

    qualname: str | None
    written: str  # the value as the spec writes it
    path: str
    line: int


@record
class BuildSite:
    """A layer attribute built through `build_module`, and what its spec can make it."""

    attribute: str  # `in_proj`
    spec_text: str  # `submodules.in_proj`
    path: str
    line: int
    classes: list[SpecClass] = field(default_factory=list)
    unknown: str = ""  # why the classes cannot all be told ("" when every value was read)
    dataclass_name: str = ""  # the submodules dataclass whose field holds the spec


def is_built_by_spec(qualname: str | None) -> bool:
    """Is this "class" megatron's builder function (`build_module`), as a layer's resolution
    reports an attribute assigned its result?"""
    return qualname is not None and qualname.rsplit(".", 1)[-1] == BUILDER


def build_site(resolver, inst, expr_text: str) -> BuildSite | None:
    """The `build_module(...)` construction of the layer `expr_text` names and the classes its
    spec can make it; None where the layer's construction cannot be found."""
    found = _construction(resolver, inst, expr_text)
    if found is None:
        return None
    origin, owner, facts = found
    call = origin.call
    spec = call.args[0] if call.args else next((kw.value for kw in call.keywords if kw.arg == SPEC_PARAMETER), None)
    attribute = expr_text.rsplit(".", 1)[-1]
    if spec is None:
        return BuildSite(attribute, "", origin.path, origin.line, unknown="`build_module` is given no spec")
    site = BuildSite(attribute, ast.unparse(spec), origin.path, origin.line)
    if isinstance(spec, ast.Attribute) and isinstance(spec.value, ast.Name) and spec.value.id in origin.method_params:
        _from_dataclass_field(resolver, site, spec, owner, origin, facts)
    elif (direct := _spec_value(resolver, spec, facts.module, facts.imports, origin.path)) is not None:
        site.classes = direct
    else:
        site.unknown = f"the spec `{site.spec_text}` is not a parameter's field, a class or a `ModuleSpec`"
    unread = [c.written for c in site.classes if c.qualname is None]
    if unread and not site.unknown:
        site.unknown = "a spec computes it: " + ", ".join(f"`{text}`" for text in dict.fromkeys(unread))
    return site


def _construction(resolver, inst, expr_text: str):
    """(the AttrOrigin of the `build_module` assignment, its class, that file's facts), found from
    the first step of the layer's resolution (the assignment's path and line)."""
    if not inst.chain:
        return None
    step = inst.chain[0]
    module = _module_of_path(resolver, step.path)
    facts = resolver.project.file_facts(module) if module else None
    if facts is None:
        return None
    attribute = expr_text.rsplit(".", 1)[-1]
    for qualname in list(facts.classes):
        class_facts = facts.classes[qualname]
        for origin in class_facts.attrs.get(attribute, ()):
            if origin.kind == "call" and origin.call is not None and origin.line == step.line and \
                    is_built_by_spec(origin.type_name):
                return origin, class_facts, facts
    return None


def _module_of_path(resolver, path: str) -> str | None:
    if path == resolver.path:
        return resolver.module
    by_path = resolver.index.cached_facts(("megatron module paths",),
                                          lambda: {shown: module for module, shown in
                                                   resolver.index.modules.module_paths()}, census=True)
    return by_path.get(path)


def _from_dataclass_field(resolver, site: BuildSite, spec: ast.Attribute, owner, origin, facts) -> None:
    """`submodules.in_proj`, `submodules` a parameter annotated with a dataclass: the values every
    construction of that dataclass in the tree gives the field."""
    parameter = spec.value.id  # type: ignore[attr-defined]  # checked by the caller
    method = owner.methods.get(origin.method)
    annotation = _annotation_of(method, parameter)
    if annotation is None:
        site.unknown = f"`{parameter}` has no type annotation: the dataclass that holds `{spec.attr}` cannot be told"
        return
    dataclass_name = in_tree(resolver, resolver.index.resolve(facts.module, annotation, facts.imports))
    site.dataclass_name = dataclass_name
    values = spec_census(resolver, dataclass_name).get(spec.attr, [])
    if not values:
        short = dataclass_name.rsplit(".", 1)[-1]
        site.unknown = f"no `{short}(...)` in the tree names `{spec.attr}`: the spec is written outside it"
        return
    for value, module, imports, path in values:
        read = _spec_value(resolver, value, module, imports, path)
        site.classes.extend(read if read is not None else
                            [SpecClass(None, ast.unparse(value), path, getattr(value, "lineno", 0))])


def _annotation_of(method, parameter: str) -> str | None:
    """The class a parameter's annotation names (`Optional[X]` and `Union[X, None]` unwrapped)."""
    if method is None:
        return None
    arguments = method.args
    for arg in arguments.posonlyargs + arguments.args + arguments.kwonlyargs:
        if arg.arg == parameter and arg.annotation is not None:
            return _annotated_class(arg.annotation)
    return None


def _annotated_class(annotation: ast.expr) -> str | None:
    if isinstance(annotation, ast.Constant) and isinstance(annotation.value, str):
        try:
            annotation = ast.parse(annotation.value, mode="eval").body
        except SyntaxError:
            return None
    if isinstance(annotation, ast.Subscript) and dotted(annotation.value) in _TYPING_WRAPPERS:
        items = annotation.slice.elts if isinstance(annotation.slice, ast.Tuple) else [annotation.slice]
        named = [name for name in (_annotated_class(item) for item in items) if name and name not in _TYPING_WRAPPERS]
        return named[0] if len(named) == 1 else None
    if isinstance(annotation, ast.BinOp) and isinstance(annotation.op, ast.BitOr):  # `X | None`
        named = [name for name in (_annotated_class(side) for side in (annotation.left, annotation.right))
                 if name and name not in _TYPING_WRAPPERS]
        return named[0] if len(named) == 1 else None
    return dotted(annotation)


def _spec_value(resolver, value: ast.expr, module: str, imports: dict[str, str], path: str) -> list[SpecClass] | None:
    """The class a spec value names: a class, `ModuleSpec(module=Class, ...)`, an import path
    `("package.module", "Class")`; [] for `None` (no layer); None when it is none of those."""
    line = getattr(value, "lineno", 0)
    if isinstance(value, ast.Constant) and value.value is None:
        return []
    if isinstance(value, ast.Tuple) and len(value.elts) == 2 and \
            all(isinstance(e, ast.Constant) and isinstance(e.value, str) for e in value.elts):
        named = f"{value.elts[0].value}.{value.elts[1].value}"  # type: ignore[attr-defined]
        return [SpecClass(in_tree(resolver, named), ast.unparse(value), path, line)]
    if isinstance(value, ast.Call) and (dotted(value.func) or "").rsplit(".", 1)[-1] == SPEC_CLASS:
        inner = value.args[0] if value.args else next((kw.value for kw in value.keywords if kw.arg == "module"), None)
        return _spec_value(resolver, inner, module, imports, path) if inner is not None else None
    name = dotted(value)
    if name is None:
        return None
    return [SpecClass(in_tree(resolver, resolver.index.resolve(module, name, imports)), name, path, line)]


def in_tree(resolver, qualname: str) -> str:
    """The tree's own name for a class imported by its installed name: megatron-core's files import
    `megatron.core.X`, while its tree (a namespace package, `megatron/` without `__init__.py`) names
    the module `core.X`. The name as given where no shorter one is a class of the tree."""
    if resolver.index.class_location(qualname) is not None:
        return qualname
    parts = qualname.split(".")
    for start in range(1, len(parts) - 1):
        shorter = resolver.index.canonical(".".join(parts[start:]))
        if resolver.index.class_location(shorter) is not None:
            return shorter
    return qualname


def spec_census(resolver, dataclass_name: str) -> dict[str, list[tuple[ast.expr, str, dict[str, str], str]]]:
    """Field → (value, module, imports, path) for every keyword every call of the submodules
    dataclass in the tree passes (`MambaMixerSubmodules(in_proj=..., out_proj=...)`). Only the
    files that import or define the dataclass are parsed; computed once per run and dataclass."""
    return resolver.index.cached_facts(("megatron spec census", dataclass_name),
                                       lambda: _census(resolver, dataclass_name))


def _census(resolver, dataclass_name: str) -> dict[str, list[tuple[ast.expr, str, dict[str, str], str]]]:
    from dtype_lint.core.source import read_file

    short = dataclass_name.rsplit(".", 1)[-1]
    home = dataclass_name.rsplit(".", 1)[0]
    found: dict[str, list[tuple[ast.expr, str, dict[str, str], str]]] = {}
    for module, header in resolver.index.modules.items():
        if module != home and not any(target.rsplit(".", 1)[-1] == short for target in header.imports.values()):
            continue
        try:
            tree = ast.parse(read_file(header.path).text)
        except (OSError, SyntaxError, ValueError, UnicodeError):
            continue
        for node in ast.walk(tree):
            if not (isinstance(node, ast.Call) and node.keywords):
                continue
            name = dotted(node.func)
            if not name or name.rsplit(".", 1)[-1] != short or \
                    in_tree(resolver, resolver.index.resolve(module, name, header.imports)) != dataclass_name:
                continue
            for keyword in node.keywords:
                if keyword.arg:
                    found.setdefault(keyword.arg, []).append((keyword.value, module, header.imports, header.path))
    return found
