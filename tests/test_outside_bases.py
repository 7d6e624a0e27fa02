"""A quant method class whose `create_weights` or `process_weights_after_loading` runs in a class
outside the tree (dtype_lint/analysis/storage/storage_model.py `_first_definer`).

`fixtures/outside_bases` is our own plugin in the shape of an out-of-tree device plugin whose
methods subclass the engine's (vLLM's, not in the tree): `super().create_weights` into the
engine's Fp8 method, a method with no `create_weights` of its own (the engine's unquantized one
runs, not the plugin's int8 base behind it), an engine method whose after-loading the plugin
overrides (it deletes `weight`; another deletes it and sets a new one), an in-tree `super()` chain, and a vendor base no catalogue
records. The package also holds an experts method registering `w2_qweight`: no linear's storage.
"""

from __future__ import annotations

import json
import os
import textwrap
from pathlib import Path

import pytest
from cli_runner import dtl
from golden import assert_golden, lines_text

from dtype_lint.core.engine_source import shipped_releases

PLUGIN = Path(__file__).resolve().parents[1] / "fixtures" / "outside_bases"
LINEAR = "vllm.model_executor.layers.linear.LinearBase"
# The fixture pins no vLLM: the newest shipped catalogue describes vLLM's classes (engine_source.py).
NEWEST = f"in vllm {shipped_releases('vllm')[-1]}, the newest shipped release"


def linear_storages(root: Path) -> list:
    """What the default storage model (the tree's backends and the shipped catalogue) says a
    `LinearBase` of the project at `root` can hold in `weight`, zero-config, as a run there sees it."""
    from dtype_lint.analysis.storage.catalogue import default_model
    from dtype_lint.run.catalogue_build import project_facts

    here = os.getcwd()
    os.chdir(root)
    try:
        config, project = project_facts(".")
        return default_model(project, config.all_config_params).storages_for(LINEAR)
    finally:
        os.chdir(here)


@pytest.fixture(scope="module")
def storages():
    by_method: dict[str, list] = {}
    for storage in linear_storages(PLUGIN):
        by_method.setdefault(storage.method, []).append(storage)
    return by_method


def _kinds(storages) -> set[tuple[str, str]]:
    return {(s.kind, s.dtype) for s in storages}


def _steps(storage) -> list[str]:
    return [e.message for e in storage.evidence]


def test_super_create_weights_into_an_engine_class_is_the_catalogue_s_record(storages):
    fp8 = storages["PlugFp8LinearMethod"]
    # the engine's Fp8 method: fp8, or int32 where its kernel is Marlin; not the in-tree int8
    # base behind it in the bases, nor the package's experts method
    assert _kinds(fp8) == {("fp8", "float8_e4m3fn"), ("packed", "int32")}
    for storage in fp8:
        steps = _steps(storage)
        assert "`PlugFp8LinearMethod.create_weights` calls `super().create_weights`" in steps
        assert any(s.startswith("`Fp8LinearMethod.create_weights` registers `weight`") and NEWEST in s
                   for s in steps)
        assert NEWEST in storage.what


def test_no_linear_method_gets_the_package_s_other_methods(storages):
    assert not any("w2_qweight" in s.what for methods in storages.values() for s in methods)
    assert not any(e.path.endswith("experts.py") for methods in storages.values() for s in methods
                   for e in s.evidence)


def test_an_inherited_create_weights_is_the_first_base_s_even_outside_the_tree(storages):
    (keep,) = storages["PlugKeepLinearMethod"]
    assert (keep.kind, keep.dtype) == ("compute", "params_dtype")
    assert _steps(keep)[1] == ("`PlugKeepLinearMethod` inherits `create_weights` from "
                               "`vllm.model_executor.layers.linear.UnquantizedLinearMethod`")


def test_an_in_tree_after_loading_over_an_engine_method_decides(storages):
    (device,) = storages["PlugFp8DeviceMethod"]
    assert (device.kind, device.what) == ("absent", "deletes `weight`")
    assert os.path.basename(device.evidence[-1].path) == "fp8.py" and device.evidence[-1].line == 25


