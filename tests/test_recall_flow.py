"""Issue #39, recall where the bug goes next: each site counted once, messages that name the sink
truthfully, fixes of pure receivers, storage code known by what it does, dtypes kept on `self`.

Every fixture here is our own small code shaped like the real sites the issue cites."""

from __future__ import annotations

import json
import textwrap

from cli_runner import dtl
from tiny_project import PYPROJECT, write_tree

from dtype_lint.api import check_source

# A site inside a nested `def` whose layer the nested function builds itself: both the walk of
# `run` (a `def` statement of its body is entered) and the nested function's own walk meet it.
NESTED = textwrap.dedent("""\
    import torch
    from vllm.model_executor.layers.linear import ColumnParallelLinear


    def run(xs, quant_config):
        def cast(x):
            inner = ColumnParallelLinear(4, 4, quant_config=quant_config)
            return x.to(inner.weight.dtype)

        def cast_typed(x, layer: ColumnParallelLinear):
            return x.to(layer.weight.dtype)

        return [cast(x) for x in xs]
""")


def test_a_site_in_a_nested_function_is_reported_once():
    findings = check_source(NESTED, filename="nested.py", settings={"select": ["ALL"]})
    assert [(f.code, f.span.line, f.scope) for f in findings] == [
        ("DTL001", 8, "run.cast"), ("DTL001", 11, "run.cast_typed")]


def test_a_site_in_a_nested_function_is_fixed_and_counted_once(tmp_path):
    write_tree(tmp_path, {"pyproject.toml": PYPROJECT, "proj/__init__.py": "", "proj/nested.py": NESTED})
    run = dtl(tmp_path, "check", ".", "--no-cache", "--fix", "--show-fixes")
    assert run.returncode == 0, run.stderr
    assert "2 × DTL001" in run.stdout and "(2 fixed, 0 remaining)" in run.stdout, run.stdout
    fixed = (tmp_path / "proj/nested.py").read_text()
    assert fixed.count("get_layer_input_dtype(inner, True) or x.dtype") == 1
    assert fixed.count("get_layer_input_dtype(layer, True) or x.dtype") == 1


def test_json_lists_a_nested_site_once(tmp_path):
    write_tree(tmp_path, {"pyproject.toml": PYPROJECT, "proj/__init__.py": "", "proj/nested.py": NESTED})
    run = dtl(tmp_path, "check", ".", "--no-cache", "--output-format", "json", "--exit-zero")
    report = json.loads(run.stdout)
    lines = [(f["path"], f["line"], f["col"]) for f in report["findings"]]
    assert len(lines) == len(set(lines)) == 2 and report["summary"]["fixable"] == 2


# A weight rewrite in a quantizer-adjacent helper, and an activation cast, both handed the
# storage dtype of a quantizable layer.
SINKS = textwrap.dedent("""\
    import torch
    from vllm.model_executor.layers.linear import ColumnParallelLinear


    def requantize(weight, dtype):
        weight = weight.to(dtype)
        return weight


    def rescale(hidden, dtype):
        return hidden.to(dtype)


    class Block(torch.nn.Module):
        def __init__(self, proj: ColumnParallelLinear, gate: ColumnParallelLinear):
            super().__init__()
            self.proj = proj
            self.gate = gate

        def load(self, loaded):
            return requantize(loaded, self.proj.weight.dtype)

        def forward(self, x):
            return rescale(x, self.proj.weight.dtype)

        def rewrite(self):
            stored = self.gate.weight
            return stored.t().to(self.proj.weight.dtype)

        def route(self, topk_weights):
            return topk_weights.t().to(self.proj.weight.dtype)
""")


def _dtl001_messages(code: str) -> dict[int, str]:
    return {f.span.line: f.message for f in check_source(code, filename="sinks.py", settings={"select": ["DTL001"]})}


