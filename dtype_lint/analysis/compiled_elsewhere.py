"""What the other files of a project script or trace, so that `--fix` leaves it alone there too.

analysis/compiled_code.py reads one file. A class is as often compiled from another one:
`export.py` does `from .modeling_foo import FooBlock` and `torch.jit.script(block)` with `block:
FooBlock`, or `engine.py` traces a `Decoder` whose `__init__` builds `blocks.py`'s `Mlp`. A fix of
the site in `FooBlock` or `Mlp` was applied as safe and broke the script (TorchScript cannot
compile the helper) or, worse, the trace: under torch.fx the weight is a proxy, the HF helper's
`isinstance(weight, torch.Tensor)` is False, and the traced graph silently lost the cast.

The census, once per run over the whole project:
- its roots are the files whose text may compile (`core/compile_text.might_compile`, which the scan
  asks of the text of each file it reads and keeps in its summary: a file that fails it is neither
  read again nor parsed, and no header is read for it). CompiledCode reads what each compiles of
  its own; what its compile calls are handed is resolved across files through its imports: a class
  built there (`Decoder(...)`, and the classes its arguments build: `Wrapper(Mlp())`; `.eval()` and
  the like return the module), a variable holding only such constructions, a class or function
  named as such, a parameter's annotation (that class, and its subclasses among the classes of the
  modules the file imports from). Anything else (a parameter with no annotation of the project's,
  `self.block`, what another library's factory returns) may be any object of every module of the
  project the file imports from (by name, as a module, or with `*`): each of their classes and
  functions counts as compiled, and what their classes reach;
- what compiled code reaches, file by file: a compiled class's bases, what its methods build and
  call (in `__init__` only what it builds: its submodules; a function called there runs before any
  compiler), a compiled function's callees, each resolved through the imports of its file
  (re-exports followed), and within a file by CompiledCode's own rules (`CompiledCode.mark`). Only
  the modules reached are parsed.
A site whose top-level class or function the census reaches (outside `__init__`, as in the file
itself) gets no fix, and its reason names the code and where it is: "`torch.jit.script(block)` in
src/mypkg/export.py:11 may compile `FooBlock`".

What the census read is that test of every file of the project (ModuleTable.holding) and the files
it parsed, a group read. A file it passed over by the test is recorded as such (Reads.passed): a
finding whose fix was planned stays true while each of those files fails the test still
(core/passed_over.py) and the files it parsed are unchanged; the pre-commit replay checks them
the same way. The census itself is kept on disk with what it read (run/facts_cache.py), so a
run that analyses an edited file plans its fix without making the census again.

Not seen (as in the file itself): a compiler called through a wrapper another function defines
(`my_script(model)` around `torch.jit.script`), a module handed to a constructor (`Decoder(mlp)`
with `mlp` built elsewhere) or built by a factory or a registry, a class defined in a class or a
function (only top-level definitions are compiled or not), a compiler's alias bound in another file
(megatron's `jit_fuser`, `torch.compile` on current torch anyway).
"""

from __future__ import annotations

import ast

from dtype_lint.analysis.compiled_code import Compiled, CompiledCode, enclosing
from dtype_lint.analysis.function_walk import walk
from dtype_lint.analysis.index.class_index import ModuleHeader, dotted, resolve_relative
from dtype_lint.core import trees
from dtype_lint.core.compile_text import might_compile
from dtype_lint.core.records import record
from dtype_lint.core.source import READ_ERRORS, read_file

# `nn.Module` methods that return the module itself (`Block(config).eval()`).
_RETURNS_SELF = frozenset({"eval", "train", "to", "cuda", "cpu", "xpu", "half", "float", "double", "bfloat16",
                           "type", "requires_grad_", "apply", "share_memory"})
# Names in an annotation that wrap a class without being one (`Optional[FooBlock]`).
_TYPE_WRAPPERS = frozenset({"Optional", "Union", "typing.Optional", "typing.Union"})


@record(frozen=True)
class Origin:
    """The code of another file that compiles a definition: why, and that file's path."""
    why: Compiled
    path: str

    def refusal(self, name: str, func: str) -> str:
        """The no-fix reason of a site in the top-level definition `name` (`func`: the helper)."""
        evidence = f"`{self.why.code}` in {self.path}:{self.why.line} may compile `{name}`"
        return Compiled(self.why.compiler, evidence).refusal(func, elsewhere=True)


