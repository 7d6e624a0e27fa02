"""The rule contract (Fixit-style): one class per rule, declaring itself.

A rule module holds one `Rule` subclass with its code, name, summary, its documentation (the
module docstring, printed by `dtype-lint rule CODE` and generated into docs/rules/), the text
its prefilter needs (`patterns`), the facts it reads (`facts`), and VALID/INVALID examples that
the test suite runs. It reports through `ctx.report(node, message, fix=...)`; a finding has the
rule's `severity` unless reported with another (`severity="warning"` for a lower-severity
consequence of a problem reported elsewhere). Rules are
discovered (rules/__init__.py), never listed by hand: adding a rule is adding one module.

Facts a rule may declare (reading an undeclared one raises, so declarations stay true):
- "candidates": functions that can hold a weight-dtype site (their text mentions the rule's
  `marker`), less exempt storage code; each with its nodes and local scope, computed once per
  file for every rule that asks;
- "functions": every function of the file, exempt or not;
- "layers": layer resolution (what class does `self.kv_b_proj` hold, may it be quantized?);
- "fixes": the fix planner (routes a site through the shared helper);
- "flows": a layer's weight or weight dtype passed into a project function that casts or
  allocates with it (flows.py);
- "helpers": functions of the input-dtype helper's shape this file defines or calls, with what
  they decide for every storage (helper_facts.py). A rule that reports calls of helpers defined
  in other files sets `reads_helper_callers`, so that files importing one are analysed whatever
  their text;
- "guards": the questions asked of the checks that dominate a site (analysis/guard_engine/file_guards.py):
  `storage_unpacked(site, function, layer)` (the layer is proven unquantized or its storage a
  float there; `layer_verdict(..., site=)` asks it for every rule) and `weight_present(read,
  function, layer)` (`L.weight` cannot raise there).
"""

from __future__ import annotations

import ast
import enum
import fnmatch
import re
import textwrap
from bisect import bisect_left, bisect_right
from dataclasses import field
from functools import cached_property, lru_cache
from typing import ClassVar

from dtype_lint.analysis.flow.recognisers import (
    FIRST_PARAMETER,
    alloc_dtype_keywords,
    cast_dtype_args,
    weight_dtype_source,
)
from dtype_lint.analysis.function_walk import SCOPE_EVENTS, FunctionWalk, iter_functions, patched_methods
from dtype_lint.analysis.index.class_facts import FunctionScope, ProjectFacts
from dtype_lint.analysis.storage.layers import LayerResolver
from dtype_lint.analysis.storage.verdicts import backends_unknown, why_storage
from dtype_lint.core.ast_walk import enclosing_function
from dtype_lint.core.config import Config
from dtype_lint.core.findings import FINDING_KINDS, Evidence, Finding, Fix, Span
from dtype_lint.core.records import record
from dtype_lint.core.regions import BLANKED
from dtype_lint.core.source import SourceFile
from dtype_lint.dtypes.storage_format import ABSENT
from dtype_lint.ecosystems.registry import default_words, family_of, optional, planner_of, plugins

FACTS = frozenset({"candidates", "functions", "layers", "fixes", "flows", "helpers", "guards", "tree", "imports",
                   "loaders"})

def storage_dtypes(evidence) -> str:
    """The storages behind a finding, for its message: the backends the storage model found
    (`(Fp8 (fp8.py:194 -> fp8_utils.py:1255) registers `weight` as float8_e4m3fn; ...)`), or
    the words of the ecosystem whose layer it is when it knew none (vLLM's repacks for a
    vLLM-style engine's layer, the generic family's otherwise). Where an ecosystem's family decided the layer, its
    quantizers' words (ecosystems/registry.py), narrowed by partial guards."""
    default = default_words(evidence)  # the words of the ecosystem whose layer it is
    family = family_of(evidence)
    if family is not None:
        return "(" + family.backend_words(evidence, default) + ")"
    return "(" + why_storage(evidence, default) + ")"


class FixAvailability(enum.Enum):
    """Whether a rule's findings come with a fix (Ruff's FixAvailability): the README's fix column
    is generated from it (`Rule.fix_column`), and a rule declaring NONE may not report a fix."""

    ALWAYS = "always"
    SOMETIMES = "sometimes"
    NONE = "none"


def example_code(code: str) -> str:
    """An example's source: a triple-quoted block that starts with a newline is dedented (Fixit
    style: `Valid(\"\"\"\n    import torch\n    ...\"\"\")`), anything else is taken as written."""
    return textwrap.dedent(code[1:]) if code.startswith("\n") else code


@record(frozen=True)
class Valid:
    """An example the rule must not report (Fixit's `Valid`)."""
    code: str
    settings: dict = field(default_factory=dict)

    def __post_init__(self):
        object.__setattr__(self, "code", example_code(self.code))


@record(frozen=True)
class Invalid:
    """An example the rule must report, and the source its fix must give (Fixit's `Invalid`)."""
    code: str
    # Expected source after `--fix` (safe fixes only unless unsafe=True); None: no fix expected.
    expected_replacement: str | None = None
    # Substrings every finding's message must contain.
    message_contains: tuple[str, ...] = ()
    count: int = 1
    unsafe: bool = False
    settings: dict = field(default_factory=dict)

    def __post_init__(self):
        object.__setattr__(self, "code", example_code(self.code))
        if self.expected_replacement is not None:
            object.__setattr__(self, "expected_replacement", example_code(self.expected_replacement))


