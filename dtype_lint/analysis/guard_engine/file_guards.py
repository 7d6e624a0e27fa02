"""The `guards` fact: the questions a rule asks of the checks that dominate a site in one file.

- `storage_unpacked(site, function, layer)`: a check proves the layer unquantized or its storage a
  float wherever `site` runs (analysis/guard_engine/guards.py, STORAGE_UNPACKED) - what DTL001, DTL002 and
  DTL004 need before a cast to `L.weight.dtype` is harmless;
- `weight_present(read, function, layer)`: `L.weight` cannot raise at `read` (WEIGHT_PRESENT):
  a dominating guard in the function, with the flags and predicates of its class and module
  (analysis/guard_engine/guard_flags.py); a layer class whose `__init__` refuses quantization; a private
  function whose every caller passes a layer that is never quantized; and, looked for last as they
  cost more, a check the engine cannot read on the layer itself, a dormant path
  (analysis/guard_engine/dormant.py), or a guard around every call in the file.

One object per file, built on demand: most files hold no site a rule would report.
"""

from __future__ import annotations

import ast
import functools
from collections.abc import Sequence

from dtype_lint.analysis.analysed_function import AnalysedFunction
from dtype_lint.analysis.function_walk import parent_map, walk
from dtype_lint.analysis.guard_engine.dominance import dominators, statement_blocks
from dtype_lint.analysis.guard_engine.dormant import dormant_attributes, enabled_in_file
from dtype_lint.analysis.guard_engine.guard_flags import (
    ClassGuardFlags,
    attribute_predicate_calls,
    concrete_classes,
    def_alone,
    imported_predicate,
    object_predicate_calls,
    predicate_names,
)
from dtype_lint.analysis.guard_engine.guards import (
    BackendNames,
    GuardKnowledge,
    implies_no_weight,
    implies_weight,
    is_falsy,
    unpacked_storage_guard,
    weight_present_at,
)
from dtype_lint.analysis.index.class_facts import annotation_name
from dtype_lint.analysis.index.class_index import dotted
from dtype_lint.analysis.index.lazy_exports import lazy_owner
from dtype_lint.analysis.storage.layers import NONE
from dtype_lint.core.findings import Evidence
from dtype_lint.core.text_facts import top_level_defs

_NO_LAYER = ast.Name(id="<no layer>")  # a guard in a caller speaks of no particular layer


def test_module(path: str) -> bool:
    """A test module: `test_*.py`, `*_test.py`, `conftest.py`, or a file under a `test`/`tests`
    folder. A test builds its layer with the config it asserts on, and reads the storage that
    config gives on purpose: not model code a backend can surprise."""
    parts = path.replace("\\", "/").split("/")
    name = parts[-1]
    return (name.startswith("test_") or name.endswith("_test.py") or name == "conftest.py"
            or any(part in ("test", "tests") for part in parts[:-1]))


