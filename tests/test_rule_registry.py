"""The one rule registry (dtype_lint/core/rule_registry.py): what each rule module declares, read
without importing it, is what the rule class says, and everything that used to keep its own list
of codes (config's opt-in list, reduced parsing, the migration, the triage) derives from it."""

from __future__ import annotations

import re
import sys
from pathlib import Path

import pytest

from dtype_lint.core import rule_registry
from dtype_lint.core.config import Config
from dtype_lint.core.rule_registry import DECLARED, WHOLE_FILE_FACTS, RegistryError, read_rule, registry
from dtype_lint.rules import RULES_BY_CODE
from dtype_lint.run.file_analysis import reducible

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.parametrize("info", registry(), ids=lambda info: info.code)
def test_what_the_registry_reads_is_what_the_class_declares(info):
    rule = RULES_BY_CODE[info.code]
    for name in DECLARED:
        declared = getattr(rule, name)
        declared = declared.value if name == "fix_availability" else declared
        assert getattr(info, name) == declared, f"{info.code}.{name}"
    assert rule.__module__ == f"dtype_lint.rules.{info.module}"


def test_every_rule_module_is_in_the_registry():
    modules = sorted(path.stem for path in (ROOT / "rules").glob("dtl*.py"))
    assert [info.module for info in registry()] == modules
    assert tuple(RULES_BY_CODE) == rule_registry.codes()


@pytest.mark.parametrize("info", registry(), ids=lambda info: info.code)
def test_a_rule_is_on_by_default_exactly_when_it_says_so(info):
    assert Config().enabled(info.code) is info.default_enabled
    assert Config(select=["DTL"]).enabled(info.code) is info.default_enabled
    assert Config(select=[info.code]).enabled(info.code)
    assert Config(select=["ALL"]).enabled(info.code)
    assert not Config(select=["ALL"], ignore=[info.code]).enabled(info.code)


@pytest.mark.parametrize("info", registry(), ids=lambda info: info.code)
def test_a_rule_on_reduced_trees_reads_no_whole_file_fact(info):
    """`regions = "sites"` is a promise the facts must keep: a fact that walks the whole tree
    (the file guards, module globals, helper facts, every function) would read blanked bodies."""
    if info.regions == "sites":
        assert not info.facts & WHOLE_FILE_FACTS, f"{info.code} reads {sorted(info.facts & WHOLE_FILE_FACTS)}"


def test_reduced_parsing_follows_the_enabled_rules_declarations():
    def reduced_when(select: list[str]) -> bool:
        config = Config(select=select)
        return all(info.regions == "sites" for info in registry() if config.enabled(info.code))

    for select in (["DTL"], ["ALL"], *([info.code] for info in registry())):
        assert reducible(Config(select=select)) is reduced_when(select), select
    # The default run parses reduced; selecting every rule does not (some rule reads whole files).
    assert reducible(Config()) and not reducible(Config(select=["ALL"]))


def test_the_migration_turns_on_the_opt_in_rules_that_declare_it(tmp_path: Path):
    from dtype_lint.migrate import migration

    seen: list[list[str]] = []
    original = migration.run

    def spy(config, options):
        seen.append(list(config.select))
        return original(config, options)

    (tmp_path / "pkg").mkdir()
    (tmp_path / "pkg" / "a.py").write_text("x = 1\n")
    migration.run = spy
    try:
        migration.run_migration(Config(root=tmp_path), str(tmp_path / "pkg"))
    finally:
        migration.run = original
    wanted = [info.code for info in registry() if info.opt_in and info.in_migration]
    assert seen == [["DTL", *wanted]] and wanted
    assert all(RULES_BY_CODE[code].fix_availability.value != "none" for code in wanted)


def test_the_triage_splits_the_rules_by_their_declaration():
    sys.path.insert(0, str(ROOT / "scripts"))
    try:
        import triage
    finally:
        sys.path.remove(str(ROOT / "scripts"))
    assert triage.RULES == tuple(code for code, rule in RULES_BY_CODE.items() if rule.dtype_site)
    assert set(triage.RULES) | set(triage.RULE_CODES) == set(RULES_BY_CODE)
    assert all(code in triage.RULES_SUMMARY_HEADER for code in triage.RULE_CODES)


def test_config_holds_no_list_of_rule_codes():
    text = (ROOT / "dtype_lint" / "core/config.py").read_text(encoding="utf-8")
    assert not re.findall(r"[\"']DTL\d{3}[\"']", text)
    assert "OPT_IN_RULES" not in text


def test_a_declaration_the_registry_cannot_read_is_a_clear_error(tmp_path: Path):
    module = tmp_path / "dtl042_dynamic.py"
    module.write_text("class Dynamic(Rule):\n    code = 'DTL042'\n    name = 'dynamic'\n    summary = 's'\n"
                      "    default_enabled = compute()\n")
    with pytest.raises(RegistryError, match="`default_enabled` must be a literal"):
        read_rule(module)
    module.write_text("class Misnamed(Rule):\n    code = 'DTL043'\n    name = 'misnamed'\n    summary = 's'\n")
    with pytest.raises(RegistryError, match="must start with dtl043_"):
        read_rule(module)
    module.write_text("class Where(Rule):\n    code = 'DTL042'\n    name = 'where'\n    summary = 's'\n"
                      "    regions = 'everywhere'\n")
    with pytest.raises(RegistryError, match="`regions` is one of"):
        read_rule(module)


def test_an_undeclared_attribute_takes_the_base_rules_default(tmp_path: Path):
    module = tmp_path / "dtl042_minimal.py"
    module.write_text("class Minimal(Rule):\n    code = 'DTL042'\n    name = 'minimal'\n    summary = 's'\n\n"
                      "    VALID = []\n")
    info = read_rule(module)
    assert (info.default_enabled, info.regions, info.fix_availability, info.facts) == (
        True, "whole-file", "none", frozenset())


def test_the_rules_tables_are_generated_from_the_registry():
    sys.path.insert(0, str(ROOT / "scripts"))
    try:
        import readme_rules
    finally:
        sys.path.remove(str(ROOT / "scripts"))
    assert readme_rules.write_tables(ROOT, check=True) == [], "run python scripts/readme_rules.py"
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    for info in registry():
        assert readme_rules.readme_row(info) in readme
        assert info.opt_in == readme_rules.readme_row(info).split(" | ")[2].startswith("(opt-in")


@pytest.mark.parametrize("info", registry(), ids=lambda info: info.code)
def test_a_rule_module_stays_readable_in_one_sitting(info):
    """At most 300 lines with its docs and examples: the analysis a rule needs lives in modules named
    for it (dtype_lint/analysis/, dtype_lint/fix/), its longer test programs in tests/rules/."""
    lines = (ROOT / "rules" / f"{info.module}.py").read_text(encoding="utf-8").count("\n")
    assert lines <= 300, f"{info.module}.py has {lines} lines"
