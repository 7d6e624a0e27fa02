"""Per-file facts and layer-type resolution: what class does `self.kv_b_proj` hold?

Facts come from stdlib `ast` of the files that survive the prefilter (and, lazily, of the files
defining their base classes). Attribute facts are per class: `self.X = Cls(...)`,
`self.X = param` with `param: Cls`, `X: Cls` annotations. Resolution follows `self`, annotated
parameters, local assignments and attribute chains, and records each step as Evidence.
"""

from __future__ import annotations

import ast
import fnmatch
from dataclasses import dataclass, field

from .findings import Evidence
from .index import QuantizableLayerIndex, dotted, record_import


@dataclass(frozen=True)
class AttrOrigin:
    type_name: str | None  # qualified class name, None when not resolvable
    quant: str  # "set": built with quant_config=<something>; "none": quant_config=None; "": no word
    how: str  # human words for the evidence line
    path: str
    line: int


@dataclass
class ClassFacts:
    qualname: str
    path: str
    line: int
    attrs: dict[str, list[AttrOrigin]] = field(default_factory=dict)
    # `super().__init__(..., quant_config=None)`: this layer class is never quantized.
    unquantized_super: bool = False


@dataclass
class FileFacts:
    module: str
    path: str
    imports: dict[str, str]
    classes: dict[str, ClassFacts]


def _quant_kw(call: ast.Call) -> str:
    """"set": `quant_config=<x>`; "none": `quant_config=None`; "absent": a constructor call that
    cannot pass one (no such keyword, no `**kwargs`, few positionals); "": unknown."""
    for kw in call.keywords:
        if kw.arg == "quant_config":
            if isinstance(kw.value, ast.Constant) and kw.value.value is None:
                return "none"
            return "set"
    if any(kw.arg is None for kw in call.keywords) or any(isinstance(a, ast.Starred) for a in call.args):
        return ""
    # vLLM's linear layers take quant_config sixth at the earliest; fewer positionals cannot pass it.
    return "absent" if len(call.args) < 6 else ""


def annotation_name(node: ast.AST | None) -> str | None:
    """`X`, `a.X`, `"X"`, `Optional[X]`, `X | None` → dotted `X`."""
    if node is None:
        return None
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        try:
            node = ast.parse(node.value, mode="eval").body
        except SyntaxError:
            return None
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.BitOr):
        for side in (node.left, node.right):
            if not (isinstance(side, ast.Constant) and side.value is None):
                return annotation_name(side)
        return None
    if isinstance(node, ast.Subscript):
        base = dotted(node.value) or ""
        if base.rsplit(".", 1)[-1] in ("Optional", "Union"):
            inner = node.slice
            elts = inner.elts if isinstance(inner, ast.Tuple) else [inner]
            for e in elts:
                if not (isinstance(e, ast.Constant) and e.value is None):
                    return annotation_name(e)
        return None
    return dotted(node)


def collect_imports(tree: ast.Module, module: str, is_package: bool) -> dict[str, str]:
    imports: dict[str, str] = {}
    for node in ast.walk(tree):
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            record_import(node, imports, module, is_package)
    return imports


