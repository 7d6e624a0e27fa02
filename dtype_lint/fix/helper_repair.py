"""The fixes of an unsound input-dtype helper (DTL005): the missing branch inserted into the helper
itself, or its callers routed to the configured helper, each proven by the dtype evaluator
(dtypes/evaluator.py) before it is offered."""

from __future__ import annotations

import ast

from dtype_lint.analysis.helper_functions import KnownHelper
from dtype_lint.core.findings import Edit, Fix
from dtype_lint.dtypes.evaluator import AFTER_ERROR, Case, Table, alternatives, evaluate_helper, unsound_cases
from dtype_lint.ecosystems.registry import model_dtype_attributes
from dtype_lint.fix.helper_template import helper_table


def missing_branch_fix(source, fn, h: KnownHelper) -> tuple[Fix | None, str]:
    """One branch returning the layer's model dtype for exactly the wrong cases, inserted after the
    assignment of the variable the function finally returns; proven by evaluating the result."""
    if any(v == AFTER_ERROR for _c, v in h.unsound):
        return None, ("the helper reads `.weight` without a fallback (`getattr(layer, \"weight\", None)`): "
                      "not a plain branch")
    last = fn.body[-1]
    if not (isinstance(last, ast.Return) and isinstance(last.value, ast.Name)):
        return None, "the helper does not end in `return <weight dtype>`: add the missing case by hand"
    var = last.value.id
    assigns = [s for s in fn.body if isinstance(s, ast.Assign) and len(s.targets) == 1
               and isinstance(s.targets[0], ast.Name) and s.targets[0].id == var]
    every = [n for n in ast.walk(fn) if isinstance(n, ast.Name) and n.id == var and isinstance(n.ctx, ast.Store)]
    if len(assigns) != 1 or len(every) != 1:
        return None, f"`{var}` is not assigned once at the top of the helper: add the missing case by hand"
    layer = fn.args.posonlyargs + fn.args.args
    layer = [a.arg for a in layer if a.arg not in ("self", "cls")][0]
    assert h.table is not None  # a helper the evaluator read: its table is there
    flags_in_table = h.table.flags
    parts = []
    by_storage: dict[str | None, set[bool]] = {}
    for case, _v in h.unsound:
        by_storage.setdefault(case.storage, set()).add(case.flag)
    for storage, flags in by_storage.items():
        test = f"{var} == torch.{storage}"
        if len(flags) < len(flags_in_table):
            flag_test = h.flag_param if True in flags else f"not {h.flag_param}"
            test = f"({test} and {flag_test})"
        parts.append(test)
    if len(parts) == 1 and parts[0].startswith("("):
        parts[0] = parts[0][1:-1]
    assign = assigns[0]
    src = source
    indent = src.indent_of(assign.lineno)
    unit = src.indent_of(fn.body[0].lineno)[len(src.indent_of(fn.lineno)):] or "    "
    nl = src.newline
    # The layer's model dtype, by the attribute its engine's layers state it under.
    model_dtype = f"{layer}.{model_dtype_attributes()[0]}"
    text = f"{indent}if {' or '.join(parts)}:{nl}{indent}{unit}return {model_dtype}{nl}"
    last = assign.end_lineno or assign.lineno
    at = src.offset(last + 1, 0) if last < len(src.lines) else len(src.text)
    patched = src.text[:at] + text + src.text[at:]
    assert h.table is not None  # a helper the evaluator read: its table is there
    why = still_wrong(patched, fn.name, fn.lineno, h.table)
    if why:
        return None, why
    return Fix(f"return `{model_dtype}` for the wrong cases (proven by the dtype evaluator)", True,
               (Edit(at, at, text),)), ""


def still_wrong(patched: str, name: str, line: int, before: Table) -> str:
    """Why the patched helper is not the fix ("" when it is): unparsable, still unsound, or changed."""
    try:
        tree = ast.parse(patched)
    except SyntaxError:
        return "the branch would not parse here"
    fn = next((n for n in ast.walk(tree) if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))
               and n.name == name and n.lineno == line), None)
    try:
        after = evaluate_helper(fn, tree) if fn is not None else None
    except Exception as e:  # noqa: BLE001 - whatever the evaluator refuses, the fix is off
        return f"the patched helper cannot be evaluated ({e})"
    if after is None or unsound_cases(after):
        return "the branch would not make the helper sound"
    wrong = {c for c, _ in unsound_cases(before)}
    if any(after.get(c) != v for c, v in before.rows if c not in wrong):
        return "the branch would change a case the helper gets right"
    return ""


def route_blocker(planner, template: str, h: KnownHelper, has_flag: bool = True) -> str:
    """Why calls of `h` cannot become calls of the configured helper ("" when they can): some
    case `h` gets right is decided otherwise (or not surely) by the configured helper."""
    if planner.helper_wrong_cases:
        return f"the configured helper `{planner.func}` is unsound too"
    cfg = helper_table(planner.module, planner.func, template, planner.helper_path)
    if cfg is None:
        return f"`{planner.func}` is beyond the dtype evaluator"
    default = planner.flag_default == "True"
    wrong = {c for c, _ in h.unsound}
    assert h.table is not None  # a helper the evaluator read: its table is there
    for case, value in h.table.rows:
        if case in wrong:
            continue
        theirs = cfg.get(case if has_flag else Case(case.storage, default))
        if len(alternatives(value)) > 1 or value != theirs:
            return f"`{h.name}` and `{planner.func}` decide {case.describe()} differently ({value} vs {theirs})"
    return ""


def route_fix(source, planner, template: str, call: ast.Call, h: KnownHelper) -> tuple[Fix | None, str]:
    """Call the configured helper instead, when it decides every case `h` gets right the same way."""
    if h.configured:
        return None, f"fix `{h.name}` itself (reported at its definition)"
    if call.keywords or any(isinstance(a, ast.Starred) for a in call.args) or not 1 <= len(call.args) <= 2:
        return None, f"`{h.name}` is called with keywords or other arguments: route it to `{planner.func}` by hand"
    has_flag = len(call.args) == 2
    blocker = route_blocker(planner, template, h, has_flag)
    if blocker:
        return None, (f"{blocker}; route it by hand, or take the fix offered where `{h.name}` is defined "
                      "(its missing cases as one branch)")
    func_start, func_end = source.node_offsets(call.func)
    edits = [Edit(func_start, func_end, planner.name)]
    if not has_flag:
        _, end = source.node_offsets(call.args[0])
        edits.append(Edit(end, end, f", {planner.flag_default}"))
    return planner.helper_fix(f"call `{planner.func}` instead of `{h.name}` (they agree on every storage "
                              f"`{h.name}` gets right)", edits, True), ""
