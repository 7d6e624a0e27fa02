"""Ecosystem knowledge as data (#35): the storage formats, a layer's model dtype attribute, the
helper templates and the run-time guard's quantizer names come from each ecosystem's folder
through the registry, so a new ecosystem's rows reach every stage with a registry line.

Each plug-in is tried in a fresh interpreter: the tables are built when their stage is imported."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

from dtype_lint.dtypes import storage_formats
from dtype_lint.ecosystems.registry import plugins

PLUG_IN = """
import sys
sys.path.insert(0, {folder!r})
from dtype_lint.ecosystems import registry
registry.ECOSYSTEMS = {{**registry.ECOSYSTEMS, "w6": {roles!r}}}
"""


def _run_with(tmp_path: Path, modules: dict[str, str], roles: dict[str, str], code: str) -> str:
    package = tmp_path / "w6eco"
    package.mkdir()
    (package / "__init__.py").write_text("")
    for name, text in modules.items():
        (package / f"{name}.py").write_text(textwrap.dedent(text))
    script = PLUG_IN.format(folder=str(tmp_path), roles=roles) + textwrap.dedent(code)
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    return proc.stdout


def test_the_formats_table_is_the_ecosystems_rows_in_the_evaluators_order():
    rows = [fmt.name for module in plugins("formats") for fmt in module.FORMATS]
    assert sorted(rows) == sorted(fmt.name for fmt in storage_formats.FORMATS)
    assert len(rows) == len(set(rows))
    containers = [fmt.container for fmt in storage_formats.FORMATS]
    order = [*storage_formats.DTYPE_BITS, None]
    assert containers == sorted(containers, key=order.index)


def test_a_new_ecosystems_format_reaches_the_tables(tmp_path):
    formats = """
        from dtype_lint.dtypes.storage_format import KEEP, MODEL_DTYPE, StorageFormat
        FORMATS = (StorageFormat("mxfp6", "MXFP6", "uint8", 6, True, KEEP, MODEL_DTYPE, ("pack_mxfp6",)),)
        """
    out = _run_with(tmp_path, {"formats": formats}, {"formats": "w6eco.formats"}, """
        from dtype_lint.dtypes import storage_formats
        print(storage_formats.format_of_kernel("pack_mxfp6").label, storage_formats.format_named("mxfp6").kind)
        print(storage_formats.storage_words(("mxfp6",)))
        """)
    assert out.splitlines() == ["MXFP6 packed", "uint8 under MXFP6"]


def test_a_new_ecosystems_model_dtype_attribute_makes_a_helper(tmp_path):
    attributes = 'MODEL_DTYPE_ATTRIBUTES = ("compute_dtype",)\n'
    out = _run_with(tmp_path, {"layer_attributes": attributes}, {"layer_attributes": "w6eco.layer_attributes"}, """
        import ast
        from dtype_lint.core.text_facts import could_be_helper_shaped, dtype_functions
        from dtype_lint.dtypes.evaluator import helper_shape
        text = "def input_dtype(layer):\\n    return layer.compute_dtype\\n"
        print(could_be_helper_shaped(text), list(dtype_functions(text)), helper_shape(ast.parse(text).body[0]) is not None)
        """)
    assert out.split() == ["True", "['input_dtype']", "True"]


def test_a_new_ecosystems_quantizer_is_named_by_the_run_time_guard(tmp_path):
    runtime = """
        NO_WEIGHT_STORAGE_ATTRIBUTES = ("w6_packed",)
        QUANTIZER_BY_CLASS_NAME = {"W6Linear": "MXFP6"}
        QUANTIZER_BY_CLASS_PREFIX = {}
        QUANTIZER_BY_WEIGHT_CLASS_NAME = {}
        QUANTIZER_BY_PACKAGE = {}
        QUANTIZER_BY_CLASS_NAME_PART = {}
        STORAGE_CODE_FRAGMENTS = ("/w6kernels/",)
        """
    out = _run_with(tmp_path, {"runtime": runtime}, {"runtime": "w6eco.runtime"}, """
        from dtype_lint.guard import frames, storage
        class W6Linear:
            pass
        layer = W6Linear()
        layer.w6_packed = 0
        print(storage.quantizer_name(layer), storage.missing_weight_storage(layer).storage)
        print("/w6kernels/" in frames.STORAGE_CODE_FRAGMENTS, storage.quantizer_name(type("QuantLinear4", (), {})()))
        """)
    assert out.splitlines() == ["MXFP6 no `.weight`: `w6_packed`", "True GPTQ"]