class Rule:
    code: ClassVar[str]
    name: ClassVar[str]
    summary: ClassVar[str]
    # Regular expressions; a file that matches none of any enabled rule's is never parsed.
    patterns: ClassVar[tuple[str, ...]] = ()
    # A word every line of interest holds: functions without it are not candidates.
    marker: ClassVar[str | tuple[str, ...]] = "weight"
    facts: ClassVar[frozenset[str]] = frozenset()
    severity: ClassVar[str] = "error"  # "error" | "warning"
    # False: off unless `select` names the code (measured precision below 95% off the trees it was
    # developed on). Read without importing the rule (dtype_lint/core/rule_registry.py), as are the
    # other declarations: each must be a literal.
    default_enabled: ClassVar[bool] = True
    # The parts of a file the rule reads: "sites" (the functions holding a line its patterns match,
    # the class facts, module-level statements: core/regions.py may blank every other function
    # body), "on-demand" (it asks `needs_whole_tree` of that reduced tree first, and runs on the
    # whole tree only where the answer is yes) or "whole-file" (it walks the whole tree; a file it
    # may report in is parsed whole).
    regions: ClassVar[str] = "whole-file"
    # It reports a layer's weight dtype used as a compute dtype (a cast, an allocation): every
    # ecosystem family answers for such sites, and the triage judges them tree by tree.
    dtype_site: ClassVar[bool] = False
    # An opt-in rule that `dtype-lint migrate` turns on: its fixes are part of routing every site
    # through the helper.
    in_migration: ClassVar[bool] = False
    # Patterns whose matches are sites only where a gate keeps them, decided before any parse
    # (pattern -> a gate of dtype_lint/analysis/pattern_gates.py, which says why each is exact).
    # A file whose only matches the gates drop is not parsed for this rule.
    pattern_gates: ClassVar[dict[str, str]] = {}
    # Analyse files that import a helper-shaped function from another file even when their text
    # matches no pattern (a call site of the helper needs no `.weight` on its lines).
    reads_helper_callers: ClassVar[bool] = False
    # Whether findings carry a fix, and what the README's fix column says about it.
    fix_availability: ClassVar[FixAvailability] = FixAvailability.NONE
    fix_note: ClassVar[str] = ""
    VALID: ClassVar[list[Valid]] = []
    INVALID: ClassVar[list[Invalid]] = []

    def check(self, ctx: "RuleContext") -> None:
        raise NotImplementedError

    def needs_whole_tree(self, ctx: "RuleContext") -> bool:
        """For a rule declaring `regions = "on-demand"`: asked of the file's reduced tree (the
        functions holding a line its patterns match are whole there, other function bodies may be
        blanked), may `check` on the whole tree report anything here? False must be certain: the
        rule is then not run on this file at all. True: the file is parsed whole and `check` runs
        on that tree, exactly as in a run without reduced trees."""
        return True

    @classmethod
    def fix_column(cls) -> str:
        """The README rules table's fix cell: the availability, then the rule's note."""
        return f"{cls.fix_availability.value}: {cls.fix_note}" if cls.fix_note else cls.fix_availability.value


class RuleContractError(Exception):
    """A rule read a fact it did not declare."""


@record
class Candidate:
    """A function that can hold a site, shared by every rule that walks candidates."""

    fn: ast.FunctionDef | ast.AsyncFunctionDef
    class_qualname: str | None
    scope_name: str
    exempt: bool = False

    @cached_property
    def walk(self) -> FunctionWalk:
        """The one walk of the function: its nodes, their events by kind (`walk.of(ast.Call)`), and
        the parent map, shared by every rule and fact (analysis/function_walk.py)."""
        return FunctionWalk(self.fn)

    @property
    def nodes(self) -> list[ast.AST]:
        return self.walk.nodes

    @cached_property
    def scope(self) -> FunctionScope:
        return FunctionScope(self.fn, self.class_qualname, self.walk.of(*SCOPE_EVENTS))

    @property
    def parents(self) -> dict[int, ast.AST]:
        return self.walk.parents


@lru_cache(maxsize=16)
def _marker_pattern(markers: tuple[str, ...]) -> re.Pattern:
    return re.compile("|".join(re.escape(m) for m in markers))


def _holds_line(lines: list[int], fn: ast.FunctionDef | ast.AsyncFunctionDef) -> bool:
    """Is one of the sorted 1-based `lines` among `fn`'s own (its `def` line to its last)?"""
    j = bisect_left(lines, fn.lineno)
    return j < len(lines) and lines[j] <= (fn.end_lineno or fn.lineno)


def lines_holding(text: str, markers) -> list[int]:
    """The 1-based lines of `text` (line feeds only) holding one of `markers` (none holds a line
    break), in order. Each marker is found by `str.find`, from one line it is in to the next: an
    alternation of the markers made re try a match at every `w`, `.` and `p` of the text (the
    default rules' markers), and the files a run analyses are its largest."""
    line_starts: set[int] = set()
    for marker in markers:
        at = text.find(marker)
        while at >= 0:
            line_starts.add(text.rfind("\n", 0, at) + 1)
            end = text.find("\n", at)
            if end < 0:
                break
            at = text.find(marker, end + 1)
    out = []
    line, counted = 1, 0  # the line number at offset `counted`
    for start in sorted(line_starts):
        line += text.count("\n", counted, start)
        counted = start
        out.append(line)
    return out


