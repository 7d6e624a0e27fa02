"""Turn one DTL001 site into text edits that route it through the shared helper (the fix forms:
README, "Fixes and the shared helper").

Three forms, tried in order:
- idiom: `alias = L.weight.dtype (if hasattr… else L.<model dtype>)` + `if <guard>: x = x.to(…)`,
  proven equal to the helper by truth table, becomes `v = helper(L, flag)` and
  `if v is not None: x = x.to(v)`, where the old code evaluated the dtype (the aliases must be
  the statements right before the guard);
- statement: `x = x.to(L.weight.dtype)` becomes the same helper call, guard and cast;
- expression: any other cast becomes `x.to(helper(L, flag) or x.dtype)` when `x` is pure.
The helper is called where the old code read the dtype, never hoisted out of a loop, an `if`
or a `try` (a loop may run zero times, a guard may be what keeps the layer from being None,
a call in the loop may swap or repack the layer); scope_check.py verifies the placement.
Edits are character ranges computed from ast positions, so formatting outside the site is kept;
each fix also carries the edit that imports the helper (import_edit.py), so a fix is complete
data. Nothing here touches the file system.

Fix safety follows the helper's own code: a fix that routes a site through a helper that the
dtype evaluator finds unsound (DTL005: an integer dtype, an AttributeError, or a kept fp8
activation for some storage) is unsafe, and says which case is wrong.
"""

from __future__ import annotations

import ast
import re
import unicodedata
from functools import cached_property

from dtype_lint.analysis.compiled_code import compiled_reason
from dtype_lint.analysis.compiled_elsewhere import elsewhere_reason
from dtype_lint.analysis.flow.recognisers import (
    WeightDtypeSource,
    cast_dtype_args,
    is_pure,
    names_in,
    weight_dtype_source,
)
from dtype_lint.analysis.index.class_facts import FunctionScope, walk_function
from dtype_lint.core import trees
from dtype_lint.core.config import Config
from dtype_lint.core.findings import Edit, Fix
from dtype_lint.core.project_style import project_style
from dtype_lint.core.records import record
from dtype_lint.core.source import SourceFile
from dtype_lint.dtypes.evaluator import UNPACKED, summarize_cases, unsound_cases
from dtype_lint.dtypes.truth_table import cast_disagreements, prove_guarded_cast, unpacked_storages
from dtype_lint.fix.bound_names import fresh, identifiers, module_names
from dtype_lint.fix.helper_template import helper_table
from dtype_lint.fix.import_edit import import_edit
from dtype_lint.fix.string_lines import rows_starting_in_strings, rows_starting_in_strings_of

# `import *` however it is spelled (a line continuation may part them); a match in a string or a
# comment only costs the walk the text test spares.
_STAR_IMPORT = re.compile(r"import[\s\\]*\*")
_KNOWN_GLOBALS = {"torch", "current_platform", "hasattr", "getattr", "True", "False", "None"}


# Calls through which a function can see its own local variables: a fix there must add none
# (`locals()` would gain a key, `exec`/`eval` code could read or clobber it). `vars()` and `dir()`
# only without arguments; a frame's `f_locals` however it was reached.
_FRAME_READERS = {"locals", "eval", "exec"}
_FRAME_READERS_WITHOUT_ARGS = {"vars", "dir"}


def frame_reader(fn: ast.AST) -> str:
    """How `fn` (or code nested in it) may read its local variables by name, as written
    (`locals()`, `vars()`, `eval(...)`, `frame.f_locals`); "" when it cannot."""
    for node in ast.walk(fn):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name):
            name = node.func.id
            if name in _FRAME_READERS or (name in _FRAME_READERS_WITHOUT_ARGS and not node.args and not node.keywords):
                return f"{name}()"
        elif isinstance(node, ast.Attribute) and node.attr == "f_locals":
            return ".f_locals"
    return ""


@record
class Site:
    """A cast the planner rewrites, with what planning its edit needs."""
    call: ast.Call
    arg: ast.expr
    wds: WeightDtypeSource
    fn: ast.FunctionDef | ast.AsyncFunctionDef
    scope: FunctionScope
    parents: dict[int, ast.AST]
    # The layer the helper is given when it is not `wds.layer` itself: for HF's
    # `next(iter(M.parameters())).dtype`, the layer holding M's first parameter (`M.linear_1`).
    helper_layer: str = ""


