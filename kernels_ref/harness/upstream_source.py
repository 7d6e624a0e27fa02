"""vLLM's own MLA prefill functions, cut out of a release's source so that they can run here.

``extract(text, ...)`` starts from ``MLACommonBaseImpl._compute_prefill_context`` and
``_context_parallel_compute_prefill_context`` (and ``_concat_k_nope_k_pe``, which they call on
``self``) plus the chunk-metadata builder and its dataclass, and follows every free name:

* a function, class or assignment at the top of the same module is taken too (``reorg_kvcache``,
  0.28.0's ``_get_kv_b_proj_input_dtype``, ``accumulate_mla_context_chunk``, ...);
* a name imported from another vLLM module is either one of :data:`FOLLOW` (small pure helpers:
  ``cdiv``, ``get_dcp_local_seq_lens``, ...), taken from that module's source the same way, or
  one of :data:`PROVIDED`, which the harness supplies (kernels, platform, distributed group);
* a name imported from anywhere else (torch, numpy, the standard library) keeps its import
  statement, executed as written;
* in the fixer's rewrite of 0.27.1, the helper's import names the generated helper module, whose
  text travels with the extraction;
* anything else is an error naming the function and the name, so a vLLM release that needs more
  than the harness knows fails loudly instead of running something else.

Each piece keeps its source text exactly (only dedented); :mod:`.upstream_runtime` executes the
texts in one namespace per release, the way the module itself would. Nothing here imports torch,
and nothing from vLLM is ever written into this repository: the texts live in memory or in a
``--emit-variants`` folder outside version control.
"""

from __future__ import annotations

import ast
import builtins
import hashlib
import textwrap
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Callable

MLA_MODULE = "vllm/model_executor/layers/attention/mla_attention.py"
IMPL_CLASS = "MLACommonBaseImpl"
METHODS = ("_compute_prefill_context", "_context_parallel_compute_prefill_context", "_concat_k_nope_k_pe")
METADATA = ("build_mla_chunked_context_metadata", "MLACommonPrefillMetadata")
#: 0.28.0's helper; present only in releases with the fix.
FIXED_HELPER = "_get_kv_b_proj_input_dtype"

#: Names imported from other vLLM modules that are taken from those modules' source.
FOLLOW = frozenset({"cdiv", "round_down", "round_up", "get_dcp_local_seq_lens", "is_quantized_kv_cache"})
#: Names imported from vLLM that the harness supplies (see upstream_runtime.provided_names).
PROVIDED = frozenset(
    {"ops", "current_platform", "merge_attn_states", "mask_empty_context", "get_dcp_group", "MLADCPManager",
     "np_to_pinned_tensor", "PIN_MEMORY", "async_tensor_h2d"}
)
#: Top-level packages whose imports are executed as written.
PLAIN_IMPORTS = frozenset({"torch", "numpy", "itertools", "math", "typing", "dataclasses", "functools", "collections", "enum", "abc"})

_BUILTINS = frozenset(dir(builtins))


class ExtractionError(RuntimeError):
    """The source needs something the harness does not know how to supply."""


@dataclass(frozen=True)
class Unit:
    """One top-level definition (or method) cut out of a vLLM module."""

    name: str
    kind: str  # "method", "function", "class", "assign"
    origin: str  # the file inside the release, e.g. vllm/utils/math_utils.py
    line: int
    text: str


@dataclass
class Extraction:
    """Everything one release (or its rewrite) contributes to a run."""

    label: str  # "0.27.1", "0.27.1+dtype-lint", "0.28.0"
    version: str
    units: list[Unit] = field(default_factory=list)
    imports: list[str] = field(default_factory=list)  # statements executed as written
    provided: list[str] = field(default_factory=list)  # names the harness must supply
    helper_module: str | None = None  # module the rewrite imports the helper from
    helper_name: str | None = None
    helper_text: str | None = None

    def unit(self, name: str) -> Unit:
        for u in self.units:
            if u.name == name:
                return u
        raise KeyError(name)

    def has(self, name: str) -> bool:
        return any(u.name == name for u in self.units)

    def digest(self) -> str:
        return hashlib.sha256(repr(asdict(self)).encode()).hexdigest()

    def to_json(self) -> dict:
        return asdict(self) | {"sha256": self.digest()}

    @classmethod
    def from_json(cls, data: dict) -> "Extraction":
        data = dict(data)
        digest = data.pop("sha256", None)
        ext = cls(**{k: v for k, v in data.items() if k != "units"}, units=[Unit(**u) for u in data["units"]])
        if digest != ext.digest():
            raise ValueError(f"saved extraction {ext.label} does not match its recorded sha256")
        return ext


