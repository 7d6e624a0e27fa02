"""Ecosystems as plug-ins (#35): the registry hands each stage the families of every ecosystem
through one protocol per role, a new ecosystem plugs in with a registry line, and the words that
name an ecosystem's backends, quantizers and helper stay inside `dtype_lint/ecosystems/`."""

from __future__ import annotations

import re
import sys
import textwrap
from functools import cache
from pathlib import Path

import pytest

from dtype_lint.api import check_source
from dtype_lint.core.findings import Edit, Evidence, Finding, Fix, Span
from dtype_lint.ecosystems import registry

ROOT = Path(__file__).resolve().parent.parent

# Words that name one ecosystem's backends, kernels, quantizers, helper or parameters. A word
# inside an identifier counts (`awq_marlin_repack`, `ModelOptLinearMethod`, `bnb_4bit`); the format
# notations every backend shares (fp8, int8, W8A16, W4A4) and the ecosystems' own names (vLLM, the
# packages a convention or a preset is keyed by) do not.
ECOSYSTEM_WORDS = re.compile(
    r"marlin|machete|cutlass|fbgemm|exllama|nvfp4|mxfp4|\bawq|gptq|bitsandbytes|\bbnb|gguf|hqq|\bquanto"
    r"|torchao|modelopt|\bquark\b|compressed[-_ ]tensors"
    r"|params_dtype|get_module_input_dtype|get_kv_b_proj_input_dtype|hf_utils",
    re.IGNORECASE)


def _source_files() -> list[Path]:
    return sorted([*(ROOT / "dtype_lint").rglob("*.py"), *(ROOT / "rules").glob("*.py")])


@cache
def _files_naming_words() -> frozenset[str]:
    """Every source file (inside ecosystems/ too) that names an ecosystem's words: searched once
    for the tests below (the search is most of their cost)."""
    return frozenset(path.relative_to(ROOT).as_posix() for path in _source_files()
                     if ECOSYSTEM_WORDS.search(path.read_text(encoding="utf-8")))


def _naming_files() -> frozenset[str]:
    return frozenset(path for path in _files_naming_words() if not path.startswith("dtype_lint/ecosystems/"))


def test_no_file_outside_ecosystems_names_an_ecosystem():
    """The rules' pages, summaries, messages and examples too: where they explain the bug class with
    its best-known backends they hold `{{name}}` slots or read the ecosystems' passages."""
    naming = sorted(_naming_files())
    assert naming == [], ("these files name an ecosystem's backends, quantizers or helper; move that "
                          f"knowledge into dtype_lint/ecosystems/ (a rule's words: a `rule_words` passage): {naming}")


def test_the_word_search_sees_the_words():
    assert ECOSYSTEM_WORDS.search("x = layer.params_dtype")
    assert ECOSYSTEM_WORDS.search("under Marlin")
    assert not ECOSYSTEM_WORDS.search("layer.weight.dtype")
    for word in ("ModelOptLinearMethod", "QuantoConfig", "torchao", "HQQLinear", "ExLlamaV2", "compressed-tensors",
                 "compressed_tensors", "machete_prepack_b", "CUTLASS", "fbgemm_fp8", "MXFP4", "GGUFLinear",
                 "bnb_4bit", "AWQMarlin", "Quark", "_get_kv_b_proj_input_dtype"):
        assert ECOSYSTEM_WORDS.search(word), word
    for innocent in ("quantize", "quantization", "quantized_weight", "weight_packed", "W8A16", "float8_e4m3fn",
                     "vllm.platforms", "transformers", "quarks", "awkward"):
        assert not ECOSYSTEM_WORDS.search(innocent), innocent
    assert "dtype_lint/ecosystems/hf/family.py" in _files_naming_words()


def test_the_hf_modules_moved_no_stage_imports_them_by_name():
    """Stages reach an ecosystem only through the registry: no module outside ecosystems/ imports
    one, but for the shrinking list below."""
    importing = [path.relative_to(ROOT).as_posix() for path in _source_files()
                 if not path.relative_to(ROOT).as_posix().startswith("dtype_lint/ecosystems/")
                 and re.search(r"dtype_lint\.ecosystems\.(hf|vllm)\b", path.read_text(encoding="utf-8"))]
    assert sorted(importing) == sorted(IMPORTING_AN_ECOSYSTEM_BY_NAME), importing


