"""Table dispatch per layer type (dtype_lint/analysis/storage/storage_model.py): a config that hands a
helper the layer and a table of method classes by role (`Linear=A if a16 else B, Experts=C`)
reaches each class only where the helper's own tests on the layer type build it, and a helper
whose result the config keeps as a value (a lookup of the layer's entry) is no method it cannot
name; a `match layer:` reads each `case Cls():` as a test of the layer's type. `fixtures/table_dispatch` is the case: a linear gets both linear methods of the table and
the int8 method, an embedding gets none of them.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from cli_runner import dtl
from golden import assert_golden, lines_text

TABLES = Path(__file__).resolve().parents[1] / "fixtures" / "table_dispatch"


@pytest.fixture(scope="module")
def storages():
    from dtype_lint.analysis.storage.storage_model import CodeBackends
    from dtype_lint.run.catalogue_build import project_facts

    here = os.getcwd()
    os.chdir(TABLES)
    try:
        config, project = project_facts(".")
        model = CodeBackends(project, config.all_config_params)
        yield {q.rsplit(".", 1)[-1]: model.storages_for(q)
               for q in ("tablelm.layers.linear.LinearBase", "tablelm.layers.embedding.Embedding")}
    finally:
        os.chdir(here)


def _kinds(found) -> set[tuple]:
    return {(s.backend, s.method, s.kind, s.dtype, s.typed) for s in found}


def test_each_class_of_the_table_counts_under_the_helper_s_tests(storages):
    assert _kinds(storages["LinearBase"]) == {
        ("Fp4Config", "Fp4LinearMethod", "packed", "uint8", True),  # both arms of the conditional
        ("Fp4Config", "Fp4A16LinearMethod", "packed", "uint8", True),
        ("MixedConfig", "Int8LinearMethod", "packed", "int8", True),  # the lookup is a value, not a method
        ("MatchedConfig", "PackedLinearMethod", "absent", "", True),  # its `case LinearBase():` only
    }


def test_a_layer_type_the_table_does_not_serve_gets_none_of_its_classes(storages):
    # the experts' method is the helper's fall-through, after the embedding's own branch; the
    # `match` gives an embedding nothing (`case Embedding(): return None`) and the experts' method
    # only to what no earlier case took
    assert _kinds(storages["Embedding"]) == {("Fp4Config", "PlainMethod", "compute", "params_dtype", True)}


def test_findings_match_expected_txt():
    proc = dtl(TABLES, "check", ".", "--no-cache", "--output-format", "json")
    assert proc.returncode == 1, proc.stderr
    found = json.loads(proc.stdout)["findings"]
    assert_golden(TABLES / "expected.txt", lines_text([f"{f['path']}:{f['line']}:{f['col']} {f['code']}"
                                                       for f in found]))
    (cast,) = found
    assert "Fp4 (fp4.py:29 -> fp4.py:18) registers `weight` as uint8" in cast["message"]
    assert not any("cannot name" in e["message"] for e in cast["evidence"])


def test_a_create_weights_handed_to_an_object_it_builds_is_that_class_s(tmp_path):
    """`Spec().create_weights(layer, ...)`: the class is named, so its own storages stand for the
    method (not every method of the package); a class outside the tree is an unknown storage."""
    from dtype_lint.analysis.storage.storage_model import CodeBackends
    from dtype_lint.run.catalogue_build import project_facts

    files = {
        "eng/__init__.py": "",
        "eng/layer.py": ("from eng.quant import QuantConfig\n\n\nclass Linear:\n"
                         "    def __init__(self, quant_config: QuantConfig | None = None):\n"
                         "        self.quant_method = quant_config.get_quant_method(self, '')\n"),
        "eng/quant.py": (
            "import torch\nfrom outside.kernels import OutsideSpec\n\n\nclass QuantConfig:\n    pass\n\n\n"
            "class Int8Spec:\n    def create_weights(self, layer, n):\n"
            "        layer.register_parameter('weight', torch.nn.Parameter(torch.empty(n, dtype=torch.int8)))\n\n\n"
            "class MoeMethod:\n    def create_weights(self, layer, n):\n"
            "        layer.register_parameter('w13_qweight', torch.nn.Parameter(torch.empty(n, dtype=torch.int32)))\n\n\n"
            "class BuiltHere:\n    def create_weights(self, layer, n):\n        Int8Spec().create_weights(layer, n)\n\n\n"
            "class BuiltOutside:\n    def create_weights(self, layer, n):\n        OutsideSpec().create_weights(layer, n)\n\n\n"
            "class AConfig(QuantConfig):\n    def get_quant_method(self, layer, prefix):\n        return BuiltHere()\n\n\n"
            "class BConfig(QuantConfig):\n    def get_quant_method(self, layer, prefix):\n        return BuiltOutside()\n"),
    }
    for rel, text in files.items():
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / rel).write_text(text, encoding="utf-8")
    here = os.getcwd()
    os.chdir(tmp_path)
    try:
        config, project = project_facts(".")
        got = CodeBackends(project, config.all_config_params).storages_for("eng.layer.Linear")
    finally:
        os.chdir(here)
    assert {(s.backend, s.method, s.kind, s.dtype) for s in got} == {
        ("AConfig", "Int8Spec", "packed", "int8"),  # not MoeMethod's `w13_qweight`
        ("BConfig", "BuiltOutside", "unknown", ""),
    }
