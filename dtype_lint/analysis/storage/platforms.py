"""Which quantizations the project's platforms admit, and the storage model narrowed to them.

A platform class lists the quantization methods it can run (`supported_quantization = ["fp8",
...]`; an empty list admits every one, vLLM's interface). A backend no platform of the project
admits cannot reach a layer, so its storages do not make a site a finding.

**The choice.** The platforms are every class of the scanned tree that declares
`supported_quantization`, in a module (or package) named `platform` or `platforms` at any depth,
and the classes of those modules that inherit a declaration (vLLM's `CudaPlatform` inherits the
interface's empty list) or share a declaring class's bases. The project admits the **union** of
their lists; it narrows only when every one of them restricts:

- an engine with many platforms in the tree (vLLM: CUDA admits everything) narrows nothing;
- a platform plugin (one platform class, `NPUPlatform(Platform)` on an engine outside the tree)
  admits its platform's list;
- a project with no platform class (a model plugin) narrows nothing.

**Names to backends.** An admitted name is served by the config class registered for it: one of
the project's own (`@register_quantization_config(NAME)` on a class, or
`register_quantization_config(NAME)(Cls)`: a plugin replaces the engine's config of that name),
else one of the tree's configs whose `get_name()` returns it, else the shipped catalogue's config of
that name (the catalogue records each backend's names). The names may be string constants or
module-level constants (`FP8_METHOD = "fp8"`, imported). A name that no config serves leaves the
layer un-narrowed (it may be a backend that drops `.weight`).

The narrowed storages of a layer are its storages under the admitted engine configs plus what the
project's own admitted configs give it (read from their code, as for any backend; a layer outside
the tree is matched against their `isinstance` dispatch through the catalogue's record of its
bases).
"""

from __future__ import annotations

import ast
import re
from functools import cache

from dtype_lint.analysis.index.class_index import PLATFORM_MODULES, dotted
from dtype_lint.core.findings import Evidence
from dtype_lint.core.records import record

# `supported_quantization: list[str] = [...]` in a class body (its value spans lines).
_ADMITS = re.compile(r"^[ \t]+supported_quantization\s*(?::[^=\n]*)?=\s*(\[[^\]]*\]|\(\s*\))", re.MULTILINE)


@cache
def _register_patterns() -> tuple[re.Pattern[str], re.Pattern[str]]:
    """A registration of a config class under a name: the decorator form and the call form;
    compiled on first use (a check whose platforms' facts the cache keeps never needs them)."""
    return (re.compile(
        r"^[ \t]*@[ \t]*[\w.]*register\w*\(\s*([^()\n]+?)\s*\)[ \t]*\n(?:[ \t]*@[^\n]*\n)*[ \t]*class[ \t]+(\w+)",
        re.MULTILINE),
        re.compile(r"[\w.]*register\w*\(\s*([^()\n]+?)\s*\)\s*\(\s*(\w+)\s*\)"))


@record(frozen=True)
class Admission:
    """One platform class and what it admits (None: every quantization)."""

    platform: str  # qualified name
    path: str  # where its (or its nearest declaring base's) list is written
    line: int
    names: tuple[str, ...] | None
    declared_by: str  # the class whose body declares the list

    @property
    def short(self) -> str:
        return self.platform.rsplit(".", 1)[-1]


@record(frozen=True)
class Narrowing:
    """The project's platforms, every one of which restricts, and the union they admit."""

    admissions: tuple[Admission, ...]
    names: tuple[str, ...]

    def evidence(self) -> Evidence:
        first = self.admissions[0]
        who = ", ".join(f"`{a.short}`" for a in self.admissions)
        return Evidence(f"platform: the project's platforms ({who}) admit only {', '.join(self.names)}: "
                        "the other backends cannot reach it", first.path, first.line)


def platform_modules(index) -> list[str]:
    """The modules named `platform`/`platforms`, or inside a package of that name (no file read;
    the enumeration is recorded as a read: a platform module added anywhere is a change)."""
    return index.modules.enumerate(PLATFORM_MODULES)


