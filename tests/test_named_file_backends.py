"""A run on named files inside an engine's checkout reads that checkout's own backends (#39).

Pre-commit checks the staged files by name. In a checkout of the engine itself (a tree holding the
`vllm` package, with or without a configuration) those files' layers are the tree's own, and so
are their backends: a named-file run must judge them from the tree as `check .` does, never from
the catalogue shipped for another release (before: "fbgemm_fp8.py:89 -> marlin_utils_fp8.py:141
in vllm 0.33.0" for a file of 0.27.1, lines that do not exist there). The answers are kept in the
cache with the stamps of what they read, so the next pre-commit run does not compute them again.
A project outside the engine (a plugin) keeps the shipped catalogue, and says which release's.

The small engine below is our own, in vLLM's module layout (so the `vllm` preset names its
layers) with a backend no vLLM release has: a nibble-packing method that registers `weight` as
uint8. The real-tree tests (slow tier) check vLLM 0.27.1 and 0.33.0.
"""

from __future__ import annotations

import json
import re
import shutil
import textwrap
from pathlib import Path

import pytest
from conftest import full_only

from tests.cli_runner import dtl

BACKEND = "vllm/model_executor/layers/quantization/nibble_pack.py"
MODEL = "vllm/model_executor/models/tiny_model.py"
REGISTER = 'layer.register_parameter("weight", torch.nn.Parameter(torch.empty(n, n // 2, dtype=torch.uint8)))'

ENGINE = {
    "vllm/__init__.py": "",
    "vllm/model_executor/__init__.py": "",
    "vllm/model_executor/layers/__init__.py": "",
    "vllm/model_executor/layers/linear.py": """
        import torch
        from torch import nn

        from vllm.model_executor.layers.quantization.base_config import QuantizationConfig


        class LinearBase(nn.Module):
            def __init__(self, n: int, quant_config: QuantizationConfig | None = None):
                super().__init__()
                self.quant_method = quant_config.get_quant_method(self, "") if quant_config else None
                self.quant_method.create_weights(self, n, torch.bfloat16)


        class ColumnParallelLinear(LinearBase):
            pass
    """,
    "vllm/model_executor/layers/quantization/__init__.py": "",
    "vllm/model_executor/layers/quantization/base_config.py": """
        class QuantizationConfig:
            def get_quant_method(self, layer, prefix):
                raise NotImplementedError
    """,
    BACKEND: f"""
        import torch

        from vllm.model_executor.layers.linear import LinearBase
        from vllm.model_executor.layers.quantization.base_config import QuantizationConfig


        class NibblePackMethod:
            def create_weights(self, layer, n, params_dtype):
                {REGISTER}


        class NibblePackConfig(QuantizationConfig):
            def get_quant_method(self, layer, prefix):
                if isinstance(layer, LinearBase):
                    return NibblePackMethod()
                return None
    """,
    "vllm/model_executor/models/__init__.py": "",
    MODEL: """
        import torch

        from vllm.model_executor.layers.linear import ColumnParallelLinear


        class TinyAttention(torch.nn.Module):
            def __init__(self, quant_config):
                super().__init__()
                self.kv_proj = ColumnParallelLinear(8, quant_config=quant_config)

            def forward(self, x):
                x = x.to(self.kv_proj.weight.dtype)
                return self.kv_proj(x)
    """,
}


def write(root: Path, files: dict[str, str]) -> Path:
    for rel, text in files.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(textwrap.dedent(text).lstrip("\n"), encoding="utf-8")
    return root


def line_of(root: Path, rel: str, needle: str) -> int:
    lines = (root / rel).read_text(encoding="utf-8").splitlines()
    return next(number for number, line in enumerate(lines, 1) if needle in line)


def findings(root: Path, *args: str) -> list[dict]:
    proc = dtl(root, "check", *args, "--output-format", "json", "--exit-zero")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return json.loads(proc.stdout)["findings"]


@pytest.fixture
def builds(monkeypatch) -> list[str]:
    """The layer classes whose backends' storages were computed from their code (not read from
    the cache): one entry per config's dispatch walked."""
    from dtype_lint.analysis.storage import storage_model

    seen: list[str] = []
    real = storage_model.CodeBackends._config_storages

    def counting(self, config, layer_class):
        seen.append(layer_class)
        return real(self, config, layer_class)

    monkeypatch.setattr(storage_model.CodeBackends, "_config_storages", counting)
    return seen


