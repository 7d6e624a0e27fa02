"""One file's findings: parse → facts → rules → per-file ignores → suppressions.

The same function serves a check and every round of a fix, so what `--fix` acts on is exactly
what a check reports (unused suppressions included, with their fixes). It never raises on user
input: a file that cannot be parsed, or whose nesting exhausts the parser, becomes DTL900.
"""

from __future__ import annotations

import os
import sys
from functools import cache, lru_cache
from typing import TYPE_CHECKING

from dtype_lint.analysis.index.class_facts import ProjectFacts
from dtype_lint.analysis.index.class_index import QuantizableLayerIndex, extract_header
from dtype_lint.core import regions, trees
from dtype_lint.core.config import Config
from dtype_lint.core.findings import ENGINE_CODES, PARSE_ERROR, Evidence, Finding, Span
from dtype_lint.core.prefilter import for_rules, has_suppression, marker_words, searched
from dtype_lint.core.source import MAX_LINE_CHARS, READ_ERRORS, SourceFile, read_file, too_long_line
from dtype_lint.rule import RuleContext, RuleContractError, RuleFacts

if TYPE_CHECKING:
    from collections.abc import Callable

    from dtype_lint.core.prefilter import Prefilter, Searcher


def enabled_rules(config: Config, path: str | None = None):
    """The rules `config` enables (for `path`), in code order: only their modules are imported."""
    from dtype_lint.rules import enabled

    return enabled(lambda code: config.enabled(code, path))


def analyze(path: str, text: str, index: QuantizableLayerIndex, config: Config, module: str,
            load_file=None) -> list[Finding]:
    """Every finding of one file's text, sorted. `module`: its dotted name ("" when unknown).
    The other files the analysis reads are recorded by the index (`index.reading()`)."""
    rules = enabled_rules(config, path)
    codes = frozenset(r.code for r in rules)
    raw: list[Finding] = []
    # Each rule runs only where its own prefilter passes: one rule's broad patterns must not change
    # what another reports (a file is parsed once, for the rules that can find something in it).
    # Whether the module imports a helper, asked only for a rule reporting helper calls whose own
    # patterns miss the text (it resolves every import of the module: with every rule on, most
    # files DTL005 reads match its patterns).
    callers = cache(lambda: bool(reads_helper_callers(rules, index, module)))
    tested: tuple[dict[str, bool], dict[str, bool]] = ({}, {})  # a pattern rules share is searched once
    active = [r for r in rules if for_rules((r,)).might_match(text, tested) or (r.reads_helper_callers and callers())]
    spans = None
    if active and any(r.pattern_gates for r in active):
        active, spans = _gated(active, text, tested, index, module, callers)
    if active:
        long_line = too_long_line(text)
        if long_line:
            return _engine_error(path, f"line {long_line} is longer than {MAX_LINE_CHARS} characters; "
                                       "not parsed (generated code)", long_line, 1, config)
        reduce = reducible(config)
        # With an "on-demand" rule on (an opt-in rule) and no "whole-file" one here, the file is
        # parsed reduced as in a run of the default rules, and parsed whole only for the on-demand
        # rules that say they need it (`Rule.needs_whole_tree`): with every rule on, most files
        # such a rule's prefilter passes hold nothing it could report.
        staged = not reduce and all(r.regions in ("sites", "on-demand") for r in active)
        try:
            tree = trees.parse_reduced(path, text, spans if spans is not None else site_spans(active, text),
                                       lazy_classes=True) \
                if reduce or staged else trees.parse(path, text)
        except SyntaxError as error:
            # The running interpreter's parser reads the file: code written for a newer Python
            # (`x[*idx]` on 3.10) is a syntax error here, which the version tells apart.
            return _engine_error(path, f"cannot parse with Python {sys.version_info[0]}.{sys.version_info[1]}: "
                                       f"{error.msg}", error.lineno or 1, error.offset or 1, config)
        except (ValueError, RecursionError, MemoryError) as error:  # null bytes; absurd nesting
            return _engine_error(path, f"cannot parse: {_why(error)}", 1, 1, config)
        is_pkg = os.path.basename(path) == "__init__.py"
        known = index.modules.get(module)
        imports = known.imports if known is not None and known.path == path else \
            extract_header(text, module, path, is_pkg, functions=False).imports
        markers = frozenset(m for r in active for m in marker_words(r))
        facts = _rule_facts(tree, path, text, module, is_pkg, imports, markers, index, load_file, config, reduce)
        whole_rules: list = []
        try:
            if staged:
                whole_rules = _run_staged(active, facts, raw, path, config)
            else:
                _run_rules(active, facts, raw, path, config)
        finally:
            facts.release()  # no reference cycle keeps the file's tree for the collector
        if whole_rules:
            _run_whole(whole_rules, trees.whole_of(tree), path, text, module, is_pkg, imports, markers,
                       index, load_file, config, raw)
        trees.release(path)  # the store keeps what other files read (core/trees.py)
        index.compact_facts()  # ... and the facts of other files' classes it did not ask for, less
    if not has_suppression(text):
        if not raw:
            return []
        from dtype_lint.core.suppressions import might_hold_suppression  # only a file with findings

        if not might_hold_suppression(text):
            return sorted(raw, key=Finding.sort_key)
    from dtype_lint.core.suppressions import apply_suppressions

    kept, unused = apply_suppressions(path, text, raw, enabled_codes=codes | set(ENGINE_CODES))
    return sorted(kept + [f for f in unused if config.enabled(f.code, path)], key=Finding.sort_key)


