"""`dtype-lint explain PATH:LINE`: the storage model for the layers read on one line.

For every `X.weight` on the line it shows what a reviewer would look up by hand: the class `X`
resolves to and the chain that says so, whether a quantization config reaches its construction,
the quant root, the tree's backends that can be handed it, and every storage each of them gives
`weight` (with the lines that make it), then what DTL001/DTL002 (a non-compute storage) and
DTL003 (no `weight`) conclude there.
"""

from __future__ import annotations

import ast
import functools
import os
from pathlib import Path

from dtype_lint.analysis.storage.catalogue import default_model
from dtype_lint.analysis.storage.storage_model import ABSENT, COMPUTE
from dtype_lint.analysis.storage.verdicts import NON_COMPUTE

# The rule whose question (a cast to a non-compute storage) explain asks for a layer its callers hand.
CAST_RULE = "DTL001"


class ExplainError(Exception):
    """Bad input: the message says what (exit 2)."""


def parse_site(site: str) -> tuple[str, int]:
    path, sep, line = site.rpartition(":")
    if not sep or not line.isdigit() or int(line) < 1:
        raise ExplainError(f"`{site}`: expected PATH:LINE (e.g. model.py:42)")
    if not os.path.isfile(path):
        raise ExplainError(f"`{path}`: no such file")
    return path, int(line)


def explain(site: str, config_file: str | None = None, verbose: bool = False) -> str:
    """The explanation, as text. Short by default: each backend whose storage is not the compute
    dtype, with the line that makes it; `verbose`: every backend and each line of its chain."""
    from dtype_lint.analysis.function_walk import iter_functions, patched_methods
    from dtype_lint.analysis.index.class_facts import FunctionScope
    from dtype_lint.analysis.index.class_index import extract_header
    from dtype_lint.analysis.storage.layers import LayerResolver
    from dtype_lint.core.discovery import module_name
    from dtype_lint.core.source import read_file
    from dtype_lint.run.catalogue_build import project_facts_for

    path, line = parse_site(site)
    try:
        text = read_file(path).text
        tree = ast.parse(text, filename=path)
    except (OSError, UnicodeError, SyntaxError, ValueError) as error:
        raise ExplainError(f"`{path}`: cannot read or parse: {error}") from None
    config, project = project_facts_for(path, config_file)
    module = module_name(path, config.root)
    imports = extract_header(text, module, path, os.path.basename(path) == "__init__.py").imports
    project.register(tree, module, path, os.path.basename(path) == "__init__.py", imports)
    resolver = LayerResolver(project, module, imports, path, config.all_config_params)
    model = default_model(project, config.all_config_params)

    scopes = {}
    from dtype_lint.analysis.instance_patches import patched_class

    patched = patched_methods(tree)  # `Model.forward = fn`: fn runs as Model's method, as check reads it
    function_node: ast.FunctionDef | ast.AsyncFunctionDef | None  # None: the line is in no function
    for function_node, class_q, scope_name in iter_functions(tree, module):
        if class_q is None and scope_name in patched:
            class_q = patched_class(project.index, module, imports, patched[scope_name])
        if function_node.lineno <= line <= (function_node.end_lineno or function_node.lineno):
            scopes[(function_node.end_lineno or function_node.lineno) - function_node.lineno] = (function_node, class_q)
    function_node, class_q = scopes[min(scopes)] if scopes else (None, None)
    scope = FunctionScope(function_node, class_q)
    reads = _weight_reads(tree, line, scope)
    callers = _Callers(path, text, module, tree, config, project, imports)
    if not reads:
        return f"{path}:{line}: no `.weight` read on this line\n"
    out = []
    seen = set()
    for node, alias in reads:
        layer = node.value
        text_of = ast.unparse(layer)
        if text_of in seen:
            continue
        seen.add(text_of)
        via = f" (through `{alias}`, bound at line {node.lineno})" if alias else ""
        out.append(f"{path}:{line}: `{text_of}.weight`{via}")
        if _adapter_decides(resolver, layer, scope, out):
            continue
        inst = resolver.resolve(layer, scope)
        if not inst.qualname:
            if inst.origin:  # a layer of a class a family knows outside the tree (as check asks it)
                out.append("  class: not resolved (a generic type, a value from outside: see docs/quantizability.md)")
                if not _family_decides(resolver, inst, text_of, out):
                    _named_only(resolver, inst, text_of, out)
            elif not _callers_decide(callers, function_node, layer, out):
                out.append("  class: not resolved (a generic type, a value from outside: see docs/quantizability.md)")
            continue
        out.append(f"  class: {inst.qualname}")
        for evidence_item in inst.chain:
            out.append(f"    {_where(evidence_item)}{evidence_item.message}")
        out.append(f"  quantization config at its construction: {inst.config}")
        if _family_decides(resolver, inst, text_of, out):
            continue
        root = resolver.quant_root(inst.qualname)
        if root is None:
            out.append("  quant root: none (no backend can be handed it): not quantizable")
            continue
        out.append(f"  quant root: {root[0]}")
        storages = model.storages_for(inst.qualname)
        if storages is None:
            out.append("  backends: the layer's config type does not resolve in this tree, and no shipped "
                       "catalogue knows the class")
        else:
            backends = sorted({s.backend for s in storages})
            out.append(f"  backends that can be handed it: {len(backends)}")
            unknown = model.undispatched(inst.qualname) if not backends else None
            if unknown is not None:  # not knowing the backends is not "no backend" (never fail open)
                out.append(f"    {_where(unknown[1])}{unknown[0]}")
            out.extend(_backend_lines(backends, storages, verbose))
        out.extend(_platforms(model, inst.qualname))
        # Not a list of rules to keep in step with rules/: the two storage questions the storage
        # model answers (a non-compute storage, no `weight`), named by the rules that ask them.
        for code, need in (("DTL001/DTL002", NON_COMPUTE), ("DTL003", ABSENT)):
            verdict = resolver.quantizable(inst, text_of, None, need)
            low = verdict is not None and verdict[0] == "low"
            out.append(f"  {code}: " + ("reported with low confidence unless a guard dominates the site (the "
                                         "backends that reach it are not known)" if low
                                         else "reported unless a guard dominates the site" if verdict
                                         else "not reported (no reachable backend gives such a storage)"))
    return "\n".join(out) + "\n"