class RuleFacts:
    """What rules may read about one file; built lazily, once, whatever rules ask."""

    def __init__(self, source: SourceFile, tree: ast.Module, config: Config, project: ProjectFacts,
                 imports: dict[str, str], markers: frozenset[str]):
        self.source = source
        self.tree = tree
        self.config = config
        self.project = project
        self.imports = imports
        self._markers = markers

    def release(self) -> None:
        """Forget what the rules' questions built, once they have all run. Some of it refers back
        to this object (FileGuards), a reference cycle that kept the file's tree, its candidates
        and its project facts alive until the cycle collector found them: on ten copies of vLLM
        about half of each collection's objects were such garbage, and `check --no-cache -j 1`
        (1,620 files analysed) ran eleven collections of 100,000 to 170,000 objects."""
        guards = self.__dict__.get("guards")
        if guards is not None:
            guards.release()
        for name in _CACHED:
            self.__dict__.pop(name, None)

    @cached_property
    def _nodes(self) -> dict[int, Candidate]:
        return {}

    def _function_list(self, lines: list[int] | None) -> list[Candidate]:
        out = []
        for function_node, class_q, scope_name in iter_functions(self.tree, self.source.module, lines):
            if class_q is None and scope_name in self._patched:  # `Model.forward = fn`: fn is Model's method
                class_q = self._patched_class(self._patched[scope_name])
            c = self._nodes.get(id(function_node))
            if c is None:
                c = self._nodes[id(function_node)] = Candidate(function_node, class_q, scope_name)
            out.append(c)
        return out

    def _patched_class(self, spelled: str) -> str:
        from dtype_lint.analysis.instance_patches import patched_class

        return patched_class(self.project.index, self.source.module, self.imports, spelled)

    @cached_property
    def _patched(self) -> dict[str, str]:
        """Module-level functions patched onto a class (`Model.forward = fn`). The tree the rules
        get is reduced to the statements near sites, so the statements that patch (often inside
        an `apply()` function) are read from the whole text, parsed only where a module-level
        function takes `self` (rare outside such projects)."""
        if not any(isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.args.args
                   and node.args.args[0].arg == "self" for node in self.tree.body):
            return {}
        try:
            return patched_methods(ast.parse(self.source.text))
        except (SyntaxError, ValueError, RecursionError):
            return {}

    @cached_property
    def _all_functions(self) -> list[Candidate]:
        """Every function, its exemption not yet decided (deciding it reads base classes)."""
        return self._function_list(None)

    @cached_property
    def _marker_lines(self) -> list[int]:
        """The 1-based lines holding a marker word: each marker found from line to line
        (`lines_holding`; with lone CRs, one regex search per such line), not a test per line."""
        return self._lines_holding(sorted(self._markers))

    @cached_property
    def _naming(self) -> dict[tuple[str, ...], list[Candidate]]:
        return {}

    def candidates_naming(self, words: tuple[str, ...]) -> list[Candidate]:
        """The candidates one of whose lines holds one of `words`, in their order: those a rule
        that looks for what must spell one of them in the function's own code need walk (with
        every rule on, the candidates are every function saying `dtype`, and DTL003 looks for
        `.weight` reads). All of them where the text is not ASCII: an identifier may be spelled
        in characters the parser normalises to the word."""
        found = self._naming.get(words)
        if found is None:
            candidates = self.candidates
            if self.source.text.isascii():
                lines = self._lines_holding(sorted(words))
                candidates = [c for c in candidates if _holds_line(lines, c.fn)]
            found = self._naming[words] = candidates
        return found

    def _lines_holding(self, markers: list[str]) -> list[int]:
        if not markers or any(not m or "\r" in m or "\n" in m for m in markers):
            return [i for i, line in enumerate(self.source.lines, 1) if any(m in line for m in markers)]
        text = self.source.text
        if "\r" in text:  # lines may break at a lone CR: the source's line starts say where
            search = _marker_pattern(tuple(markers)).search
            out: list[int] = []
            starts = self.source.starts
            found = search(text)
            while found is not None:
                line = bisect_right(starts, found.start())
                out.append(line)
                # go on from the next line's start (`starts` ends with the text's end)
                found = search(text, starts[line]) if line < len(starts) else None
            return out
        return lines_holding(text, markers)

    @cached_property
    def _exemptions(self) -> dict[int, bool]:
        return {}

    def _exempt(self, functions: list[Candidate], i: int) -> bool:
        """Is functions[i] exempt: named by `exempt-functions`, a method of storage code, a storage
        function (`LayerResolver.storage_function`), or
        nested in an exempt function (decided on demand: only candidates need it). `functions`
        holds, before each function, every function enclosing it."""
        c = functions[i]
        known = self._exemptions.get(id(c.fn))
        if known is not None:
            return known
        exempt = self._exempt_itself(c)
        if not exempt:
            # The nearest enclosing function decides for all of them (its own answer takes in
            # those enclosing it); scanning every earlier function was quadratic in a file's.
            outer = self._enclosing.get(id(c.fn))
            exempt = outer is not None and self._exempt(self._all_functions, self._function_index[id(outer)])
        c.exempt = self._exemptions[id(c.fn)] = exempt
        return exempt

    def _exempt_itself(self, c: Candidate) -> bool:
        """Exempt for what it is, not for what encloses it: named by `exempt-functions`, a method
        of storage code, or a storage function (`LayerResolver.storage_function`)."""
        return any(fnmatch.fnmatch(c.fn.name, p) for p in self.config.exempt_functions) or \
            bool(c.class_qualname and self._storage(c.class_qualname)) or \
            (c.class_qualname is None and c.scope_name == c.fn.name and self.layers.storage_function(c.fn) is not None)

    @cached_property
    def _enclosing(self) -> dict[int, ast.AST]:
        """id(function) -> the innermost function whose lines hold its `def` line (as `_exempt`
        reads nesting), in one sweep: the walk yields a function before those nested in it."""
        out: dict[int, ast.AST] = {}
        stack: list[ast.FunctionDef | ast.AsyncFunctionDef] = []
        for function in self._all_functions:
            line = function.fn.lineno
            while stack and not (stack[-1].lineno < line <= (stack[-1].end_lineno or stack[-1].lineno)):
                stack.pop()
            if stack:
                out[id(function.fn)] = stack[-1]
            stack.append(function.fn)
        return out

    @cached_property
    def _storage_classes(self) -> dict[str, bool]:
        return {}

    def _storage(self, class_q: str) -> bool:
        known = self._storage_classes.get(class_q)
        if known is None:
            known = self._storage_classes[class_q] = self.project.index.exempt_verdict(class_q).yes or \
                self.layers.storage_code(class_q) is not None
        return known

    @cached_property
    def _function_index(self) -> dict[int, int]:
        return {id(c.fn): i for i, c in enumerate(self._all_functions)}

    def exempt(self, c: Candidate) -> bool:
        """Is this function of the file exempt (`_exempt`), decided for it alone: a rule that reads
        few functions' exemption need not decide every function's (it reads base classes)."""
        return self._exempt(self._all_functions, self._function_index[id(c.fn)])

    @cached_property
    def functions(self) -> list[Candidate]:
        functions = self._all_functions
        for i in range(len(functions)):
            self._exempt(functions, i)
        return functions

    @cached_property
    def candidates(self) -> list[Candidate]:
        """Functions with a marker word on one of their lines, exempt storage code excluded.
        Aliases are function-local, so a function without the word cannot hold a site; the walk
        does not enter statements without such a line."""
        lines = self._marker_lines
        functions = self._function_list(lines)
        out = []
        for i, function in enumerate(functions):
            j = bisect_left(lines, function.fn.lineno)
            if j == len(lines) or lines[j] > (function.fn.end_lineno or function.fn.lineno) \
                    or self._exempt(functions, i):
                continue
            out.append(function)
        return out

    def _storage_exempt(self, c: Candidate) -> bool:
        """Exempt as storage code (a method of a storage class, a storage function), itself or
        through an enclosing function: not merely for its name."""
        current: Candidate | None = c
        while current is not None:
            if (current.class_qualname and self._storage(current.class_qualname)) or \
                    (current.class_qualname is None and current.scope_name == current.fn.name
                     and self.layers.storage_function(current.fn) is not None):
                return True
            outer = self._enclosing.get(id(current.fn))
            current = self._all_functions[self._function_index[id(outer)]] if outer is not None else None
        return False

    @cached_property
    def loaders(self) -> list[Candidate]:
        """Functions with a marker word that are exempt only for their name (`exempt-functions`:
        weight loaders, `load_weights`), not as storage code. Their storage work stays exempt; a
        rule asks of them only whether a cast or allocation in a weight's dtype is installed as
        another parameter of that layer (analysis/storage/compute_parameters.py)."""
        lines = self._marker_lines
        functions = self._function_list(lines)
        out = []
        for i, function in enumerate(functions):
            j = bisect_left(lines, function.fn.lineno)
            if j == len(lines) or lines[j] > (function.fn.end_lineno or function.fn.lineno):
                continue
            if self._exempt(functions, i) and not self._storage_exempt(function):
                out.append(function)
        return out

    @cached_property
    def _function_spans(self) -> list[tuple[int, int, str]]:
        # A blanked body (core/regions.py) still spans its real lines: a site found in it through
        # a value flow (the real function read back) belongs to it.
        return sorted((c.fn.lineno, max(c.fn.end_lineno or c.fn.lineno, getattr(c.fn, BLANKED, 0) or 0), c.scope_name)
                      for c in self._all_functions)

    def scope_of(self, node: ast.expr | ast.stmt) -> str:
        """The qualified name of the innermost function holding `node` ("<module>" outside any):
        nested functions start later than the functions holding them, and a decorator line
        before its `def` belongs to the enclosing scope."""
        line, end = node.lineno, getattr(node, "end_lineno", None) or node.lineno
        for first, (region, last) in self._blanked_classes.items():
            if first <= line <= last:  # a class the reduced parse blanked whole: its own functions say
                inner = [c for c in self.blanked_class_functions(region)
                         if c.fn.lineno <= line and end <= (c.fn.end_lineno or c.fn.lineno)]
                return inner[-1].scope_name if inner else "<module>"
        # The last span (in start order) that holds the node is the last one starting at or before
        # its line, or one enclosing that one: walked up the nesting, not a test of every span
        # per node (quadratic in a file's functions).
        spans, parents = self._function_spans, self._span_parents
        index = bisect_right(self._function_starts, line) - 1
        while index >= 0:
            if end <= spans[index][1]:
                return spans[index][2]
            index = parents[index]
        return "<module>"

    @cached_property
    def _blanked_classes(self) -> dict:
        """Class line -> (ClassRegion, last line) of each class the reduced parse blanked whole
        (core/regions.py): its functions are not in the tree."""
        from dtype_lint.core import trees

        return getattr(self.tree, trees.BLANKED_CLASSES, {})

    @cached_property
    def _read_back(self) -> dict[int, list[Candidate]]:
        return {}

    def blanked_class_functions(self, region) -> list[Candidate]:
        """The functions of a class blanked whole, from its own text parsed whole (once), as
        `functions` gives them: its methods, what is nested in them, each one's exemption decided
        as `_exempt` decides it (`_exempt_itself`, or nested in an exempt function). For what
        reads a file's functions to find something in them (the callers of a function:
        analysis/flow/callers.py), not for the rules' sites: such a class holds no line a rule's
        pattern matches."""
        from dtype_lint.core import trees

        got = self._read_back.get(region.class_line)
        if got is None:
            path, text = self.source.path, self.source.text
            cls = trees.parse_class(path, text, region, lambda: trees.parse(path, text), reduce=False)
            module = ast.Module(body=[cls] if cls is not None else [], type_ignores=[])
            got = [Candidate(fn, class_q, scope) for fn, class_q, scope in iter_functions(module, self.source.module)]
            enclosing: list[Candidate] = []
            for c in got:  # a function comes before those nested in it
                while enclosing and not (enclosing[-1].fn.lineno < c.fn.lineno
                                         <= (enclosing[-1].fn.end_lineno or enclosing[-1].fn.lineno)):
                    enclosing.pop()
                c.exempt = self._exempt_itself(c) or bool(enclosing and enclosing[-1].exempt)
                enclosing.append(c)
            self._read_back[region.class_line] = got
        return got

    def _blanked_callers(self, callee: re.Pattern) -> list[Candidate]:
        """The functions of the classes blanked whole whose text `callee` matches."""
        text = self.source.text
        return [c for region, _ in self._blanked_classes.values() if callee.search(text, region.body, region.end)
                for c in self.blanked_class_functions(region)]

    @cached_property
    def _function_starts(self) -> list[int]:
        return [start for start, _stop, _name in self._function_spans]

    @cached_property
    def _span_parents(self) -> list[int]:
        """For each function span, the index of the last earlier span holding it (-1: none)."""
        parents: list[int] = []
        stack: list[int] = []
        for index, (start, stop, _name) in enumerate(self._function_spans):
            while stack and not (self._function_spans[stack[-1]][0] <= start
                                 and stop <= self._function_spans[stack[-1]][1]):
                stack.pop()
            parents.append(stack[-1] if stack else -1)
            stack.append(index)
        return parents

    @cached_property
    def layers(self) -> LayerResolver:
        return LayerResolver(self.project, self.source.module, self.imports, self.source.path,
                             self.config.all_config_params)

    @cached_property
    def flows(self):
        from dtype_lint.analysis.flow.flows import Flows

        return Flows(self.project, self.source.module, self.imports, self.config, self.layers)

    @cached_property
    def fixes(self):
        from dtype_lint.fix.planner import Planner

        return Planner(self.source, self.config, self.project, self.tree)

    @cached_property
    def generic_holders(self):
        from dtype_lint.analysis.flow.callers import GenericHolders

        return GenericHolders(self.functions, (self.source.path, self.source.text), self._blanked_callers)

    @cached_property
    def guards(self):
        from dtype_lint.analysis.guard_engine.file_guards import FileGuards

        return FileGuards(self)

    def family_fixes(self, family):
        """The planner of sites an ecosystem's family decided (its "planner" plug-in), one per file."""
        planners = self.__dict__.setdefault("_family_planners", {})
        if family not in planners:
            planners[family] = planner_of(family)(self.source, self.config, self.project, self.tree)
        return planners[family]

    @cached_property
    def helpers(self):
        from dtype_lint.analysis.helper_functions import HelperFacts

        return HelperFacts(self.tree, self.source.module, self.source.path, self.imports, self.config,
                           self.project.index, self.project.load_file, self.source)


