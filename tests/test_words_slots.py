"""Words and optional questions that belong to an ecosystem (#35), asked through the registry.

- A rule's `summary` may hold a `{{name}}` slot as its page does: every place that shows a summary
  (`dtype-lint rule --all`, the README table the rule registry renders, the reports' rule metadata)
  fills it from the ecosystems' `rule_words` passages, so DTL003's summary names no backend itself.
- The family role's optional questions (`layer_kind`, `sequential_item`, `first_parameter`,
  `first_parameter_holder`, `why_not`) have a default the registry supplies: a family with nothing
  to say about them writes nothing, and the stages behave as if it had answered "nothing".
"""

from __future__ import annotations

import re
import sys

import pytest
from test_ecosystems import FAKE_FAMILY, FAKE_PLANNER
from test_ecosystems import SITE as THIRD_ECOSYSTEM_SITE

from dtype_lint.api import check_source
from dtype_lint.cli import main
from dtype_lint.core import rule_registry
from dtype_lint.ecosystems import registry
from dtype_lint.reporters.rule_metadata import rule_infos
from dtype_lint.rules import RULES_BY_CODE

# A word no ecosystem uses: where it shows up, the slot was filled from the passages.
MARKER = "W9-KERNEL-WORD"


@pytest.fixture
def marked_passages(monkeypatch) -> None:
    """The ecosystems' passages with DTL003's summary words replaced by MARKER."""
    real = registry.passages()
    monkeypatch.setattr(registry, "passages", lambda: {**real, "no_weight_short": MARKER})


def _dtl003_listing_line(capsys) -> str:
    assert main(["rule", "--all"]) == 0
    return next(line for line in capsys.readouterr().out.splitlines() if line.startswith("DTL003 "))


def test_the_dtl003_summary_takes_its_backends_from_a_passage(capsys, marked_passages):
    line = _dtl003_listing_line(capsys)
    assert line.endswith(f"fallback ({MARKER} have none)"), line
    assert "{{" not in line


def test_the_dtl003_summary_shows_the_ecosystems_words_unchanged(capsys):
    """With the real passages the listing says what it always said (byte-identical output)."""
    line = _dtl003_listing_line(capsys)
    assert line == ("DTL003  unguarded-weight-access      `.weight` read on a quantizable layer with no "
                    "`hasattr`/`getattr` fallback (AWQ/GPTQ have none)")


def test_the_readme_row_and_the_reports_fill_the_summary_slot(marked_passages):
    info = next(info for info in rule_registry.registry() if info.code == "DTL003")
    assert "{{no_weight_short}}" in info.summary  # the declaration stays as written (the class's)
    assert info.what_column() == f"(opt-in) {info.shown_summary()}"
    assert f"({MARKER} have none)" in info.what_column()
    assert f"({MARKER} have none)" in rule_infos()["DTL003"].summary  # SARIF's shortDescription


def test_a_summary_slot_no_ecosystem_fills_is_an_error(monkeypatch):
    monkeypatch.setattr(registry, "passages", lambda: {})
    info = next(info for info in rule_registry.registry() if info.code == "DTL003")
    with pytest.raises(KeyError, match="no_weight_short"):
        info.what_column()


def test_dtl005_prefilters_on_every_model_dtype_attribute():
    """The model dtype attribute (vLLM's `params_dtype`) comes from the layer_attributes role."""
    patterns = RULES_BY_CODE["DTL005"].patterns
    for name in registry.model_dtype_attributes():
        assert rf"\.{name}\b" in patterns


# ---- the family role's optional questions -----------------------------------------------------

OPTIONAL = ("layer_kind", "sequential_item", "first_parameter", "first_parameter_holder", "why_not", "class_named",
            "speaks_for_file", "helper_words", "outside_attribute")