def _weight_reads(tree: ast.AST, line: int, scope) -> list[tuple[ast.Attribute, str]]:
    """(`X.weight` read, the local it reaches the line through or "") for the line: the reads on it
    (an assignment to `X.weight` is no read), else those of a local the line uses that is bound
    once to an expression reading `.weight` (`dtype = base.weight.dtype` ... `.to(dtype)`), as
    check reports a cast through a local at the cast."""

    def reads_in(node: ast.AST) -> list[ast.Attribute]:
        return [n for n in ast.walk(node) if isinstance(n, ast.Attribute) and n.attr == "weight"
                and isinstance(n.ctx, ast.Load)]

    on_line = [n for n in reads_in(tree) if n.lineno <= line <= (n.end_lineno or n.lineno)]
    if on_line:
        return [(n, "") for n in on_line]
    names = sorted({n.id for n in ast.walk(scope.fn) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load)
                    and n.lineno <= line <= (n.end_lineno or n.lineno)}) if scope.fn is not None else []
    found = []
    for name in names:
        values = scope.assigns.get(name, [])
        if len(values) == 1 and values[0] is not None:
            found += [(n, name) for n in reads_in(values[0])]
    return found


def _adapter_decides(resolver, layer: ast.expr, scope, out: list[str]) -> bool:
    """An adapter library's base layer (the registry's `adapter` role), as check asks it before
    the layer's class: its evidence and what the rules conclude; False where no adapter role
    speaks for this layer."""
    from dtype_lint.ecosystems.registry import ecosystem_of, plugins

    for adapter in plugins("adapter"):
        decided = adapter.adapter_verdict(resolver, layer, scope, scope.class_qualname)
        if decided is None:
            continue
        out.append(f"  family: {ecosystem_of(adapter)} (an adapter library)")
        if not decided:
            out.append("    the base layer, in code that writes into its weight or computes in its own storage: "
                       "its storage dtype is the right one here")
            out.append("  DTL001/DTL002: not reported")
            return True
        for evidence_item in decided[1]:
            out.append(f"    {_where(evidence_item)}{evidence_item.message}")
        out.append("  DTL001/DTL002: reported " + ("with low confidence " if decided[0] == "low" else "")
                   + "unless a guard dominates the site")
        return True
    return False