# ----------------------------------------------------------------------------- name analysis


def source_segment(lines: list[str], node: ast.stmt) -> str:
    first = min([node.lineno] + [d.lineno for d in getattr(node, "decorator_list", [])])
    return textwrap.dedent("".join(lines[first - 1 : node.end_lineno]))


def free_names(node: ast.AST) -> set[str]:
    """Names ``node`` reads and does not bind itself, annotations left out (they are never
    evaluated: the runtime compiles with ``from __future__ import annotations``)."""
    loads: set[str] = set()
    bound: set[str] = set()

    def visit(n: ast.AST) -> None:
        for name, value in ast.iter_fields(n):
            if name in ("annotation", "returns"):
                continue
            for v in value if isinstance(value, list) else [value]:
                if not isinstance(v, ast.AST):
                    continue
                if isinstance(v, ast.Name):
                    (loads if isinstance(v.ctx, ast.Load) else bound).add(v.id)
                elif isinstance(v, ast.arg):
                    bound.add(v.arg)
                elif isinstance(v, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                    bound.add(v.name)
                elif isinstance(v, ast.alias):
                    bound.add((v.asname or v.name).split(".")[0])
                elif isinstance(v, ast.ExceptHandler) and v.name:
                    bound.add(v.name)
                visit(v)

    if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
        # Wrapped in an expression: `visit` looks at a node's fields, so a bare `@dataclass` or
        # `class K(IntEnum)` would otherwise never be seen as a read of its name.
        for d in node.decorator_list:
            visit(ast.Expr(d))
        body = ast.Module(body=node.body, type_ignores=[])
        if isinstance(node, ast.ClassDef):
            for base in node.bases:
                visit(ast.Expr(base))
        else:
            for arg_node in ast.walk(node.args):
                if isinstance(arg_node, ast.arg):
                    bound.add(arg_node.arg)
            for default in node.args.defaults + [d for d in node.args.kw_defaults if d is not None]:
                visit(default)
        visit(body)
    else:
        visit(node)
    return loads - bound - _BUILTINS


@dataclass
class SourceModule:
    path: str
    text: str
    lines: list[str]
    top: dict[str, ast.stmt]  # name -> its def, class or assignment
    imports: dict[str, tuple[str, str, str]]  # name -> (module, imported name, statement text)

    @classmethod
    def parse(cls, path: str, text: str) -> "SourceModule":
        tree = ast.parse(text)
        lines = text.splitlines(keepends=True)
        top: dict[str, ast.stmt] = {}
        imports: dict[str, tuple[str, str, str]] = {}
        for node in tree.body:
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                top[node.name] = node
            elif isinstance(node, (ast.Assign, ast.AnnAssign)):
                targets = node.targets if isinstance(node, ast.Assign) else [node.target]
                for target in targets:
                    if isinstance(target, ast.Name):
                        top[target.id] = node
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module is not None:  # level 0 names one
                for alias in node.names:
                    stmt = f"from {node.module} import {alias.name}" + (f" as {alias.asname}" if alias.asname else "")
                    imports[alias.asname or alias.name] = (node.module, alias.name, stmt)
            elif isinstance(node, ast.Import):
                for alias in node.names:
                    local = alias.asname or alias.name.split(".")[0]
                    stmt = f"import {alias.name}" + (f" as {alias.asname}" if alias.asname else "")
                    imports[local] = (alias.name, "", stmt)
        return cls(path, text, lines, top, imports)


def _module_file(module: str) -> str:
    return module.replace(".", "/") + ".py"


def extract(
    text: str,
    version: str,
    label: str,
    *,
    read: Callable[[str], str],
    helper_module: str | None = None,
    helper_text: str | None = None,
) -> Extraction:
    """Cut the prefill functions and everything they need out of ``text`` (the MLA module).

    ``read(path)`` returns another file of the same release (for :data:`FOLLOW` names).
    ``helper_module``/``helper_text``: the fixer's helper, for the rewritten module.
    """
    main = SourceModule.parse(MLA_MODULE, text)
    impl = main.top.get(IMPL_CLASS)
    if not isinstance(impl, ast.ClassDef):
        raise ExtractionError(f"{MLA_MODULE}: no class {IMPL_CLASS}")
    methods = {n.name: n for n in impl.body if isinstance(n, ast.FunctionDef)}
    missing = [m for m in METHODS if m not in methods]
    if missing:
        raise ExtractionError(f"{MLA_MODULE}: {IMPL_CLASS} has no {', '.join(missing)}")

    ext = Extraction(label=label, version=version, helper_text=helper_text)
    modules = {MLA_MODULE: main}
    done: set[tuple[str, str]] = set()
    imports: dict[str, None] = {}
    provided: dict[str, None] = {}
    units: list[Unit] = []
    queue: list[tuple[SourceModule, str, ast.stmt, str]] = [(main, m, methods[m], "method") for m in METHODS]
    queue += [(main, name, main.top[name], "") for name in METADATA if name in main.top]
    if len(queue) != len(METHODS) + len(METADATA):
        raise ExtractionError(f"{MLA_MODULE}: missing one of {', '.join(METADATA)}")

    while queue:
        mod, name, node, kind = queue.pop(0)
        if (mod.path, name) in done:
            continue
        done.add((mod.path, name))
        if not kind:
            kind = "class" if isinstance(node, ast.ClassDef) else ("assign" if isinstance(node, (ast.Assign, ast.AnnAssign)) else "function")
        units.append(Unit(name, kind, mod.path, node.lineno, source_segment(mod.lines, node)))
        for free in sorted(free_names(node)):
            if free == "self" and kind == "method":
                continue
            if free in mod.top:
                queue.append((mod, free, mod.top[free], ""))
                continue
            if free not in mod.imports:
                raise ExtractionError(f"{mod.path}: {name} uses {free!r}, which is neither defined nor imported there")
            source_module, imported, stmt = mod.imports[free]
            top_package = source_module.split(".")[0]
            if helper_module is not None and source_module == helper_module:
                ext.helper_module, ext.helper_name = source_module, imported
            elif top_package == "vllm" and free in PROVIDED:
                provided[free] = None
            elif top_package == "vllm" and imported in FOLLOW:
                path = _module_file(source_module)
                if path not in modules:
                    modules[path] = SourceModule.parse(path, read(path))
                other = modules[path]
                if imported not in other.top:
                    raise ExtractionError(f"{path} does not define {imported} (imported by {mod.path})")
                queue.append((other, imported, other.top[imported], ""))
                if imported != free:
                    raise ExtractionError(f"{mod.path}: {free} is an alias of {imported}; aliases are not followed")
            elif top_package in PLAIN_IMPORTS:
                imports[stmt] = None
            else:
                raise ExtractionError(
                    f"{mod.path}: {name} uses {free!r} from {source_module}, which the upstream harness does not provide"
                )
    for unit in units:
        if unit.kind == "method" and "super" in free_names(ast.parse(unit.text).body[0]):
            raise ExtractionError(f"{unit.name} calls super(): it cannot run outside its class")
    if helper_module is not None and ext.helper_module is None:
        raise ExtractionError(f"the rewritten module never imports its helper from {helper_module}")
    # Source order per file, followed files first: the order the interpreter would define them in.
    order = {path: i for i, path in enumerate(reversed(list(modules)))}
    ext.units = sorted(units, key=lambda u: (order[u.origin], u.line))
    ext.imports = list(imports)
    ext.provided = sorted(provided)
    return ext


def helper_imports(text: str) -> list[tuple[str, str, str]]:
    """``(module, name, statement)`` of each import in a helper module's text."""
    return list(SourceModule.parse("<helper>", text).imports.values())


def read_release(root: Path):
    """A ``read(path)`` for :func:`extract` over a release tree from ``dtype_lint.releases``."""

    def read(path: str) -> str:
        return (Path(root) / path).read_text()

    return read