def build_file_facts(tree: ast.Module, module: str, path: str, is_package: bool,
                     index: QuantizableLayerIndex, imports: dict[str, str] | None = None) -> FileFacts:
    if imports is None:
        imports = collect_imports(tree, module, is_package)
    facts = FileFacts(module, path, imports, {})

    def resolve(name: str | None) -> str | None:
        return index.resolve(module, name, imports) if name else None

    def visit_class(cls: ast.ClassDef, prefix: str):
        qual = f"{prefix}.{cls.name}" if prefix else cls.name
        cf = ClassFacts(f"{module}.{qual}" if module else qual, path, cls.lineno)
        facts.classes[cf.qualname] = cf
        for stmt in cls.body:
            if isinstance(stmt, ast.AnnAssign) and isinstance(stmt.target, ast.Name):
                t = resolve(annotation_name(stmt.annotation))
                if t:
                    cf.attrs.setdefault(stmt.target.id, []).append(
                        AttrOrigin(t, "", f"class attribute `{stmt.target.id}: {t.rsplit('.', 1)[-1]}`", path, stmt.lineno))
            elif isinstance(stmt, ast.ClassDef):
                visit_class(stmt, qual)
            elif isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef)):
                visit_method(cf, stmt)

    def visit_method(cf: ClassFacts, fn: ast.FunctionDef):
        args = fn.args.posonlyargs + fn.args.args + fn.args.kwonlyargs
        if not args:
            return
        self_name = args[0].arg
        params = {a.arg: a.annotation for a in args[1:]}
        for node in iter_statements(fn.body):
            if isinstance(node, ast.Expr) and isinstance(node.value, ast.Call):
                if fn.name == "__init__" and _is_super_init(node.value) and _quant_kw(node.value) == "none":
                    cf.unquantized_super = True
                continue
            if isinstance(node, ast.Assign):
                targets, value, ann = node.targets, node.value, None
            elif isinstance(node, ast.AnnAssign):
                targets, value, ann = [node.target], node.value, node.annotation
            else:
                continue
            for tgt in targets:
                if not (isinstance(tgt, ast.Attribute) and isinstance(tgt.value, ast.Name)
                        and tgt.value.id == self_name):
                    continue
                origin = _origin_of(value, ann, params, resolve, path, node.lineno, tgt.attr)
                if origin is not None:
                    cf.attrs.setdefault(tgt.attr, []).append(origin)

    for stmt in tree.body:
        if isinstance(stmt, ast.ClassDef):
            visit_class(stmt, "")
        elif isinstance(stmt, ast.If):  # classes under `if TYPE_CHECKING:`/platform checks
            for s in stmt.body + stmt.orelse:
                if isinstance(s, ast.ClassDef):
                    visit_class(s, "")
    return facts


def iter_statements(body):
    """Statements only, through compound statements but not into nested defs: far cheaper than
    ast.walk, and attribute facts live in statements."""
    todo = list(reversed(body))
    while todo:
        stmt = todo.pop()
        yield stmt
        if isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            continue
        for name in ("body", "orelse", "finalbody"):
            todo.extend(reversed(getattr(stmt, name, None) or []))
        for h in getattr(stmt, "handlers", None) or []:
            todo.extend(reversed(h.body))
        for c in getattr(stmt, "cases", None) or []:
            todo.extend(reversed(c.body))


def _is_super_init(call: ast.Call) -> bool:
    f = call.func
    return (isinstance(f, ast.Attribute) and f.attr == "__init__" and isinstance(f.value, ast.Call)
            and isinstance(f.value.func, ast.Name) and f.value.func.id == "super")


def _origin_of(value, ann, params, resolve, path, line, attr) -> AttrOrigin | None:
    if ann is not None:
        t = resolve(annotation_name(ann))
        if t:
            return AttrOrigin(t, "", f"`self.{attr}: {t.rsplit('.', 1)[-1]}` annotation", path, line)
    if isinstance(value, ast.Call):
        name = dotted(value.func)
        if name:
            t = resolve(name)
            q = _quant_kw(value)
            extra = {"set": " with `quant_config=`", "none": " with `quant_config=None`",
                     "absent": " without `quant_config`"}.get(q, "")
            return AttrOrigin(t, q, f"`self.{attr} = {name}(...)`{extra}", path, line)
    if isinstance(value, ast.Name) and value.id in params:
        t = resolve(annotation_name(params[value.id]))
        if t:
            return AttrOrigin(t, "", f"`self.{attr}` is set from parameter `{value.id}: {t.rsplit('.', 1)[-1]}`",
                              path, line)
    return None


@dataclass(frozen=True)
class LayerType:
    qualname: str | None
    quant: str = ""
    chain: tuple[Evidence, ...] = ()