def elsewhere_reason(index, module: str, tree: ast.Module, fn: ast.FunctionDef | ast.AsyncFunctionDef,
                     func: str) -> str:
    """The no-fix reason for a site in function `fn` of `module` (its tree `tree`) that code of
    the project compiles (the census), or "" when none does."""
    if not module:
        return ""
    compiled = census(index).get(module)
    if not compiled:
        return ""
    owner, method = enclosing(tree.body, fn.lineno)
    if owner is None or method == "__init__":
        return ""  # TorchScript and fx compile what runs after construction
    origin = compiled.get(owner.name)
    return origin.refusal(owner.name, func) if origin is not None else ""


def census(index) -> dict[str, dict[str, Origin]]:
    """Module -> its top-level classes and functions that code of the project compiles, with the
    code that does; once per run, what it read replayed to each file that asks."""
    # Kept on disk by an earlier run (run/facts_cache.py) while every file it read is unchanged
    # and every file it passed over passes over still.
    return index.cached_facts(_KEY, lambda: index.stored_facts(_KEY, _Census(index).run)[0], census=True)


_KEY = ("compiled elsewhere",)  # run/facts_cache.COMPILED_ELSEWHERE


@record
class _Module:
    code: CompiledCode
    header: ModuleHeader
    tree: ast.Module


