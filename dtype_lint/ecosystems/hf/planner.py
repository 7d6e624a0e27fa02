"""Fixes of Hugging Face sites: routed through the HF helper, `get_module_input_dtype(module)`.

The same forms as the vLLM planner (statement, expression, alias; planner.py), with the HF
helper (ecosystems/hf/helper.py) imported from where the project keeps shared torch utilities
(`transformers.pytorch_utils`, `diffusers.utils.torch_utils`; a configured `helper` module for a
project built on them). The guarded form is HF's own: a cast under a partial guard
(`if L.weight.dtype != torch.int8:`, `if (dt := L.weight.dtype).is_floating_point:`) becomes

    wo_input_dtype = get_module_input_dtype(self.wo)
    if wo_input_dtype is not None and <the guard's other tests, the weight dtype replaced>:
        hidden_states = hidden_states.to(wo_input_dtype)

The guard's tests on the storage (`is_floating_point`, `!= torch.int8`, `isinstance(L.weight,
torch.Tensor)`, `hasattr`) go: the helper decides what they tried to. It is safe: on every float
storage that is not fp8 the helper returns the weight dtype, so the cast is the same; it changes
only the storages the guard got wrong (fp8, uint8, no `.weight`) and bitsandbytes 4-bit, whose
module casts its input to its compute dtype itself.
"""

from __future__ import annotations

import ast
import re
from types import SimpleNamespace

from dtype_lint.analysis.flow.recognisers import FIRST_PARAMETER, is_pure
from dtype_lint.core.findings import Edit, Fix
from dtype_lint.ecosystems.hf.family import NO_WEIGHT, StorageReader, hf_module
from dtype_lint.ecosystems.hf.helper import HF_HELPER_HOMES, HF_HELPER_NAME, default_hf_helper_module
from dtype_lint.fix.bound_names import fresh, identifiers
from dtype_lint.fix.planner import Planner, Site


def hf_helper_module(source_module: str, path: str, configured: str) -> str:
    """The module the HF helper lives in for this file."""

    where = SimpleNamespace(module=source_module, imports={}, path=path)  # hf_module reads a resolver's module and path
    top = hf_module(where).split(".", 1)[0]
    if top in HF_HELPER_HOMES:
        return HF_HELPER_HOMES[top]
    return configured


def sibling_spelling(source_module: str, path: str, helper_module: str, tree: ast.Module) -> str:
    """The helper's module as a relative import (`.module_input_dtype`, `..module_input_dtype`)
    where the file imports modules of its own package relatively and never absolutely, as the
    package's files import their siblings; "" (absolute) otherwise, or where the helper is not
    in the file's top-level package."""
    top = source_module.split(".", 1)[0]
    if "." not in helper_module or helper_module.split(".", 1)[0] != top:
        return ""
    relative = absolute = 0
    for stmt in tree.body:
        if isinstance(stmt, ast.ImportFrom):
            relative += stmt.level > 0
            absolute += stmt.level == 0 and (stmt.module or "").split(".", 1)[0] == top
        elif isinstance(stmt, ast.Import):
            absolute += any(alias.name.split(".", 1)[0] == top for alias in stmt.names)
    if not relative or absolute:
        return ""
    package = source_module.split(".")
    if not path.replace("\\", "/").endswith("/__init__.py"):
        package = package[:-1]  # a module's relative imports start from its package
    target = helper_module.split(".")
    common = 0
    while common < min(len(package), len(target) - 1) and package[common] == target[common]:
        common += 1
    return "." * (len(package) - common + 1) + ".".join(target[common:])