@pytest.mark.parametrize("configured", [False, True], ids=["no-configuration", "pyproject"])
def test_a_named_file_of_an_engine_checkout_cites_the_checkout_s_own_backend(tmp_path, builds, configured):
    # Before: without a configuration the named file was its own project, its layer a preset
    # class the shipped catalogue describes ("... in vllm 0.33.0"), not this tree's backend.
    files = dict(ENGINE)
    if configured:  # a checkout's pyproject.toml without settings of ours
        files["pyproject.toml"] = '[project]\nname = "vllm"\nversion = "0"\n'
    root = write(tmp_path / "checkout", files)
    register_line = line_of(root, BACKEND, "register_parameter")

    (cast,) = findings(root, MODEL)
    assert cast["code"] == "DTL001" and cast["path"] == MODEL, cast
    assert f"nibble_pack.py:{register_line}" in cast["message"], cast["message"]
    assert "in vllm 0." not in json.dumps(cast), cast  # no shipped release's lines
    assert {"path": BACKEND, "line": register_line} in [{"path": e["path"], "line": e["line"]}
                                                        for e in cast["evidence"]], cast["evidence"]
    # The whole-tree run reads the same backends and reports the same finding.
    assert findings(root, ".", "--no-cache") == [cast]
    assert builds  # the backends were read from their code the first time

    # Pre-commit again (unchanged, then after an edit of the model file): the backends' answer
    # comes from the cache, kept with the stamps of the files it read.
    cached = list((root / ".dtype_lint_cache").glob("v2-*/s/*.json"))
    assert cached and any(BACKEND in path.read_text(encoding="utf-8") for path in cached)
    builds.clear()
    assert findings(root, MODEL) == [cast]
    model = root / MODEL
    model.write_text(model.read_text(encoding="utf-8") + "# edited\n", encoding="utf-8")
    assert findings(root, MODEL) == [cast]
    assert builds == []

    # The stamps hold the answer to the backend's bytes: an edited backend is read again.
    backend = root / BACKEND
    backend.write_text(backend.read_text(encoding="utf-8").replace("torch.uint8", "torch.int32"), encoding="utf-8")
    (again,) = findings(root, MODEL)
    assert "int32" in again["message"] and builds


def test_a_plugin_outside_the_engine_keeps_the_shipped_catalogue_and_names_its_release(tmp_path):
    root = write(tmp_path / "plugin", {
        "myplugin/__init__.py": "",
        "myplugin/head.py": """
            from vllm.model_executor.layers.linear import ColumnParallelLinear


            class Head:
                def __init__(self, quant_config):
                    self.proj = ColumnParallelLinear(8, 8, quant_config=quant_config)

                def forward(self, x):
                    return x.to(self.proj.weight.dtype)
        """,
    })
    (cast,) = findings(root, "myplugin/head.py")
    # unpinned: the newest shipped release, and the words say why (tests/test_plugin_engine.py)
    assert re.search(r"in vllm \d+\.\d+\.\d+, the newest shipped release: the project pins none\)",
                     "\n".join(e["message"] for e in cast["evidence"])), \
        cast["message"]
    assert all(not e["path"] or e["path"] == "myplugin/head.py" for e in cast["evidence"])
    assert findings(root, ".", "--no-cache") == [cast]


# ---- the real trees (slow tier: a whole-tree run of each release) ----------------------------------

# The MLA prefill casts (0.27.1's bug, fixed in 0.33.0: no finding there), Gemma 3n and Gemma 3n's
# multimodal tower (default-rule findings in both releases).
REAL_FILES = ("vllm/model_executor/layers/attention/mla_attention.py", "vllm/model_executor/models/gemma3n.py",
              "vllm/model_executor/models/gemma3n_mm.py")
WITHOUT_FINDINGS = {("vllm_0330", REAL_FILES[0])}


def _copy(tree: Path, target: Path) -> Path:
    """The release's tree without the cache other runs left in it (this test writes its own)."""
    shutil.copytree(tree, target, ignore=shutil.ignore_patterns(".dtype_lint_cache"), symlinks=True)
    return target


def _whole_tree(tree: Path) -> list[dict]:
    """What `check . --no-cache --output-format json` prints in the release's tree: the default
    rules' findings of the shared `--select ALL` run of it (tests/release_runs.py; what a rule
    reports does not depend on which other rules run), named relative to the tree."""
    from release_runs import check_all, findings_json

    from dtype_lint.core.rule_registry import opt_in_codes

    prefixes = {json.dumps(str(where) + "/")[1:-1] for where in (tree, tree.resolve())}

    def relative(finding: dict) -> dict:
        text = json.dumps(finding)
        for prefix in prefixes:
            text = text.replace(prefix, "")
        return json.loads(text)

    return [relative(f) for f in findings_json(check_all(tree)) if f["code"] not in opt_in_codes()]


@pytest.mark.slow
@pytest.mark.network
@pytest.mark.xdist_group("release-runs")  # the worker that makes the release's `--select ALL` run
@pytest.mark.parametrize("release", ["vllm_0271", full_only("vllm_0330", "the same mechanism on 0.27.1")])
def test_real_named_files_read_the_release_s_own_backends(release, request, tmp_path, builds):
    tree = request.getfixturevalue(release)
    root = _copy(tree, tmp_path / release)
    whole = _whole_tree(tree)
    for rel in REAL_FILES:
        expected = [f for f in whole if f["path"] == rel]
        assert bool(expected) == ((release, rel) not in WITHOUT_FINDINGS), (rel, expected)
        named = findings(root, rel)
        assert named == expected, rel
        for finding in named:
            assert "in vllm 0." not in json.dumps(finding), finding
            for evidence in finding["evidence"]:
                if evidence["path"]:  # every line cited is one of this tree's
                    lines = (root / evidence["path"]).read_text(encoding="utf-8").splitlines()
                    assert 1 <= evidence["line"] <= len(lines), evidence
    # The next pre-commit run on an edited file with findings reads the backends' answers from
    # the cache.
    edited = next(rel for rel in REAL_FILES if (release, rel) not in WITHOUT_FINDINGS)
    target = root / edited
    target.write_text(target.read_text(encoding="utf-8") + "# edited\n", encoding="utf-8")
    builds.clear()
    assert findings(root, edited) == [f for f in whole if f["path"] == edited]
    assert builds == []
