"""Which functions of a file TorchScript compiles or torch.fx traces, so that `--fix` leaves them alone.

A fix routes a cast through the shared helper. Eager Python, `torch.compile` and `torch.export`
run the helper as written (tests/test_trust_round3_compiled.py compiles and exports fixed modules
on every storage), but two compilers do not:
- TorchScript (`torch.jit.script`) compiles the helper recursively and rejects it: a function
  cannot take an `nn.Module` argument, and `getattr(layer, "weight", None)` is not scriptable;
- torch.fx's symbolic tracing (`torch.fx.symbolic_trace`, a `Tracer().trace`, torch.ao's FX graph
  mode quantization) hands the helper the weight as a proxy, and the helper branches on its dtype
  ("symbolically traced variables cannot be used as inputs to control flow"); the HF helper's
  `isinstance(weight, torch.Tensor)` is False there, so the traced graph silently loses the cast.
The original `x.to(layer.weight.dtype)` scripts and traces, so a fix there would break code that
compiled. Such sites keep their finding and get no fix, with the reason.

What counts as compiled, read from this file (what another file of the project compiles is
compiled_elsewhere.py's census, which reads each file that names a compiler with this class):
- a function or class decorated `torch.jit.script` (or `script_method`, `export`, `interface`),
  and a class deriving from `torch.jit.ScriptModule`;
- a class given to a compiler: `torch.jit.script(...)` (also `getattr(torch.jit, "script")`), an
  fx tracing entry point (`symbolic_trace`; `.trace` of a tracer: `Tracer().trace`, a tracer held
  in a variable or attribute, a class of the file deriving from a `...Tracer`) or one of torch.ao's
  quantize_fx entry points that trace the model they prepare (`prepare_fx`, `prepare_qat_fx`,
  `fuse_fx`, and their private `_prepare_fx` forms; `convert_fx` takes their GraphModule and
  traces nothing), as the class itself, an instance built there (`Cls(...)`), a variable holding
  one, or `self` in its own methods; an argument that names no class of the file
  (`torch.jit.script(model)`) counts every class here;
- what those reach: the top-level functions their code calls, the classes their code builds (a
  scripted or traced module compiles its submodules' `forward` too) and a class's bases (their
  methods run on the compiled instance: a scripted subclass compiles its base's `forward`),
  transitively.
`__init__` is never compiled. A `torch.jit.ignore` method is not compiled but still refused: it runs
as Python on the scripted module, whose dtype attributes are ints (a layer's model dtype attribute
there is not a dtype, and `x.to(<int>)` reads it as a device).
`torch.jit.trace`, `make_fx`, `torch.compiler.disable` and CUDA-graph capture run the Python as
written (tracing records the ops the eager code runs), so they need no refusal.
"""

from __future__ import annotations

import ast
from collections.abc import Sequence

from dtype_lint.analysis.function_walk import walk  # ast.walk's nodes in its order, as a list: cheaper
from dtype_lint.core import trees
from dtype_lint.core.records import record

# Text without any of these cannot script or trace anything: the parse-free answer.
MARKERS = ("jit", "symbolic_trace", "Tracer", "ScriptModule", "_fx")

_SCRIPT_DECORATORS = {"script", "script_method", "export", "interface"}
_COMPILER_PACKAGES = ("torch.jit", "torch.fx", "transformers.utils.fx", "torch.ao.quantization",
                      "torch.ao.quantization.quantize_fx", "torch.quantization", "torch.quantization.quantize_fx")
# torch.ao's FX graph mode quantization entry points that symbolically trace the model they are
# handed (torch 2.13's quantize_fx.py: `_prepare_fx` runs `QuantizationTracer(...).trace(model)`,
# `fuse_fx` runs `torch.fx.symbolic_trace(model)`); `convert_fx` and its kin take the GraphModule
# those return and trace nothing. `make_fx` traces the eager code's dispatched ops, as
# `torch.jit.trace` does: the helper runs as Python there.
_FX_QUANTIZE = {"prepare_fx", "prepare_qat_fx", "fuse_fx", "_prepare_fx", "_prepare_standalone_module_fx"}
_QUANTIZE_PREFIXES = ("torch.ao.quantization.", "torch.quantization.")

TORCHSCRIPT = "TorchScript"
FX = "torch.fx"


