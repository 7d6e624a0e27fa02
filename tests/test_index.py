"""The class index and layer resolution: is `L` in `x.to(L.weight.dtype)` a quantizable layer?

Each test writes a small package to a temp dir and runs the engine on it (in process, no cache),
with the `generic` preset and `pkg.layers.linear.LinearBase` as the only configured root unless
it says otherwise, so everything else must be resolved across files.
"""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest
from tiny_project import write_tree

from dtype_lint.analysis.index.class_index import QuantizableLayerIndex, extract_header
from dtype_lint.api import make_config
from dtype_lint.run import pipeline
from dtype_lint.run.pipeline import RunOptions

LINEAR = """
    from torch import nn


    class LinearBase(nn.Module):
        def __init__(self, input_size, output_size, bias=False, params_dtype=None, quant_config=None, prefix=""):
            super().__init__()


    class ColumnParallelLinear(LinearBase):
        pass


    class RowParallelLinear(LinearBase):
        pass
"""

SETTINGS = {"preset": "generic", "quantizable": ["pkg.layers.linear.LinearBase"]}


def write(root: Path, files: dict[str, str]) -> None:
    write_tree(root, files, dedent=True)


def run(root: Path, files: dict[str, str], **settings):
    """Findings as (path relative to root, line, confidence, finding) of a run over a fresh package."""
    base = {"pkg/__init__.py": "", "pkg/layers/__init__.py": "", "pkg/layers/linear.py": LINEAR}
    write(root, {**base, **files})
    cfg = make_config({**SETTINGS, **{k.replace("_", "-"): v for k, v in settings.items()}}, root=root)
    result = pipeline.run(cfg, RunOptions(paths=[str(root)], jobs=1, use_cache=False))
    return [(Path(f.path).relative_to(root).as_posix(), f.span.line, f.confidence, f) for f in result.findings]


def sites(findings) -> list[tuple[str, str]]:
    """(path, the flagged cast's source)."""
    return [(p, f.expression) for p, _line, _c, f in findings]


# ---- the hierarchy across files ---------------------------------------------------------------
def test_cross_file_subclass_with_relative_import(tmp_path):
    found = run(tmp_path, {
        "pkg/layers/fused.py": """
            from .linear import ColumnParallelLinear


            class FusedQKV(ColumnParallelLinear):
                pass
        """,
        "pkg/models/__init__.py": "",
        "pkg/models/llama.py": """
            from ..layers.fused import FusedQKV


            class Attn:
                def __init__(self, quant_config):
                    self.qkv_proj = FusedQKV(8, 24, quant_config=quant_config)

                def forward(self, x):
                    return self.qkv_proj(x.to(self.qkv_proj.weight.dtype))
        """,
    })
    assert sites(found) == [("pkg/models/llama.py", "x.to(self.qkv_proj.weight.dtype)")]
    evidence = " | ".join(e.message for e in found[0][3].evidence)
    assert "`FusedQKV` subclasses `ColumnParallelLinear`" in evidence
    assert "`ColumnParallelLinear` subclasses `LinearBase`" in evidence
    assert "`LinearBase` is a configured quantizable class" in evidence


def test_index_verdicts_follow_relative_imports_and_reexports():
    headers = [
        extract_header("from .linear import ColumnParallelLinear as CPL\n", "pkg.layers", "pkg/layers/__init__.py", True),
        extract_header(textwrap.dedent(LINEAR), "pkg.layers.linear", "pkg/layers/linear.py", False),
        extract_header("from ..layers import CPL\n\nclass Merged(CPL):\n    pass\n", "pkg.models.m", "pkg/models/m.py", False),
    ]
    index = QuantizableLayerIndex(headers, ["pkg.layers.linear.LinearBase"], [])
    assert index.canonical("pkg.layers.CPL") == "pkg.layers.linear.ColumnParallelLinear"
    assert index.resolve("pkg.models.m", "CPL") == "pkg.layers.linear.ColumnParallelLinear"
    assert index.bases("pkg.models.m.Merged") == ["pkg.layers.linear.ColumnParallelLinear"]
    verdict = index.quantizable_verdict("pkg.models.m.Merged")
    assert verdict.yes and len(verdict.chain) == 3
    assert not index.quantizable_verdict("pkg.layers.linear.nn.Module").yes