class FileGuards:
    """Guard questions about one file. `file`: the rule facts of the file (rule.RuleFacts: its
    tree, imports, project, config, layer resolver and functions)."""

    def __init__(self, file):
        self._file = file

    def release(self) -> None:
        """Forget what the questions built (rule.RuleFacts.release): the class flags refer back
        to this object, and this object to the file's facts."""
        flags = self.__dict__.pop("_class_flags", None)
        if flags is not None:
            flags.release()
        for name in _CACHED:
            self.__dict__.pop(name, None)

    # ---- storage proven unpacked ------------------------------------------------------------
    def storage_unpacked(self, site: ast.AST, function, layer: ast.expr) -> Evidence | None:
        """Evidence of a check proving `layer` unquantized (or its storage a float) at `site` in
        `function` (a rule.Candidate), or None."""
        scope = function.scope
        aliases = {k: v[0] for k, v in scope.assigns.items() if len(v) == 1 and v[0] is not None}
        project = self._file.project
        class_facts = project.class_facts(function.class_qualname) if function.class_qualname else None
        return unpacked_storage_guard(site, function.parents, layer, aliases, class_facts, self._file.source.path,
                                      self._module_function)

    @functools.cached_property
    def _own_functions(self) -> dict[str, ast.AST]:
        return {node.name: node for node in self._file.tree.body
                if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef))}

    def _module_function(self, name: str):
        """The top-level function `name` calls in this file: its own, or one imported from a
        project module (read through the index's file facts)."""
        found = self._module_function_at(name)
        return found[0] if found is not None else None

    # ---- `.weight` exists -------------------------------------------------------------------
    @functools.cached_property
    def _class_flags(self) -> ClassGuardFlags:
        file = self._file
        backends = BackendNames(file.config.all_config_params,
                                concrete_classes(file.project, file.source.module, file.imports))
        return ClassGuardFlags(
            file.tree, lambda local: imported_predicate(file.project, file.imports, local,
                                                        file.config.all_config_params),
            backends, self._object_predicates)

    def _object_predicates(self, fn, base: str) -> frozenset[str]:
        """What the call `base(...)` in `fn` is, `X.m` where `X = C(...)` or `X = f()` in `fn` and
        `m`, a method of C (of the class `f`'s return annotation names), is a predicate (read as
        an imported predicate is, with its unquantized checks and config tests only), or
        `self.a.m` (`_attribute_predicates`): `{base}`, `{"not " + base}` or nothing. Asked only
        for the names a guard calls (names_on_demand.py)."""
        if "." not in base:
            return frozenset()  # both name only `X.m` calls: a plain `f` needs no walk of `fn`
        calls = self._object_calls.get(id(fn))
        if calls is None:
            calls = self._object_calls[id(fn)] = object_predicate_calls(fn)
        return self._object_predicate(calls, base) | self._attribute_predicates(fn, base)

    @functools.cached_property
    def _object_calls(self) -> dict[int, dict]:
        return {}  # id(fn) -> object_predicate_calls(fn)

    @functools.cached_property
    def _attribute_calls(self) -> dict[int, dict]:
        return {}  # id(fn) -> attribute_predicate_calls(fn, its self name)

    def _object_predicate(self, calls: dict, base: str) -> frozenset[str]:
        found = set()
        for name, (builder, method_name) in ((base, calls[base]),) if base in calls else ():
            builder_name = dotted(builder)
            if builder_name is None:  # never: object_predicate_calls keeps only builders with a dotted name
                continue
            located = self._method_of_built(builder_name, method_name)
            if located is None:
                continue
            owner, method = located
            config_params = self._file.config.all_config_params
            known = GuardKnowledge(backends=BackendNames(config_params))
            key = ("object-predicate", owner, method_name, config_params)
            names = self._file.project.index.cached_facts(key, lambda method=method, known=known:
                                                           predicate_names(method, known, "m"))
            if "m" in names:
                found.add(name)
            elif "not m" in names:
                found.add(f"not {name}")
        return frozenset(found)

    def _attribute_predicates(self, fn, base: str) -> frozenset[str]:
        """`self.a.m` where `self.a` resolves to a class whose method `m` is a predicate (read as
        an imported predicate is, with its unquantized checks and config tests only):
        `self.self_attn.can_fuse(x)` true only when the attention's projection is unquantized."""
        if not base.startswith("self."):
            return frozenset()  # every name attribute_predicate_calls gives starts so
        function = self._candidate(fn)
        if function is None or not function.scope.self_name:
            return frozenset()
        calls = self._attribute_calls.get(id(fn))
        if calls is None:
            calls = self._attribute_calls[id(fn)] = attribute_predicate_calls(fn, function.scope.self_name)
        found = set()
        project, config_params = self._file.project, self._file.config.all_config_params
        for name, (receiver, method_name) in ((base, calls[base]),) if base in calls else ():
            qualname = self._file.layers.resolve(receiver, function.scope).qualname
            if qualname is None:
                continue
            owner = next((c for c in project.index.mro(qualname) or [qualname] if project.class_facts(c) is not None
                          and method_name in project.class_facts(c).methods), None)
            if owner is None:
                continue
            method = project.class_facts(owner).methods[method_name]
            known = GuardKnowledge(backends=BackendNames(config_params))
            key = ("object-predicate", owner, method_name, config_params)
            names = project.index.cached_facts(key, lambda method=method, known=known:
                                               predicate_names(method, known, "m"))
            if "m" in names:
                found.add(name)
            elif "not m" in names:
                found.add(f"not {name}")
        return frozenset(found)

    def _candidate(self, fn):
        """The rule.Candidate of a function node of this file, or None."""
        return next((function for function in self._file.functions if function.fn is fn), None)

    def _method_of_built(self, builder: str, method_name: str):
        """The method `method_name` of the class `builder(...)` builds: the class itself, or the
        class a project function's return annotation names (its module's imports resolve it)."""
        project, file = self._file.project, self._file
        index = project.index
        qualname = index.resolve(file.source.module, builder, file.imports)
        if project.class_facts(qualname) is None:
            located = self._module_function_at(builder)
            if located is None:
                return None
            function_node, module, imports = located
            returned = annotation_name(function_node.returns)
            if not returned:
                return None
            qualname = index.resolve(module, returned, imports)
        for owner in index.mro(qualname) or [qualname]:
            facts = project.class_facts(owner)
            if facts is not None and method_name in facts.methods:
                return owner, facts.methods[method_name]
        return None

    def _module_function_at(self, name: str):
        """(function, its module, that module's imports) for a top-level function `name` calls."""
        if name in self._own_functions:
            return self._own_functions[name], self._file.source.module, self._file.imports
        target = self._file.imports.get(name)
        if target is None:
            return None
        project = self._file.project
        module, _, attr = project.index.canonical(target).rpartition(".")
        if project.index.modules.get(module) is None:
            return None
        module = lazy_owner(project, module, attr) or module
        # The `def` read from its own lines first, as imported predicates are (guard_flags.
        # _named_predicates): the module's facts may hold a reduced tree, whose blanked bodies
        # (a predicate's: no site in it) say nothing, and parsing the whole module costs more.
        text = project.module_text(module)
        bodies = top_level_defs(text, attr) if text is not None else []
        alone = def_alone(bodies[0], attr) if len(bodies) == 1 else None
        header = project.index.modules.get(module)
        if alone is not None and header is not None:
            return alone, module, header.imports
        facts = project.file_facts(module)
        if facts is None or facts.tree is None:
            return None
        function_node = next((node for node in facts.tree.body
                   if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.name == attr), None)
        return (function_node, facts.module, facts.imports) if function_node is not None else None

    @functools.cached_property
    def _private_calls(self) -> "_PrivateCalls":
        return _PrivateCalls(self._file.functions)

    @functools.cached_property
    def _callers(self) -> "_CallerGuards":
        return _CallerGuards(self._file, self._class_flags)

    @functools.cached_property
    def _known_in(self) -> dict[int, GuardKnowledge]:
        return {}

    @functools.cached_property
    def _known_at_read(self) -> dict[int, GuardKnowledge]:
        return {}

    @functools.cached_property
    def _enabled_attributes(self) -> frozenset[str]:
        return enabled_in_file(self._file.tree)

    def weight_present(self, read: ast.AST, function, layer: ast.expr) -> bool:
        """`layer.weight` read at `read` in `function` (a rule.Candidate) cannot raise: a guard
        implies it (see the module docstring)."""
        known = self._known_in.get(id(function.fn))
        if known is None:
            aliases = {k: v[0] for k, v in function.scope.assigns.items() if len(v) == 1 and v[0] is not None}
            known = self._known_in[id(function.fn)] = self._class_flags.in_function(function.fn).with_aliases(aliases)
        if weight_present_at(read, layer, function.parents, known):
            return True
        if "self" in known.flags and isinstance(layer, ast.Name) and layer.id == function.scope.self_name:
            return True  # a layer class whose __init__ refuses quantization
        if self._callers_pass_unquantized(function, layer):
            return True
        # The guards that cost more to see, looked for only where a read would be reported.
        at_read = self._known_at_read.get(id(function.fn))
        if at_read is None:
            at_read = self._known_at_read[id(function.fn)] = known.at_read(
                lambda call: self._unresolved_method(call, function), self._dormant(function))
        return weight_present_at(read, layer, function.parents, at_read) or \
            self._callers.every_call_guarded(function, layer) or self._callers.parameter_guards(function, read)

    def _dormant(self, function) -> dict[str, object]:
        if not (function.class_qualname and function.scope.self_name):
            return {}
        found = dormant_attributes(self._file.project, function.class_qualname, self._enabled_attributes)
        return {f"{function.scope.self_name}.{attr}": value for attr, value in found.items()}

    def _unresolved_method(self, call: ast.Call, function) -> bool:
        """`recv.m(...)` where `recv` is neither `self`/`cls` nor a name this file imports (a
        module's functions can be read), and its class does not resolve (`self.kernel = None` in
        `__init__`, set by other code)."""
        func = call.func
        if not isinstance(func, ast.Attribute):
            return False
        receiver = root = func.value
        while isinstance(root, ast.Attribute):
            root = root.value
        imports = self._file.imports
        if isinstance(receiver, ast.Name) and (receiver.id in ("self", "cls") or receiver.id in imports):
            return False
        if isinstance(root, ast.Name) and root.id in imports:
            return False  # `pkg.mod.f(...)`: a module's function
        return self._file.layers.resolve(receiver, function.scope).qualname is None

    def _callers_pass_unquantized(self, function, layer: ast.expr, depth: int = 0) -> bool:
        """`layer` is a parameter of a private function (or method) of this file, and every call
        of it here passes a layer that is never quantized (built with `quant_config=None`, say):
        only those calls can reach it, so its annotation's class says too much."""
        if depth > 3 or not isinstance(layer, ast.Name) or layer.id not in function.scope.params:
            return False
        function_node = function.fn
        if not function_node.name.startswith("_") or function_node.name.startswith("__"):
            return False
        params = [a.arg for a in function_node.args.posonlyargs + function_node.args.args]
        if function.class_qualname is not None and params[:1] in (["self"], ["cls"]):
            params = params[1:]
        calls = self._private_calls.calls.get(function_node.name, [])
        if not calls:
            return False
        layers = self._file.layers
        for call, caller in calls:
            arg = next((k.value for k in call.keywords if k.arg == layer.id), None)
            if arg is None and layer.id in params:
                position = params.index(layer.id)
                arg = call.args[position] if position < len(call.args) and not any(
                    isinstance(a, ast.Starred) for a in call.args[:position + 1]) else None
            if arg is None:
                return False
            scope = caller.scope
            if isinstance(arg, ast.Name) and arg.id not in scope.params and arg.id not in scope.assigns:
                # A free variable of a nested function: the enclosing function's local.
                outer = self._enclosing(caller)
                if outer is not None and arg.id in outer.scope.assigns:
                    caller, scope = outer, outer.scope
            instance = layers.resolve(arg, scope)
            known = instance.qualname is not None or instance.config == NONE
            if known and layers.quantizable(instance, ast.unparse(arg), None) is None:
                continue  # resolved, and never quantized
            if not self._callers_pass_unquantized(caller, arg, depth + 1):
                return False
        return True

    def _enclosing(self, function):
        """The function of the file that `function` is nested in (the innermost), or None."""
        best = None
        for other in self._file.functions:
            if other.fn is not function.fn and other.fn.lineno < function.fn.lineno \
                    and function.fn.end_lineno <= other.fn.end_lineno \
                    and any(node is function.fn for node in ast.walk(other.fn)):
                if best is None or other.fn.lineno > best.fn.lineno:
                    best = other
        return best


