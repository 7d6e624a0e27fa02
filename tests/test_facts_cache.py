"""The storage model's answers kept on disk (dtype_lint/run/facts_cache.py): a run on an edited
file with a site reads its layers' backends from the cache while their files are unchanged, and
computes them again as soon as one of the files the answer read changes.

The tree is our own, in the shape of a serving engine: a config base in a `quant` package, one
backend whose quant method registers `weight` as int32 words (a repack) and a model file whose
forward casts to the layer's weight dtype.
"""

from __future__ import annotations

import json
import textwrap
from pathlib import Path

import pytest

from tests.cli_runner import dtl

PACKED = 'layer.register_parameter("weight", torch.nn.Parameter(torch.empty(n, n // 8, dtype=torch.int32)))'
COMPUTE = 'layer.register_parameter("weight", torch.nn.Parameter(torch.empty(n, n, dtype=params_dtype)))'

FILES = {
    "pyproject.toml": """
        [project]
        name = "tinyserve"
        version = "0"

        [tool.dtype-lint]
        preset = "generic"
    """,
    "tinyserve/__init__.py": "",
    "tinyserve/layers/__init__.py": "",
    "tinyserve/layers/linear.py": """
        import torch
        from torch import nn

        from tinyserve.quant.base import QuantConfig


        class LinearBase(nn.Module):
            def __init__(self, n: int, quant_config: QuantConfig | None = None):
                super().__init__()
                self.quant_method = quant_config.get_quant_method(self, "") if quant_config else None
                self.quant_method.create_weights(self, n, torch.bfloat16)
    """,
    "tinyserve/quant/__init__.py": "",
    "tinyserve/quant/base.py": """
        class QuantConfig:
            def get_quant_method(self, layer, prefix):
                raise NotImplementedError
    """,
    "tinyserve/quant/words.py": f"""
        import torch

        from tinyserve.layers.linear import LinearBase
        from tinyserve.quant.base import QuantConfig


        class WordsMethod:
            def create_weights(self, layer, n, params_dtype):
                {PACKED}


        class WordsConfig(QuantConfig):
            def get_quant_method(self, layer, prefix):
                if isinstance(layer, LinearBase):
                    return WordsMethod()
                return None
    """,
    "tinyserve/model.py": """
        from tinyserve.layers.linear import LinearBase


        class Model:
            def __init__(self, quant_config):
                self.out_proj = LinearBase(8, quant_config=quant_config)

            def forward(self, x):
                return x.to(self.out_proj.weight.dtype)
    """,
}


@pytest.fixture
def tree(tmp_path) -> Path:
    root = tmp_path / "tinyserve-root"
    for rel, text in FILES.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(textwrap.dedent(text).lstrip("\n"), encoding="utf-8")
    return root


@pytest.fixture
def builds(monkeypatch) -> list[str]:
    """The layer classes whose storages the model computed (not read from disk)."""
    from dtype_lint.analysis.storage import storage_model

    seen: list[str] = []
    real = storage_model.CodeBackends._config_storages

    def counting(self, config, layer_class):
        seen.append(layer_class)
        return real(self, config, layer_class)

    monkeypatch.setattr(storage_model.CodeBackends, "_config_storages", counting)
    return seen


def _findings(root: Path, *args: str) -> list[dict]:
    proc = dtl(root, "check", *args, "--output-format", "json", "--exit-zero")
    return json.loads(proc.stdout)["findings"]


def _edit(path: Path, old: str = "", new: str = "") -> None:
    """Replace `old` by `new`; with neither, add a comment line (a save that changes the bytes)."""
    text = path.read_text(encoding="utf-8")
    assert old in text
    path.write_text(text.replace(old, new) if old else text + "# edited\n", encoding="utf-8")


def test_an_edited_site_file_reads_its_backends_from_disk(tree, builds):
    cold = _findings(tree, ".")
    assert [f["code"] for f in cold] == ["DTL001"]
    assert any("int32" in e["message"] for e in cold[0]["evidence"])
    assert builds and list((tree / ".dtype_lint_cache").glob("v2-*/s/*.json"))

    builds.clear()
    _edit(tree / "tinyserve/model.py")  # pre-commit after an edit: the file is analysed again
    again = _findings(tree, "tinyserve/model.py")
    assert builds == []  # the backends' answer came from the cache
    assert again == cold  # evidence paths respelled as this run shows them

    # The cached answer's reads are replayed: the file's findings entry still depends on the
    # backend, so editing the backend reaches this file's cached findings too.
    _edit(tree / "tinyserve/quant/words.py", PACKED, COMPUTE)
    assert _findings(tree, "tinyserve/model.py") == []  # no backend repacks the weight now
    assert builds  # computed again: the backend's file changed


def test_an_edited_backend_recomputes_the_answer_for_an_edited_site(tree, builds):
    assert len(_findings(tree, ".")) == 1
    _edit(tree / "tinyserve/quant/words.py", PACKED, COMPUTE)
    _edit(tree / "tinyserve/model.py")
    builds.clear()
    assert _findings(tree, "tinyserve/model.py") == []
    assert builds
    # ... and back: the answer follows the backend's bytes, never an older entry's.
    _edit(tree / "tinyserve/quant/words.py", COMPUTE, PACKED)
    _edit(tree / "tinyserve/model.py")
    assert [f["code"] for f in _findings(tree, "tinyserve/model.py")] == ["DTL001"]