def test_a_weight_rewrite_is_not_called_an_activation_cast():
    messages = _dtl001_messages(SINKS)
    assert "which casts a weight to it" in messages[21] and "activation" not in messages[21]
    assert "which casts an activation to it" in messages[24]
    assert messages[28].startswith("weight cast to `self.proj.weight.dtype`")
    # Plural `*_weights` are routing or attention weights: activations.
    assert messages[31].startswith("activation cast to `self.proj.weight.dtype`")


# Casts whose receivers are calls without side effects (shaped like Gemma-3n's rsqrt scale and
# a relative-position mask): `--fix` rewrites them with `or <receiver>.dtype`.
PURE_ATTN = textwrap.dedent("""\
    import torch

    from proj.layers import QLinear


    class Scaler(torch.nn.Module):
        def __init__(self, proj: QLinear):
            super().__init__()
            self.proj = proj

        def scale(self):
            return torch.rsqrt(torch.tensor(2.0)).to(self.proj.weight.dtype)

        def mask(self, same):
            return same.unsqueeze(-1).to(self.proj.weight.dtype)

        def rows(self, table, idx):
            return table[idx].transpose(0, 1).to(self.proj.weight.dtype)
""")

# Storages a backend can leave (packed, fp8, missing) and the plain float and complex ones.
STORAGES = ["int32", "uint8", "int8", "float8_e4m3fn", "missing", "float16", "bfloat16", "float32", "complex64"]


def _layer(layers_module, storage: str):
    import torch

    layer = layers_module.QLinear(torch.float16 if storage == "missing" else getattr(torch, storage))
    if storage == "missing":
        del layer.weight  # AWQ/GPTQ: no `.weight` at all
    return layer


def _outcomes(root, storage: str) -> dict[str, object]:
    """Each method's result (dtype and values) on a layer of this storage, or the error it raises."""
    import torch
    from test_fix_verification import imported

    module = imported(root)
    layers = __import__("proj.layers", fromlist=["QLinear"])
    scaler = module.Scaler(_layer(layers, storage))
    calls = {"scale": lambda: scaler.scale(), "mask": lambda: scaler.mask(torch.tensor([True, False])),
             "rows": lambda: scaler.rows(torch.arange(12.0).reshape(3, 2, 2), 1)}
    out: dict[str, object] = {}
    for name, call in calls.items():
        try:
            result = call()
            out[name] = (result.dtype, result.float().tolist() if not result.is_complex() else result.real.tolist())
        except (AttributeError, RuntimeError, TypeError) as error:
            out[name] = type(error).__name__
    return out


def test_pure_receivers_are_fixed_and_the_fixed_code_runs_identically(tmp_path):
    import shutil

    import torch
    from tiny_project import STUB_LAYERS, STUB_PYPROJECT

    root = write_tree(tmp_path / "fixed", {"pyproject.toml": STUB_PYPROJECT, "proj/__init__.py": "",
                                           "proj/layers.py": STUB_LAYERS, "proj/attn.py": PURE_ATTN})
    original = tmp_path / "original"
    shutil.copytree(root, original)
    run = dtl(root, "check", ".", "--no-cache", "--fix", "--output-format", "concise")
    assert run.returncode == 0 and "(3 fixed, 0 remaining)" in run.stdout, run.stdout + run.stderr
    fixed = (root / "proj/attn.py").read_text()
    assert "torch.rsqrt(torch.tensor(2.0)).dtype" in fixed and "same.unsqueeze(-1).dtype" in fixed
    assert "table[idx].transpose(0, 1).dtype" in fixed
    shutil.copy(root / "proj/dtypes.py", original / "proj/dtypes.py")  # the helper, to ask it below
    helper = __import__("test_fix_verification").imported(root, "proj.dtypes").get_layer_input_dtype
    unpacked: list[str] = []
    for storage in STORAGES:
        before, after = _outcomes(original, storage), _outcomes(root, storage)
        layers = __import__("proj.layers", fromlist=["QLinear"])
        decided = helper(_layer(layers, storage), True)
        if decided is None or str(decided) == f"torch.{storage}":  # unpacked: nothing may change
            unpacked.append(storage)
            assert after == before, storage
            continue
        # Packed or missing: the fixed code casts to what the helper decides, on the same values.
        assert decided == torch.bfloat16, storage
        for name, result in after.items():
            assert isinstance(result, tuple) and result[0] == torch.bfloat16, (storage, name, result)
            floats = _outcomes(original, "float32")[name]
            assert result[1] == torch.tensor(floats[1]).to(torch.bfloat16).float().tolist(), (storage, name)
    # Complex storage is not packed: the helper keeps the weight's own dtype (#36's template semantics).
    assert unpacked == ["float8_e4m3fn", "float16", "bfloat16", "float32", "complex64"]