def admissions(index, load_file, resolve_constant) -> list[Admission]:
    """Every platform class of the tree with what it admits (see the module's docstring)."""
    declared: dict[str, tuple[str, int, tuple[str, ...] | None]] = {}
    headers = []
    for module in platform_modules(index):
        header = index.modules.get(module)
        if header is None:
            continue
        headers.append((module, header))
        text = (load_file(header.path) if load_file else None) or ""
        if "supported_quantization" not in text:
            continue
        for match in _ADMITS.finditer(text):
            line = text.count("\n", 0, match.start()) + 1
            owner = max(((n, v[1]) for n, v in header.classes.items() if v[1] <= line), key=lambda c: c[1],
                        default=None)
            if owner is None:
                continue
            names = _names(match.group(1), module, header, resolve_constant)
            declared[f"{module}.{owner[0]}"] = (header.path, line, names)
    if not declared:
        return []
    roots = set()
    for q in declared:
        roots.update(index.mro(q)[1:])
    found = []
    for module, header in headers:
        for name in header.classes:
            q = f"{module}.{name}"
            mro = index.mro(q)
            if q in declared or set(mro) & (set(declared) | roots):
                found.append((q, mro, header, name))  # else a helper of the platform module
    # An interface (a base of another platform class here) is not a platform one runs on.
    interfaces = {c for _q, mro, *_rest in found for c in mro[1:]}
    out = []
    for q, mro, header, name in found:
        if q not in interfaces:
            nearest = next((c for c in mro if c in declared), None)
            if nearest is None:  # inherits a list from outside the tree: taken as admitting all
                out.append(Admission(q, header.path, header.classes[name][1], None, ""))
                continue
            path, line, names = declared[nearest]
            out.append(Admission(q, path, line, names, nearest))
    return out


def _names(text: str, module: str, header, resolve_constant) -> tuple[str, ...] | None:
    """The names of a written list; None when it is empty (every quantization) or unreadable."""
    try:
        node = ast.parse(text.strip(), mode="eval").body
    except SyntaxError:
        return None
    elts = node.elts if isinstance(node, (ast.List, ast.Tuple)) else []
    out = []
    for element in elts:
        value = constant_string(element, module, header.imports, resolve_constant)
        if value is None:
            return None  # a name we cannot read: it may be any method
        out.append(value)
    return tuple(out) or None