@record(frozen=True)
class Compiled:
    """Why a function is compiled: by which compiler, and the code that makes it so."""
    compiler: str  # TORCHSCRIPT | FX
    evidence: str  # e.g. "`torch.jit.script(Attn(...))` on line 30"
    # That code as written (`torch.jit.script(block)`) and its line: what a site in another file
    # that it compiles is told (compiled_elsewhere.py).
    code: str = ""
    line: int = 0

    def refusal(self, func: str, elsewhere: bool = False) -> str:
        """The no-fix reason shown with the finding (`elsewhere`: the evidence lies in another file,
        and says what it may compile)."""
        if self.compiler == TORCHSCRIPT:
            why = (f"TorchScript would compile `{func}` too and cannot (a function cannot take an "
                   "`nn.Module`; `getattr(..., None)` is not scriptable)")
        else:
            why = (f"fx would trace `{func}`, which branches on the weight's dtype, a proxy while tracing "
                   "(\"symbolically traced variables cannot be used as inputs to control flow\")")
        verb = "may be compiled" if elsewhere else "is compiled"
        return (f"this code {verb} by {self.compiler} ({self.evidence}), and {why}; fix it by hand "
                f"with code {self.compiler} accepts")


def _dotted(node: ast.AST) -> str:
    parts = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    if isinstance(node, ast.Name):
        parts.append(node.id)
        return ".".join(reversed(parts))
    return ""


def _expand(name: str, aliases: dict[str, str]) -> str:
    """`name` with its first part replaced by what a local alias stands for."""
    head, _, rest = name.partition(".")
    if head in aliases:
        return aliases[head] + ("." + rest if rest else "")
    return name


def _call_text(call: ast.Call) -> str:
    """A compile call as a message quotes it: whole when short, else its callee with `(...)`."""
    text = ast.unparse(call)
    return text if len(text) <= 80 and "\n" not in text else f"{ast.unparse(call.func)}(...)"


def _last(node: ast.expr) -> str:
    return _dotted(node).rsplit(".", 1)[-1]


_Definition = ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef


def enclosing(top: Sequence[ast.stmt], line: int) -> tuple[_Definition | None, str]:
    """The top-level class or function of `top` holding `line`, and the name of its method that
    does (a class's), else ""."""
    owner = next((n for n in top if isinstance(n, (ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef))
                  and n.lineno <= line <= (n.end_lineno or n.lineno)), None)
    method = ""
    if isinstance(owner, ast.ClassDef):
        method = next((m.name for m in owner.body if isinstance(m, (ast.FunctionDef, ast.AsyncFunctionDef))
                       and m.lineno <= line <= (m.end_lineno or m.lineno)), "")
    return owner, method