def test_a_new_backend_in_the_package_is_seen(tree, builds):
    # The answer read the package's listing: a backend added there invalidates it.
    _edit(tree / "tinyserve/quant/words.py", PACKED, COMPUTE)
    assert _findings(tree, ".") == []
    new = tree / "tinyserve/quant/packed.py"
    new.write_text((tree / "tinyserve/quant/words.py").read_text(encoding="utf-8")
                   .replace(COMPUTE, PACKED).replace("Words", "Packed"), encoding="utf-8")
    _edit(tree / "tinyserve/model.py")
    builds.clear()
    assert [f["code"] for f in _findings(tree, "tinyserve/model.py")] == ["DTL001"]
    assert builds


def test_no_cache_neither_reads_nor_writes_answers(tree, builds):
    _findings(tree, ".", "--no-cache")
    assert not (tree / ".dtype_lint_cache").exists() or not list((tree / ".dtype_lint_cache").glob("v2-*/s/*"))


# ---- the platforms' admissions ------------------------------------------------------------------

PLUGIN = Path(__file__).resolve().parents[1] / "fixtures" / "platform_plugin"  # see test_platforms.py


@pytest.fixture
def plugin(tmp_path) -> Path:
    import shutil

    root = tmp_path / "platform_plugin"
    shutil.copytree(PLUGIN, root)
    return root


@pytest.fixture
def admitted(monkeypatch) -> list[int]:
    """One entry per computation of the platforms' admissions (not read from disk)."""
    from dtype_lint.analysis.storage import platforms

    seen: list[int] = []
    real = platforms.admissions

    def counting(*args, **kwargs):
        seen.append(1)
        return real(*args, **kwargs)

    monkeypatch.setattr(platforms, "admissions", counting)
    return seen


SHARD = "npuplug/ops/shard.py"


def test_the_platforms_admissions_are_read_from_disk_while_the_platform_modules_are_the_same(plugin, admitted):
    cold = _findings(plugin, ".", "--no-cache")
    assert [f["code"] for f in cold] == ["DTL001"]  # narrowed to the platform's two backends
    assert _findings(plugin, ".") == cold and admitted
    admitted.clear()
    _edit(plugin / SHARD)
    assert _findings(plugin, SHARD) == cold
    assert admitted == []  # kept with the storages' answers

    # A platform module added anywhere is no read of the kept answer: the list of them is checked.
    second = plugin / "npuplug" / "deep" / "platforms.py"
    second.parent.mkdir()
    second.write_text("from vllm.platforms import Platform\n\n\nclass OtherPlatform(Platform):\n"
                      "    supported_quantization = [\"auto_awq\"]\n", encoding="utf-8")
    _edit(plugin / SHARD)
    widened = _findings(plugin, SHARD)
    assert admitted and widened == _findings(plugin, ".", "--no-cache")
    assert {f["code"] for f in widened} == {"DTL001", "DTL003"}  # the union admits AutoAWQ

    # An edit of a platform's list reaches the answer through its file's stamp.
    admitted.clear()
    second.write_text(second.read_text(encoding="utf-8").replace('["auto_awq"]', '["fp8"]'), encoding="utf-8")
    _edit(plugin / SHARD)
    narrowed = _findings(plugin, SHARD)
    assert admitted and narrowed == _findings(plugin, ".", "--no-cache")
    assert [f["code"] for f in narrowed] == ["DTL001"]  # AutoAWQ is out again


def test_a_platform_module_added_reaches_the_cached_findings_of_an_unchanged_file(plugin):
    # The findings of an unchanged file are kept with what their analysis read: the enumeration
    # of the platform modules is one of those reads, so a new platform module is a change. The
    # file holds no fixable site, so no later stage analyses it again (which would hide a stale
    # entry), and the new platform is in a package of its own (no folder listing covers it).
    reader = plugin / "npuplug" / "ops" / "reader.py"
    reader.write_text("import torch\nfrom vllm.model_executor.layers.linear import LinearBase\n\n\n"
                      "def keep_shard(layer: LinearBase):\n    return torch.empty_like(layer.weight)\n",
                      encoding="utf-8")
    READER = "npuplug/ops/reader.py"
    assert [f for f in _findings(plugin, ".") if f["path"] == READER] == []  # narrowed; cache written
    second = plugin / "otherplug" / "platform.py"
    second.parent.mkdir()
    (second.parent / "__init__.py").write_text("", encoding="utf-8")
    second.write_text("from vllm.platforms import Platform\n\n\nclass OtherPlatform(Platform):\n"
                      "    supported_quantization = [\"auto_awq\"]\n", encoding="utf-8")
    widened = _findings(plugin, ".")
    assert widened == _findings(plugin, ".", "--no-cache")
    assert [f["code"] for f in widened if f["path"] == READER] == ["DTL003"]  # the union admits AutoAWQ
    assert _findings(plugin, READER) == [f for f in widened if f["path"] == READER]
    second.unlink()  # and gone again: the narrowing is back
    assert [f for f in _findings(plugin, ".") if f["path"] == READER] == []