def test_reexport_through_package_init(tmp_path):
    found = run(tmp_path, {
        "pkg/layers/__init__.py": "from .linear import RowParallelLinear\n",
        "pkg/mlp.py": """
            from pkg.layers import RowParallelLinear


            class MLP:
                def __init__(self, quant_config):
                    self.down_proj = RowParallelLinear(32, 8, quant_config=quant_config)

                def forward(self, h):
                    h = h.to(self.down_proj.weight.dtype)
                    return self.down_proj(h)
        """,
    })
    assert sites(found) == [("pkg/mlp.py", "h.to(self.down_proj.weight.dtype)")]


# ---- annotations --------------------------------------------------------------------------------
@pytest.mark.parametrize("annotation", [
    "ColumnParallelLinear",
    '"ColumnParallelLinear"',
    "Optional[ColumnParallelLinear]",
    "ColumnParallelLinear | None",
    '"Optional[ColumnParallelLinear]"',
])
def test_annotated_parameter_under_type_checking(tmp_path, annotation):
    """The MLA shape: the layer arrives through `__init__`, its class imported only for typing."""
    found = run(tmp_path, {"pkg/mla.py": f"""
        from __future__ import annotations

        from typing import TYPE_CHECKING, Optional

        if TYPE_CHECKING:
            from pkg.layers.linear import ColumnParallelLinear


        class MLAImpl:
            def __init__(self, kv_b_proj: {annotation}):
                self.kv_b_proj = kv_b_proj

            def prefill(self, kv_c):
                return self.kv_b_proj(kv_c.to(self.kv_b_proj.weight.dtype))
    """})
    assert sites(found) == [("pkg/mla.py", "kv_c.to(self.kv_b_proj.weight.dtype)")]
    assert "is set from parameter `kv_b_proj: ColumnParallelLinear`" in found[0][3].evidence[0].message


def test_class_level_and_local_annotations(tmp_path):
    found = run(tmp_path, {"pkg/m.py": """
        from pkg.layers.linear import RowParallelLinear


        class Block:
            o_proj: RowParallelLinear

            def forward(self, x):
                return self.o_proj(x.to(self.o_proj.weight.dtype))


        def run_all(projs, x):
            proj: RowParallelLinear
            for proj in projs:
                x = proj(x.to(proj.weight.dtype))
            return x
    """})
    assert sites(found) == [("pkg/m.py", "x.to(self.o_proj.weight.dtype)"), ("pkg/m.py", "x.to(proj.weight.dtype)")]


# ---- attribute chains -----------------------------------------------------------------------------
def test_nested_attribute_chains_across_files(tmp_path):
    found = run(tmp_path, {
        "pkg/attn.py": """
            from pkg.layers.linear import ColumnParallelLinear


            class Attention:
                def __init__(self, quant_config):
                    self.qkv_proj = ColumnParallelLinear(8, 24, quant_config=quant_config)
        """,
        "pkg/block.py": """
            from pkg.attn import Attention


            class Mixer:
                def __init__(self, quant_config):
                    self.attn = Attention(quant_config)


            class Block:
                def __init__(self, quant_config):
                    self.mixer = Mixer(quant_config)

                def forward(self, x):
                    y = x.to(self.mixer.attn.qkv_proj.weight.dtype)
                    z = x.to(self.mixer.attn.weight.dtype)  # Attention is no layer
                    return y, z
        """,
    })
    assert sites(found) == [("pkg/block.py", "x.to(self.mixer.attn.qkv_proj.weight.dtype)")]