class CompiledCode:
    """The compiled functions of one module's tree, by function node.

    `seeds`: read what the file itself compiles (False: only what `mark` says, for a module whose
    text names no compiler, reached from another file's compiled code)."""

    def __init__(self, tree: ast.Module, seeds: bool = True):
        self._tree = tree
        self._classes: dict[str, ast.ClassDef] = {}
        self._functions: dict[str, ast.FunctionDef | ast.AsyncFunctionDef] = {}
        for node in tree.body:
            if isinstance(node, ast.ClassDef):
                self._classes.setdefault(node.name, node)
            elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                self._functions.setdefault(node.name, node)
        self._why: dict[int, Compiled] = {}  # id(class or function node) -> why it is compiled
        self._reached: dict[int, list[ast.AST]] = {}  # id(node) -> what its code reaches in this file
        self._tracer_variables: set[str] | None = None
        # What each compile call of the file is handed: (why, its first argument, the scope it is
        # called in), for the census of what other files' code it compiles (compiled_elsewhere.py).
        self.compile_calls: list[tuple[Compiled, ast.expr, ast.AST]] = []
        self._jit_names: set[str] = set()  # `from torch.jit import script`
        # Local names for torch's compilers: `from torch.jit import script as S`, `import torch.jit as J`,
        # `sj = torch.jit.script` (a hostile round found each of these fixed and then unscriptable).
        self._aliases: dict[str, str] = {}
        if seeds:
            # One walk for what the seeds read: the imports, the plain assignments, the functions.
            nodes = walk(tree)
            self._read_names([n for n in nodes if isinstance(n, (ast.Import, ast.ImportFrom))],
                             [n for n in nodes if isinstance(n, ast.Assign)])
            self._seed(tree, [n for n in nodes if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))])
            self._spread()
        self._top = [n for n in tree.body if isinstance(n, (ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef))]

    def _read_names(self, imports: list[ast.Import | ast.ImportFrom], assigns: list[ast.Assign]) -> None:
        """`_jit_names`, and `_aliases`: local name -> the dotted name it stands for, for imports
        from torch's compiler packages and plain assignments of such a name (`sj = torch.jit.script`)."""
        for node in imports:
            if isinstance(node, ast.ImportFrom) and node.module in _COMPILER_PACKAGES:
                for alias in node.names:
                    self._aliases[alias.asname or alias.name] = f"{node.module}.{alias.name}"
                    if node.module == "torch.jit":
                        self._jit_names.add(alias.asname or alias.name)
            elif isinstance(node, ast.Import):
                for alias in node.names:
                    if alias.asname and alias.name in _COMPILER_PACKAGES:
                        self._aliases[alias.asname] = alias.name
        for assign in assigns:
            if len(assign.targets) == 1 and isinstance(assign.targets[0], ast.Name):
                target = _expand(_dotted(assign.value), self._aliases)
                if target.endswith(("jit.script", "symbolic_trace")):
                    self._aliases[assign.targets[0].id] = target

    # ---- what the file says --------------------------------------------------------------
    def _compiler_of(self, func: ast.expr) -> str:
        """TORCHSCRIPT for `torch.jit.script` / `jit.script` / an imported `script` /
        `getattr(torch.jit, "script")`, FX for `symbolic_trace`, `<...>Tracer(...).trace`, a
        tracer held in a variable (`tracer.trace`) and torch.ao's quantize_fx entry points, ""
        otherwise."""
        if isinstance(func, ast.Call):
            return self._named_compiler(self._getattr_name(func))
        compiler = self._named_compiler(_expand(_dotted(func), self._aliases))
        if compiler or not (isinstance(func, ast.Attribute) and func.attr == "trace"):
            return compiler
        if isinstance(func.value, ast.Call):
            return FX if self._tracer_class(_last(func.value.func)) else ""
        if self._tracer_class(_last(func.value)) or _dotted(func.value) in self._tracers():
            return FX
        return ""

    def _named_compiler(self, name: str) -> str:
        if name.endswith("jit.script") or (name == "script" and "script" in self._jit_names):
            return TORCHSCRIPT
        if name.endswith("symbolic_trace"):
            return FX
        module, _, last = name.rpartition(".")
        if last in _FX_QUANTIZE and (module.endswith("quantize_fx") or name.startswith(_QUANTIZE_PREFIXES)):
            return FX
        return ""

    def _getattr_name(self, call: ast.Call) -> str:
        """`torch.jit.script` for `getattr(torch.jit, "script")`, "" for any other call."""
        if isinstance(call.func, ast.Name) and call.func.id == "getattr" and len(call.args) >= 2 \
                and isinstance(call.args[1], ast.Constant) and isinstance(call.args[1].value, str):
            owner = _dotted(call.args[0])
            return _expand(f"{owner}.{call.args[1].value}", self._aliases) if owner else ""
        return ""

    def _tracer_class(self, name: str) -> bool:
        """A `Tracer` by its name, or a class of this file deriving from one (`class Leafy(fx.Tracer)`)."""
        if name.endswith("Tracer"):
            return True
        seen: set[str] = set()
        while name in self._classes and name not in seen:
            seen.add(name)
            bases = [_last(base) for base in self._classes[name].bases]
            if any(base.endswith("Tracer") for base in bases):
                return True
            name = next((base for base in bases if base in self._classes), "")
        return False

    def _tracers(self) -> set[str]:
        """Names and attributes assigned a tracer (`tracer = torch.fx.Tracer()`, `self._tracer =
        LeafTracer()`), in any scope of the file: read once, when a `.trace` call asks."""
        if self._tracer_variables is None:
            found: set[str] = set()
            for node in walk(self._tree):
                if isinstance(node, (ast.Assign, ast.AnnAssign)) and isinstance(node.value, ast.Call) \
                        and self._tracer_class(_last(node.value.func)):
                    targets = node.targets if isinstance(node, ast.Assign) else [node.target]
                    found.update(name for target in targets if (name := _dotted(target)))
            self._tracer_variables = found
        return self._tracer_variables

    def _decorated(self, node: ast.AST) -> str:
        for decorator in getattr(node, "decorator_list", ()):
            target = decorator.func if isinstance(decorator, ast.Call) else decorator
            name = _expand(_dotted(target), self._aliases)
            last = name.rsplit(".", 1)[-1]
            if last in _SCRIPT_DECORATORS and (name.endswith("jit." + last) or last in self._jit_names):
                return name
        return ""

    def _mark(self, node: ast.AST, why: Compiled) -> bool:
        if id(node) in self._why:
            return False
        self._why[id(node)] = why
        return True

    def _seed(self, tree: ast.Module, functions: list[ast.FunctionDef | ast.AsyncFunctionDef]) -> None:
        for node in tree.body:
            decorator = self._decorated(node)
            if decorator and isinstance(node, (ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
                self._mark(node, Compiled(TORCHSCRIPT, f"`@{decorator}` on line {node.lineno}", f"@{decorator}",
                                          node.lineno))
            if isinstance(node, ast.ClassDef):
                for base in node.bases:
                    if _dotted(base).endswith("ScriptModule"):
                        self._mark(node, Compiled(TORCHSCRIPT, f"`{node.name}` derives from `{_dotted(base)}`",
                                                  f"class {node.name}({_dotted(base)})", node.lineno))
                for item in node.body:
                    decorator = self._decorated(item)
                    if decorator:
                        self._mark(node, Compiled(TORCHSCRIPT, f"`@{decorator}` on line {item.lineno}",
                                                  f"@{decorator}", item.lineno))
        for scope in [tree, *functions]:
            built: dict[str, set[str]] | None = None
            for call in self._own_calls(scope):
                compiler = self._compiler_of(call.func)
                if not compiler or not call.args:
                    continue
                why = Compiled(compiler, f"`{ast.unparse(call.func)}(...)` on line {call.lineno}", _call_text(call),
                               call.lineno)
                self.compile_calls.append((why, call.args[0], scope))
                if built is None:
                    built = self._built_in(scope)
                names = self._classes_of(call.args[0], built, scope)
                for name in names if names is not None else list(self._classes):
                    target = self._classes.get(name) or self._functions.get(name)
                    if target is not None:
                        self._mark(target, why)

    @staticmethod
    def _own_calls(scope: ast.AST) -> list[ast.Call]:
        """The calls of `scope`'s own code (a module's top level, or a function without its
        nested functions, which are scopes of their own)."""
        calls, stack = [], list(ast.iter_child_nodes(scope))
        while stack:
            node = stack.pop()
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)) and scope is not node:
                if isinstance(node, ast.ClassDef):
                    stack.extend(node.body)  # a class body at top level is the module's code
                continue
            if isinstance(node, ast.Call):
                calls.append(node)
            stack.extend(ast.iter_child_nodes(node))
        return calls

    def _built_in(self, scope: ast.AST) -> dict[str, set[str]]:
        """Variable -> the classes of this file assigned to it as `Cls(...)` in `scope`."""
        built: dict[str, set[str]] = {}
        for node in walk(scope):
            if isinstance(node, ast.Assign) and isinstance(node.value, ast.Call):
                made = _dotted(node.value.func).rsplit(".", 1)[-1]
                for target in node.targets:
                    if isinstance(target, ast.Name):
                        built.setdefault(target.id, set()).add(made)
        return built

    def _classes_of(self, arg: ast.expr, built: dict[str, set[str]], scope: ast.AST) -> set[str] | None:
        """The classes or functions of this file `arg` stands for; None when it names none
        (then any of them may be what is compiled)."""
        if isinstance(arg, ast.Call):
            arg = arg.func
        name = _dotted(arg).rsplit(".", 1)[-1]
        if name in self._classes or name in self._functions:
            return {name}
        if name == "self":
            owner = [c for c in self._classes.values() if any(n is scope for n in ast.walk(c))]
            return {owner[0].name} if owner else None
        known = {n for n in built.get(name, ()) if n in self._classes}
        return known or None

    # ---- what compiled code reaches -----------------------------------------------------
    def _local(self, callee: ast.expr) -> ast.AST | None:
        """The class or function of this file a call of `callee` (or a base class so named)
        reaches: a class by its name however it is qualified, a function by its bare name."""
        name = callee.id if isinstance(callee, ast.Name) else (callee.attr if isinstance(callee, ast.Attribute) else "")
        reached: ast.AST | None = self._classes.get(name) if name else None
        if reached is None and isinstance(callee, ast.Name):
            reached = self._functions.get(name)
        return reached

    def _reaches(self, node: ast.AST) -> list[ast.AST]:
        """The classes and functions of this file `node`'s code builds or calls, and a class's bases
        (their methods run on the compiled instance)."""
        reached = self._reached.get(id(node))
        if reached is None:
            callees = [inner.func for inner in ast.walk(node) if isinstance(inner, ast.Call)]
            callees += getattr(node, "bases", [])
            reached = self._reached[id(node)] = [r for r in map(self._local, callees) if r is not None]
        return reached

    def _spread(self) -> None:
        """Callees, built submodules and bases of compiled code are compiled too, until nothing changes."""
        changed = True
        while changed:
            changed = False
            for node in [*self._classes.values(), *self._functions.values()]:
                why = self._why.get(id(node))
                if why is None:
                    continue
                for reached in self._reaches(node):
                    changed |= self._mark(reached, why)

    # ---- what another file's compiled code asks (compiled_elsewhere.py) -------------------------
    def _definitions(self) -> list[tuple[str, _Definition]]:
        return [*self._classes.items(), *self._functions.items()]

    def defines(self, name: str) -> bool:
        return name in self._classes or name in self._functions

    def is_class(self, name: str) -> bool:
        return name in self._classes

    def local_name(self, callee: ast.expr) -> str:
        """The class or function of this file a call of `callee` reaches (as compiled code's
        calls are read here), by name, else ""."""
        reached = self._local(callee)
        return getattr(reached, "name", "")

    def names(self) -> list[str]:
        """The top-level classes and functions, by name."""
        return [name for name, _node in self._definitions()]

    def marked(self) -> dict[str, Compiled]:
        """The top-level classes and functions compiled, by name."""
        return {name: self._why[id(node)] for name, node in self._definitions() if id(node) in self._why}

    def mark(self, name: str, why: Compiled) -> list[str]:
        """Compile the top-level class or function `name` from outside this file, and what it
        reaches here; the names that were not compiled before."""
        node = self._classes.get(name) or self._functions.get(name)
        if node is None or id(node) in self._why:
            return []
        before = set(self._why)
        self._mark(node, why)
        self._spread()
        return [n for n, definition in self._definitions() if id(definition) in self._why
                and id(definition) not in before]

    def outside(self, name: str) -> list[tuple[str, bool]]:
        """What the top-level class or function `name` reaches that this file does not define, as
        written (`Mlp`, `blocks.Mlp`): its bases and the callees of its code, each with whether it
        counts only as a class (a base; a call in `__init__`, which builds submodules there but
        runs before any compiler, so a function it calls is not compiled)."""
        node = self._classes.get(name) or self._functions.get(name)
        if node is None:
            return []
        out = [(_dotted(base), True) for base in getattr(node, "bases", []) if self._local(base) is None]
        parts = node.body if isinstance(node, ast.ClassDef) else [node]
        for part in parts:
            in_init = isinstance(part, (ast.FunctionDef, ast.AsyncFunctionDef)) and part.name == "__init__"
            out += [(_dotted(inner.func), in_init) for inner in walk(part)
                    if isinstance(inner, ast.Call) and self._local(inner.func) is None]
        return [(dotted, classes_only) for dotted, classes_only in out if dotted]

    def why(self, fn: ast.FunctionDef | ast.AsyncFunctionDef) -> Compiled | None:
        """Why the function `fn` is compiled, or None when it is not. Found by its line, not its
        node: the planner's tree may have other functions' bodies blanked (core/regions.py)."""
        owner, method = enclosing(self._top, fn.lineno)
        why = self._why.get(id(owner)) if owner is not None else None
        if why is None or method == "__init__":
            return None  # TorchScript and fx compile what runs after construction
        return why


def compiled_reason(text: str, tree: ast.Module, fn: ast.FunctionDef | ast.AsyncFunctionDef, func: str,
                    memo: dict) -> str:
    """The no-fix reason for a site in function `fn` of the module `tree` (text `text`), or ""
    when nothing compiles it. `memo` keeps the file's analysis between its sites.

    Read from the whole tree whenever the text names a compiler: what carries compilation to
    the site may lie in bodies a reduced parse blanked without naming one (a scripted parent's
    `__init__` building the site's module, its `forward` calling it: four lines each were enough
    for `--fix` to call the site safe and break `torch.jit.script` of the parent)."""
    if not any(marker in text for marker in MARKERS):
        return ""
    if "triton.jit" in text and not any(marker in text.replace("triton.jit", "") for marker in MARKERS):
        return ""  # Triton's kernels (`@triton.jit`, vLLM's attention files): no TorchScript, no fx
    code = memo.get(id(tree))
    if code is None:
        code = memo[id(tree)] = CompiledCode(trees.whole_of(tree))
    why = code.why(fn)
    return why.refusal(func) if why is not None else ""