def _run_staged(rules, facts: RuleFacts, raw: list[Finding], path: str, config: Config) -> list:
    """Ask each "on-demand" rule whether it needs the whole tree here (`Rule.needs_whole_tree`,
    on the reduced tree of `facts`). When one does, every rule runs on the whole tree, as in a run
    without reduced trees: one set of facts then serves them all (walks, layer resolution), where
    running the "sites" rules on the reduced tree too built most of them twice. Otherwise the
    "sites" rules run on the reduced tree and the on-demand ones not at all. Returns the rules
    left for `_run_whole`."""
    for rule in rules:
        if rule.regions != "on-demand":
            continue
        instance = rule()
        try:
            needed = instance.needs_whole_tree(RuleContext(instance, facts, []))
        except RuleContractError:
            raise  # a bug in the rule, for its author
        except Exception:  # noqa: BLE001 - the whole-tree run says what went wrong, as before
            needed = True
        if needed:
            return list(rules)
    _run_rules([r for r in rules if r.regions == "sites"], facts, raw, path, config)
    return []


def _run_whole(rules, tree, path: str, text: str, module: str, is_pkg: bool, imports, markers,
               index: QuantizableLayerIndex, load_file, config: Config, raw: list[Finding]) -> None:
    """Run `rules` on the whole tree of the file, with the file's facts read from that tree (as a
    run parsing every file whole does; other files' facts are shared through the index)."""
    facts = _rule_facts(tree, path, text, module, is_pkg, imports, markers, index, load_file, config, False)
    try:
        _run_rules(rules, facts, raw, path, config)
    finally:
        facts.release()


def _rule_facts(tree, path: str, text: str, module: str, is_pkg: bool, imports, markers,
                index: QuantizableLayerIndex, load_file, config: Config, reduce: bool) -> RuleFacts:
    """The facts the rules read of one file's `tree` (reduced or whole, as `reduce` says)."""
    project = ProjectFacts(index, load_file=load_file or safe_read, reduce=reduce)
    project.register(tree, module, path, is_pkg, imports)
    return RuleFacts(SourceFile(path, text, module), tree, config, project, imports, markers)


def _run_rules(rules, facts: RuleFacts, raw: list[Finding], path: str, config: Config) -> None:
    for rule in rules:
        mark = len(raw)
        instance = rule()
        try:
            instance.check(RuleContext(instance, facts, raw))
        except RecursionError:
            del raw[mark:]
            raw.extend(_engine_error(path, f"{rule.code} gave up: expression nesting too deep", 1, 1, config))
        except RuleContractError:
            raise  # a bug in the rule, for its author
        except Exception as error:  # noqa: BLE001 - one rule's bug must not abort the run or lose files
            del raw[mark:]
            raw.extend(_engine_error(path, f"internal error in {rule.code}: {type(error).__name__}: {error}; "
                                           "please report it", 1, 1, config))


def reducible(config: Config) -> bool:
    """May files be parsed with the function bodies no rule reads blanked (core/regions.py)?
    Only when every rule the run enables reads a tree in the ways regions.py knows."""
    from dtype_lint.core.rule_registry import reduced_parsing_codes, registry

    reducible_codes = reduced_parsing_codes()
    return all(info.code in reducible_codes for info in registry() if config.enabled(info.code))


