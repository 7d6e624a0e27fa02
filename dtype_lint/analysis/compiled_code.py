"""Which functions of a file TorchScript compiles or torch.fx traces, so that `--fix` leaves them alone.

A fix routes a cast through the shared helper. Eager Python, `torch.compile` and `torch.export`
run the helper as written (tests/test_trust_round3_compiled.py compiles and exports fixed modules
on every storage), but two compilers do not:
- TorchScript (`torch.jit.script`) compiles the helper recursively and rejects it: a function
  cannot take an `nn.Module` argument, and `getattr(layer, "weight", None)` is not scriptable;
- torch.fx's symbolic tracing (`torch.fx.symbolic_trace`, a `Tracer().trace`) hands the helper
  the weight as a proxy, and the helper branches on its dtype ("symbolically traced variables
  cannot be used as inputs to control flow"); the fix's `is not None` guard would be traced as
  always true.
The original `x.to(layer.weight.dtype)` scripts and traces, so a fix there would break code that
compiled. Such sites keep their finding and get no fix, with the reason.

What counts as compiled, from this file alone (a class scripted from another file is not seen):
- a function or class decorated `torch.jit.script` (or `script_method`, `export`, `interface`),
  and a class deriving from `torch.jit.ScriptModule`;
- a class given to `torch.jit.script(...)` or to an fx tracing entry point, as the class itself,
  an instance built there (`Cls(...)`), a variable holding one, or `self` in its own methods; an
  argument that names no class of the file (`torch.jit.script(model)`) counts every class here;
- what those reach: the top-level functions their code calls, and the classes their code builds
  (a scripted or traced module compiles its submodules' `forward` too), transitively.
`__init__` is never compiled. A `torch.jit.ignore` method is not compiled but still refused: it runs
as Python on the scripted module, whose dtype attributes are ints (a layer's model dtype attribute
there is not a dtype, and `x.to(<int>)` reads it as a device).
`torch.jit.trace`, `torch.compiler.disable` and CUDA-graph capture run the Python as written
(tracing records the ops the eager code runs), so they need no refusal.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass

from dtype_lint.analysis.function_walk import walk  # ast.walk's nodes in its order, as a list: cheaper
from dtype_lint.core import trees

# Text without any of these cannot script or trace anything: the parse-free answer.
MARKERS = ("jit", "symbolic_trace", "Tracer", "ScriptModule")

_SCRIPT_DECORATORS = {"script", "script_method", "export", "interface"}

TORCHSCRIPT = "TorchScript"
FX = "torch.fx"


@dataclass(frozen=True)
class Compiled:
    """Why a function is compiled: by which compiler, and the code that makes it so."""
    compiler: str  # TORCHSCRIPT | FX
    evidence: str  # e.g. "`torch.jit.script(Attn(...))` on line 30"

    def refusal(self, func: str) -> str:
        """The no-fix reason shown with the finding."""
        if self.compiler == TORCHSCRIPT:
            why = (f"TorchScript would compile `{func}` too and cannot (a function cannot take an "
                   "`nn.Module`; `getattr(..., None)` is not scriptable)")
        else:
            why = (f"fx would trace `{func}`, which branches on the weight's dtype, a proxy while tracing "
                   "(\"symbolically traced variables cannot be used as inputs to control flow\")")
        return (f"this code is compiled by {self.compiler} ({self.evidence}), and {why}; fix it by hand "
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


class CompiledCode:
    """The compiled functions of one module's tree, by function node."""

    def __init__(self, tree: ast.Module):
        self._jit_names = self._names_from(tree, "torch.jit")  # `from torch.jit import script`
        # Local names for torch's compilers: `from torch.jit import script as S`, `import torch.jit as J`,
        # `sj = torch.jit.script` (a hostile round found each of these fixed and then unscriptable).
        self._aliases = self._aliases_of(tree)
        self._fx_names = self._names_from(tree, "torch.fx") | self._names_from(tree, "transformers.utils.fx")
        self._classes: dict[str, ast.ClassDef] = {}
        self._functions: dict[str, ast.FunctionDef | ast.AsyncFunctionDef] = {}
        for node in tree.body:
            if isinstance(node, ast.ClassDef):
                self._classes.setdefault(node.name, node)
            elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                self._functions.setdefault(node.name, node)
        self._why: dict[int, Compiled] = {}  # id(class or function node) -> why it is compiled
        self._seed(tree)
        self._spread()
        self._top = [n for n in tree.body if isinstance(n, (ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef))]

    @staticmethod
    def _aliases_of(tree: ast.Module) -> dict[str, str]:
        """Local name -> the dotted name it stands for, for imports from torch's compiler packages
        and plain assignments of such a name (`sj = torch.jit.script`)."""
        aliases: dict[str, str] = {}
        packages = ("torch.jit", "torch.fx", "transformers.utils.fx")
        for node in walk(tree):
            if isinstance(node, ast.ImportFrom) and node.module in packages:
                for alias in node.names:
                    aliases[alias.asname or alias.name] = f"{node.module}.{alias.name}"
            elif isinstance(node, ast.Import):
                for alias in node.names:
                    if alias.asname and alias.name in packages:
                        aliases[alias.asname] = alias.name
        for node in walk(tree):
            if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name):
                target = _expand(_dotted(node.value), aliases)
                if target.endswith(("jit.script", "symbolic_trace")):
                    aliases[node.targets[0].id] = target
        return aliases

    @staticmethod
    def _names_from(tree: ast.Module, package: str) -> set[str]:
        return {alias.asname or alias.name for node in walk(tree)
                if isinstance(node, ast.ImportFrom) and node.module == package for alias in node.names}

    # ---- what the file says --------------------------------------------------------------
    def _compiler_of(self, func: ast.expr) -> str:
        """TORCHSCRIPT for `torch.jit.script` / `jit.script` / an imported `script`, FX for
        `symbolic_trace` or `<...>Tracer(...).trace`, "" otherwise."""
        name = _expand(_dotted(func), self._aliases)
        if name.endswith("jit.script") or (name == "script" and "script" in self._jit_names):
            return TORCHSCRIPT
        if name.endswith("symbolic_trace"):
            return FX
        if isinstance(func, ast.Attribute) and func.attr == "trace":
            receiver = func.value.func if isinstance(func.value, ast.Call) else func.value
            if _dotted(receiver).rsplit(".", 1)[-1].endswith("Tracer"):
                return FX
        return ""

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

    def _seed(self, tree: ast.Module) -> None:
        for node in tree.body:
            decorator = self._decorated(node)
            if decorator and isinstance(node, (ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
                self._mark(node, Compiled(TORCHSCRIPT, f"`@{decorator}` on line {node.lineno}"))
            if isinstance(node, ast.ClassDef):
                for base in node.bases:
                    if _dotted(base).endswith("ScriptModule"):
                        self._mark(node, Compiled(TORCHSCRIPT, f"`{node.name}` derives from `{_dotted(base)}`"))
                for item in node.body:
                    decorator = self._decorated(item)
                    if decorator:
                        self._mark(node, Compiled(TORCHSCRIPT, f"`@{decorator}` on line {item.lineno}"))
        for scope in [tree, *(n for n in walk(tree) if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef)))]:
            built = self._built_in(scope)
            for call in self._own_calls(scope):
                compiler = self._compiler_of(call.func)
                if not compiler or not call.args:
                    continue
                why = Compiled(compiler, f"`{ast.unparse(call.func)}(...)` on line {call.lineno}")
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
    def _spread(self) -> None:
        """Callees and built submodules of compiled code are compiled too, until nothing changes."""
        changed = True
        while changed:
            changed = False
            for node in [*self._classes.values(), *self._functions.values()]:
                why = self._why.get(id(node))
                if why is None:
                    continue
                for inner in ast.walk(node):
                    if not isinstance(inner, ast.Call):
                        continue
                    name = _dotted(inner.func).rsplit(".", 1)[-1] if isinstance(inner.func, ast.Name) else \
                        (inner.func.attr if isinstance(inner.func, ast.Attribute) else "")
                    reached: ast.AST | None = \
                        self._classes.get(name) if isinstance(inner.func, (ast.Name, ast.Attribute)) else None
                    if reached is None and isinstance(inner.func, ast.Name):
                        reached = self._functions.get(name)
                    if reached is not None:
                        changed |= self._mark(reached, why)

    def why(self, fn: ast.FunctionDef | ast.AsyncFunctionDef) -> Compiled | None:
        """Why the function `fn` is compiled, or None when it is not. Found by its line, not its
        node: the planner's tree may have other functions' bodies blanked (core/regions.py)."""
        line = fn.lineno
        owner = next((n for n in self._top if n.lineno <= line <= (n.end_lineno or n.lineno)), None)
        why = self._why.get(id(owner)) if owner is not None else None
        if why is None:
            return None
        if isinstance(owner, ast.ClassDef):
            method = next((m for m in owner.body if isinstance(m, (ast.FunctionDef, ast.AsyncFunctionDef))
                           and m.lineno <= line <= (m.end_lineno or m.lineno)), None)
            if getattr(method, "name", "") == "__init__":
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