# FileGuards' answers kept on it, forgotten by `release`.
_CACHED = tuple(name for name, value in vars(FileGuards).items() if isinstance(value, functools.cached_property))


class _CallerGuards:
    """Guards in the callers: a function or method whose every use in its file is a call that a
    guard dominates in the calling function (`if self.attn.fast_decode: self.attn.forward_decode(
    ...)`, with `fast_decode` a flag of the callee's class, read on the object called), or that an
    earlier read of the same layer's `.weight` in the caller dominates (the layer named in the
    caller's terms: `self.X` through the object called on, a parameter through the argument). That
    read raises first, and is the one reported: a dispatch that reads `w = self.weight` and
    calls `self._gemm_fp8(x)` only after testing `w.dtype`."""

    def __init__(self, file, class_flags: ClassGuardFlags):
        self._file, self._class_flags = file, class_flags
        self._decided: dict[tuple, bool] = {}

    @functools.cached_property
    def _parents(self) -> dict[int, ast.AST]:
        return parent_map(self._file.tree)

    def every_call_guarded(self, function, layer: ast.expr | None = None, depth: int = 0) -> bool:
        """Every call of `function` in the file is guarded, in its caller or, up to three
        levels up, in every call of that caller (`_project(x)` called only from `_fused(x)`,
        called only under the flag)."""
        key = (id(function.fn), ast.dump(layer) if layer is not None else None)
        if key not in self._decided:
            if depth > 2:
                return False
            self._decided[key] = False  # a cycle of calls guards nothing
            self._decided[key] = self._decide(function, layer, depth)
        return self._decided[key]

    @staticmethod
    def _in_caller(layer: ast.expr | None, function, call: ast.Call, receiver: ast.expr | None) -> ast.expr:
        """`layer`, an expression of the callee, as the caller writes it at `call`: its root
        `self` becomes the object called on, a parameter the argument passed for it; anything else
        names no layer there."""
        if layer is None:
            return _NO_LAYER
        root, path = layer, []
        while isinstance(root, ast.Attribute):
            path.append(root.attr)
            root = root.value
        if not isinstance(root, ast.Name):
            return _NO_LAYER
        function_node = function.fn
        params = [a.arg for a in function_node.args.posonlyargs + function_node.args.args]
        base: ast.expr | None
        if receiver is not None and params and root.id == params[0] == function.scope.self_name:
            base = receiver
        elif root.id in params and not any(isinstance(a, ast.Starred) for a in call.args):
            positional = params[1:] if receiver is not None else params
            base = next((k.value for k in call.keywords if k.arg == root.id), None)
            position = positional.index(root.id) if root.id in positional else len(call.args)
            if base is None and position < len(call.args):
                base = call.args[position]
            if base is None:
                return _NO_LAYER
        else:
            return _NO_LAYER
        for attr in reversed(path):
            base = ast.Attribute(value=base, attr=attr, ctx=ast.Load())
        return base

    def _decide(self, function, layer: ast.expr | None, depth: int = 0) -> bool:
        function_node = function.fn
        method = function.class_qualname is not None
        if method and function_node.name == "__init__" and function.scope_name.count(".") == 1:
            return self._constructions_guarded(function, layer, depth)
        # Called implicitly (`module(x)` runs `forward`, an attribute read runs a property, a
        # decorator may register it): not every call is in sight.
        if (function_node.name.startswith("__") or function_node.name == "forward"
                or function.scope_name.count(".") > int(method)):
            return False
        if any(dotted(d) not in ("staticmethod", "classmethod") for d in function_node.decorator_list):
            return False
        parents = self._parents
        uses = [n for n in walk(self._file.tree)
                if (isinstance(n, ast.Attribute) and method and n.attr == function_node.name)
                or (isinstance(n, ast.Name) and not method and n.id == function_node.name
                    and isinstance(n.ctx, ast.Load))]
        calls = 0
        for use in uses:
            call = parents.get(id(use))
            if not (isinstance(call, ast.Call) and call.func is use):
                return False  # handed on as a value: called where the rule cannot see
            caller = self._caller_of(call)
            if caller is None or caller.fn is function_node:
                return False
            known = self._class_flags.in_function(caller.fn)
            if isinstance(use, ast.Attribute):  # a method's uses are attributes, a function's names
                receiver = self._receiver_class(use.value, caller)
                if receiver is None:
                    return False  # an object of unknown class: it may be this one
                if function.class_qualname not in self._file.layers.index.mro(receiver):
                    continue  # another class's method of the same name
                if not (isinstance(use.value, ast.Name) and use.value.id == caller.scope.self_name):
                    # The callee's flags, read on the object it is called on.
                    theirs = self._class_flags.of(function_node).flags
                    known = known.with_flags(f"{ast.unparse(use.value)}.{flag[5:]}" for flag in theirs
                                             if flag.startswith("self."))
            in_caller = self._in_caller(layer, function, call, use.value if isinstance(use, ast.Attribute) else None)
            if not weight_present_at(call, in_caller, caller.parents, known) and not self.every_call_guarded(
                    caller, None if in_caller is _NO_LAYER else in_caller, depth + 1):
                return False
            calls += 1
        return calls > 0

    def parameter_guards(self, function, read: ast.AST) -> bool:
        """The read runs only where a parameter held (`if gather_input:`), one that defaults to a
        false constant, and every call in the file that passes it passes a guard value: a false
        constant, a flag or predicate of the caller, or a local that is true there only where a
        guard held (`gather = ...; if gather and not self.attn.can_fuse(x): gather = False`)."""
        function_node = function.fn
        defaults = _false_defaults(function_node)
        guarding = []
        for dominator in dominators(read, function.parents):
            test = dominator.test
            values = test.values if isinstance(test, ast.BoolOp) and isinstance(test.op, ast.And) else [test]
            if dominator.holds and dominator.kind in ("branch", "operand"):
                guarding += [v.id for v in values if isinstance(v, ast.Name) and v.id in defaults]
        return any(self._every_call_passes_a_guard(function, name) for name in dict.fromkeys(guarding))

    def _every_call_passes_a_guard(self, function, name: str) -> bool:
        passed = self._arguments_for(function, name)
        if not passed:
            return False  # unknown, or never passed here: turned on out of sight
        for call, value in passed:
            caller = self._caller_of(call)
            known = self._class_flags.in_function(caller.fn) if caller is not None else self._class_flags.of(None)
            if is_falsy(value) or implies_weight(value, None, known):
                continue
            if not (caller is not None and isinstance(value, ast.Name) and _local_flag_before(call, value.id, known,
                                                                                              self._parents)):
                return False
        return True

    def _arguments_for(self, function, name: str) -> list[tuple[ast.Call, ast.expr]] | None:
        """(call, the value it passes for parameter `name`) for every call in the file that may
        call `function` and passes it: by keyword (whatever the call names: a keyword of that name
        is read as this one), or by position to a call of the function's name (for `forward`, a
        call of an object of its class). None where a call passes what cannot be read (`*args`,
        `**kwargs` to the function's name)."""
        function_node = function.fn
        method = function.class_qualname is not None
        positional = [a.arg for a in function_node.args.posonlyargs + function_node.args.args]
        if method:
            positional = positional[1:]
        position = positional.index(name) if name in positional else None
        found: list[tuple[ast.Call, ast.expr]] = []
        for call in walk(self._file.tree):
            if not isinstance(call, ast.Call):
                continue
            keyword = next((k.value for k in call.keywords if k.arg == name), None)
            if keyword is not None:
                found.append((call, keyword))
                continue
            func = call.func
            named = (func.attr if isinstance(func, ast.Attribute) else func.id if isinstance(func, ast.Name)
                     else None) == function_node.name
            unreadable = any(isinstance(a, ast.Starred) for a in call.args) or any(k.arg is None for k in call.keywords)
            if named and unreadable:
                return None
            if position is None or position >= len(call.args):
                continue
            if not named and function_node.name == "forward" and method and isinstance(func, (ast.Name, ast.Attribute)):
                caller = self._caller_of(call)
                receiver = self._receiver_class(func, caller) if caller is not None else None
                named = receiver is not None and function.class_qualname in self._file.layers.index.mro(receiver)
            if named:
                if any(isinstance(a, ast.Starred) for a in call.args[:position + 1]):
                    return None
                found.append((call, call.args[position]))
        return found

    def _constructions_guarded(self, function, layer: ast.expr | None, depth: int) -> bool:
        """`__init__` runs where its class is built: every construction in the file (`C(...)`,
        or `cls(...)` in a classmethod of C) is guarded, and C is named nowhere else but in
        annotations (a subclass, or the class handed on as a value, builds it out of sight)."""
        constructions = self._constructions(function)
        if not constructions:
            return False
        new_object = ast.Name(id="<the object built>", ctx=ast.Load())
        for call in constructions:
            caller = self._caller_of(call)
            if caller is None or caller.fn is function.fn:
                return False
            known = self._class_flags.in_function(caller.fn)
            in_caller = self._in_caller(layer, function, call, new_object)
            if not weight_present_at(call, in_caller, caller.parents, known) and not self.every_call_guarded(
                    caller, None if in_caller is _NO_LAYER else in_caller, depth + 1):
                return False
        return True

    def _constructions(self, function) -> list[ast.Call] | None:
        """The calls that build `function`'s class in this file, or None where the class is also
        named otherwise (a base, a value handed on) or is not a top-level class of the file."""
        class_name = function.class_qualname.rsplit(".", 1)[-1]
        owner = next((node for node in self._file.tree.body if isinstance(node, ast.ClassDef)
                      and node.name == class_name and any(m is function.fn for m in node.body)), None)
        if owner is None:
            return None
        parents = self._parents
        annotations = {id(node) for holder in walk(self._file.tree) for annotation in _annotations_of(holder)
                       for node in ast.walk(annotation)}
        class_params = {id(m): m.args.args[0].arg for m in owner.body
                        if isinstance(m, (ast.FunctionDef, ast.AsyncFunctionDef)) and m.args.args
                        and any(dotted(d) == "classmethod" for d in m.decorator_list)}
        calls: list[ast.Call] = []
        for node in walk(self._file.tree):
            if not (isinstance(node, ast.Name) and isinstance(node.ctx, ast.Load)) or id(node) in annotations:
                continue
            if node.id != class_name:
                caller = self._caller_of_node(node, class_params)
                if caller is None or node.id != class_params[id(caller)]:
                    continue  # not `cls` in a classmethod of the class
            call = parents.get(id(node))
            if not (isinstance(call, ast.Call) and call.func is node):
                return None
            calls.append(call)
        return calls

    def _caller_of_node(self, node: ast.AST, functions: dict[int, str]):
        """The function among `functions` (by id) whose body holds `node`, or None."""
        parents = self._parents
        while id(node) in parents:
            node = parents[id(node)]
            if id(node) in functions:
                return node
        return None

    def _caller_of(self, call: ast.Call):
        """The innermost function of the file holding the call."""
        best = None
        for other in self._file.functions:
            if other.fn.lineno <= call.lineno and call.end_lineno <= other.fn.end_lineno and id(call) in other.parents:
                if best is None or other.fn.lineno > best.fn.lineno:
                    best = other
        return best

    def _receiver_class(self, receiver: ast.expr, caller) -> str | None:
        if isinstance(receiver, ast.Name) and receiver.id == caller.scope.self_name:
            return caller.class_qualname
        return self._file.layers.resolve(receiver, caller.scope).qualname