def _family_decides(resolver, inst, text_of: str, out: list[str]) -> bool:
    """An ecosystem family that decides this layer (HF model code: the quantizers that replace
    it at load time), as check's verdict takes it first: its evidence, then what the rules
    conclude. False where no family speaks for it (the storage model below does)."""
    from dtype_lint.ecosystems.registry import ecosystem_of, optional, plugins

    for family in plugins("family"):
        decided = family.verdict(resolver, inst, text_of)
        if decided is None:
            continue
        out.append(f"  family: {ecosystem_of(family)}")
        if not decided:
            # A family may say why in its own words (an optional question of the family role).
            why = optional(family, "family", "why_not")(resolver, inst, text_of) or \
                "no quantizer of this family replaces it here (storage code, or excluded by the model)"
            out.append(f"    {why}")
            out.append("  DTL001/DTL002: not reported")
            return True
        for evidence_item in decided[1][len(inst.chain):]:
            out.append(f"    {_where(evidence_item)}{evidence_item.message}")
        out.append("  DTL001/DTL002: reported " + ("with low confidence " if decided[0] == "low" else "")
                   + "unless a guard dominates the site")
        return True
    return False


class _Callers:
    """The file's facts as check's rules read them, built only when a layer is reached through a
    parameter: its callers in the file say what it is (analysis/flow/callers.py)."""

    def __init__(self, path: str, text: str, module: str, tree: ast.Module, config, project, imports):
        self._args = (path, text, module, tree, config, project, imports)

    @functools.cached_property
    def context(self):
        from dtype_lint.core.source import SourceFile
        from dtype_lint.rule import RuleContext, RuleFacts
        from dtype_lint.rules import enabled

        path, text, module, tree, config, project, imports = self._args
        # The rule that asks check's question of a cast (a non-compute storage): its verdict,
        # callers and guards at the calls included, is the one check reports.
        rule = enabled(lambda code: code == CAST_RULE)[0]()
        return RuleContext(rule, RuleFacts(SourceFile(path, text, module), tree, config, project, imports,
                                           frozenset()), [])


def _callers_decide(callers: _Callers, function_node, layer: ast.expr, out: list[str]) -> bool:
    """A layer reached through a parameter typed only as a module (`indexer.weights_proj` with
    `indexer: nn.Module`): as check, the verdict on what the calls of its function in this file
    pass for it, judged at each call (one step). False where no call decides it."""
    from dtype_lint.analysis.flow.callers import generically_typed, handed_root
    from dtype_lint.analysis.storage.verdicts import backends_unknown

    root = handed_root(layer)
    if function_node is None or root is None or not generically_typed(function_node, root.id):
        return False
    # check's own step (RuleContext.layer_verdict, once the layer's class did not resolve here)
    verdict = callers.context.callers_verdict(function_node, layer, NON_COMPUTE)
    if verdict is None:
        return False
    out.append(f"  class: not resolved here: `{root.id}` is a parameter typed only as a module; its callers in "
               f"this file say what it is (as check follows them)")
    for evidence_item in verdict[1]:
        out.append(f"    {_where(evidence_item)}{evidence_item.message}")
    low = verdict[0] == "low"
    out.append("  DTL001/DTL002: reported " + ("with low confidence " if low else "") + "unless a guard dominates the "
               "site" + (" (the backends that reach it are not known)" if low and backends_unknown(verdict[1]) else ""))
    return True


def _named_only(resolver, inst, text_of: str, out: list[str]) -> None:
    """A layer of a class known only by its name's string (analysis/instance_patches.py): check
    reports it with low confidence, saying why."""
    verdict = resolver.quantizable(inst, text_of, None, NON_COMPUTE)
    if verdict is None:
        return
    for evidence_item in verdict[1]:
        out.append(f"    {_where(evidence_item)}{evidence_item.message}")
    out.append("  DTL001/DTL002: reported with low confidence unless a guard dominates the site (the "
               "backends that reach it are not known)")


