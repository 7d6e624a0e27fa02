"""The one rule registry: what every rule module declares, read without importing a rule.

A rule module (`rules/dtlNNN_<name>.py`) declares its metadata as plain class attributes of its
`Rule` subclass, before its examples and methods: `code`, `name`, `summary`, `default_enabled`,
`facts`, `fix_availability`, `fix_note`, `severity`, `regions`, `dtype_site` and `in_migration` (their
meaning: `dtype_lint/rule.py`). Everything that needs to know about rules asks here rather
than keeping its own list of codes: which rules are on by default (core/config.py), whether files
may be parsed reduced (run/file_analysis.py), which opt-in rules a migration turns on
(migrate/migration.py), which rules the triage judges in which document (scripts/triage.py),
the README's and docs/rules/'s tables (scripts/readme_rules.py, tests/test_docs.py).

Why read the text rather than import the class: deciding what a run enables must not import the
rules it does not enable (a pre-commit run imports only the default rules, and nothing of what
only the opt-in rules use). So the declarations are read from the module's source, statically:
a value must be a literal, a `frozenset({...})` of literals or a `FixAvailability.X` member.
`tests/test_rule_contract.py` checks that what is read here equals the imported class's
attributes, so the two cannot drift.
"""

from __future__ import annotations

import ast
import importlib.util
import re
import textwrap
from functools import lru_cache
from pathlib import Path

from dtype_lint.core.records import record

# `dtl001_weight_dtype_cast`: the code is the module name's first six characters.
RULE_MODULE_NAME = re.compile(r"dtl\d{3}_\w+")
# The metadata a rule module declares (each has a default on `Rule` in dtype_lint/rule.py).
DECLARED = ("code", "name", "summary", "default_enabled", "facts", "fix_availability", "fix_note", "severity",
            "regions", "dtype_site", "in_migration")
# What `regions` may say: "sites" (a run reads the functions holding a site line, the class facts,
# module-level statements, and what `Defs` hands out: core/regions.py may blank the rest),
# "on-demand" (the rule first reads the reduced tree a "sites" rule reads and answers, per file,
# `needs_whole_tree(ctx)`: only where it says yes is that file parsed whole, every rule then
# running on that tree) or
# "whole-file" (the rule walks the whole tree: any file it may report in is parsed whole).
REGIONS = ("sites", "on-demand", "whole-file")
# Facts that walk the whole tree of a file: a rule declaring one cannot run on a reduced tree.
WHOLE_FILE_FACTS = frozenset({"tree", "functions", "helpers", "guards"})

_RULE_CLASS = re.compile(r"^class (\w+)\((?:\w+\.)*Rule\):[^\n]*\n", re.M)
_BASE_CLASS = re.compile(r"^class Rule\b[^\n]*:[^\n]*\n", re.M)
# The declarations end where the examples, a method or the next top-level statement begin.
_DECLARATIONS_END = re.compile(r"^    (?:VALID\b|INVALID\b|def |@)|^\S", re.M)


class RegistryError(Exception):
    """A rule module whose declarations cannot be read statically (a bug for the rule's author)."""


@record(frozen=True)
class RuleInfo:
    """One rule's declarations, as its module states them."""

    code: str
    module: str  # the module's name inside `dtype_lint.rules`
    name: str
    summary: str
    default_enabled: bool
    facts: frozenset[str]
    fix_availability: str  # a FixAvailability value: "always", "sometimes", "none"
    fix_note: str
    severity: str
    regions: str
    dtype_site: bool
    in_migration: bool

    @property
    def opt_in(self) -> bool:
        return not self.default_enabled

    def fix_column(self) -> str:
        """The README rules table's fix cell (as `Rule.fix_column`): the availability, then the note."""
        return f"{self.fix_availability}: {self.fix_note}" if self.fix_note else self.fix_availability

    def shown_summary(self) -> str:
        """The summary as it is shown: a summary that names an ecosystem's backends holds `{{name}}`
        slots (as a rule's page does), filled from the ecosystems' passages. `summary` keeps the
        declaration as written (what the registry reads equals the class's attribute)."""
        from dtype_lint.ecosystems.registry import filled  # imports passages only for a summary with a slot

        return filled(self.summary)

    def what_column(self) -> str:
        """The README rules table's description: the summary, after what makes the rule special."""
        marks = [word for word, applies in (("opt-in", self.opt_in), ("warning", self.severity == "warning"))
                 if applies]
        return (f"({', '.join(marks)}) " if marks else "") + self.shown_summary()


