"""The storage model (dtype_lint/analysis/storage/storage_model.py): what each backend of a tree leaves in
a layer's `.weight`, read from the backends' code, and how the rules ask it.

The tree below is our own, written in the shapes real engines take: a config base in a
`quant` package, configs that dispatch on the layer type (`isinstance`, a negated early return,
a helper handed the layer and a method class, a local flag), methods that register `weight` in a
stated dtype (through a helper that builds the parameter) or `qweight` instead, a repack into
int32 words in a helper of another file, and a scheme chosen at run time (`layer.scheme`).
"""

from __future__ import annotations

import json
import os
import re
import textwrap
from pathlib import Path

import pytest
from conftest import full_only

from tests.cli_runner import dtl

FILES = {
    "pyproject.toml": """
        [project]
        name = "tinyserve"
        version = "0"

        [tool.dtype-lint]
        preset = "generic"
        extend-select = ["DTL003"]
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


        class RowLinear(LinearBase):
            pass
    """,
    "tinyserve/layers/embedding.py": """
        import torch
        from torch import nn

        from tinyserve.quant.base import QuantConfig


        class Embedding(nn.Module):
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


        class PlainMethod:
            def create_weights(self, layer, n, params_dtype):
                weight = torch.nn.Parameter(torch.empty(n, n, dtype=params_dtype))
                layer.register_parameter("weight", weight)
    """,
    "tinyserve/quant/packed_int4.py": """
        from tinyserve.layers.linear import LinearBase
        from tinyserve.quant.base import PlainMethod, QuantConfig
        from tinyserve.quant.utils import pick_linear_method


        class Int4Method:
            def create_weights(self, layer, n, params_dtype):
                layer.register_parameter("qweight", torch.nn.Parameter(torch.empty(n, n // 8, dtype=torch.int32)))
                layer.register_parameter("scales", torch.nn.Parameter(torch.empty(n, dtype=params_dtype)))


        class Int4Config(QuantConfig):
            def get_quant_method(self, layer, prefix):
                return pick_linear_method(self, layer, Int4Method)
    """,
    "tinyserve/quant/utils.py": """
        from tinyserve.layers.linear import LinearBase
        from tinyserve.quant.base import PlainMethod


        def pick_linear_method(config, layer, method_cls):
            if not isinstance(layer, LinearBase):
                return None
            return method_cls()


        def make_fp8_weight(n):
            return torch.nn.Parameter(torch.empty(n, n, dtype=torch.float8_e4m3fn))


        def repack_for_wide_kernel(layer):
            words = wide_kernel_pack(layer.weight).view(torch.int32)  # the words' dtype, stated
            replace_parameter(layer, "weight", words)
    """,
    "tinyserve/quant/fp8.py": """
        from tinyserve.layers.embedding import Embedding
        from tinyserve.layers.linear import LinearBase
        from tinyserve.quant.base import PlainMethod, QuantConfig
        from tinyserve.quant.utils import make_fp8_weight, repack_for_wide_kernel


        class Fp8Method:
            def create_weights(self, layer, n, params_dtype):
                layer.register_parameter("weight", make_fp8_weight(n))

            def process_weights_after_loading(self, layer):
                if self.wide:
                    repack_for_wide_kernel(layer)


        class Fp8Config(QuantConfig):
            def get_quant_method(self, layer, prefix):
                head_quantized = isinstance(layer, Embedding) and self.with_head
                if isinstance(layer, LinearBase) or head_quantized:
                    return Fp8Method()
                if isinstance(layer, Embedding):
                    return PlainMethod()
                return None
    """,
    "tinyserve/quant/schemes/__init__.py": "",
    "tinyserve/quant/schemes/config.py": """
        from tinyserve.layers.linear import LinearBase
        from tinyserve.quant.base import QuantConfig


        class SchemeMethod:
            def create_weights(self, layer, n, params_dtype):
                layer.scheme.create_weights(layer, n, params_dtype)


        class SchemeConfig(QuantConfig):
            def get_quant_method(self, layer, prefix):
                if isinstance(layer, LinearBase):
                    return SchemeMethod()
                return None
    """,
    "tinyserve/quant/schemes/int8.py": """
        class W8A8Scheme:
            def create_weights(self, layer, n, params_dtype):
                weight = torch.nn.Parameter(torch.empty(n, n, dtype=torch.int8))
                layer.register_parameter("weight", weight)
    """,
    "tinyserve/platforms/__init__.py": "",
    "tinyserve/platforms/interface.py": """
        class Platform:
            supported_quantization: list[str] = []
    """,
    "tinyserve/platforms/gpu.py": """
        from tinyserve.platforms.interface import Platform


        class GpuPlatform(Platform):  # inherits the interface's empty list: every quantization
            pass
    """,
    "tinyserve/platforms/npu.py": """
        from tinyserve.platforms.interface import Platform


        class NpuPlatform(Platform):
            supported_quantization: list[str] = [
                "int4",  # no fp8 on this device
            ]
    """,
    "tinyserve/model.py": """
        from tinyserve.layers.embedding import Embedding
        from tinyserve.layers.linear import RowLinear


        class Model:
            def __init__(self, quant_config):
                self.out_proj = RowLinear(8, quant_config=quant_config)
                self.embed = Embedding(8, quant_config=quant_config)

            def forward(self, x):
                x = x.to(self.out_proj.weight.dtype)
                return x + self.embed.weight.sum() + self.out_proj.weight.sum()
    """,
}