# ---- quant_config -----------------------------------------------------------------------------
def test_quant_config_none_or_absent_is_never_quantized(tmp_path):
    found = run(tmp_path, {
        "pkg/layers/unquantized.py": """
            from .linear import ReplicatedLinear as _R
            from .linear import RowParallelLinear


            class GateLinear(RowParallelLinear):
                def __init__(self, n, m):
                    super().__init__(n, m, quant_config=None)
        """,
        "pkg/m.py": """
            from pkg.layers.linear import ColumnParallelLinear
            from pkg.layers.unquantized import GateLinear


            class M:
                def __init__(self, quant_config):
                    self.a = ColumnParallelLinear(8, 8, quant_config=None)
                    self.b = ColumnParallelLinear(8, 8)
                    self.c = GateLinear(8, 8)
                    self.d = ColumnParallelLinear(8, 8, quant_config=quant_config)
                    self.e = ColumnParallelLinear(8, 8, **kwargs_from_somewhere)

                def forward(self, x):
                    a = x.to(self.a.weight.dtype)
                    b = x.to(self.b.weight.dtype)
                    c = x.to(self.c.weight.dtype)
                    d = x.to(self.d.weight.dtype)
                    e = x.to(self.e.weight.dtype)
                    return a, b, c, d, e
        """,
    })
    # Only the layers that may be handed a quant config: d (explicitly), e (through **kwargs).
    assert sites(found) == [("pkg/m.py", "x.to(self.d.weight.dtype)"), ("pkg/m.py", "x.to(self.e.weight.dtype)")]


def test_quant_config_on_an_unseen_class_is_evidence(tmp_path):
    """A class outside the scan built with `quant_config=` is trusted to be quantizable; a class
    the scan defines outside the hierarchy is not, whatever it is given."""
    found = run(tmp_path, {"pkg/m.py": """
        from otherlib.layers import FancyLinear
        from torch import nn


        class Norm(nn.Module):
            pass


        class M:
            def __init__(self, quant_config):
                self.fancy = FancyLinear(8, 8, quant_config=quant_config)
                self.norm = Norm(8, quant_config=quant_config)

            def forward(self, x):
                return x.to(self.fancy.weight.dtype), x.to(self.norm.weight.dtype)
    """})
    assert sites(found) == [("pkg/m.py", "x.to(self.fancy.weight.dtype)")]


def test_embeddings_and_heads_are_quantizable_like_any_layer(tmp_path):
    """vLLM preset: VocabParallelEmbedding and ParallelLMHead (and subclasses) built with a quant
    config are quantizable (CT WNA16 and GGUF embeddings have no `.weight`, ModelOpt Q8_0 keeps a
    uint8 one); a configured `not-quantizable` class is not."""
    found = run(tmp_path, {
        "pkg/emb.py": """
            from vllm.model_executor.layers.vocab_parallel_embedding import ParallelLMHead


            class TiedHead(ParallelLMHead):
                pass


            class Table:
                pass
        """,
        "pkg/m.py": """
            from vllm.model_executor.layers.vocab_parallel_embedding import VocabParallelEmbedding
            from pkg.emb import Table, TiedHead


            class M:
                def __init__(self, quant_config):
                    self.embed = VocabParallelEmbedding(100, 8, quant_config=quant_config)
                    self.head = TiedHead(100, 8, quant_config=quant_config)
                    self.table = Table(100, 8, quant_config=quant_config)

                def forward(self, x):
                    return (x.to(self.embed.weight.dtype), x.to(self.head.weight.dtype),
                            x.to(self.table.weight.dtype))
        """,
    }, preset="vllm", not_quantizable=["pkg.emb.Table"])
    assert [f.expression for *_, f in found] == ["x.to(self.embed.weight.dtype)", "x.to(self.head.weight.dtype)"]


def test_exempt_classes_and_functions(tmp_path):
    found = run(tmp_path, {"pkg/quant.py": """
        from pkg.layers.linear import LinearBase


        class QuantMethodBase:
            pass


        class Fp8Method(QuantMethodBase):
            def apply(self, layer: LinearBase, x):
                return x.to(layer.weight.dtype)


        class Loader:
            def load_weights(self, layer: LinearBase, x):
                return x.to(layer.weight.dtype)

            def forward(self, layer: LinearBase, x):
                return x.to(layer.weight.dtype)


        class Kernel:
            # Structure alone says storage code: its methods are handed the layer they own.
            def process_weights_after_loading(self, layer: LinearBase):
                pass

            def apply_weights(self, layer: LinearBase, x):
                return x.to(layer.weight.dtype)
    """}, exempt_classes=["pkg.quant.QuantMethodBase"])
    assert [(p, f.scope) for p, _line, _c, f in found] == [("pkg/quant.py", "Loader.forward")]