# A weight swapped in by a helper not named for storage: what it does with the allocation makes it
# storage code; a scratch buffer and a scale parameter beside it stay findings.
REGISTERED = textwrap.dedent("""\
    import torch
    from torch import nn
    from vllm.model_executor.layers.linear import ColumnParallelLinear


    class Swapper(nn.Module):
        def __init__(self, proj: ColumnParallelLinear):
            super().__init__()
            self.proj = proj

        def swap_in(self, layer):
            source = self.proj.weight
            fresh = nn.Parameter(torch.empty(source.shape, dtype=source.dtype, device=source.device),
                                 requires_grad=False)
            del layer.weight
            layer.register_parameter("weight", fresh)

        def assign(self, layer):
            buf = torch.zeros(4, dtype=self.proj.weight.dtype)
            layer.weight = nn.Parameter(buf)

        def beside(self, n):
            scratch = torch.empty(n, dtype=self.proj.weight.dtype)
            self.scale = nn.Parameter(torch.ones(n, dtype=self.proj.weight.dtype))
            return scratch
""")


def test_an_allocation_registered_as_a_layers_weight_is_storage_code():
    findings = check_source(REGISTERED, filename="swap.py", settings={"select": ["DTL002"]})
    assert [(f.span.line, f.scope) for f in findings] == [(23, "Swapper.beside"), (24, "Swapper.beside")]


# A dtype stored on `self` from a quantizable layer's weight, read in another method of the class
# and, through the attribute chain `self.tower.dtype`, in another class of another module.
TOWER = textwrap.dedent("""\
    import torch
    from vllm.model_executor.layers.linear import ColumnParallelLinear


    class Tower(torch.nn.Module):
        def __init__(self, hidden, quant_config=None):
            super().__init__()
            self.head = ColumnParallelLinear(hidden, hidden, quant_config=quant_config)
            self.dtype = self.head.weight.dtype
            self.norm_dtype = torch.float32

        def forward(self, pixels):
            return self.head(pixels.to(self.dtype))

        def normed(self, pixels):
            return pixels.to(self.norm_dtype)
""")

MODEL = textwrap.dedent("""\
    import torch

    from proj.tower import Tower


    class Model(torch.nn.Module):
        def __init__(self, hidden, quant_config=None):
            super().__init__()
            self.tower = Tower(hidden, quant_config=quant_config)

        def embed(self, batch):
            pixels = batch["pixels"].type(
                self.tower.dtype
            )
            return self.tower(pixels)
""")


def test_a_dtype_stored_on_self_is_followed_within_and_across_classes(tmp_path):
    write_tree(tmp_path, {"pyproject.toml": PYPROJECT, "proj/__init__.py": "", "proj/tower.py": TOWER,
                          "proj/model.py": MODEL})
    run = dtl(tmp_path, "check", ".", "--no-cache", "--output-format", "json", "--exit-zero")
    found = sorted((f["path"], f["line"], f["message"].split(",")[0]) for f in json.loads(run.stdout)["findings"])
    assert found == [
        ("proj/model.py", 12, "activation cast to `self.tower.dtype`"),
        ("proj/tower.py", 13, "activation cast to `self.dtype`"),
    ], run.stdout
    messages = {f["line"]: f for f in json.loads(run.stdout)["findings"]}
    assert "which holds `self.tower.head.weight.dtype`" in messages[12]["message"]
    assert any(e["line"] == 9 and e["path"] == "proj/tower.py" for e in messages[12]["evidence"])
