"""Platform narrowing (dtype_lint/analysis/storage/platforms.py): a backend that no platform of the project
admits cannot reach a layer, so its storages do not make a site a finding.

`fixtures/platform_plugin` is our own plugin in the shape of an out-of-tree device plugin: one
platform class on an engine outside the tree (vLLM's layers, from the shipped catalogue) that
admits two names, each served by a config of the plugin's own (registered by decorator and by
call, the names written as imported module constants). The tests change one thing at a time in a
copy to show what each part of the mechanism decides.
"""

from __future__ import annotations

import json
import shutil
import textwrap
from pathlib import Path

import pytest
from cli_runner import dtl
from golden import assert_golden, lines_text

PLUGIN = Path(__file__).resolve().parents[1] / "fixtures" / "platform_plugin"
PLATFORM = "npuplug/platform.py"


def findings(root: Path) -> list[dict]:
    proc = dtl(root, "check", ".", "--no-cache", "--output-format", "json", "--exit-zero")
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout)["findings"]


def entries(found) -> list[str]:
    return [f"{f['path']}:{f['line']}:{f['col']} {f['code']}" for f in found]


def sites(found) -> set[tuple[str, str]]:
    return {(f["code"], f["scope"]) for f in found}


@pytest.fixture
def copy(tmp_path) -> Path:
    root = tmp_path / "platform_plugin"
    shutil.copytree(PLUGIN, root)
    return root


def _admit(root: Path, names: str) -> None:
    path = root / PLATFORM
    text = path.read_text(encoding="utf-8")
    start = text.index("supported_quantization")
    end = text.index("]", start) + 1
    path.write_text(text[:start] + f"supported_quantization: list[str] = {names}" + text[end:], encoding="utf-8")


def test_findings_match_expected_txt():
    found = findings(PLUGIN)
    assert_golden(PLUGIN / "expected.txt", lines_text(entries(found)))


def test_the_evidence_names_the_admitted_backends_and_the_platform():
    (cast,) = findings(PLUGIN)
    assert cast["code"] == "DTL001" and cast["scope"] == "project_in"
    # the plugin's own backends, read from its code, not the engine's catalogue
    assert "NpuInt8 (int8.py:17 -> int8.py:9) registers `weight` as int8" in cast["message"]
    assert "NpuFp8 (fp8.py:24 -> fp8.py:11) registers `weight` as float8_e4m3fn" in cast["message"]
    backends = [e["message"] for e in cast["evidence"] if e["message"].startswith("backend: ")]
    assert len(backends) == 2 and not any("vllm 0.33.0" in b for b in backends)
    (platform,) = [e for e in cast["evidence"] if e["message"].startswith("platform: ")]
    assert platform["path"] == PLATFORM and platform["line"] == 12
    assert "`NpuPlatform`" in platform["message"] and "admit only fp8, npu-int8" in platform["message"]


def test_a_platform_that_admits_everything_narrows_nothing(copy):
    _admit(copy, "[]")
    found = findings(copy)
    # every backend of the engine counts again: AWQ/GPTQ drop a linear's `.weight`, embeddings
    # have quantized backends, and the cast's evidence comes from the catalogue
    assert sites(found) == {("DTL001", "project_in"), ("DTL003", "keep_shard"), ("DTL001", "tied_table")}
    assert not any(e["message"].startswith("platform: ") for f in found for e in f["evidence"])


def test_an_engine_backend_admitted_by_name_comes_from_the_catalogue(copy):
    # "auto_awq" is served by no config of the plugin: the engine's AutoAWQ config (the catalogue
    # records each backend's names) registers `qweight`, so the shard read can fail.
    _admit(copy, '["fp8", "auto_awq"]')
    found = {(f["code"], f["scope"]): f for f in findings(copy)}
    assert set(found) == {("DTL001", "project_in"), ("DTL003", "keep_shard")}
    assert "AutoAWQ registers `qweight`, not `weight`" in found[("DTL003", "keep_shard")]["message"]


def test_a_name_no_config_serves_leaves_the_layer_unnarrowed(copy):
    # a method we cannot find may be one that drops `.weight`: every backend counts
    _admit(copy, '["fp8", "some-device-format"]')
    assert ("DTL003", "keep_shard") in sites(findings(copy))


def test_a_second_platform_adds_its_names_and_one_that_admits_all_ends_the_narrowing(copy):
    second = copy / "npuplug" / "platforms" / "other.py"  # a module in a `platforms` folder
    second.parent.mkdir()
    second.write_text(textwrap.dedent("""
        from vllm.platforms import Platform


        class OtherPlatform(Platform):
            supported_quantization = ["auto_awq"]
    """), encoding="utf-8")
    assert ("DTL003", "keep_shard") in sites(findings(copy))  # the union admits AutoAWQ
    second.write_text(textwrap.dedent("""
        from npuplug.platform import NpuPlatform


        class LargerNpuPlatform(NpuPlatform):
            supported_quantization = []
    """), encoding="utf-8")
    # NpuPlatform is now an interface of another platform; the one run on admits everything
    assert ("DTL001", "tied_table") in sites(findings(copy))


def test_explain_shows_the_platforms_and_the_configs_serving_each_name():
    proc = dtl(PLUGIN, "explain", "npuplug/ops/shard.py:11")
    assert proc.returncode == 0, proc.stderr
    out = proc.stdout
    assert "npuplug/platform.py:12: NpuPlatform admits fp8, npu-int8" in out
    assert "platform narrowing: the platforms admit only fp8, npu-int8" in out
    assert "    fp8: npuplug.quant.fp8.NpuFp8Config" in out
    assert "    npu-int8: npuplug.quant.int8.NpuInt8Config" in out
    assert "backends that can be handed it: 2" in out
    assert "DTL003: not reported" in out


def test_in_tree_platforms_narrow_only_when_every_one_restricts(tmp_path):
    """An engine tree: the interface declares an empty list; a platform inheriting it admits all."""
    from dtype_lint.analysis.storage.platforms import PlatformNarrowing
    from dtype_lint.analysis.storage.storage_model import CodeBackends
    from dtype_lint.run.catalogue_build import project_facts

    files = {
        "eng/__init__.py": "",
        "eng/platforms/__init__.py": "",
        "eng/platforms/interface.py": "class Platform:\n    supported_quantization: list[str] = []\n",
        "eng/platforms/gpu.py": "from eng.platforms.interface import Platform\n\n\nclass Gpu(Platform):\n    pass\n",
        "eng/platforms/npu.py": ("from eng.platforms.interface import Platform\n\n\nclass Npu(Platform):\n"
                                "    supported_quantization = ['int4']\n"),
    }
    for rel, text in files.items():
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / rel).write_text(text, encoding="utf-8")

    def narrowing():
        import os

        here = os.getcwd()
        os.chdir(tmp_path)
        try:
            config, project = project_facts(".")
            platforms = PlatformNarrowing(CodeBackends(project, config.all_config_params))
            return {a.short: a.names for a in platforms.admissions()}, platforms.narrowing()
        finally:
            os.chdir(here)

    admitted, chosen = narrowing()
    assert admitted == {"Gpu": None, "Npu": ("int4",)} and chosen is None  # the interface is no platform
    (tmp_path / "eng/platforms/gpu.py").unlink()
    admitted, chosen = narrowing()
    assert admitted == {"Npu": ("int4",)} and chosen.names == ("int4",)