# ---- name heuristics ------------------------------------------------------------------------------
NAMED_ONLY = {"pkg/m.py": """
    from torch import nn


    class Block:
        def __init__(self, layers):
            self.o_proj = layers["o_proj"]
            self.out_proj = nn.Linear(8, 8)
            self.norm = layers["norm"]

        def forward(self, x):
            a = x.to(self.o_proj.weight.dtype)
            b = x.to(self.out_proj.weight.dtype)
            c = x.to(self.norm.weight.dtype)
            return a, b, c
"""}


def test_name_heuristics_are_off_by_default(tmp_path):
    assert run(tmp_path, NAMED_ONLY) == []


def test_name_heuristics_report_low_confidence_when_on(tmp_path):
    found = run(tmp_path, NAMED_ONLY, name_heuristics=True)
    # `o_proj` did not resolve: low confidence. `out_proj` resolved to nn.Linear built without a
    # quant config, so its name counts for nothing; `norm` matches no pattern.
    assert [(p, f.expression, conf) for p, _line, conf, f in found] == [
        ("pkg/m.py", "x.to(self.o_proj.weight.dtype)", "low")]
    assert "looks like a projection layer" in found[0][3].evidence[-1].message


def test_functions_inside_any_compound_statement_are_checked():
    from dtype_lint.api import check_source

    src = (
        "from vllm.model_executor.layers.linear import LinearBase\n"
        "async def f(layer: LinearBase, x, y):\n"
        "    async with y:\n"
        "        try:\n"
        "            pass\n"
        "        except ValueError:\n"
        "            def g(layer: LinearBase):\n"
        "                return x.to(layer.weight.dtype)\n"
        "    match x:\n"
        "        case 1:\n"
        "            def h(layer: LinearBase):\n"
        "                return x.to(layer.weight.dtype)\n"
    )
    assert [(f.span.line, f.scope) for f in check_source(src)] == [(8, "f.g"), (12, "f.h")]


def test_bracketed_imports_over_several_lines_are_read_whole():
    # Black's `from a import (` over lines, with and without what sends the header reader to its
    # character walk (a comment, a string, a second bracket, a statement after `)` on its line).
    text = ("from pkg.a import (\n    X,\n    Y as Z,\n)\n"
            "from pkg.b import (P,  # a comment\n    Q)\n"
            "from pkg.c import (\n    R,\n); from pkg.d import S\n"
            "from pkg.e import (\n    T, U)\nclass K(\n    X,\n):\n    pass\n")
    header = extract_header(text, "m", "m.py", False)
    assert header.imports == {"X": "pkg.a.X", "Z": "pkg.a.Y", "P": "pkg.b.P", "Q": "pkg.b.Q", "R": "pkg.c.R",
                              "S": "pkg.d.S", "T": "pkg.e.T", "U": "pkg.e.U"}
    assert header.classes == {"K": (["X"], 12)}


def test_the_names_headers_import_are_one_object_per_name():
    """Thousands of modules import the same names: each header holds the one interned string of
    each local name and target, whether the fast path or a parse of the statement read it."""
    fast = extract_header("import torch.nn\nimport numpy as np\nfrom .linear import Linear as L\n",
                          "pkg.layers.a", "pkg/layers/a.py", False)
    parsed = extract_header('import torch.nn  # c\nimport numpy as np  # c\nfrom .linear import (Linear as L,  # c\n)\n',
                            "pkg.layers.b", "pkg/layers/b.py", False)
    assert fast.imports == parsed.imports == {"torch": "torch", "np": "numpy", "L": "pkg.layers.linear.Linear"}
    for local, target in fast.imports.items():
        other = next(k for k in parsed.imports if k == local)
        assert other is local and parsed.imports[local] is target


def test_the_importers_of_a_name_are_every_import_of_it():
    """The storage model's constructions read which modules import a name (a census built once per
    run: tests/test_import_census.py): (module, target) pairs, in module order."""
    from dtype_lint.analysis.storage.constructions import _importers

    headers = [extract_header("from pkg.layers import Linear\n", "pkg.a", "pkg/a.py", False),
               extract_header("from pkg.layers import Linear as L\nimport torch\n", "pkg.b", "pkg/b.py", False)]
    index = QuantizableLayerIndex(headers, [], [])
    assert _importers(index, "Linear") == [("pkg.a", "pkg.layers.Linear"), ("pkg.b", "pkg.layers.Linear")]
    assert _importers(index, "torch") == [("pkg.b", "torch")]