class _NoFix:
    """A planner that plans nothing, saying why; everything else is the wrapped planner's."""

    def __init__(self, planner, reason: str):
        self._planner, self._reason = planner, reason

    def plan(self, site) -> tuple[None, str]:
        return None, self._reason

    def __getattr__(self, name: str):
        return getattr(self._planner, name)


# RuleFacts' lazily built answers (what `release` forgets).
_CACHED = tuple(name for name, value in vars(RuleFacts).items() if isinstance(value, cached_property))


class RuleContext:
    """One rule's view of one file: the facts it declared, and `report`."""

    def __init__(self, rule: Rule, facts: RuleFacts, sink: list[Finding]):
        self.rule = rule
        self._facts = facts
        self._sink = sink
        # (code, span, kind) -> index in the sink of what this rule reported there: a site in a
        # nested `def` is met by the walk of the function holding it too (a `def` statement of a
        # body is entered), and must be reported, listed and fixed once.
        self._reported: dict[tuple[str, Span, str], int] = {}
        self.source = facts.source
        self.config = facts.config
        self._tracing = False  # judging a caller's argument (analysis/flow/callers.py): one step only

    def _declared(self, name: str) -> None:
        if name not in type(self.rule).facts:
            raise RuleContractError(f"{self.rule.code} reads `{name}` but does not declare it in `facts`")

    def _fact(self, name: str):
        self._declared(name)
        return getattr(self._facts, name)

    @property
    def tree(self) -> ast.Module:
        return self._fact("tree")

    @property
    def imports(self) -> dict[str, str]:
        """Local name -> what it imports (`{"torch": "torch", "Fp8Config": "vllm....Fp8Config"}`)."""
        return self._fact("imports")

    @property
    def candidates(self) -> list[Candidate]:
        return self._fact("candidates")

    def candidates_naming(self, words: tuple[str, ...]) -> list[Candidate]:
        """The candidates whose lines may spell one of `words` (RuleFacts.candidates_naming)."""
        self._declared("candidates")
        return self._facts.candidates_naming(words)

    @property
    def functions(self) -> list[Candidate]:
        return self._fact("functions")

    @property
    def every_function(self) -> list[Candidate]:
        """Every function of the file, its exemption decided only when `is_exempt` asks (the
        `functions` fact decides every one's first)."""
        self._declared("functions")
        return self._facts._all_functions

    def is_exempt(self, c: Candidate) -> bool:
        self._declared("functions")
        return self._facts.exempt(c)

    @property
    def layers(self) -> LayerResolver:
        return self._fact("layers")

    @property
    def fixes(self):
        return self._fact("fixes")

    @property
    def flows(self):
        return self._fact("flows")

    def fixes_for(self, evidence):
        """The planner for a site with this verdict's evidence: the ecosystem helper's where an
        ecosystem's family decided the layer, else the configured helper's."""
        planner = self._fact("fixes")
        family = family_of(evidence)
        if family is None and backends_unknown(evidence):
            return _NoFix(self._unknown_family_planner(planner),
                          "the backends that reach this layer are not known, so no helper is proven to run "
                          "on it; route the cast by hand (or set `quantizable`/`preset` for your engine)")
        return self._facts.family_fixes(family) if family is not None else planner

    def _unknown_family_planner(self, planner):
        """The planner whose helper a message names where no family decided the layer and its
        backends cannot be told (no fix is planned: only the words): the configured helper's where
        `helper` is set or the file is the preset's engine or written on its layers; else the helper
        of the ecosystem whose code the file is (a file importing transformers: the HF helper, which
        runs on any module), else the configured helper's."""
        from dtype_lint.ecosystems.presets import writes_on_preset_layers
        from dtype_lint.ecosystems.registry import fallback_family

        facts, modules = self._facts, self._facts.project.index.modules
        if self.config.helper or writes_on_preset_layers(self.config.preset, facts.imports, facts.source.module,
                                                         lambda top: modules.get(top) is not None):
            return planner
        family = fallback_family(self._fact("layers"))
        return facts.family_fixes(family) if family is not None else planner

    def report_flows(self, c: Candidate, call: ast.Call, kind: str, what: str) -> None:
        """Report the arguments of `call` whose weight (dtype) its callee uses to `kind` ("cast",
        "alloc"), when the layer may be quantized."""
        for flow in self.flows.flows(call, c.scope):
            # A weight handed over (not its dtype): its dtype is also reported where it is taken,
            # in this file (analysis/flow/flows.py, `anchors`).
            taken = [use for use in flow.uses if use.kind == kind and use.what == "weight"
                     and flow.use.what == "weight"]
            if flow.use.kind != kind and not taken:
                continue
            verdict = self.layer_verdict(flow.layer, c, site=call)
            if verdict is None:
                continue
            for use in taken:
                self._report_handed_use(flow, use, c, call, verdict, what)
            if flow.use.kind != kind:
                continue
            confidence, evidence = verdict
            handed = f", handed on to `{flow.use.via}`" if flow.use.via else ""
            use = Evidence(f"there: `{flow.use.text}` (parameter `{flow.use.param}`{handed})", flow.use.path,
                           flow.use.line)
            target = "its dtype" if flow.use.what == "weight" else "it"
            # A callee that rewrites a weight (`weight = weight.to(dtype)`) casts no activation.
            verb = "casts a weight to" if kind == "cast" and flow.use.sink == "weight" else what
            self.report(
                flow.arg,
                f"`{ast.unparse(flow.arg)}` is passed to `{flow.callee}`, which {verb} {target}: the storage "
                f"dtype of quantizable layer `{ast.unparse(flow.layer)}` {storage_dtypes(evidence)}",
                confidence=confidence, evidence=(use, *evidence),
                no_fix_reason="the dtype is used in another function; route it through the helper by hand",
            )

    def _report_handed_use(self, flow, use, c: Candidate, call: ast.Call,
                           verdict: tuple[str, tuple[Evidence, ...]], what: str) -> None:
        """Report where the dtype of a weight handed over at `call` (in `c`) is taken, at the
        nearest of the use's anchors in this file: the callee's cast or allocation that reads the
        parameter's `.dtype`, or the argument that passes that dtype on. A use in another file
        stays the evidence of the handing call only."""
        anchor = next((a for a in use.anchors if a.path == self.source.path), None)
        if anchor is None or anchor.node is flow.arg:
            return
        confidence, evidence = verdict
        layer = ast.unparse(flow.layer)
        line = flow.arg.lineno
        onward = f" and on to `{use.via}`" if use.via and not anchor.via else ""
        handed = Evidence(f"`{use.param}` is `{ast.unparse(flow.arg)}`, handed to `{flow.callee}` in "
                          f"`{c.scope_name}`", self.source.path, line)
        source = f"the dtype of `{layer}.weight`, handed to `{flow.callee}` at line {line}{onward}"
        verb = "casts a weight to" if use.kind == "cast" and use.sink == "weight" else what
        if anchor.via:
            passed = ast.unparse(anchor.node)
            passed = f"`{passed}`, {source}," if anchor.of_dtype else f"`{passed}` ({source})"
            message = f"{passed} is passed to `{anchor.via}`, which {verb} {'it' if anchor.of_dtype else 'its dtype'}"
            there: tuple[Evidence, ...] = (Evidence(f"there: `{use.text}`", use.path, use.line),)
        else:
            message, there = f"`{use.text}` {verb} {source}", ()
        self.report(anchor.node,
                    f"{message}: the storage dtype of quantizable layer `{layer}` {storage_dtypes(evidence)}",
                    confidence=confidence, evidence=(handed, *there, *evidence),
                    no_fix_reason="the weight is handed in from another function; take the compute dtype where it "
                                  "is handed over (route it through the helper by hand)")

    @property
    def helpers(self):
        return self._fact("helpers")

    @property
    def guards(self):
        return self._fact("guards")

    def report_loader_installs(self, kind: str) -> None:
        """In functions exempt only for their name (the `loaders` fact: weight loaders), a cast
        (`kind` "cast") or an allocation ("alloc") in `L.weight.dtype` whose result the loader
        installs as another parameter of `L` that the layer computes with (`L.bias =
        nn.Parameter(b.to(L.weight.dtype))`): not storage work (analysis/storage/compute_parameters.py).
        What becomes the weight itself stays exempt."""
        from dtype_lint.analysis.storage.compute_parameters import compute_parameter_install

        self._declared("loaders")
        for loader in self._facts.loaders:
            for node in sorted(loader.walk.of(ast.Call), key=lambda n: (n.lineno, n.col_offset)):
                dtypes = cast_dtype_args(node) if kind == "cast" else \
                    [kw.value for kw in alloc_dtype_keywords(node, self._facts.imports)]
                for dtype in dtypes:
                    weight_dtype = weight_dtype_source(dtype, loader.scope)
                    if weight_dtype is None or weight_dtype.form == FIRST_PARAMETER:
                        continue
                    name = compute_parameter_install(node, weight_dtype.layer, loader.nodes, loader.scope.assigns)
                    verdict = self.layer_verdict(weight_dtype.layer, loader, site=node) if name else None
                    if verdict is None:
                        continue
                    layer = ast.unparse(weight_dtype.layer)
                    via = f" through `{weight_dtype.alias}`" if weight_dtype.alias else ""
                    verb = "casts" if kind == "cast" else "allocates"
                    self.report(node, f"weight loader {verb} `{layer}.{name}` in `{layer}.weight.dtype`{via}, the "
                                      f"storage dtype of a quantizable layer {storage_dtypes(verdict[1])}: the layer "
                                      f"computes with its `{name}`, which takes the compute dtype, not the "
                                      f"weight's storage",
                                confidence=verdict[0], evidence=verdict[1],
                                no_fix_reason=f"`{name}` is a parameter the layer computes with; choose its "
                                              "dtype by hand")
                    break

    def calls(self):
        """(candidate, call node) for every call in every candidate function, in source order (the
        fix planner names the variables of a function's sites in the order they are met)."""
        for candidate in self.candidates:
            for node in sorted(candidate.walk.of(ast.Call), key=lambda n: (n.lineno, n.col_offset)):
                yield candidate, node

    def layer_verdict(self, layer: ast.expr, where: "FunctionScope | Candidate",
                      site: ast.AST | None = None, need: str = "non-compute",
                      form: str = "") -> tuple[str, tuple[Evidence, ...]] | None:
        """(confidence, evidence) when `layer` may hold a repacked weight here, else None.
        Given the candidate function and the `site` node, a check that dominates the site and
        proves the layer unquantized (analysis/guard_engine/guards.py, STORAGE_UNPACKED) also makes it None. `need`:
        the storage that makes the site a finding ("non-compute", or "absent" for a read of `.weight`
        itself), asked of the storage model (analysis/storage/storage_model.py)."""
        cfg = self.config
        patterns = cfg.name_patterns if cfg.name_heuristics else None
        scope = where.scope if isinstance(where, Candidate) else where
        inst = self.layers.resolve(layer, scope)
        text = ast.unparse(layer)
        if form == FIRST_PARAMETER:  # `next(iter(M.parameters())).dtype`: M's first layer, a family's code only
            found = next((got for family in plugins("family")
                          for got in [optional(family, "family", "first_parameter")(self.layers, inst,
                                                                                    layer=layer, scope=scope)]
                          if got is not None), None)
            if found is None:
                return None
            inst, text = found[0], (text + ("" if found[1].startswith("[") else ".") + found[1]) if found[1] else text
        verdict = None
        if form != FIRST_PARAMETER and need != ABSENT:
            # An adapter's base layer (the registry's `adapter` role): the loaded model's layer, quantized.
            for adapter in plugins("adapter"):
                verdict = adapter.adapter_verdict(self.layers, layer, scope, scope.class_qualname)
                if verdict is False:
                    return None
                if verdict is not None:
                    break
        if verdict is None:
            verdict = self.layers.quantizable(inst, text, patterns, need)
        if verdict is None and form != FIRST_PARAMETER and isinstance(where, Candidate):
            verdict = self._from_callers(layer, where, need)
        family = family_of(verdict[1]) if verdict is not None else None
        if form == FIRST_PARAMETER and family is None:
            return None
        if family is not None and not self.rule.dtype_site:
            return None
        if verdict is None or site is None or not isinstance(where, Candidate):
            return verdict
        from dtype_lint.analysis.guard_engine.never_runs import never_runs

        if never_runs(site, where.parents):  # `if TYPE_CHECKING:`: the site never runs
            return None
        if family is not None:  # the family's quantizers' storages, narrowed by its partial guards
            aliases = {k: v[0] for k, v in scope.assigns.items() if len(v) == 1 and v[0] is not None}
            cf = self._facts.project.class_facts(where.class_qualname) if where.class_qualname else None
            return family.narrowed(verdict, site, where.fn, where.parents, layer, aliases, self.source.path,
                                   lambda: self._facts.guards.storage_unpacked(site, where, layer) is not None,
                                   scope.assigns, cf)
        # A check that proves the layer unquantized there (asked for every rule: a guard the
        # rule did not declare still decides whether the layer may be quantized at this site).
        if self._facts.guards.storage_unpacked(site, where, layer) is not None:
            return None
        return verdict

    def held_dtype(self, expr: ast.AST, where: "Candidate", site: ast.AST) \
            -> tuple[ast.expr, Evidence, str, tuple[str, tuple[Evidence, ...]]] | None:
        """`expr` giving one of an object's layers' `.weight.dtype` through a getter
        (`R.context_dtype`, `R.get_dtype()`: `LayerResolver.dtype_getter`; a method with several
        returns: `returned_dtype`) or an attribute the object stored it in (`R.dtype`:
        `LayerResolver.stored_dtype`): (that layer, where it is returned or stored, "returns" or
        "holds", the verdict at `site`), else None. DTL001's casts and DTL002's allocations."""
        got, verb = self.layers.dtype_getter(expr, where.scope), "returns"
        if got is None:  # the value stored on an object instead (`self.dtype = L.weight.dtype`)
            got, verb = self.layers.stored_dtype(expr, where.scope), "holds"
        if got is not None:
            verdict = self.layer_verdict(got[0], where, site=site)
            return (got[0], got[1], verb, verdict) if verdict is not None else None
        returned = self.returned_dtype(expr, where, site)
        return (returned[0], returned[1], "returns", returned[2]) if returned is not None else None

    def returned_dtype(self, expr: ast.AST, where: "Candidate", site: ast.AST) \
            -> tuple[ast.expr, Evidence, tuple[str, tuple[Evidence, ...]]] | None:
        """`self.name()` at `site`, where `name` is an argument-less method named for a dtype, of
        the site's class or a base, in this file, with several returns, one of which returns one
        of its layers' `.weight.dtype` (`get_k_proj_weight_dtype`: `self.k_proj.scales.dtype` when
        the layer has a `qweight`, else `self.k_proj.weight.dtype`): (that layer, where the method
        returns it, the verdict there). The verdict is taken at that `return`, the method's own
        checks before it narrowing the storages (a test for another tensor of the layer maps the
        storages that hold one, not those that repack `.weight` itself), and the site's must leave
        the layer quantizable too. A method with one `return` is
        `LayerResolver.dtype_getter`'s, read at the site."""
        if not (isinstance(expr, ast.Call) and not expr.args and not expr.keywords and where.class_qualname
                and isinstance(expr.func, ast.Attribute) and "dtype" in expr.func.attr
                and isinstance(expr.func.value, ast.Name) and expr.func.value.id == where.scope.self_name):
            return None
        name, project = expr.func.attr, self._facts.project
        for ancestor in project.index.mro(where.class_qualname):
            facts = project.class_facts(ancestor)
            if facts is not None and name in facts.methods:
                break
        else:
            return None
        method = next((c for c in self.candidates if c.class_qualname == ancestor and c.fn.name == name
                       and len(c.fn.args.args) == 1 and not c.fn.args.vararg), None)
        if method is None:
            return None
        returns = [(n, n.value) for n in method.walk.of(ast.Return)
                   if n.value is not None and enclosing_function(method.parents, n) is method.fn]
        for returned, value in returns if len(returns) > 1 else ():
            source = weight_dtype_source(value, method.scope)
            layer = source.layer if source is not None else None
            if not (isinstance(layer, ast.Attribute) and isinstance(layer.value, ast.Name)
                    and layer.value.id == method.scope.self_name):
                continue
            verdict = self.layer_verdict(layer, method, site=returned)
            if verdict is not None and self.layer_verdict(layer, where, site=site) is not None:
                return layer, Evidence(f"`{name}` returns `{ast.unparse(value)}`", self.source.path,
                                       returned.lineno), verdict
        return None

    def callers_verdict(self, function_node: ast.AST, layer: ast.expr, need: str):
        """`explain`'s question, answered as the check answers it: the verdict on `layer`, reached
        through a parameter of the function `function_node` typed only as a module, from what the
        calls of that function in this file pass for it (None where none decides it, or where the
        function is storage code the rules skip)."""
        function = next((c for c in self._facts.functions if c.fn is function_node), None)
        if function is None or function.exempt:
            return None
        return self._from_callers(layer, function, need)

    def _from_callers(self, layer: ast.expr, where: "Candidate", need: str):
        """A parameter typed only as a module (analysis/flow/callers.py): the verdict on what a call of
        its function in this file passes for it, judged at that call (one step)."""
        from dtype_lint.analysis.flow.callers import generically_typed, handed_root, with_root

        # Not for a read of `.weight` itself (DTL003): its callers' paths are guarded by checks the
        # engine reads on the layer it is handed (a format predicate on the config), not at the call.
        root = handed_root(layer)
        if need == ABSENT or root is None or root.id not in where.scope.params \
                or not generically_typed(where.fn, root.id) or self._tracing \
                or (where.class_qualname is not None and root.id == where.scope.self_name):
            return None
        self._tracing = True
        try:
            for arg, caller, call in self._facts.generic_holders.passed(where, root.id):
                if caller.exempt:
                    continue
                # `indexer.weights_proj` with `indexer` handed `self.indexer`: the caller's `self.indexer.weights_proj`
                got = self.layer_verdict(with_root(layer, arg), caller, site=call, need=need)
                if got is not None:
                    step = Evidence(f"`{root.id}` is `{ast.unparse(arg)}` where `{caller.scope_name}` calls "
                                    f"`{where.fn.name}`", self.source.path, call.lineno)
                    return got[0], (step, *got[1])
        finally:
            self._tracing = False
        return None

    def span(self, node: ast.expr | ast.stmt) -> Span:
        src = self.source
        # A parsed node has its end; a node made by hand without one spans its start.
        end_line = node.end_lineno or node.lineno
        end_col = node.end_col_offset if node.end_col_offset is not None else node.col_offset
        return Span(node.lineno, src.char_col(node.lineno, node.col_offset) + 1,
                    end_line, src.char_col(end_line, end_col) + 1)

    def report(self, node: ast.expr | ast.stmt, message: str, *, fix: Fix | None = None, no_fix_reason: str = "",
               confidence: str = "high", evidence: tuple[Evidence, ...] = (), expression: str | None = None,
               code: str | None = None, severity: str | None = None, kind: str = "site",
               scope: str | None = None) -> Finding:
        """Report `node`. `scope`: the qualified name of the function holding the node, derived
        unless given (a definition is reported in its own scope); `kind`: "site" (an expression
        that is wrong here), "call" (a call of a function defined wrong) or "definition" (that
        function itself)."""
        if kind not in FINDING_KINDS:
            raise RuleContractError(f"{self.rule.code} reports kind {kind!r}; one of {sorted(FINDING_KINDS)}")
        if fix is not None and type(self.rule).fix_availability is FixAvailability.NONE:
            raise RuleContractError(f"{self.rule.code} reports a fix but declares fix_availability NONE")
        finding = Finding(
            code=code or self.rule.code,
            message=message,
            path=self.source.path,
            span=self.span(node),
            confidence=confidence,
            evidence=evidence,
            fix=fix,
            no_fix_reason=no_fix_reason,
            scope=self._facts.scope_of(node) if scope is None else scope,
            expression=ast.unparse(node) if expression is None else expression,
            severity=severity or self.rule.severity,
            kind=kind,
        )
        key = (finding.code, finding.span, kind)
        earlier = self._reported.get(key)
        if earlier is not None:
            # The same site met again from another function's walk: keep one finding, the one
            # with a fix where only this one has it (the enclosing walk resolves closures).
            if self._sink[earlier].fix is None and fix is not None:
                self._sink[earlier] = finding
            return self._sink[earlier]
        self._reported[key] = len(self._sink)
        self._sink.append(finding)
        return finding


__all__ = ["Rule", "Valid", "Invalid", "RuleContext", "RuleFacts", "Candidate", "FACTS", "FixAvailability",
           "example_code", "iter_functions", "storage_dtypes"]