class _Census:
    def __init__(self, index):
        self.index = index
        self.modules: dict[str, _Module | None] = {}  # parsed so far (None: unreadable)
        self.found: dict[str, dict[str, Origin]] = {}
        self.roots: list[str] = []  # modules whose compile calls are still to be read
        self.todo: list[tuple[str, str, Origin]] = []  # compiled definitions whose reach is to be read

    def run(self) -> dict[str, dict[str, Origin]]:
        for module, path in list(self.index.modules.holding(might_compile, "might_compile")):
            text = self._text(path)
            if text is None or not might_compile(text):
                continue
            header = self.index.modules.get(module)
            if header is not None:
                self._parse(module, header, text)
        while self.roots or self.todo:
            if self.roots:
                self._read_root(self.roots.pop(0))
            else:
                self._follow(*self.todo.pop())
        return self.found

    # ---- modules --------------------------------------------------------------------------
    @staticmethod
    def _text(path: str) -> str | None:
        try:
            return read_file(path).text
        except READ_ERRORS:
            return None

    def _parse(self, module: str, header: ModuleHeader, text: str) -> _Module | None:
        try:
            # Not kept in the store of shared trees: the census reads each once, and its trees
            # (1.6 MiB on vLLM 0.34.0) stayed there through the analyses after it.
            tree = trees.parse(header.path, text, keep=False)
        except (SyntaxError, ValueError, RecursionError, MemoryError):
            self.modules[module] = None
            return None
        seeds = might_compile(text)
        parsed = self.modules[module] = _Module(CompiledCode(tree, seeds=seeds), header, tree)
        if seeds:
            origins: dict[int, Origin] = {}
            for name, why in parsed.code.marked().items():
                origin = origins.setdefault(id(why), Origin(why, header.path))
                self._found(module, name, origin)
            if parsed.code.compile_calls:
                self.roots.append(module)
        return parsed

    def _module(self, module: str) -> _Module | None:
        if module not in self.modules:
            header = self.index.modules.get(module)
            text = self._text(header.path) if header is not None else None
            if text is None:
                self.modules[module] = None
            else:
                self._parse(module, header, text)
        return self.modules[module]

    # ---- marking and following ------------------------------------------------------------
    def _found(self, module: str, name: str, origin: Origin, follow: bool = True) -> None:
        names = self.found.setdefault(module, {})
        if name not in names:
            names[name] = origin
            if follow:
                self.todo.append((module, name, origin))

    def _mark(self, module: str, name: str, origin: Origin, functions_reach: bool = True) -> None:
        """`name` of `module` is compiled, and what it reaches there; what they reach in other
        modules is followed, but from functions only with `functions_reach` (False: compiled only
        because any object of the module may be, where a function's own callees are not worth
        the census's following: vLLM's `fx_utils` traces a module it is handed, and imports
        `vllm.logger`, whose functions call half the engine's utilities)."""
        parsed = self._module(module)
        if parsed is None:
            return
        for newly in parsed.code.mark(name, origin.why):
            self._found(module, newly, origin, functions_reach or parsed.code.is_class(newly))

    def _follow(self, module: str, name: str, origin: Origin) -> None:
        """Mark what the compiled definition `name` of `module` reaches in other modules."""
        parsed = self.modules.get(module)
        if parsed is None:
            return
        for written, classes_only in parsed.code.outside(name):
            target = self._locate(module, parsed.header, written)
            if target is not None and (target[2] or not classes_only):
                self._mark(target[0], target[1], origin)

    def _locate(self, module: str, header: ModuleHeader, written: str) -> tuple[str, str, bool] | None:
        """(module, name, is a class) of the project's top-level definition that `written` (a
        dotted name in `module`) names through the module's imports, else None."""
        imported = header.imports.get(written.split(".", 1)[0])
        if imported is None or imported.split(".", 1)[0] not in self.index.modules.top_names():
            return None
        qualname = self.index.resolve(module, written, header.imports)
        location = self.index.class_location(qualname)
        if location is not None:
            return location[0].module, location[1], True
        owner, _, name = qualname.rpartition(".")
        parsed = self._module(owner) if owner else None
        if parsed is not None and parsed.code.defines(name):
            return owner, name, parsed.code.is_class(name)
        return None

    # ---- what a compile call is handed --------------------------------------------------------
    def _read_root(self, module: str) -> None:
        parsed = self.modules[module]
        assert parsed is not None
        for why, arg, scope in parsed.code.compile_calls:
            origin = Origin(why, parsed.header.path)
            targets = self._targets(module, parsed, arg, scope)
            if targets is not None:
                for target_module, name in targets:
                    self._mark(target_module, name, origin)
                continue
            for imported in self._imported_modules(module, parsed):
                found = self._module(imported)
                for name in found.code.names() if found is not None else ():
                    self._mark(imported, name, origin, functions_reach=False)

    def _targets(self, module: str, parsed: _Module, arg: ast.expr, scope: ast.AST) -> list[tuple[str, str]] | None:
        """The definitions `arg` stands for, None when that cannot be told."""
        while isinstance(arg, ast.Call) and isinstance(arg.func, ast.Attribute) and arg.func.attr in _RETURNS_SELF:
            arg = arg.func.value
        if isinstance(arg, ast.Call):
            return self._built(module, parsed, arg)
        written = dotted(arg) or ""
        if written == "self" or (written and parsed.code.local_name(arg)):
            return []  # CompiledCode marked it
        if not isinstance(arg, ast.Name):
            return None
        annotation = _parameter_annotation(scope, arg.id)
        if annotation is not None:
            return self._annotated(module, parsed, annotation)
        if _is_parameter(scope, arg.id):
            return None
        values = _assigned(scope, arg.id)
        if values and all(isinstance(value, ast.Call) for value in values):
            targets: list[tuple[str, str]] = []
            for value in values:
                built = self._built(module, parsed, value)  # type: ignore[arg-type]  # a Call, tested above
                if built is None:
                    return None
                targets += built
            return targets
        located = self._locate(module, parsed.header, arg.id) if not values else None
        return [located[:2]] if located is not None else None

    def _built(self, module: str, parsed: _Module, call: ast.Call) -> list[tuple[str, str]] | None:
        """What `call` builds (a class of the project, or what a function of it returns) and what
        its arguments build; None when its callee is no definition of the project."""
        targets: list[tuple[str, str]] = []
        for inner in walk(call):
            if not isinstance(inner, ast.Call):
                continue
            local = parsed.code.local_name(inner.func)
            located = (module, local, parsed.code.is_class(local)) if local else \
                self._locate(module, parsed.header, dotted(inner.func) or "")
            if inner is call and located is None:
                return None
            if located is not None and (inner is call or located[2]):  # an argument's: a module it builds
                targets.append(located[:2])
        return targets

    def _annotated(self, module: str, parsed: _Module, annotation: ast.expr) -> list[tuple[str, str]] | None:
        """The project's classes an argument annotated `annotation` may be (each class it names
        and its subclasses among the classes of the modules the file imports from), None when the
        annotation names anything else."""
        named: list[tuple[str, str]] = []
        for written in _annotation_names(annotation):
            if written in _TYPE_WRAPPERS:
                continue
            located = (module, written, True) if parsed.code.is_class(written) else \
                self._locate(module, parsed.header, written)
            if located is None or not located[2]:
                return None
            named.append(located[:2])
        if not named:
            return None
        classes = {f"{m}.{n}" for m, n in named}
        for imported in self._imported_modules(module, parsed):
            header = self.index.modules.get(imported)
            for name in header.classes if header is not None else ():
                if not classes.isdisjoint(self.index.mro(f"{imported}.{name}")):
                    named.append((imported, name))
        return named

    def _imported_modules(self, module: str, parsed: _Module) -> list[str]:
        """The project's modules `module` imports, or imports a definition of (re-exports followed),
        in the order written."""
        targets: list[str] = []
        for node in walk(parsed.tree):
            if isinstance(node, ast.Import):
                targets += [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = resolve_relative(module, parsed.header.is_package, node.module, node.level)
                if base is not None:
                    targets += [base if alias.name == "*" else f"{base}.{alias.name}" for alias in node.names]
        tops = self.index.modules.top_names()
        found: dict[str, None] = {}
        for target in targets:
            if target.split(".", 1)[0] not in tops:
                continue
            if self.index.modules.get(target) is None:
                target = self.index.canonical(target).rpartition(".")[0]
            if target and target != module and self.index.modules.get(target) is not None:
                found[target] = None
        return list(found)


def _annotation_names(annotation: ast.expr) -> list[str]:
    """The dotted names an annotation is made of (`Optional[FooBlock]`: `Optional`, `FooBlock`);
    "" for a part that is none (then the annotation cannot be told)."""
    if isinstance(annotation, ast.Constant) and isinstance(annotation.value, str):
        try:
            annotation = ast.parse(annotation.value, mode="eval").body
        except SyntaxError:
            return [""]
    if isinstance(annotation, (ast.Name, ast.Attribute)):
        return [dotted(annotation) or ""]
    if isinstance(annotation, ast.Subscript):
        return _annotation_names(annotation.value) + _annotation_names(annotation.slice)
    if isinstance(annotation, ast.BinOp):  # `FooBlock | None`
        return _annotation_names(annotation.left) + _annotation_names(annotation.right)
    if isinstance(annotation, ast.Tuple):
        return [name for element in annotation.elts for name in _annotation_names(element)]
    if isinstance(annotation, ast.Constant) and annotation.value is None:
        return []
    return [""]


def _parameters(scope: ast.AST) -> list[ast.arg]:
    args = getattr(scope, "args", None)
    if not isinstance(args, ast.arguments):
        return []
    return [*args.posonlyargs, *args.args, *args.kwonlyargs, *filter(None, (args.vararg, args.kwarg))]


def _is_parameter(scope: ast.AST, name: str) -> bool:
    return any(arg.arg == name for arg in _parameters(scope))


def _parameter_annotation(scope: ast.AST, name: str) -> ast.expr | None:
    return next((arg.annotation for arg in _parameters(scope) if arg.arg == name), None)


def _assigned(scope: ast.AST, name: str) -> list[ast.expr | None]:
    """What `scope`'s code binds `name` to: each value of a plain assignment, None for any other
    binding (an augmented or unpacking assignment, a loop, `with ... as`, `:=`)."""
    values: list[ast.expr | None] = []
    for node in walk(scope):
        if isinstance(node, ast.Assign):
            for assigned in node.targets:
                if isinstance(assigned, ast.Name) and assigned.id == name:
                    values.append(node.value)
                elif any(isinstance(inner, ast.Name) and inner.id == name for inner in walk(assigned)):
                    values.append(None)
        elif isinstance(node, (ast.AnnAssign, ast.AugAssign, ast.NamedExpr, ast.For, ast.AsyncFor, ast.withitem)):
            target: ast.expr | None = node.optional_vars if isinstance(node, ast.withitem) else node.target
            if target is not None and any(isinstance(inner, ast.Name) and inner.id == name for inner in walk(target)):
                values.append(node.value if isinstance(node, ast.AnnAssign) and isinstance(target, ast.Name) else None)
    return values