def _false_defaults(function_node) -> set[str]:
    """The parameters of a function that default to a false constant (`gather_input: bool = False`)."""
    args = function_node.args
    positional = args.posonlyargs + args.args
    pairs = list(zip(positional[len(positional) - len(args.defaults):], args.defaults))
    pairs += [(a, d) for a, d in zip(args.kwonlyargs, args.kw_defaults) if d is not None]
    return {a.arg for a, default in pairs if isinstance(default, ast.Constant) and not default.value}


def _statement_of(node: ast.AST, parents: dict[int, ast.AST]) -> ast.AST:
    while not isinstance(node, ast.stmt) and id(node) in parents:
        node = parents[id(node)]
    return node


def _stores(stmt: ast.stmt, name: str) -> list[ast.AST]:
    """The nodes of `stmt` storing into the local `name` (nested functions and classes aside)."""
    found: list[ast.AST] = []
    todo: list[ast.AST] = [stmt]
    while todo:
        node = todo.pop()
        if isinstance(node, ast.Name) and node.id == name and isinstance(node.ctx, ast.Store):
            found.append(node)
        for child in ast.iter_child_nodes(node):
            if not isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef, ast.Lambda)):
                todo.append(child)
    return found


def _only_false_stores(statements: list[ast.stmt], name: str) -> bool:
    """Every store into `name` in `statements` is `name = <false constant>`."""
    for stmt in statements:
        allowed = {id(node.targets[0]) for node in ast.walk(stmt) if isinstance(node, ast.Assign)
                   and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name)
                   and node.targets[0].id == name and is_falsy(node.value)}
        if any(id(store) not in allowed for store in _stores(stmt, name)):
            return False
    return True