def _literal(node: ast.expr) -> object:
    """The value of a declaration: a literal, `frozenset({...})`, or `FixAvailability.X` ("x")."""
    if isinstance(node, ast.Constant):
        return node.value  # most declarations, read without literal_eval's walk
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "frozenset":
        return frozenset(ast.literal_eval(node.args[0])) if node.args else frozenset()
    if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id == "FixAvailability":
        return node.attr.lower()
    return ast.literal_eval(node)


def _declarations(text: str, class_pattern: re.Pattern, where: str) -> dict[str, object]:
    """The DECLARED attributes assigned at the top of the class `class_pattern` finds in `text`."""
    found = class_pattern.search(text)
    if found is None:
        raise RegistryError(f"{where}: no `class ...(Rule):` found")
    end = _DECLARATIONS_END.search(text, found.end())
    body = textwrap.dedent(text[found.end(): end.start() if end else len(text)])
    declared: dict[str, object] = {}
    for statement in ast.parse(body).body:
        target = (statement.targets[0] if isinstance(statement, ast.Assign) and len(statement.targets) == 1
                  else statement.target if isinstance(statement, ast.AnnAssign) else None)
        value = statement.value if isinstance(statement, (ast.Assign, ast.AnnAssign)) else None
        if not isinstance(target, ast.Name) or target.id not in DECLARED or value is None:
            continue
        try:
            declared[target.id] = _literal(value)
        except ValueError:
            raise RegistryError(f"{where}: `{target.id}` must be a literal (the registry reads it without "
                                "importing the rule)") from None
    return declared


def _module_path(module: str) -> Path:
    spec = importlib.util.find_spec(module)  # imports the parent package only, never `module` itself
    if spec is None or spec.origin is None:
        raise RegistryError(f"cannot find {module}")
    return Path(spec.origin)


@lru_cache(maxsize=1)
def _defaults() -> dict[str, object]:
    """`Rule`'s own values for the declarations a rule may leave out (dtype_lint/rule.py)."""
    path = _module_path("dtype_lint.rule")
    return _declarations(path.read_text(encoding="utf-8"), _BASE_CLASS, str(path))


def rules_folder() -> Path:
    """Where the rule modules are: `rules/` in a checkout, `dtype_lint/rules/` when installed."""
    return _module_path("dtype_lint.rules").parent


def read_rule(path: Path) -> RuleInfo:
    """The declarations of the rule module at `path`, over `Rule`'s defaults."""
    declared = {**_defaults(), **_declarations(path.read_text(encoding="utf-8"), _RULE_CLASS, str(path))}
    missing = [name for name in ("code", "name", "summary") if name not in declared]
    if missing:
        raise RegistryError(f"{path}: the rule class must declare {', '.join(missing)}")
    if declared["code"] != path.stem[:6].upper():
        raise RegistryError(f"{path}: declares {declared['code']}: the module name must start with "
                            f"{str(declared['code']).lower()}_")
    if declared["regions"] not in REGIONS:
        raise RegistryError(f"{path}: `regions` is one of {', '.join(REGIONS)}, got {declared['regions']!r}")
    return RuleInfo(module=path.stem, **{name: declared[name] for name in DECLARED})  # type: ignore[arg-type]


def read_folder(folder: Path) -> tuple[RuleInfo, ...]:
    """The declarations of every rule module in `folder`, by code (a checkout's `rules/`)."""
    paths = sorted(path for path in folder.glob("dtl*.py") if RULE_MODULE_NAME.fullmatch(path.stem))
    return tuple(read_rule(path) for path in paths)


@lru_cache(maxsize=1)
def registry() -> tuple[RuleInfo, ...]:
    """Every rule's declarations, by code; no rule imported."""
    return read_folder(rules_folder())


def codes() -> tuple[str, ...]:
    """Every rule's code, in order."""
    return tuple(info.code for info in registry())


# The sets below are asked per file and per finding (Config.enabled); a process's rules do not change.
@lru_cache(maxsize=1)
def opt_in_codes() -> frozenset[str]:
    """The rules off unless `select` names their exact code (or ALL)."""
    return frozenset(info.code for info in registry() if info.opt_in)


@lru_cache(maxsize=1)
def reduced_parsing_codes() -> frozenset[str]:
    """The rules that read a file only in the regions core/regions.py keeps."""
    return frozenset(info.code for info in registry() if info.regions == "sites")


@lru_cache(maxsize=1)
def on_demand_codes() -> frozenset[str]:
    """The rules that read a reduced tree first and a whole one only where they ask for it."""
    return frozenset(info.code for info in registry() if info.regions == "on-demand")


@lru_cache(maxsize=1)
def migration_codes() -> tuple[str, ...]:
    """The opt-in rules a migration turns on (their fixes are part of routing every site)."""
    return tuple(info.code for info in registry() if info.opt_in and info.in_migration)