def constant_string(node: ast.expr, module: str, imports: dict[str, str], resolve_constant) -> str | None:
    """A string constant, or a name bound to one at module level (here or where it is imported from)."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return node.value
    name = dotted(node) if isinstance(node, (ast.Name, ast.Attribute)) else None
    if not name:
        return None
    head, _, rest = name.partition(".")
    target = imports.get(head)
    qualname = (f"{target}.{rest}" if rest else target) if target else f"{module}.{name}"
    return resolve_constant(qualname)


def narrowing_of(found: list[Admission]) -> Narrowing | None:
    """The union the platforms admit; None when there is none, or one admits every quantization."""
    if not found or any(a.names is None for a in found):
        return None
    names: list[str] = []
    for a in found:
        names.extend(n for n in a.names or () if n not in names)  # None: returned above
    return Narrowing(tuple(found), tuple(names))


class PlatformNarrowing:
    """The storage model's narrowing to what the project's platforms admit, read lazily from the
    code: asked only when a site is about to be reported, computed once per index."""

    def __init__(self, code):
        self.code = code  # storage_model.CodeBackends: the tree's code, its memo and readers
        self.index = code.index

    # ---- what the platforms admit -----------------------------------------------------------------
    def narrowing(self) -> Narrowing | None:
        return self.code._memo(("platform narrowing",), lambda: narrowing_of(self.admissions()))

    def admissions(self) -> list[Admission]:
        return self.code._memo(("platform admissions",),
                               lambda: admissions(self.index, self.code.project.load_file, self.constant))

    def constant(self, qualname: str) -> str | None:
        """The string a module-level name is bound to (`FP8_METHOD = "fp8"`), following one import."""
        def build():
            for _ in range(3):
                module, _, name = qualname_[0].rpartition(".")
                src = self.code._source(module) if module else None
                if src is None:
                    return None
                pattern = re.compile(rf"^{re.escape(name)}\s*(?::[^=\n]+)?=\s*(['\"])([^'\"\n]*)\1\s*(?:#.*)?$")
                for line in src.lines:
                    match = pattern.match(line)
                    if match:
                        return match.group(2)
                target = src.header.imports.get(name)
                if not target or target == qualname_[0]:
                    return None
                qualname_[0] = target
            return None
        qualname_ = [qualname]
        return self.code._memo(("module constant", qualname), build)

    # ---- names to configs ---------------------------------------------------------------------------
    def names_of(self, config: str) -> tuple[str, ...]:
        """The quantization names a config class is registered under: its `get_name()` constant and
        the registrations of it in its module."""
        def build():
            out: list[str] = []
            got = self.code._method_of(config, "get_name")
            if got is not None:
                _owner, src, function_node = got
                for node in ast.walk(function_node):
                    if isinstance(node, ast.Return) and node.value is not None:
                        value = constant_string(node.value, src.module, src.header.imports, self.constant)
                        if value and value not in out:
                            out.append(value)
            for name in self._registered_in(config.rpartition(".")[0]).get(config, ()):
                if name not in out:
                    out.append(name)
            return tuple(out)
        return self.code._memo(("quantization names", config), build)

    def _registered_in(self, module: str) -> dict[str, tuple[str, ...]]:
        """Config class → the names the module registers it under."""
        def build():
            src = self.code._source(module)
            if src is None:
                return {}
            text = "".join(src.lines)
            if "register" not in text:
                return {}
            out: dict[str, list[str]] = {}
            for pattern in _register_patterns():
                for match in pattern.finditer(text):
                    cls = src.header.classes.get(match.group(2)) and f"{module}.{match.group(2)}"
                    if cls is None:
                        target = src.header.imports.get(match.group(2))
                        cls = self.index.canonical(target) if target else None
                    if cls is None:
                        continue
                    try:
                        expr = ast.parse(match.group(1), mode="eval").body
                    except SyntaxError:
                        continue
                    value = constant_string(expr, module, src.header.imports, self.constant)
                    if value:
                        out.setdefault(cls, []).append(value)
            return {k: tuple(v) for k, v in out.items()}
        return self.code._memo(("registrations", module), build)

    def project_registrations(self) -> dict[str, tuple[str, ...]]:
        """name → the project's config classes registered for it (a device variant may register its
        own under the same name: each counts), from every module that registers one."""
        def build():
            out: dict[str, list[str]] = {}
            load = self.code.project.load_file
            for module, path in self.index.modules.module_paths():
                text = load(path) if load else None
                if not text or "register" not in text or "quant" not in text.lower():
                    continue
                if self.index.modules.get(module) is None:
                    continue
                for cls, names in self._registered_in(module).items():
                    for name in names:
                        if cls not in out.setdefault(name, []):
                            out[name].append(cls)
            return {name: tuple(classes) for name, classes in out.items()}
        return self.code._memo(("project registrations",), build)

    # ---- the narrowed storages ---------------------------------------------------------------------
    def narrow(self, layer_class: str, storages, family: str, catalogue_data: dict | None = None):
        """The storages the admitted backends give the layer (a frozenset), or None when the
        platforms do not narrow (or an admitted name is served by no config we can find)."""
        narrowing = self.narrowing()
        if narrowing is None:
            return None
        return self.code._memo(("narrowed", layer_class, family),
                               lambda: self._narrow(layer_class, storages, family, catalogue_data, narrowing))

    def served(self, layer_class: str, family: str, catalogue_data: dict | None):
        """name → [(config short name, the project's config qualname, or None for an engine
        config outside the tree)] for each admitted name; None when some name is served by no
        config."""
        narrowing = self.narrowing()
        if narrowing is None:
            return None
        registered = self.project_registrations()
        tree_configs: dict[str, list[str]] = {}
        if family == "code":
            # The layer's own family of configs (the subclasses of its constructor's config type):
            # a name registered for another family's layers (a plugin's torch-side configs beside
            # its own layer stack) does not serve this layer.
            own = list(self.code.backends(layer_class) or ())
            registered = {name: tuple(c for c in configs if c in own) for name, configs in registered.items()}
            for config in own:
                for name in self.names_of(config):
                    tree_configs.setdefault(name, []).append(config)
        engine_names: dict[str, str] = {}
        if catalogue_data is not None:
            for config, names in catalogue_data.get("names", {}).items():
                for name in names:
                    engine_names.setdefault(name, config)
        out: dict[str, list[tuple[str, str | None]]] = {}
        for name in narrowing.names:
            project = registered.get(name) or tree_configs.get(name)
            if project:
                out[name] = [(config.rsplit(".", 1)[-1], config) for config in project]
            elif name in engine_names:
                out[name] = [(engine_names[name], None)]
            else:
                return None
        return out

    def _narrow(self, layer_class, storages, family, catalogue_data, narrowing):
        served = self.served(layer_class, family, catalogue_data)
        if served is None:
            return None
        configs = [c for served_by in served.values() for c in served_by]
        engine = {short for short, project in configs if project is None}
        kept = {s for s in storages if s.backend in engine}
        mro = None
        if family != "code":
            mro = (catalogue_data or {}).get("mro", {}).get(layer_class, [layer_class])
        for _short, project in configs:
            if project is not None:
                kept.update(self.code.config_storages(project, layer_class, mro))
        return frozenset(kept)