class HFPlanner(Planner):
    def __init__(self, source, config, project, tree):
        super().__init__(source, config, project, tree)
        # `helper` names the HF helper's home only when it names the HF helper: a pinned shared
        # helper (`pkg.layer_input_dtype:get_layer_input_dtype`) is another family's, whose
        # template would not run on bitsandbytes layers; its module is not shared with it.
        module, _, func = (config.helper or "").partition(":")
        configured = module if module and func == HF_HELPER_NAME else \
            default_hf_helper_module(source.module, source.path)
        self.module = hf_helper_module(source.module, source.path, configured)
        self.func = HF_HELPER_NAME
        # transformers' and diffusers' own homes keep the absolute import their patch series use.
        self.spelled = "" if self.module in HF_HELPER_HOMES.values() else \
            sibling_spelling(source.module, source.path, self.module, tree)
        self._holder = ""  # the layer the helper is given for the site being planned, if not its own

    def plan(self, site: Site) -> tuple[Fix | None, str]:
        if site.wds.form == FIRST_PARAMETER and not site.helper_layer:
            return None, "the layer holding the first parameter is not known"
        self._holder = site.helper_layer
        try:
            fix, reason = super().plan(site)
            if fix is None and reason.startswith("the cast's receiver has side effects"):
                hoisted = self._hoisted(site)
                if hoisted is not None:
                    return hoisted, ""
            if fix is None and site.wds.alias and "is used outside casts" in reason:
                written = self._compute_dtype_elif(site)
                if written is not None:
                    return written, ""
            if fix is None and site.wds.alias and reason.endswith("is assigned more than once"):
                fallback = self._fallback(site)
                if fallback is not None:
                    return fallback, ""
            return fix, reason
        finally:
            self._holder = ""

    def _var_name(self, site: Site) -> str:
        """`mlp_input_dtype` for `self.mlp[0]` (diffusers' Sequential items), not `layer_...`."""
        layer = site.wds.layer
        if isinstance(layer, ast.Subscript) and isinstance(layer.value, (ast.Attribute, ast.Name)):
            from dataclasses import replace

            return super()._var_name(replace(site, wds=replace(site.wds, layer=layer.value)))
        return super()._var_name(site)

    def _compute_dtype_elif(self, site: Site) -> Fix | None:
        """diffusers' z_image writes the helper by hand, and gets fp8 wrong:

            weight_dtype = self.mlp[0].weight.dtype
            compute_dtype = getattr(self.mlp[0], "compute_dtype", None)
            if weight_dtype.is_floating_point:
                t_freq = t_freq.to(weight_dtype)
            elif compute_dtype is not None:
                t_freq = t_freq.to(compute_dtype)

        The `if`/`elif` becomes the helper's guarded cast (the helper takes the compute dtype
        first, which the `elif` reaches only on non-float storage: the same on bitsandbytes and
        GGUF, no cast on fp8), and the two aliases go when nothing else reads them."""
        stmt = self._statement_of(site)
        if_node = site.parents.get(id(stmt))
        if not (isinstance(if_node, ast.If) and if_node.body == [stmt] and self._is_self_cast(stmt, site)
                and len(if_node.orelse) == 1 and isinstance(if_node.orelse[0], ast.If)):
            return None
        elif_node = if_node.orelse[0]
        if elif_node.orelse or len(elif_node.body) != 1:
            return None
        reader = StorageReader(site.wds.layer, {k: v[0] for k, v in site.scope.assigns.items()
                                          if len(v) == 1 and v[0] is not None}, NO_WEIGHT)
        if not reader.mentions(if_node.test) or reader.value(if_node.test) is None:
            return None
        # `elif C is not None:` with C `getattr(L, "compute_dtype", None)` (or `L.compute_dtype`)
        test = elif_node.test
        if not (isinstance(test, ast.Compare) and len(test.ops) == 1 and isinstance(test.ops[0], ast.IsNot)
                and isinstance(test.comparators[0], ast.Constant) and test.comparators[0].value is None
                and isinstance(test.left, ast.Name)):
            return None
        compute = test.left.id
        compute_values = site.scope.assigns.get(compute, [])
        if len(compute_values) != 1 or not _is_compute_dtype(compute_values[0], site.wds.layer):
            return None
        other = elif_node.body[0]
        target = stmt.targets[0]  # type: ignore[attr-defined]  # _is_self_cast(stmt) held: an ast.Assign
        if not (isinstance(other, ast.Assign) and len(other.targets) == 1 and
                ast.dump(other.targets[0]) == ast.dump(target) and isinstance(other.value, ast.Call) and
                isinstance(other.value.func, ast.Attribute) and other.value.func.attr == "to" and
                ast.dump(other.value.func.value).replace("Load()", "Store()") == ast.dump(target) and
                len(other.value.args) == 1 and not other.value.keywords and
                isinstance(other.value.args[0], ast.Name) and other.value.args[0].id == compute):
            return None
        if not self._own_lines(if_node):
            return None
        start, _ = self._stmt_line_region(if_node, with_comments=False)
        elif_end = elif_node.end_lineno or elif_node.lineno  # set on every parsed node
        end = self.src.offset(elif_end + 1, 0) if elif_end < len(self.src.lines) else len(self.src.text)
        var = self._var_name(site)
        indent = self.src.indent_of(if_node.lineno)
        unit = self._indent_unit(site, stmt)
        name = self.src.segment(target)
        text = (f"{indent}{var} = {self.helper_call(self.src.segment(site.wds.layer), self.flag_default)}\n"
                f"{indent}if {var} is not None:\n{indent}{unit}{name} = {name}.to({var})\n")
        edits = [Edit(start, end, text)]
        for alias in (site.wds.alias, compute):
            if alias is None:  # no alias: no assignment of it to remove
                continue
            values = site.scope.assigns.get(alias, [])
            assign = site.parents.get(id(values[0])) if len(values) == 1 and values[0] is not None else None
            if isinstance(assign, ast.Assign) and len(assign.targets) == 1 and self._own_lines(assign) and \
                    not self._uses_outside(site.fn, alias, if_node):
                arg_start, arg_end = self._stmt_line_region(assign, with_comments=False)
                if arg_end <= start:
                    edits.append(Edit(arg_start, arg_end, ""))
        return self._fix(f"route the hand-written dtype choice through `{self.func}`", edits, binds=(var,))

    def _fallback(self, site: Site) -> Fix | None:
        """The hand-written helper of diffusers' Wan-Animate: the alias is the layer's weight dtype
        under a storage test, and a float fallback otherwise,

            if L.weight.dtype.is_floating_point:
                dt = L.weight.dtype
            else:
                dt = hidden_states.dtype

        becomes `dt = get_module_input_dtype(L) or hidden_states.dtype`: the same dtype wherever
        the test was right, the fallback where it was wrong (fp8 passes `is_floating_point`; a
        missing `.weight` raised), and bitsandbytes 4-bit's compute dtype where it has one."""
        name = site.wds.alias
        bound = site.scope.assigns.get(name, []) if name is not None else []
        if len(bound) != 2 or any(v is None for v in bound):
            return None
        values = sorted((v for v in bound if v is not None), key=lambda v: (v.lineno, v.col_offset))
        assigns = [site.parents.get(id(v)) for v in values]
        if not all(isinstance(a, ast.Assign) and len(a.targets) == 1 and isinstance(a.targets[0], ast.Name)
                   for a in assigns):
            return None
        if_node = site.parents.get(id(assigns[0]))
        if not (isinstance(if_node, ast.If) and if_node.body == [assigns[0]] and if_node.orelse == [assigns[1]]):
            return None
        reader = StorageReader(site.wds.layer, {}, NO_WEIGHT)
        if not reader._is_dtype(values[0]) or reader._is_dtype(values[1]) or reader.mentions(values[1]) or \
                not is_pure(values[1]) or not reader.mentions(if_node.test) or reader.value(if_node.test) is None:
            return None
        if not self._own_lines(if_node):
            return None
        start, end = self._stmt_line_region(if_node, with_comments=False)
        last = if_node.orelse[-1]
        last_end = last.end_lineno or last.lineno  # set on every parsed node
        end_of_else = self.src.offset(last_end + 1, 0) if last_end < len(self.src.lines) else len(self.src.text)
        indent = self.src.indent_of(if_node.lineno)
        layer = self.src.segment(site.wds.layer)
        text = f"{indent}{name} = {self.helper_call(layer, self.flag_default)} or {self.src.segment(values[1])}\n"
        return self._fix(f"`{name}`: `{self.func}`, or the fallback where it keeps the activation's dtype",
                         [Edit(start, max(end, end_of_else), text)])

    def _hoisted(self, site: Site) -> Fix | None:
        """`y = f(self.to_q_c(h).to(L.weight.dtype))`, whose receiver is a call: the receiver goes
        to a statement of its own right before, and the cast takes the `or` form on its name:

            to_q_c_out = self.to_q_c(h)
            y = f(to_q_c_out.to(get_module_input_dtype(L) or to_q_c_out.dtype))

        Only where the receiver is the first thing the statement runs that is not a plain name
        or attribute read (those cannot tell the difference), and it runs unconditionally: on
        the path down to it, calls whose function and earlier arguments are pure, no lambda,
        comprehension, conditional or short-circuit operand."""
        stmt = self._statement_of(site)
        receiver = site.call.func.value  # type: ignore[attr-defined]  # a method cast: func is an Attribute
        if not isinstance(stmt, (ast.Assign, ast.Expr, ast.Return)) or not self._own_lines(stmt) or \
                stmt.lineno != stmt.end_lineno and '"""' in self.src.segment(stmt):
            return None
        if isinstance(stmt, ast.Assign) and not all(isinstance(t, ast.Name) for t in stmt.targets):
            return None
        node: ast.AST = site.call
        while node is not stmt:
            parent = site.parents[id(node)]
            if isinstance(parent, ast.Call):
                if node is parent.func:
                    if not isinstance(node, ast.Attribute):
                        return None
                else:
                    before = [parent.func.value if isinstance(parent.func, ast.Attribute) else parent.func]
                    for arg in [*parent.args, *(k.value for k in parent.keywords)]:
                        if arg is node:
                            break
                        before.append(arg)
                    if not all(is_pure(b) for b in before):
                        return None
            elif isinstance(parent, ast.keyword) or parent is stmt:
                pass
            elif isinstance(parent, ast.Attribute) and node is parent.value:
                pass
            else:
                return None  # a lambda, comprehension, conditional, operator: leave it to a person
            node = parent
        alias_edits: list[Edit] = []
        if site.wds.alias:  # Cosmos3: `dt = next(M.parameters()).dtype` read by several such casts
            values = site.scope.assigns.get(site.wds.alias, [])
            assign = site.parents.get(id(values[0])) if len(values) == 1 and values[0] is not None else None
            if not (isinstance(assign, ast.Assign) and len(assign.targets) == 1):
                return None
            _, t1 = self.src.node_offsets(assign.targets[0])
            _, s1 = self.src.node_offsets(assign)
            call = self.helper_call(self.src.segment(site.wds.layer), self.flag_default)
            alias_edits.append(Edit(t1, s1, f" = {call}"))
        in_pass = self._fn_vars.setdefault(id(site.fn), set())  # names other sites took this pass
        taken = identifiers(site.fn) | set(site.scope.params) | {self.name} | in_pass
        func = receiver.func if isinstance(receiver, ast.Call) else None
        base = func.attr if isinstance(func, ast.Attribute) else (func.id if isinstance(func, ast.Name) else "cast")
        tmp = fresh(re.sub(r"^_+", "", base) + "_out", taken)
        in_pass.add(tmp)
        indent = self.src.indent_of(stmt.lineno)
        s0 = self.src.offset(stmt.lineno, self.src.char_col(stmt.lineno, stmt.col_offset))
        r0, r1 = self.src.node_offsets(receiver)
        arg_start, arg_end = self.src.node_offsets(site.arg)
        layer = self.src.segment(site.wds.layer)
        dtype = site.wds.alias or self.helper_call(layer, self.flag_default)
        edits = alias_edits + [Edit(s0, s0, f"{tmp} = {self.src.segment(receiver)}\n{indent}"),
                               Edit(r0, r1, tmp), Edit(arg_start, arg_end, f"{dtype} or {tmp}.dtype")]
        return self._fix(f"give the cast's receiver a name, then cast only when `{self.func}` names a dtype",
                         edits)

    @property
    def helper_wrong_cases(self) -> list[str]:
        return []  # the template decides from the module's own state: nothing to prove wrong

    def helper_call(self, layer: str, flag: str) -> str:
        return f"{self.name}({self._holder or layer})"

    def suggested_call(self, layer: str) -> str:
        return f"{self.func}({layer})"  # the module alone: no fp8 flag

    def helper_fix(self, description: str, edits: list[Edit], safe: bool | None = None, unsafe_reason: str = "",
                   binds: tuple[str, ...] = ()) -> Fix:
        # No fp8 flag: the HF helper keeps an fp8 activation out by returning None, which is the fix.
        return super().helper_fix(description, edits, True, "", binds)

    _fix = helper_fix

    def _idiom(self, site: Site, stmt: ast.stmt, if_node: ast.If) -> tuple[Fix | None, str]:
        aliases = {k: v[0] for k, v in site.scope.assigns.items() if len(v) == 1 and v[0] is not None}
        reader = StorageReader(site.wds.layer, aliases, NO_WEIGHT)
        if not reader.mentions(if_node.test) or not self._is_self_cast(stmt, site):
            return None, ""
        conjuncts = if_node.test.values if isinstance(if_node.test, ast.BoolOp) and \
            isinstance(if_node.test.op, ast.And) else [if_node.test]
        var = self._var_name(site)
        kept = []
        for conjunct in conjuncts:
            if not reader.mentions(conjunct):
                kept.append(self.src.segment(conjunct))
            elif isinstance(conjunct, ast.Compare) and len(conjunct.ops) == 1 \
                    and isinstance(conjunct.ops[0], (ast.Eq, ast.NotEq)) \
                    and sum(reader._is_dtype(side) for side in (conjunct.left, conjunct.comparators[0])) == 1 \
                    and not any(reader.mentions(side) and not reader._is_dtype(side)
                                for side in (conjunct.left, conjunct.comparators[0])) \
                    and not any(_is_dtype_constant(side) for side in (conjunct.left, conjunct.comparators[0])):
                # `hidden_states.dtype != L.weight.dtype`: the same test against the input dtype.
                left = var if reader._is_dtype(conjunct.left) else self.src.segment(conjunct.left)
                right = var if reader._is_dtype(conjunct.comparators[0]) else self.src.segment(conjunct.comparators[0])
                kept.append(f"{left} {'!=' if isinstance(conjunct.ops[0], ast.NotEq) else '=='} {right}")
            elif reader.value(conjunct) is None:
                return None, f"guarded cast not rewritten: cannot tell what `{ast.unparse(conjunct)}` tests"
        # An alias bound inside the test (the walrus) must not be needed after the `if`.
        for node in ast.walk(if_node.test):
            if isinstance(node, ast.NamedExpr) and self._uses_outside(site.fn, node.target.id, if_node):
                return None, f"`{node.target.id}` is used after the guard; rewrite by hand"
        # Where the old test read the dtype: right before the `if`, never hoisted (#20).
        pos, hoist = None, self._helper_line(site, var, "", if_node)
        header_start, _ = self._stmt_line_region(if_node)
        body0 = if_node.body[0]
        body_start = self.src.offset(body0.lineno, self.src.char_col(body0.lineno, body0.col_offset))
        indent = self.src.indent_of(if_node.lineno)
        test = " and ".join([f"{var} is not None", *kept])
        sep = " " if body0.lineno == if_node.lineno else f"\n{self.src.indent_of(body0.lineno)}"
        edits = [Edit(header_start, body_start, (hoist if pos is None else "") + f"{indent}if {test}:{sep}")]
        if pos is not None:
            edits.append(Edit(pos, pos, hoist))
        arg_start, arg_end = self.src.node_offsets(site.arg)
        edits.append(Edit(arg_start, arg_end, var))
        edits += self._dead_aliases(site, if_node, header_start)
        return self._fix(f"route the guarded cast through `{self.func}`: its storage tests go", edits,
                         binds=(var,)), ""

    def _dead_aliases(self, site: Site, if_node: ast.If, before: int) -> list[Edit]:
        """Deletions of the alias assignments the rewritten `if` no longer reads (diffusers' Wan
        `time_embedder_dtype = next(iter(self.time_embedder.parameters())).dtype`): an alias of
        the layer's dtype assigned once, by a plain statement on lines of its own before the
        `if`, and read nowhere but in the guard and the cast, which the helper's variable
        replaces. Any other alias stays (it is still read)."""
        edits = []
        for name in sorted({n.id for n in ast.walk(if_node.test) if isinstance(n, ast.Name)}):
            values = site.scope.assigns.get(name, [])
            if len(values) != 1 or values[0] is None or self._uses_outside(site.fn, name, if_node):
                continue
            if not StorageReader(site.wds.layer, {}, NO_WEIGHT)._is_dtype(values[0]):
                continue
            assign = site.parents.get(id(values[0]))
            if not (isinstance(assign, ast.Assign) and len(assign.targets) == 1 and
                    isinstance(assign.targets[0], ast.Name) and self._own_lines(assign)):
                continue
            start, end = self._stmt_line_region(assign, with_comments=False)
            if end <= before:
                edits.append(Edit(start, end, ""))
        return edits


def _is_dtype_constant(node: ast.AST) -> bool:
    return isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id == "torch"


def _is_compute_dtype(node: ast.AST | None, layer: ast.expr) -> bool:
    """`getattr(L, "compute_dtype", None)` or `L.compute_dtype`: bitsandbytes 4-bit's and GGUF's
    compute dtype, which the helper reads itself."""
    if isinstance(node, ast.Attribute) and node.attr == "compute_dtype":
        return ast.dump(node.value) == ast.dump(layer)
    return (isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "getattr"
            and len(node.args) == 3 and ast.dump(node.args[0]) == ast.dump(layer)
            and isinstance(node.args[1], ast.Constant) and node.args[1].value == "compute_dtype"
            and isinstance(node.args[2], ast.Constant) and node.args[2].value is None)


# The planner of this family's sites (ecosystems/registry.py, the "planner" role).
PLANNER = HFPlanner