class ProjectFacts:
    """Facts of the analysed file, built only if a site needs them, plus lazily parsed files
    that define base classes (kept on the index, so every file analysed against it shares them:
    many files' layers are defined in one `linear.py`)."""

    def __init__(self, index: QuantizableLayerIndex, load_file=None):
        self.index = index
        self._by_module: dict[str, FileFacts] = {}
        self._pending: dict[str, tuple] = {}
        self._load_file = load_file  # path -> text or None

    def register(self, tree: ast.Module, module: str, path: str, is_package: bool, imports: dict[str, str]) -> None:
        self._pending[module] = (tree, module, path, is_package, imports)

    def add(self, facts: FileFacts) -> None:
        self._by_module[facts.module] = facts

    def file_facts(self, module: str) -> FileFacts | None:
        if module in self._by_module:
            return self._by_module[module]
        if module in self._pending:
            tree, module, path, is_pkg, imports = self._pending.pop(module)
            facts = build_file_facts(tree, module, path, is_pkg, self.index, imports)
            self.add(facts)
            return facts
        header = self.index.modules.get(module)
        if header is None or self._load_file is None:
            return None
        facts = self.index.facts_cache.get(header.path)
        if facts is None:
            text = self._load_file(header.path)
            if text is None:
                return None
            try:
                tree = ast.parse(text)
            except (SyntaxError, ValueError):
                return None
            facts = build_file_facts(tree, header.module, header.path, header.is_package, self.index, header.imports)
            self.index.facts_cache[header.path] = facts
        self.add(facts)
        return facts

    def class_facts(self, qualname: str) -> ClassFacts | None:
        loc = self.index.class_location(qualname)
        if loc is None:
            return None
        facts = self.file_facts(loc[0].module)
        return facts.classes.get(qualname) if facts else None

    def attr_origin(self, class_qualname: str, attr: str) -> AttrOrigin | None:
        for q in self.index.mro(class_qualname):
            cf = self.class_facts(q)
            if cf and attr in cf.attrs:
                origins = cf.attrs[attr]
                # Prefer an origin that names a class; quant_config=<x> beats no word on it.
                # Prefer an origin that names a class, then one that may be quantized.
                return sorted(origins, key=lambda o: (o.type_name is None, o.quant != "set", o.quant == "absent"))[0]
        return None

    def never_quantized(self, class_qualname: str) -> bool:
        return any((cf := self.class_facts(q)) is not None and cf.unquantized_super
                   for q in self.index.mro(class_qualname))


class FunctionScope:
    """One function's parameters and local assignments, for alias and type resolution."""

    def __init__(self, fn: ast.FunctionDef | ast.AsyncFunctionDef | None, class_qualname: str | None):
        self.fn = fn
        self.class_qualname = class_qualname
        self.params: dict[str, ast.AST | None] = {}
        self.self_name: str | None = None
        self.assigns: dict[str, list[ast.AST]] = {}
        # `proj: RowParallelLinear = ...` or a bare `proj: RowParallelLinear` before `for proj in`:
        # the declared type holds whatever the local is (re)bound to.
        self.annotations: dict[str, ast.AST] = {}
        if fn is None:
            return
        args = fn.args.posonlyargs + fn.args.args + fn.args.kwonlyargs
        is_static = any(dotted(d) == "staticmethod" for d in fn.decorator_list)
        if class_qualname and args and not is_static:
            self.self_name = args[0].arg
            args = args[1:]
        for a in args:
            self.params[a.arg] = a.annotation
        for node in walk_function(fn):
            if isinstance(node, ast.Assign):
                for t in node.targets:
                    if isinstance(t, ast.Name):
                        self.assigns.setdefault(t.id, []).append(node.value)
            elif isinstance(node, (ast.AnnAssign, ast.NamedExpr)) and isinstance(node.target, ast.Name):
                if isinstance(node, ast.AnnAssign):
                    self.annotations.setdefault(node.target.id, node.annotation)
                if node.value is not None:
                    self.assigns.setdefault(node.target.id, []).append(node.value)
            elif isinstance(node, (ast.For, ast.AsyncFor, ast.With, ast.AugAssign)):
                for t in _store_names(node):
                    self.assigns.setdefault(t, []).append(None)  # unknown value


def _store_names(node) -> list[str]:
    targets = []
    if isinstance(node, (ast.For, ast.AsyncFor)):
        targets = [node.target]
    elif isinstance(node, ast.With):
        targets = [i.optional_vars for i in node.items if i.optional_vars is not None]
    elif isinstance(node, ast.AugAssign):
        targets = [node.target]
    out = []
    for t in targets:
        out.extend(n.id for n in ast.walk(t) if isinstance(n, ast.Name))
    return out