# test_ecosystems' third family (W4Linear's int32 nibbles) with no optional question at all: its
# `layer_kind` goes too.
FAMILY_ANSWERS = re.sub(r"\ndef layer_kind\(mro\):\n.*?\n\n\n", "\n", FAKE_FAMILY, flags=re.S)
# The same family answering each optional question with "nothing", as the stubs did.
STUBS = '''

def layer_kind(mro):
    return None


def sequential_item(*args):
    return None


def first_parameter(*args, **kwargs):
    return None


def first_parameter_holder(*args):
    return ""


def why_not(*args):
    return None


def class_named(name):
    return None


def speaks_for_file(resolver):
    return False


def helper_words():
    return ""


def outside_attribute(*args):
    return None
'''

# test_ecosystems' site, grown to reach each optional question: a class's layer kind, an
# `nn.Sequential` item, a first parameter.
SITE = THIRD_ECOSYSTEM_SITE.replace(
    "        self.proj = W4Linear()\n",
    "        self.proj = W4Linear()\n        self.mlp = torch.nn.Sequential(W4Linear(), torch.nn.ReLU())\n").replace(
    "        return x.to(self.proj.weight.dtype)\n",
    "        x = x.to(self.proj.weight.dtype)\n        x = x.to(self.mlp[0].weight.dtype)\n"
    "        return x.to(next(iter(self.mlp.parameters())).dtype)\n")


def _findings_with_family(tmp_path, monkeypatch, package: str, text: str) -> list[tuple]:
    folder = tmp_path / package
    folder.mkdir(parents=True)
    (folder / "__init__.py").write_text("")
    (folder / "family.py").write_text(text)
    (folder / "planner.py").write_text(FAKE_PLANNER)
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setattr(registry, "ECOSYSTEMS", {**registry.ECOSYSTEMS, package: {
        "family": f"{package}.family", "planner": f"{package}.planner"}})
    registry.plugins.cache_clear()
    try:
        found = check_source(SITE, filename="block.py", settings={"select": ["ALL"]})
        return [(f.code, f.span.line, f.message) for f in found]
    finally:
        registry.plugins.cache_clear()
        for name in (package, f"{package}.family", f"{package}.planner"):
            sys.modules.pop(name, None)


def test_a_family_without_the_optional_questions_works_through_the_registry_default(tmp_path, monkeypatch):
    assert SITE.count("W4Linear()") == 2 and "parameters()" in SITE
    assert "layer_kind" in FAKE_FAMILY and not any(f"def {question}(" in FAMILY_ANSWERS for question in OPTIONAL)
    with monkeypatch.context() as patch:
        answering = _findings_with_family(tmp_path / "stubs", patch, "w4stubs", FAMILY_ANSWERS + STUBS)
    silent = _findings_with_family(tmp_path / "silent", monkeypatch, "w4silent", FAMILY_ANSWERS)
    assert silent == answering
    # The family's layer, directly and as an `nn.Sequential` item; the first parameter no family
    # answers for is left alone.
    assert sorted(line for code, line, message in silent
                  if code == "DTL001" and "int32 under the W4 kernel" in message) == [16, 17], silent


def test_the_registry_default_answers_nothing_for_each_optional_question():
    megatron, quantizers = registry.plugin("megatron", "family"), registry.plugin("quantizers", "family")
    for question in ("sequential_item", "first_parameter", "first_parameter_holder"):
        assert not hasattr(megatron, question) and not hasattr(quantizers, question), question
    assert registry.optional(megatron, "family", "layer_kind")(["torch.nn.Linear"]) is None
    assert registry.optional(megatron, "family", "first_parameter")(None, None) is None
    assert registry.optional(quantizers, "family", "first_parameter_holder")(None, None, None, "m") == ""
    assert registry.optional(quantizers, "family", "sequential_item")(None, None, None, 0, None) is None
    assert registry.optional(megatron, "family", "helper_words")() == ""
    # A family that answers is asked its own question: HF's linear is a linear.
    hf = registry.plugin("hf", "family")
    assert registry.optional(hf, "family", "layer_kind") is hf.layer_kind
    assert set(registry.ROLE_DEFAULTS["family"]) == set(OPTIONAL)
    assert not set(OPTIONAL) & set(registry.ROLE_PROTOCOLS["family"])