def _local_flag_before(site: ast.AST, name: str, known: GuardKnowledge, parents: dict[int, ast.AST]) -> bool:
    """The local `name` is true at `site` only where a guard held: walking back from `site`, the
    nearest statement that stores it gives it a guard value, and any statement in between only
    resets it to a false constant, or does so in the body of `if <R>:` (or `if name and <R>:`)
    where `R` false implies a `.weight` (then `name` true after it means `R` failed: `if gather
    and not self.attn.can_fuse(x): gather = False`)."""
    child = _statement_of(site, parents)
    parent = parents.get(id(child))
    while parent is not None:
        for block in statement_blocks(parent):
            if not any(stmt is child for stmt in block):
                continue
            for earlier in reversed(block[:next(i for i, stmt in enumerate(block) if stmt is child)]):
                if not _stores(earlier, name):
                    continue
                targets = earlier.targets if isinstance(earlier, ast.Assign) else [earlier.target] \
                    if isinstance(earlier, ast.AnnAssign) and earlier.value is not None else []
                if len(targets) == 1 and isinstance(targets[0], ast.Name) and len(_stores(earlier, name)) == 1 \
                        and isinstance(earlier, (ast.Assign, ast.AnnAssign)):  # always, with one target
                    value = earlier.value  # None is falsy: implies_weight never sees it
                    return is_falsy(value) or (value is not None and implies_weight(value, None, known))
                if isinstance(earlier, ast.If) and _only_false_stores(earlier.body, name) \
                        and not any(_stores(stmt, name) for stmt in earlier.orelse) \
                        and not _stores_in(earlier.test, name):
                    test = earlier.test
                    values = test.values if isinstance(test, ast.BoolOp) and isinstance(test.op, ast.And) else [test]
                    rest = [v for v in values if not (isinstance(v, ast.Name) and v.id == name)]
                    if rest and implies_no_weight(
                            rest[0] if len(rest) == 1 else ast.BoolOp(op=ast.And(), values=rest), None, known):
                        return True
                    continue  # it only resets `name`: what held before still does
                if _only_false_stores([earlier], name):
                    continue
                return False
        if isinstance(parent, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
            return False  # a parameter, or a free variable: not known here
        child, parent = parent, parents.get(id(parent))
    return False


def _stores_in(expr: ast.AST, name: str) -> bool:
    return any(isinstance(n, ast.NamedExpr) and isinstance(n.target, ast.Name) and n.target.id == name
               for n in ast.walk(expr))


def _annotations_of(node: ast.AST) -> list[ast.expr]:
    """The annotations a node holds itself: a parameter's, a function's return, an annotated
    assignment's."""
    if isinstance(node, ast.arg):
        return [node.annotation] if node.annotation is not None else []
    if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
        return [node.returns] if node.returns is not None else []
    if isinstance(node, ast.AnnAssign):
        return [node.annotation]
    return []


class _PrivateCalls:
    """The calls of each private function or method of this file (`_f(...)`, `self._f(...)`), with
    the function each call is in."""

    def __init__(self, functions: Sequence[AnalysedFunction]):
        self._functions = functions

    @functools.cached_property
    def calls(self) -> dict[str, list[tuple[ast.Call, AnalysedFunction]]]:
        calls: dict[str, list[tuple[ast.Call, AnalysedFunction]]] = {}
        for function in self._functions:
            for node in function.walk.of(ast.Call):
                func = node.func
                name = func.id if isinstance(func, ast.Name) else (
                    func.attr if isinstance(func, ast.Attribute) and isinstance(func.value, ast.Name)
                    and func.value.id in ("self", "cls") else None)
                if name and name.startswith("_") and not name.startswith("__"):
                    calls.setdefault(name, []).append((node, function))
        return calls