class Planner:
    def __init__(self, source: SourceFile, config: Config, project, tree: ast.Module):
        self.src = source
        self.config = config
        self.project = project
        self.tree = tree
        self.module, self.func = config.helper_spec
        self.spelled = ""  # the module as this file's import writes it, where not `self.module` (relative)
        self.flag_default = "True" if config.fp8_input_default else "False"
        self._import: list[Edit] | None = None
        self._fn_vars: dict[int, set[str]] = {}  # id(function) -> variables given to its sites
        self._fn_names: dict[int, set[str]] = {}  # id(function) -> every name it binds or reads
        self._site_vars: dict[int, str] = {}  # id(cast call) -> its variable
        self._frame_readers: dict[int, str] = {}  # id(function) -> frame_reader(function)
        self._compiled: dict = {}  # the file's compiled functions, once a site asks
        self._fn_rows_in_strings: dict[int, set[int] | None] = {}  # id(function) -> its rows in strings

    def _frame_reader(self, fn: ast.AST) -> str:
        """`frame_reader(fn)`, walked once per function however many sites it has."""
        if id(fn) not in self._frame_readers:
            self._frame_readers[id(fn)] = frame_reader(fn)
        return self._frame_readers[id(fn)]

    @property
    def helper_path(self) -> str | None:
        header = self.project.index.modules.get(self.module)
        return header.path if header is not None else None

    @cached_property
    def name(self) -> str:
        """The name the fixed code calls the helper by: the name an existing top-level
        `from <module> import <func> [as name]` binds when nothing else binds it, else the
        function's own name when the module uses it nowhere (no local, parameter, global or
        import could shadow the helper, or be shadowed by it), else a fresh `_<func>` alias.
        A star import may bind any public name, so a module with one gets an underscore alias."""
        text = self.src.text
        if self.func not in text and _STAR_IMPORT.search(text) is None and \
                (text.isascii() or self.func not in unicodedata.normalize("NFKC", text)):
            # What the walk below would conclude, from the text: no name of the module is the
            # function's and no star import can bind it. An ASCII text holds every identifier
            # verbatim; a non-ASCII one (an em dash in a comment) may spell one in characters the
            # parser normalises (NFKC, PEP 3131), so its normalised text is searched too.
            return self.func
        # Every name the module binds or uses, blanked function bodies too (core/regions.py),
        # unless their text holds none of the names decided on here: the helper's, names holding
        # it (`_<func>`, and what `fresh` makes of it) and what a top-level import binds it as.
        aliases = {a.asname for stmt in self.tree.body if isinstance(stmt, ast.ImportFrom)
                   for a in stmt.names if a.name == self.func and a.asname}
        names = {self.func.lstrip("_") or self.func, *aliases}
        bound, taken, star = module_names(trees.whole_unless_absent(self.tree, names))
        for stmt in self.tree.body:
            if isinstance(stmt, ast.ImportFrom) and \
                    "." * stmt.level + (stmt.module or "") == (self.spelled or self.module):
                for alias in stmt.names:
                    local = alias.asname or alias.name
                    if alias.name == self.func and bound[local] == 1 and not (star and not local.startswith("_")):
                        return local
        if self.func not in taken and not (star and not self.func.startswith("_")):
            return self.func
        return fresh(f"_{self.func.lstrip('_')}", taken)

    def helper_call(self, layer: str, flag: str) -> str:
        """The helper's call for `layer` (the HF planner's helper takes no fp8 flag)."""
        return f"{self.name}({layer}, {flag})"

    def suggested_call(self, layer: str) -> str:
        """The helper's call for `layer` as a message suggests it: its name and call shape, the
        fp8 flag left to the reader (`get_layer_input_dtype(self.o_proj, ...)`)."""
        return f"{self.func}({layer}, ...)"

    @cached_property
    def helper_wrong_cases(self) -> list[str]:
        """What the configured helper gets wrong, case by case (DTL005); [] when it is sound or
        beyond the evaluator."""
        table = helper_table(self.module, self.func, self.config.template, self.helper_path)
        return summarize_cases(unsound_cases(table), table.flags) if table is not None else []

    @cached_property
    def cast_disagreements(self) -> list[str]:
        """Where a fix through the helper would cast differently from the plain cast it replaces
        on a storage that is not packed (float, complex; truth_table.cast_disagreements): such
        a fix is not safe. [] when the helper is proven to agree."""
        flag = self.flag_default == "True"
        return cast_disagreements(helper_table(self.module, self.func, self.config.template, self.helper_path,
                                               unpacked_storages(flag)), flag)

    def helper_fix(self, description: str, edits: list[Edit], safe: bool | None = None, unsafe_reason: str = "",
                   binds: tuple[str, ...] = ()) -> Fix:
        """A fix routing through the helper: its edits plus the helper's import. Unsafe, whatever
        the form, when the helper itself is unsound."""
        if self._import is None:
            edit = import_edit(self.src, self.tree, self.spelled or self.module, self.func,
                               None if self.name == self.func else self.name,
                               style=project_style(str(self.config.root)))
            self._import = [] if edit is None else [edit]
        from_cast = safe is None  # the statement, alias and expression forms replace a plain cast
        if safe is None:
            safe = self.flag_default == "True"
            unsafe_reason = "" if safe else "fp8-input-default=false changes the cast for fp8 weights"
        if self.helper_wrong_cases:
            safe = False
            unsafe_reason = (f"`{self.func}` is unsound (DTL005): " + "; ".join(self.helper_wrong_cases)
                             + (f"; also {unsafe_reason}" if unsafe_reason else ""))
        elif safe and from_cast and self.cast_disagreements:
            safe = False
            unsafe_reason = (f"`{self.func}` is not proven to cast as `x.to(<layer>.weight.dtype)` did on every "
                             "storage that is not packed: " + "; ".join(self.cast_disagreements))
        return Fix(description, safe, tuple(edits) + tuple(self._import), ((self.module, self.func),), unsafe_reason,
                   aliases=(self.name,), binds=binds, spelled=(self.spelled,) if self.spelled else ())

    _fix = helper_fix

    def idiom(self, site: Site) -> tuple[Fix | None, str]:
        """The idiom form only: the cast is the one statement of an `if` that re-implements the
        helper, proven equal to it. (None, "") when the site is not in that shape."""
        if site.wds.form == "tensor" or (self.src.module and self.src.module == self.module) or \
                self._frame_reader(site.fn):
            return None, ""
        if refusal := self.compiled_refusal(site):
            return None, refusal
        stmt = self._statement_of(site)
        parent = site.parents.get(id(stmt))
        if isinstance(parent, ast.If) and parent.body == [stmt] and not parent.orelse:
            return self._idiom(site, stmt, parent)
        return None, ""

    def compiled_refusal(self, site: Site) -> str:
        """Why no fix where TorchScript or fx compiles the site's function: code of its own file
        (analysis/compiled_code.py) or of another file of the project (compiled_elsewhere.py)."""
        return compiled_reason(self.src.text, self.tree, site.fn, self.func, self._compiled) or \
            elsewhere_reason(self.project.index, self.src.module, self.tree, site.fn, self.func)

    # ---- entry ------------------------------------------------------------------------
    def plan(self, site: Site) -> tuple[Fix | None, str]:
        if refusal := self.compiled_refusal(site):
            return None, refusal
        if site.wds.form == "tensor":
            return None, ("`.to(tensor)` also moves to the weight's device; rewrite by hand as "
                          f"`.to(device=..., dtype={self.func}(layer, ...))`")
        if self.src.module and self.src.module == self.module:
            return None, "this file defines the helper itself"
        reader = self._frame_reader(site.fn)
        if reader:
            # Every other form adds or redefines a local, which `locals()` and friends would see.
            fix, reason = self._expression(site)
            if fix is None:
                return None, (f"the function reads its own locals (`{reader}`), so no fix may add a variable, "
                              f"and the expression form cannot be used: {reason}")
            return fix, ""
        stmt = self._statement_of(site)
        parent = site.parents.get(id(stmt))
        if isinstance(parent, ast.If) and parent.body == [stmt] and not parent.orelse:
            fix, reason = self._idiom(site, stmt, parent)
            if fix is not None or reason:
                return fix, reason
        if site.wds.alias:
            return self._alias(site, stmt)
        fix = self._statement(site, stmt)
        if fix is not None:
            return fix, ""
        return self._expression(site)

    # ---- forms ------------------------------------------------------------------------
    def _idiom(self, site: Site, stmt: ast.stmt, if_node: ast.If) -> tuple[Fix | None, str]:
        layer_dump = ast.dump(site.wds.layer)
        aliases: dict[str, ast.expr] = {}
        for name in names_in(if_node.test):
            values = [v for v in site.scope.assigns.get(name, []) if v is not None]
            if len(values) == 1:
                r = weight_dtype_source(values[0], site.scope)
                if r and ast.dump(r.layer) == layer_dump:
                    aliases[name] = values[0]
        mentions_weight = any(
            (r := weight_dtype_source(n, None)) and ast.dump(r.layer) == layer_dump
            for n in ast.walk(if_node.test) if isinstance(n, ast.Attribute)
        )
        if not aliases and not mentions_weight:
            return None, ""  # an unrelated `if`: not the idiom
        if not self._is_self_cast(stmt, site):
            return None, ""
        layer_names = names_in(site.wds.layer)
        free = names_in(if_node.test) - set(aliases) - layer_names - _KNOWN_GLOBALS
        if len(free) > 1:
            return None, ""
        flag = next(iter(free), None)
        table = helper_table(self.module, self.func, self.config.template, self.helper_path)
        if table is None:
            return None, f"guarded cast not rewritten: `{self.func}` is beyond the dtype evaluator"
        unpacked = helper_table(self.module, self.func, self.config.template, self.helper_path, UNPACKED)
        proven, _rows, why = prove_guarded_cast(if_node.test, site.arg, site.wds.layer, aliases, flag,
                                                self.flag_default == "True", table, unpacked)
        if not proven:
            return None, f"guarded cast not rewritten: {why}"
        where = self._aliases_apart(site, if_node, aliases)
        if where:
            return None, f"guarded cast not rewritten: {where}"
        flag_src = flag or self.flag_default
        var = self._var_name(site)
        edits = []
        # Aliases used only by this idiom go away with it.
        for name, value in aliases.items():
            if self._uses_outside(site.fn, name, if_node):
                continue
            assign = self._assign_stmt_of(site, value)
            if assign is None:
                return None, f"alias `{name}` is not a plain assignment"
            start, end = self._stmt_line_region(assign)
            edits.append(Edit(start, end, ""))
        helper_text = self._helper_line(site, var, flag_src, if_node)
        header_start, _ = self._stmt_line_region(if_node)
        body0 = if_node.body[0]
        body_start = self.src.offset(body0.lineno, self.src.char_col(body0.lineno, body0.col_offset))
        indent = self.src.indent_of(if_node.lineno)
        if body0.lineno == if_node.lineno:
            header = f"{indent}if {var} is not None: "
        else:
            header = f"{indent}if {var} is not None:\n{self.src.indent_of(body0.lineno)}"
        edits.append(Edit(header_start, body_start, helper_text + header))
        arg_start, arg_end = self.src.node_offsets(site.arg)
        edits.append(Edit(arg_start, arg_end, var))
        return self._fix(f"route the guarded cast through `{self.func}` (proven by truth table)", edits, True,
                         binds=(var,)), ""

    def _statement(self, site: Site, stmt: ast.stmt) -> Fix | None:
        if not (self._is_self_cast(stmt, site) and self._own_lines(stmt) and self._only_dtype(site)):
            return None
        var = self._var_name(site)
        text = self._helper_line(site, var, self.flag_default, stmt)
        s0 = self.src.offset(stmt.lineno, self.src.char_col(stmt.lineno, stmt.col_offset))
        indent = self.src.indent_of(stmt.lineno)
        # Insertions at one offset apply in the order listed: the helper call, then the guard.
        edits = [Edit(s0, s0, text[len(indent):] + indent)]
        edits += self._guard(site, stmt, var)
        arg_start, arg_end = self.src.node_offsets(site.arg)
        edits.append(Edit(arg_start, arg_end, var))
        return self._fix(f"cast only when `{self.func}` names an input dtype", edits, binds=(var,))

    def _expression(self, site: Site) -> tuple[Fix | None, str]:
        receiver = site.call.func.value  # type: ignore[attr-defined]  # a method cast: func is an Attribute
        if not is_pure(receiver):
            return None, "the cast's receiver has side effects; the `or x.dtype` rewrite would evaluate it twice"
        layer = self.src.segment(site.wds.layer)
        recv = self.src.segment(receiver)
        if not isinstance(receiver, (ast.Name, ast.Attribute, ast.Subscript, ast.Call)):  # `f(x).dtype` needs none
            recv = f"({recv})"
        arg_start, arg_end = self.src.node_offsets(site.arg)
        text = f"{self.helper_call(layer, self.flag_default)} or {recv}.dtype"
        return self._fix(f"cast to `{self.func}(...)`, keeping the input dtype when it says None",
                         [Edit(arg_start, arg_end, text)]), ""

    def _alias(self, site: Site, stmt: ast.stmt) -> tuple[Fix | None, str]:
        """`w = L.weight.dtype` … `x.to(w)`: redefine the alias as the helper and guard each cast."""
        name = site.wds.alias
        values = [v for v in site.scope.assigns.get(name, [])] if name is not None else []
        if name is None or len(values) != 1 or values[0] is None:
            return None, f"alias `{name}` is assigned more than once"
        # Every load of the alias must be a cast's dtype argument, or None would leak elsewhere:
        # in this function and in every lambda, nested function, comprehension or class body in
        # it that can read it as a closure (`get = lambda: w` would start returning None).
        cast_args: set[int] = set()
        for node in ast.walk(site.fn):
            if isinstance(node, ast.Call):
                cast_args.update(id(a) for a in cast_dtype_args(node))
        own = list(walk_function(site.fn))  # the function's own loads first, then its closures'
        seen = {id(n) for n in own}
        for node in own + [n for n in ast.walk(site.fn) if id(n) not in seen]:
            if isinstance(node, ast.Name) and node.id == name and isinstance(node.ctx, ast.Load):
                if id(node) not in cast_args:
                    return None, f"alias `{name}` is used outside casts (line {node.lineno}); rewrite by hand"
        value = values[0]
        layer = self.src.segment(site.wds.layer)
        assign = site.parents.get(id(value))
        if not (isinstance(assign, ast.Assign) and len(assign.targets) == 1):
            return None, f"alias `{name}` is not a plain assignment"
        # From the end of the target to the end of the statement, so that wrapping parentheses
        # of a multi-line value go with it.
        _, t1 = self.src.node_offsets(assign.targets[0])
        _, s1 = self.src.node_offsets(assign)
        edits = [Edit(t1, s1, f" = {self.helper_call(layer, self.flag_default)}")]
        if self._is_self_cast(stmt, site) and self._own_lines(stmt) and self._only_dtype(site):
            edits += self._guard(site, stmt, name)
        else:
            receiver = site.call.func.value  # type: ignore[attr-defined]  # a method cast: func is an Attribute
            if not is_pure(receiver):
                return None, "the cast's receiver has side effects"
            arg_start, arg_end = self.src.node_offsets(site.arg)
            edits.append(Edit(arg_start, arg_end, f"{name} or {self.src.segment(receiver)}.dtype"))
        return self._fix(f"define `{name}` with `{self.func}` and cast only when it names a dtype", edits), ""

    # ---- helpers ------------------------------------------------------------------------
    def _guard(self, site: Site, stmt: ast.stmt, var: str) -> list[Edit]:
        """Edits that put `stmt` under `if var is not None:`, its continuation lines re-indented,
        except a line that starts inside a string literal of any kind (string_lines.py): its
        leading whitespace is the string's, and an indent would change what the string says.
        A blank continuation line gets no trailing whitespace."""
        s0 = self.src.offset(stmt.lineno, self.src.char_col(stmt.lineno, stmt.col_offset))
        indent = self.src.indent_of(stmt.lineno)
        unit = self._indent_unit(site, stmt)
        edits = [Edit(s0, s0, f"if {var} is not None:\n{indent}{unit}")]
        if stmt.end_lineno == stmt.lineno:
            return edits
        # The statement alone lexes as it does in the file: a statement never starts or ends
        # inside a string. Where it does not lex, nothing is re-indented (the code is valid
        # without: a continuation line's indentation is free).
        in_strings = rows_starting_in_strings(self.src.segment(stmt))
        if in_strings is None:
            return edits
        for line in range(stmt.lineno + 1, (stmt.end_lineno or stmt.lineno) + 1):
            if line - stmt.lineno + 1 in in_strings or not self.src.line_text(line).strip():
                continue
            o = self.src.offset(line, 0)
            edits.append(Edit(o, o, unit))
        return edits

    def _aliases_apart(self, site: Site, if_node: ast.If, aliases: dict[str, ast.expr]) -> str:
        """Why the helper, evaluated at the `if`, would not read what the aliases read ("" when
        it would): each alias must be assigned by the statements right before the `if`, in its
        block. Anything between (a call, a loop boundary, another branch) could rebind or repack
        the layer, or raise first, so the helper at the `if` and the alias where it was would
        differ; moving the helper up to the alias instead would take it out of the guard."""
        if not aliases:
            return ""
        block = self._block_of(site, if_node)
        if block is None:
            return "its guard is not a statement of a block"
        index = next(i for i, s in enumerate(block) if s is if_node)
        assigns = {id(site.parents.get(id(v))) for v in aliases.values()}
        first = index
        while first > 0 and id(block[first - 1]) in assigns:
            first -= 1
        adjacent = {id(s) for s in block[first:index]}
        for name, value in sorted(aliases.items()):
            if id(site.parents.get(id(value))) not in adjacent:
                return (f"alias `{name}` is computed on line {value.lineno}, not right before its guard on line "
                        f"{if_node.lineno}; the helper would be evaluated where the dtype was not")
        return ""

    @staticmethod
    def _block_of(site: Site, stmt: ast.stmt) -> list[ast.stmt] | None:
        parent = site.parents.get(id(stmt))
        for name in ("body", "orelse", "finalbody"):
            block = getattr(parent, name, None)
            if isinstance(block, list) and any(s is stmt for s in block):
                return block
        return None

    def _statement_of(self, site: Site) -> ast.stmt:
        node: ast.AST = site.call
        while not isinstance(node, ast.stmt):
            node = site.parents[id(node)]
        return node

    @staticmethod
    def _is_self_cast(stmt: ast.stmt, site: Site) -> bool:
        """`x = x.to(...)` with the same simple target and receiver, the call being the whole value."""
        if not (isinstance(stmt, ast.Assign) and len(stmt.targets) == 1 and stmt.value is site.call):
            return False
        receiver = site.call.func.value  # type: ignore[attr-defined]  # a method cast: func is an Attribute
        return ast.dump(stmt.targets[0]).replace("Store()", "Load()") == ast.dump(receiver) and is_pure(receiver)

    @staticmethod
    def _only_dtype(site: Site) -> bool:
        """The cast passes nothing but the dtype, so skipping it when the helper says None drops
        nothing else (`x.to(device=d, dtype=w)` must still move to `d`: expression form)."""
        return len(site.call.args) + len(site.call.keywords) == 1

    def _own_lines(self, stmt: ast.stmt) -> bool:
        """Alone on its lines: nothing before it, and after it only a comment (`x = x.to(w); y = 2`
        guarded whole would leave `y` unbound when the helper says None)."""
        if not self._starts_line(stmt):
            return False
        end_line = stmt.end_lineno or stmt.lineno  # a parsed statement has its end
        end_col = stmt.end_col_offset if stmt.end_col_offset is not None else stmt.col_offset
        rest = self.src.line_text(end_line)[self.src.char_col(end_line, end_col):].strip()
        return rest == "" or rest.startswith("#")

    def _starts_line(self, stmt: ast.stmt) -> bool:
        return self.src.line_text(stmt.lineno)[: self.src.char_col(stmt.lineno, stmt.col_offset)].strip() == ""

    def _var_name(self, site: Site) -> str:
        layer = site.wds.layer
        base = (layer.attr if isinstance(layer, ast.Attribute)
                else (layer.id if isinstance(layer, ast.Name) else "layer"))
        base = re.sub(r"^_+", "", base) or "layer"
        # Fresh in the function: not a local, parameter, `global`/`nonlocal`, import or nested
        # definition there (which it would shadow or be shadowed by), nor the helper's name, nor
        # a name another site of the function got in this pass (their fixes go in one round).
        if id(site.call) in self._site_vars:
            return self._site_vars[id(site.call)]
        taken = self._fn_vars.setdefault(id(site.fn), set())
        names = self._fn_names.get(id(site.fn))
        if names is None:
            names = self._fn_names[id(site.fn)] = identifiers(site.fn)
        var = fresh(f"{base}_input_dtype", names | set(site.scope.params) | {self.name} | taken)
        taken.add(var)
        self._site_vars[id(site.call)] = var
        return var

    def _helper_line(self, site: Site, var: str, flag: str, anchor_stmt: ast.stmt) -> str:
        """The helper call, as the line that goes right before `anchor_stmt`: where the old code
        evaluated the dtype. Never hoisted out of a loop: a loop may run zero times (the call
        would run where it never did, on a layer that may be None or deleted), the cast may sit
        under an `if` or `try` inside it, and any call in the loop may rebind or repack the layer
        (`self.swap()`; a quantizer may pack its CPU weights on the first forward)."""
        indent = self.src.indent_of(anchor_stmt.lineno)
        return f"{indent}{var} = {self.helper_call(self.src.segment(site.wds.layer), flag)}\n"

    def _uses_outside(self, fn: ast.AST, name: str, region: ast.AST) -> bool:
        from dtype_lint.analysis.function_walk import all_nodes  # a set: no order needed

        inside = {id(n) for n in all_nodes(region)}
        return any(isinstance(n, ast.Name) and n.id == name and isinstance(n.ctx, ast.Load)
                   and id(n) not in inside for n in walk_function(fn))

    def _assign_stmt_of(self, site: Site, value: ast.expr) -> ast.stmt | None:
        parent = site.parents.get(id(value))
        if isinstance(parent, (ast.Assign, ast.AnnAssign)) and self._starts_line(parent):
            return parent
        return None

    def _stmt_line_region(self, stmt: ast.stmt, with_comments: bool = True) -> tuple[int, int]:
        """Whole lines of a statement, plus the comment lines attached directly above it (they
        describe the code being replaced). A line that only looks like a comment because it
        starts inside a string literal (`# …` in a triple-quoted string above) is the string's."""
        first = stmt.lineno
        if with_comments:
            while first > 1 and self.src.line_text(first - 1).strip().startswith("#") \
                    and self._starts_outside_strings(first - 1):
                first -= 1
        start = self.src.offset(first, 0)
        end_line = stmt.end_lineno or stmt.lineno  # a parsed statement has its end
        end = self.src.offset(end_line + 1, 0) if end_line < len(self.src.lines) else len(self.src.text)
        return start, end

    @cached_property
    def _rows_in_strings(self) -> set[int] | None:
        """The file's rows that start inside a string literal; None where it does not lex.
        Computed once per file (one tokenize), and only when a fix deletes comment lines."""
        return rows_starting_in_strings(self.src.text)

    def _starts_outside_strings(self, line: int) -> bool:
        """Does row `line` start outside every string literal? Asked of the comment lines above a
        statement a fix rewrites: inside a function, its own rows are lexed (once per function),
        not the file's."""
        fn = _innermost_function(self.tree.body, line)
        if fn is None:
            rows = self._rows_in_strings
        else:
            if id(fn) not in self._fn_rows_in_strings:
                first = min([d.lineno for d in fn.decorator_list] + [fn.lineno])
                self._fn_rows_in_strings[id(fn)] = rows_starting_in_strings_of(
                    self.src.lines, first, fn.end_lineno or fn.lineno)
            rows = self._fn_rows_in_strings[id(fn)]
        return rows is not None and line not in rows

    def _indent_unit(self, site: Site, stmt: ast.stmt) -> str:
        """One indentation level, as this block writes it."""
        parent = site.parents.get(id(stmt))
        inner, outer = self.src.indent_of(stmt.lineno), self.src.indent_of(getattr(parent, "lineno", stmt.lineno))
        unit = inner[len(outer):] if inner.startswith(outer) else ""
        return unit or "    "


def _innermost_function(body: list[ast.stmt], line: int) -> ast.FunctionDef | ast.AsyncFunctionDef | None:
    """The innermost `def` whose statement (decorators included) holds row `line`, found down the
    statements that hold it; None when no function does."""
    found = None
    statements = body
    while True:
        holder = None
        for node in statements:
            first = min([d.lineno for d in getattr(node, "decorator_list", ())] + [node.lineno])
            if first <= line <= (node.end_lineno or node.lineno):
                holder = node
                break
        if holder is None:
            return found
        if isinstance(holder, (ast.FunctionDef, ast.AsyncFunctionDef)):
            found = holder
        statements = [*getattr(holder, "body", ()), *getattr(holder, "orelse", ()), *getattr(holder, "finalbody", ()),
                      *(s for h in getattr(holder, "handlers", ()) for s in h.body),
                      *(s for c in getattr(holder, "cases", ()) for s in c.body)]