def walk_function(fn):
    """ast.walk over a function body without descending into nested functions, lambdas or classes."""
    todo = list(fn.body)
    while todo:
        node = todo.pop()
        yield node
        for child in ast.iter_child_nodes(node):
            if not isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda, ast.ClassDef)):
                todo.append(child)


class LayerResolver:
    """Resolve the class of a layer expression inside a function, with evidence."""

    def __init__(self, project: ProjectFacts, module: str, imports: dict[str, str], path: str):
        self.project = project
        self.index = project.index
        self.module = module
        self.imports = imports
        self.path = path

    def resolve(self, expr: ast.AST, scope: FunctionScope, depth: int = 0) -> LayerType:
        if depth > 8:
            return LayerType(None)
        if isinstance(expr, ast.Name):
            if expr.id == scope.self_name and scope.class_qualname:
                return LayerType(scope.class_qualname)
            if expr.id in scope.params:
                name = annotation_name(scope.params[expr.id])
                if name:
                    t = self.index.resolve(self.module, name, self.imports)
                    line = scope.params[expr.id].lineno
                    return LayerType(t, "", (Evidence(
                        f"parameter `{expr.id}: {name}`", self.path, line),))
                return LayerType(None)
            if expr.id in scope.annotations:
                name = annotation_name(scope.annotations[expr.id])
                if name:
                    t = self.index.resolve(self.module, name, self.imports)
                    return LayerType(t, "", (Evidence(
                        f"local `{expr.id}: {name}`", self.path, scope.annotations[expr.id].lineno),))
            values = scope.assigns.get(expr.id, [])
            if len(values) == 1 and values[0] is not None:
                inner = self.resolve(values[0], scope, depth + 1)
                if inner.qualname:
                    step = Evidence(f"`{expr.id} = {ast.unparse(values[0])}`", self.path, values[0].lineno)
                    return LayerType(inner.qualname, inner.quant, (step, *inner.chain))
            return LayerType(None)
        if isinstance(expr, ast.Call):
            name = dotted(expr.func)
            if name:
                t = self.index.resolve(self.module, name, self.imports)
                return LayerType(t, _quant_kw(expr), (Evidence(f"`{name}(...)` call", self.path, expr.lineno),))
            return LayerType(None)
        if isinstance(expr, ast.Attribute):
            owner = self.resolve(expr.value, scope, depth + 1)
            if not owner.qualname:
                return LayerType(None)
            origin = self.project.attr_origin(owner.qualname, expr.attr)
            if origin is None or origin.type_name is None:
                if origin is not None and origin.quant == "set":
                    return LayerType(None, "set", (Evidence(origin.how, origin.path, origin.line),))
                return LayerType(None)
            return LayerType(origin.type_name, origin.quant, (Evidence(origin.how, origin.path, origin.line),))
        return LayerType(None)

    def quantizable(self, layer: LayerType, expr_text: str, name_patterns: list[str] | None) -> tuple[str, tuple[Evidence, ...]] | None:
        """("high"|"low", evidence) when the layer may hold a repacked weight, else None.

        Precision rules: a layer built with `quant_config=None`, or by a constructor call with no
        way to pass one, is never quantized; neither is a class the scanned tree defines outside
        the quantizable hierarchy, nor a `not-quantizable` class (embeddings), whatever it was
        given: `quant_config=` alone is evidence only for classes we cannot see."""
        if layer.quant in ("none", "absent"):
            return None
        if layer.qualname:
            if self.project.never_quantized(layer.qualname) or self.index.not_quantizable(layer.qualname):
                return None
            verdict = self.index.quantizable_verdict(layer.qualname)
            if verdict.yes:
                return "high", layer.chain + verdict.chain
            if self.index.class_location(layer.qualname) is not None:
                return None
        if layer.quant == "set":
            return "high", layer.chain + (Evidence("constructed with `quant_config=`: its quant method may repack `.weight`", "", 0),)
        if name_patterns and not layer.qualname:
            last = expr_text.rsplit(".", 1)[-1]
            if any(fnmatch.fnmatch(last, p) for p in name_patterns):
                return "low", (Evidence(f"name `{last}` looks like a projection layer; its class did not resolve", "", 0),)
        return None