# Shrinking too: the stages that still import an ecosystem module by name (none: the migration asks
# for the HF series and regression tests by role).
IMPORTING_AN_ECOSYSTEM_BY_NAME: list[str] = []


@pytest.mark.parametrize("role", sorted(registry.ROLE_PROTOCOLS))
def test_every_plugged_module_provides_its_roles_protocol(role):
    modules = registry.plugins(role)
    assert modules, f"no ecosystem fills the {role} role"
    for module in modules:
        missing = [name for name in registry.ROLE_PROTOCOLS[role] if not hasattr(module, name)]
        assert missing == [], f"{module.__name__} lacks {missing}"


def test_the_registry_names_each_family_by_what_decided_the_verdict():
    family = registry.plugins("family")[0]
    backend = family.BackendEvidence("bitsandbytes 4-bit leaves uint8", "m.py", 3, (("bnb4", "uint8"),))
    assert registry.family_of((Evidence("`Linear(...)` call", "m.py", 2), backend)) is family
    assert registry.family_of((Evidence("`Linear(...)` call", "m.py", 2),)) is None
    assert registry.family_of(()) is None
    assert registry.planner_of(family) is registry.plugin("hf", "planner").PLANNER


def _finding_importing(func: str) -> Finding:
    fix = Fix("route through the helper", True, (Edit(0, 1, "x"),), imports=(("pkg.utils", func),))
    return Finding("DTL001", "cast", "m.py", Span(1, 0, 1, 1), fix=fix)


def test_the_helper_a_fix_routes_through_is_found_by_role():
    helper = registry.helper_of(_finding_importing("get_module_input_dtype"))
    assert helper is registry.plugin("hf", "helper")
    assert registry.helper_of(_finding_importing("get_layer_input_dtype")) is None


# ---- a third ecosystem: one folder (here, two modules) plus a registry line --------------------------

FAKE_FAMILY = '''
from dtype_lint.core.findings import Evidence

DTYPE_SITE_RULES = frozenset({"DTL001"})


class PackedEvidence(Evidence):
    pass


def claims(evidence):
    return any(isinstance(e, PackedEvidence) for e in evidence or ())


def layer_kind(mro):
    return "linear" if any(name.endswith("W4Linear") for name in mro) else None


def verdict(resolver, inst, expr_text):
    if not inst.qualname or not inst.qualname.endswith("W4Linear"):
        return None
    return "high", (PackedEvidence("W4 packs `weight` into int32 nibbles", resolver.path, 1),)


def backend_words(evidence, default):
    return "int32 under the W4 kernel"


def narrowed(verdict, *args):
    return verdict
'''

FAKE_PLANNER = "from dtype_lint.fix.planner import Planner as PLANNER  # noqa: F401\n"

SITE = textwrap.dedent("""\
    import torch


    class W4Linear(torch.nn.Module):
        def __init__(self):
            super().__init__()


    class Block(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.proj = W4Linear()

        def forward(self, x):
            return x.to(self.proj.weight.dtype)
    """)


@pytest.fixture
def third_ecosystem(tmp_path, monkeypatch):
    package = tmp_path / "w4eco"
    package.mkdir()
    (package / "__init__.py").write_text("")
    (package / "family.py").write_text(FAKE_FAMILY)
    (package / "planner.py").write_text(FAKE_PLANNER)
    monkeypatch.syspath_prepend(str(tmp_path))
    ecosystems = {**registry.ECOSYSTEMS, "w4": {"family": "w4eco.family", "planner": "w4eco.planner"}}
    monkeypatch.setattr(registry, "ECOSYSTEMS", ecosystems)
    registry.plugins.cache_clear()
    yield
    registry.plugins.cache_clear()
    for name in ("w4eco", "w4eco.family", "w4eco.planner"):
        sys.modules.pop(name, None)


def test_without_the_plug_in_the_layer_is_not_known():
    assert [f for f in check_source(SITE, filename="block.py") if f.code == "DTL001"] == []


def test_a_third_ecosystem_plugs_in_with_a_registry_line(third_ecosystem):
    found = [f for f in check_source(SITE, filename="block.py") if f.code == "DTL001"]
    assert len(found) == 1, found
    assert "int32 under the W4 kernel" in found[0].message
    assert found[0].span.line == 15