def _platforms(model, qualname: str) -> list[str]:
    """The project's platforms, what each admits, and whether they narrowed the backends above."""
    narrowing = model.narrowing
    if narrowing is None:
        return []
    found = narrowing.admissions()
    if not found:
        return ["  platforms: none in the tree (no class declares `supported_quantization`): every backend counts"]
    out = ["  platforms (`supported_quantization`; an empty list admits every quantization):"]
    for a in found:
        shown = ", ".join(a.names) if a.names else "every quantization"
        inherited = f" (inherited from {a.declared_by.rsplit('.', 1)[-1]})" if a.declared_by and \
            a.declared_by != a.platform else ""
        out.append(f"    {a.path}:{a.line}: {a.short} admits {shown}{inherited}")
    chosen = narrowing.narrowing()
    if chosen is None:
        out.append("  platform narrowing: none (a platform admits every quantization): every backend counts")
        return out
    if model.narrowed_by(qualname) is None:
        out.append(f"  platform narrowing: the platforms admit only {', '.join(chosen.names)}, but a name is served "
                   "by no config we can find: every backend counts")
        return out
    out.append(f"  platform narrowing: the platforms admit only {', '.join(chosen.names)}; the backends above are "
               "the configs serving those names:")
    family = next(f for f in model.families if f.storages_for(qualname) is not None)
    data_for = getattr(family, "data_for", None)
    served = narrowing.served(qualname, family.name, data_for(qualname) if data_for else None) or {}
    for name, configs in served.items():
        shown = ", ".join(project or f"{short} (the engine's)" for short, project in configs)
        out.append(f"    {name}: {shown}")
    return out


# By default a backend shows this many of its harmful storages (a config that dispatches to dozens
# of schemes would fill a screen; the first few say why the site is reported).
SHOWN_PER_BACKEND = 3


def _backend_lines(backends: list[str], storages, verbose: bool) -> list[str]:
    """The backends' storages. A backend that only registers `weight` in the compute dtype cannot
    hurt a cast: by default those are one line, and each other storage shows the line that makes
    it (the last of its chain); `verbose` shows every backend and each line of every chain."""
    out = []
    harmless = []
    for backend in backends:
        mine = sorted((s for s in storages if s.backend == backend), key=lambda s: (s.kind, s.method))
        if not verbose and all(s.kind == COMPUTE for s in mine):
            harmless.append(backend)
            continue
        out.append(f"    {backend}:")
        shown = mine if verbose else [storage for storage in mine if storage.kind != COMPUTE]
        if not verbose and len(shown) > SHOWN_PER_BACKEND:
            rest = len(shown) - SHOWN_PER_BACKEND
            shown = shown[:SHOWN_PER_BACKEND]
        else:
            rest = 0
        for storage in shown:
            mark = ("" if storage.kind == COMPUTE
                    else "  <- " + ("no `weight`" if storage.kind == ABSENT else "not the compute dtype"))
            out.append(f"      {storage.method or '?'}: {storage.what}{mark}")
            for evidence_item in storage.evidence if verbose else storage.evidence[-1:]:
                out.append(f"        {_where(evidence_item)}{evidence_item.message}")
        if rest:
            out.append(f"      and {rest} more methods whose storage is not the compute dtype (--verbose lists them)")
        compute = 0 if verbose else sum(1 for storage in mine if storage.kind == COMPUTE)
        if compute:
            out.append(f"      and {compute} in the compute dtype (--verbose lists them)")
    if harmless:
        out.append(f"    {len(harmless)} more give `weight` in the compute dtype: {', '.join(harmless)}"
                   " (--verbose shows each backend's lines)")
    return out


def _where(e) -> str:
    return f"{e.path}:{e.line}: " if e.path else ""


def run(site: str, config_file: str | None = None, verbose: bool = False) -> int:
    import sys

    try:
        sys.stdout.write(explain(site, config_file, verbose))
    except ExplainError as error:
        print(f"dtype-lint: error: {error}", file=sys.stderr)
        return 2
    return 0


__all__ = ["ExplainError", "explain", "parse_site", "run"]
del Path