def site_spans(rules, text: str) -> list[tuple[int, int]]:
    """The lines every match of these rules' own patterns spans: where a site can be."""
    return regions.site_spans(text, _searches(tuple(dict.fromkeys(p for r in rules for p in r.patterns))))


def _gated(active: list, text: str, tested, index: QuantizableLayerIndex, module: str, callers: "Callable[[], bool]"):
    """(the rules still active, their site spans) once the gates of their gated patterns
    (`Rule.pattern_gates`, analysis/pattern_gates.py) have dropped the matches that cannot be
    sites: a rule whose other patterns do not match and whose gated matches all went is not run
    here, and a file no rule is left for is not parsed. A pattern some active rule reads without a
    gate keeps every match. Spans None: no gate applied (every match counts)."""
    from dtype_lint.analysis.pattern_gates import gate

    # A pattern two active rules read is gated only if both gate it alike.
    named: dict[str, str | None] = {}
    for rule in active:
        for pattern in rule.patterns:
            name = rule.pattern_gates.get(pattern)
            named[pattern] = name if named.get(pattern, name) == name else None
    gated = {p: name for p, name in named.items() if name is not None}
    if not gated:
        return active, None
    kept: dict[str, list[tuple[int, int]]] = {}
    for pattern, name in gated.items():
        literal, searcher = _searches((pattern,))[0]
        matches = list(searcher.finditer(text)) if not literal or literal in text else []
        if matches:
            keeps = gate(name, text, module, index).keeps
            kept[pattern] = [(m.start(), m.end()) for m in matches if keeps(m)]
    dropped = tuple(sorted(gated))
    still = [r for r in active if (r.reads_helper_callers and callers()) or any(kept.get(p) for p in r.patterns)
             or _without(r, dropped).might_match(text, tested)]
    ungated = tuple(dict.fromkeys(p for r in still for p in r.patterns if p not in gated))
    extra = [span for p in dict.fromkeys(p for r in still for p in r.patterns) for span in kept.get(p, ())]
    return still, regions.site_spans(text, _searches(ungated), extra)


@lru_cache(maxsize=16)
def _without(rule, patterns: tuple[str, ...]) -> "Prefilter":
    """The prefilter of `rule` without `patterns` (those a gate answers for here)."""
    kept = tuple(p for p in rule.patterns if p not in patterns)
    return for_rules((type(rule.__name__, (), {"marker": rule.marker, "patterns": kept}),))


@lru_cache(maxsize=16)
def _searches(patterns: tuple[str, ...]) -> "list[tuple[str, Searcher]]":
    """(the literal every match holds, the compiled pattern) of each pattern, once per run."""
    return [searched(p) for p in patterns]  # shared with the prefilter's


def reads_helpers(config: Config) -> bool:
    """Does a rule `config` enables read input-dtype helpers (the "helpers" fact, or the calls of
    helpers other files define)? Only then are a module header's helper-shaped functions found
    (`extract_header`'s `functions`, read by analysis/helper_functions.py alone): finding them
    searched every header's text: 0.21 G of the 20.9 G instructions of a cold check of vLLM 0.34.0
    with the default rules, which never read them. Headers are cached under the configuration's
    fingerprint, so a run that enables such a rule never reads one made without them."""
    return any("helpers" in rule.facts or rule.reads_helper_callers for rule in enabled_rules(config))


def reads_helper_callers(rules, index: QuantizableLayerIndex, module: str) -> bool:
    """A rule reports calls of input-dtype helpers, and this module imports one from elsewhere."""
    if not any(r.reads_helper_callers for r in rules):
        return False
    from dtype_lint.analysis.helper_functions import imports_a_helper

    return imports_a_helper(index.modules.get(module), index)


def _why(e: BaseException) -> str:
    if isinstance(e, RecursionError):
        return "nesting too deep for the parser"
    if isinstance(e, MemoryError):
        return "out of memory"
    return str(e)


def _engine_error(path: str, message: str, line: int, col: int, config: Config) -> list[Finding]:
    return [parse_error(path, message, line, col)] if config.enabled(PARSE_ERROR, path) else []


def parse_error(path: str, message: str, line: int = 1, col: int = 1) -> Finding:
    return Finding(PARSE_ERROR, message, path, Span(line, col, line, col + 1),
                   evidence=(Evidence("the file was skipped; other files were checked", path, line),),
                   scope="<module>", expression=message)


def safe_read(path: str) -> str | None:
    try:
        return read_file(path).text
    except READ_ERRORS:
        return None