@pytest.fixture(scope="module")
def tree(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("tinyserve")
    for rel, text in FILES.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(textwrap.dedent(text).lstrip("\n"), encoding="utf-8")
    return root


@pytest.fixture(scope="module")
def backends(tree):
    from dtype_lint.analysis.storage.storage_model import CodeBackends
    from dtype_lint.run.catalogue_build import project_facts

    here = os.getcwd()
    os.chdir(tree)
    try:
        config, project = project_facts(".")
        model = CodeBackends(project, config.all_config_params)
        yield model, {q: model.storages_for(q) for q in ("tinyserve.layers.linear.RowLinear",
                                                         "tinyserve.layers.embedding.Embedding")}
    finally:
        os.chdir(here)


def _kinds(storages) -> set[tuple[str, str, str, str]]:
    return {(s.backend, s.method, s.kind, s.dtype) for s in storages}


def test_each_backend_is_read_from_its_dispatch_and_its_methods(backends):
    _model, got = backends
    assert _kinds(got["tinyserve.layers.linear.RowLinear"]) == {
        # the helper's negated early return keeps it for linears; the class it is handed is built there
        ("Int4Config", "Int4Method", "absent", ""),
        # create_weights registers fp8 through a helper; a helper of another file repacks it to int32
        ("Fp8Config", "Fp8Method", "packed", "int32"),
        # `layer.scheme.create_weights`: the schemes of its package stand for it
        ("SchemeConfig", "W8A8Scheme", "packed", "int8"),
    }


def test_a_layer_type_gets_only_the_branches_that_test_for_it(backends):
    _model, got = backends
    # The embedding: the local flag `head_quantized` reaches Fp8Method, the next branch the plain
    # method; Int4 (linears only, by a negated early return) and the scheme config never reach it.
    assert _kinds(got["tinyserve.layers.embedding.Embedding"]) == {
        ("Fp8Config", "Fp8Method", "packed", "int32"),
        ("Fp8Config", "PlainMethod", "compute", "params_dtype"),
    }


def test_the_evidence_names_the_lines_that_make_each_storage(backends, tree):
    _model, got = backends
    (fp8,) = [s for s in got["tinyserve.layers.linear.RowLinear"] if s.backend == "Fp8Config"]
    files = [(os.path.basename(e.path), e.line) for e in fp8.evidence]
    assert files[0] == ("fp8.py", 20) and files[-1] == ("utils.py", 17)
    assert fp8.describe() == "Fp8 (fp8.py:20 -> utils.py:17) repacks `weight` to int32"


def test_find_stops_at_what_a_rule_needs(backends):
    model, _got = backends
    absent = model.find("tinyserve.layers.embedding.Embedding", "absent")
    assert absent == []  # no backend drops the embedding's `.weight`: DTL003 has nothing to say
    (int4,) = model.find("tinyserve.layers.linear.RowLinear", "absent")
    assert int4.what == "registers `qweight`, not `weight`"


def test_rules_ask_the_model_and_say_why(tree):
    proc = dtl(tree, "check", ".", "--no-cache", "--output-format", "json")
    findings = json.loads(proc.stdout)["findings"]
    where = sorted((f["code"], f["line"], f["expression"]) for f in findings)
    # DTL003 on the linear (Int4 has no `.weight`), not on the embedding (every backend keeps one);
    # line 11's read is the cast's, DTL001's business
    assert [w for w in where if w[0] == "DTL003"] == [("DTL003", 12, "self.out_proj.weight")]
    (cast,) = [f for f in findings if f["code"] == "DTL001"]
    assert "Fp8 (fp8.py:20 -> utils.py:17) repacks `weight` to int32" in cast["message"]
    backend_lines = [e for e in cast["evidence"] if e["message"].startswith("backend: ")]
    assert {os.path.basename(e["path"]) for e in backend_lines} >= {"utils.py"}


def test_explain_shows_the_model_for_a_site(tree):
    proc = dtl(tree, "explain", "tinyserve/model.py:12")
    assert proc.returncode == 0, proc.stderr
    out = proc.stdout
    assert "`self.embed.weight`" in out and "class: tinyserve.layers.embedding.Embedding" in out
    # short by default: a backend that keeps `weight` in the compute dtype is named on one line
    assert "PlainMethod: registers `weight` in the compute dtype" not in out
    assert "      and 1 in the compute dtype (--verbose lists them)" in out
    assert "DTL003: not reported (no reachable backend gives such a storage)" in out
    verbose = dtl(tree, "explain", "--verbose", "tinyserve/model.py:12").stdout
    assert "PlainMethod: registers `weight` in the compute dtype" in verbose
    assert verbose.count("\n") > out.count("\n")
    assert "tinyserve/platforms/npu.py:5: NpuPlatform admits int4" in out
    assert "Platform admits every quantization" in out
    bad = dtl(tree, "explain", "tinyserve/model.py")
    assert bad.returncode == 2 and "expected PATH:LINE" in bad.stderr


def test_a_plugin_importing_vllm_gets_the_shipped_catalogue(tmp_path):
    """No vLLM in the tree: the layers' storages come from the catalogue computed from a release."""
    (tmp_path / "plugin").mkdir()
    (tmp_path / "plugin" / "head.py").write_text(textwrap.dedent("""
        from vllm.model_executor.layers.linear import ColumnParallelLinear


        class Head:
            def __init__(self, quant_config):
                self.proj = ColumnParallelLinear(8, 8, quant_config=quant_config)

            def forward(self, x):
                return x.to(self.proj.weight.dtype)
    """), encoding="utf-8")
    proc = dtl(tmp_path, "check", ".", "--no-cache", "--output-format", "json")
    (cast,) = json.loads(proc.stdout)["findings"]
    assert re.search(r"in vllm \d+\.\d+\.\d+, the newest shipped release: the project pins none\)",
                     "\n".join(e["message"] for e in cast["evidence"]))
    assert "repacks `weight` to int32" in cast["message"]
    assert all(not e["path"] or e["path"] == "plugin/head.py" for e in cast["evidence"])  # no location outside the project


def test_each_shipped_catalogue_names_its_release_and_how_to_regenerate_it():
    from dtype_lint.analysis.storage.catalogue import shipped

    catalogues = [d for d in shipped() if d["dist"] == "vllm"]
    assert [d["version"] for d in catalogues] == ["0.33.0", "0.34.0"]  # one per release, oldest first
    for data in catalogues:
        assert data["regenerate"] == f"python scripts/catalogue.py --dist vllm --version {data['version']}"
        kinds = {data["storages"][i]["kind"] for i in data["layers"]["vllm.model_executor.layers.linear.LinearBase"]}
        assert {"absent", "packed", "fp8", "compute"} <= kinds


@pytest.mark.slow
@pytest.mark.network
@pytest.mark.parametrize("version", ["0.33.0", full_only("0.34.0", "0.33.0's: the same builder on the release before")])
def test_the_shipped_catalogue_equals_a_fresh_computation(version):
    import importlib.util

    spec = importlib.util.spec_from_file_location("catalogue_script", Path(__file__).parent.parent / "scripts" / "catalogue.py")
    script = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(script)
    assert script.target("vllm", version).read_text(encoding="utf-8") == script.fresh("vllm", version)


CONTAINERS = textwrap.dedent("""
    from torch import nn
    from vllm.model_executor.layers.linear import ColumnParallelLinear


    class Proj(nn.Module):
        def __init__(self, quant_config):
            super().__init__()
            self.mlp = nn.Sequential(ColumnParallelLinear(4, 4, quant_config=quant_config), nn.GELU())
            self.heads = nn.ModuleList([ColumnParallelLinear(4, 4, quant_config=quant_config) for _ in range(2)])
            self.plain = nn.Sequential(ColumnParallelLinear(4, 4, quant_config=None), nn.Linear(4, 4))

        def forward(self, x):
            x = x.to(self.mlp[0].weight.dtype)
            x = x.to(self.heads[1].weight.dtype)
            x = x.to(self.plain[0].weight.dtype)
            return x.to(self.plain[1].weight.dtype)
""")


def test_a_layer_reached_through_a_container_index_is_its_element():
    from dtype_lint.api import check_source

    found = check_source(CONTAINERS)
    assert [(f.code, f.span.line) for f in found] == [("DTL001", 14), ("DTL001", 15)]
    assert found[0].evidence[0].message == "`self.mlp[0]` is `ColumnParallelLinear(...)` in `self.mlp = nn.Sequential(...)`"


def test_a_container_element_named_by_a_local_is_that_local_s_construction():
    """`linear_1 = ColumnParallelLinear(...)` then `nn.ModuleList([linear_1, act, linear_2])`: the
    element is the local's construction (vllm-omni's SANA-WM timestep embedder had this shape);
    a local bound twice, or to something that is not a call, is not followed."""
    from dtype_lint.api import check_source

    source = textwrap.dedent("""
        from torch import nn
        from vllm.model_executor.layers.linear import ColumnParallelLinear


        class Embedder(nn.Module):
            def __init__(self, quant_config, plain):
                super().__init__()
                linear_1 = ColumnParallelLinear(4, 4, quant_config=quant_config)
                unquantized = ColumnParallelLinear(4, 4, quant_config=None)
                self.mlp = nn.ModuleList([linear_1, nn.SiLU(), unquantized, plain])

            def forward(self, x):
                x = x.to(self.mlp[0].weight.dtype)
                x = x.to(self.mlp[2].weight.dtype)
                return x.to(self.mlp[3].weight.dtype)
    """)
    found = check_source(source)
    assert [(f.code, f.span.line) for f in found] == [("DTL001", 14)]
    assert "`self.mlp[0]` is `ColumnParallelLinear(...)`" in found[0].evidence[0].message


def test_a_slice_of_the_weight_is_an_alias_of_its_dtype():
    from dtype_lint.api import check_source

    source = textwrap.dedent("""
        from vllm.model_executor.layers.linear import ColumnParallelLinear


        class Proj:
            def __init__(self, quant_config):
                self.context_proj = ColumnParallelLinear(8, 8, quant_config=quant_config)

            def forward(self, hidden, a, b):
                weight = self.context_proj.weight[:, a:b]
                return hidden.to(weight.dtype) @ weight
    """)
    assert [(f.code, f.span.line) for f in check_source(source)] == [("DTL001", 11)]


KERNEL_FILES = {
    "tinyserve/quant/kernels/__init__.py": "",
    "tinyserve/quant/kernels/base.py": """
        class Fp8Kernel:
            def process_weights_after_loading(self, layer):
                pass
    """,
    "tinyserve/quant/kernels/wide.py": """
        from tinyserve.quant.kernels.base import Fp8Kernel
        from tinyserve.quant.utils import repack_for_wide_kernel


        class WideFp8Kernel(Fp8Kernel):
            def process_weights_after_loading(self, layer):
                repack_for_wide_kernel(layer)
    """,
    "tinyserve/quant/kernels/select.py": """
        from tinyserve.quant.kernels.base import Fp8Kernel


        def choose_fp8_kernel(n) -> Fp8Kernel:
            raise NotImplementedError
    """,
    "tinyserve/quant/kernel_fp8.py": """
        from tinyserve.layers.linear import LinearBase
        from tinyserve.quant.base import QuantConfig
        from tinyserve.quant.kernels.select import choose_fp8_kernel
        from tinyserve.quant.utils import make_fp8_weight


        class KernelFp8Method:
            def create_weights(self, layer, n, params_dtype):
                layer.register_parameter("weight", make_fp8_weight(n))
                self.fp8_kernel = choose_fp8_kernel(n)

            def process_weights_after_loading(self, layer):
                self.fp8_kernel.process_weights_after_loading(layer)


        class KernelFp8Config(QuantConfig):
            def get_quant_method(self, layer, prefix):
                if isinstance(layer, LinearBase):
                    return KernelFp8Method()
                return None
    """,
}


def test_a_kernel_object_the_method_holds_is_followed(tmp_path):
    """`self.fp8_kernel = choose_fp8_kernel(...)` (a factory whose return annotation names the
    kernel base) and `self.fp8_kernel.process_weights_after_loading(layer)`: one of the kernels it
    can be (a subclass in the base's package) repacks `weight` to int32, so the method leaves fp8
    or int32, each with the lines that make it (as vLLM's Fp8 on Marlin)."""
    from dtype_lint.analysis.storage.storage_model import CodeBackends
    from dtype_lint.run.catalogue_build import project_facts

    for rel, text in {**FILES, **KERNEL_FILES}.items():
        path = tmp_path / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(textwrap.dedent(text).lstrip("\n"), encoding="utf-8")
    here = os.getcwd()
    os.chdir(tmp_path)
    try:
        config, project = project_facts(".")
        storages = CodeBackends(project, config.all_config_params).storages_for("tinyserve.layers.linear.RowLinear")
    finally:
        os.chdir(here)
    kernel = {(s.kind, s.dtype): s for s in storages if s.backend == "KernelFp8Config"}
    assert set(kernel) == {("fp8", "float8_e4m3fn"), ("packed", "int32")}
    repacked = kernel[("packed", "int32")]
    assert repacked.what == "repacks `weight` to int32 under WideFp8Kernel"
    steps = [(os.path.basename(e.path), e.message) for e in repacked.evidence]
    assert ("kernel_fp8.py", "`self.fp8_kernel = choose_fp8_kernel(...)`") in steps
    assert steps[-1][0] == "utils.py"  # the repack itself, in the helper the kernel calls