def test_a_weight_deleted_and_set_again_after_loading_is_replaced_not_absent(storages):
    (resident,) = storages["PlugFp8ResidentMethod"]
    assert (resident.kind, resident.what) == ("unknown", "replaces `weight` after loading, in a dtype it does not state")
    assert [(e.message, e.line) for e in resident.evidence[-2:]] == [
        ("`delattr(..., \"weight\")`", 33),
        ("`torch.nn.Parameter(device_copy, requires_grad=False)` becomes `weight` again", 34)]


def test_an_in_tree_super_chain_reads_the_base_that_defines_it(storages):
    (int8,) = storages["PlugInt8LinearMethod"]
    assert (int8.kind, int8.dtype) == ("packed", "int8")
    assert "weight_scale" in int8.params
    assert os.path.basename(int8.evidence[-1].path) == "base.py"


def test_a_base_no_catalogue_records_is_unknown_not_guessed(storages):
    (ext,) = storages["PlugExtLinearMethod"]
    assert ext.kind == "unknown"
    assert "`othervendor.kernels.VendorLinearMethod`, outside the tree, which no shipped catalogue records" in ext.what


def test_an_engine_after_loading_under_an_in_tree_create_weights(tmp_path):
    """The plugin registers `weight` itself; the engine's Fp8 `process_weights_after_loading`
    (its kernel, Marlin) still runs after loading: int32 as well as the plugin's fp8."""
    files = {
        "own/__init__.py": "",
        "own/quant.py": """
            import torch
            from vllm.model_executor.layers.linear import LinearBase
            from vllm.model_executor.layers.quantization import fp8 as engine_fp8
            from vllm.model_executor.layers.quantization import register_quantization_config


            class OwnFp8LinearMethod(engine_fp8.Fp8LinearMethod):
                def create_weights(self, layer, input_size, output_size, params_dtype, **extra):
                    layer.register_parameter("weight", torch.nn.Parameter(
                        torch.empty(output_size, input_size, dtype=torch.float8_e4m3fn)))


            @register_quantization_config("own")
            class OwnConfig(engine_fp8.Fp8Config):
                def get_quant_method(self, layer, prefix):
                    if isinstance(layer, LinearBase):
                        return OwnFp8LinearMethod(self)
                    return None
        """,
        "own/platform.py": """
            from vllm.platforms import Platform


            class OwnPlatform(Platform):
                supported_quantization: list[str] = ["own"]
        """,
    }
    for rel, text in files.items():
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / rel).write_text(textwrap.dedent(text).lstrip("\n"), encoding="utf-8")
    own = [s for s in linear_storages(tmp_path) if s.method == "OwnFp8LinearMethod"]
    assert _kinds(own) == {("fp8", "float8_e4m3fn"), ("packed", "int32")}
    (repacked,) = [s for s in own if s.kind == "packed"]
    assert any(m.startswith("`OwnFp8LinearMethod` inherits `process_weights_after_loading` from "
                            "`vllm.model_executor.layers.quantization.fp8.Fp8LinearMethod`") for m in _steps(repacked))


def test_findings_match_expected_txt():
    proc = dtl(PLUGIN, "check", ".", "--no-cache", "--output-format", "json", "--exit-zero")
    assert proc.returncode == 0, proc.stderr
    found = json.loads(proc.stdout)["findings"]
    assert_golden(PLUGIN / "expected.txt", lines_text(f"{f['path']}:{f['line']}:{f['col']} {f['code']}" for f in found))
    (read,) = [f for f in found if f["code"] == "DTL003"]
    # the read fails only under the method that deletes `weight` after loading
    assert "PlugFp8 (fp8.py:42 -> fp8.py:25) deletes `weight`" in read["message"]
    assert "w2_qweight" not in json.dumps(found)
