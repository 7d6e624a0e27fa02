"""Issue #39, value flow where new code keeps its values: on `self` (a dtype, a weight or a layer
stored in one method and read in another, or through the attribute chain in another class), two
calls down (a dtype handed on to a function that allocates or casts with it), and through a model
state typed only `nn.Module`.

Every fixture is our own small code shaped like the real sites the issue cites (vLLM 0.34.0's
MiniMax-M3 vision tower, DiffusionGemma's sampler and model state). Each shape has a control where
the layer cannot be quantized (built with `quant_config=None`, or a plain torch layer) or where the
value cannot be known, and nothing may be reported there."""

from __future__ import annotations

import json
import shutil
import textwrap
from pathlib import Path

import pytest
from cli_runner import dtl
from tiny_project import PYPROJECT, STUB_LAYERS, STUB_PYPROJECT, fresh_import, write_tree


def _findings(root: Path, *select: str) -> list[tuple[str, str, int, str]]:
    """(code, path, line, message) of a zero-configuration JSON run (the rules `select` names, or the defaults)."""
    args = ["check", ".", "--no-cache", "--output-format", "json", "--exit-zero"]
    if select:
        args += ["--select", ",".join(select)]
    run = dtl(root, *args)
    assert run.returncode == 0, run.stderr
    return sorted((f["code"], f["path"], f["line"], f["message"]) for f in json.loads(run.stdout)["findings"])


def _project(root: Path, files: dict[str, str]) -> Path:
    return write_tree(root, {"pyproject.toml": PYPROJECT, "proj/__init__.py": "",
                             **{path: textwrap.dedent(text) for path, text in files.items()}})


# ---- values kept on `self` ----------------------------------------------------------------------

# A tower that keeps its projector's weight dtype, its weight, and the layer under a second name,
# each read in another method; a model of another module reads the dtype through `self.tower`.
TOWER = """\
    import torch
    from vllm.model_executor.layers.linear import ColumnParallelLinear


    class Tower(torch.nn.Module):
        def __init__(self, hidden, quant_config=None):
            super().__init__()
            self.proj = {build}
            self.dtype = self.proj.weight.dtype
            self.w = self.proj.weight
            self.head = self.proj

        def by_dtype(self, pixels):
            return pixels.to(self.dtype)

        def by_weight(self, pixels):
            return pixels.to(self.w.dtype)

        def by_alias(self, pixels):
            return pixels.to(self.head.weight.dtype)

        def scratch(self, n):
            return torch.empty(n, dtype=self.w.dtype)
"""

TOWER_MODEL = """\
    import torch

    from proj.tower import Tower


    class Model(torch.nn.Module):
        def __init__(self, hidden, quant_config=None):
            super().__init__()
            self.tower = Tower(hidden, quant_config=quant_config)

        def embed(self, batch):
            return batch["pixels"].type(self.tower.dtype)

        def dummy(self, n):
            return torch.zeros(
                n,
                3,
                dtype=self.tower.dtype,
            )
"""

QUANTIZABLE = "ColumnParallelLinear(hidden, hidden, quant_config=quant_config)"


@pytest.mark.parametrize("build", [QUANTIZABLE, "ColumnParallelLinear(hidden, hidden, quant_config=None)",
                                   "torch.nn.Conv2d(3, hidden, 2)"], ids=["quantizable", "config-none", "conv"])
def test_values_kept_on_self_are_followed_only_where_the_layer_is_quantizable(tmp_path, build):
    root = _project(tmp_path, {"proj/tower.py": TOWER.format(build=build), "proj/model.py": TOWER_MODEL})
    found = [(code, path, line, message.split(",")[0]) for code, path, line, message in _findings(root)]
    if build != QUANTIZABLE:
        assert found == []
        return
    assert found == [
        ("DTL001", "proj/model.py", 12, "activation cast to `self.tower.dtype`"),
        ("DTL001", "proj/tower.py", 14, "activation cast to `self.dtype`"),
        ("DTL001", "proj/tower.py", 17, "activation cast to `self.w.dtype`"),
        ("DTL001", "proj/tower.py", 20, "activation cast to `self.head.weight.dtype`"),
        ("DTL002", "proj/model.py", 15, "`torch.zeros(..."),
        ("DTL002", "proj/tower.py", 23, "`torch.empty(..."),
    ]


def test_a_kept_weight_names_where_it_was_stored(tmp_path):
    root = _project(tmp_path, {"proj/tower.py": TOWER.format(build=QUANTIZABLE), "proj/model.py": TOWER_MODEL})
    run = dtl(root, "check", ".", "--no-cache", "--output-format", "json", "--exit-zero")
    by_line = {(f["path"], f["line"]): f for f in json.loads(run.stdout)["findings"]}
    weight = by_line[("proj/tower.py", 17)]
    assert "which holds `self.proj.weight.dtype`" in weight["message"]
    assert any(e["message"] == "`self.w = self.proj.weight` stores the weight" and e["line"] == 10
               for e in weight["evidence"])
    alias = by_line[("proj/tower.py", 20)]
    assert any(e["message"] == "`self.head = self.proj`" and e["line"] == 11 for e in alias["evidence"])


def test_a_second_name_for_two_different_layers_is_not_followed(tmp_path):
    """`self.head` is one layer on one path and another on the other: which one is not known."""
    tower = TOWER.format(build=QUANTIZABLE).replace(
        "            self.head = self.proj\n",
        "            self.head = self.proj\n            if hidden > 8:\n                self.head = self.norm\n"
        "            self.norm = torch.nn.LayerNorm(hidden)\n")
    root = _project(tmp_path, {"proj/tower.py": tower, "proj/model.py": TOWER_MODEL})
    assert all("self.head" not in message for _code, _path, _line, message in _findings(root))


# The fix of a cast through a second name runs on the layer the name holds: before and after,
# on every storage a backend can leave.
ALIAS_MODEL = """\
    import torch

    from proj.layers import QLinear


    class Head(torch.nn.Module):
        def __init__(self, proj: QLinear):
            super().__init__()
            self.proj = proj
            self.head = self.proj

        def forward(self, x):
            return x.to(self.head.weight.dtype)
"""

STORAGES = ["int32", "uint8", "int8", "float8_e4m3fn", "missing", "float16", "bfloat16", "float32", "complex64"]


def _outcome(root: Path, storage: str) -> object:
    """What `Head(layer).forward(x)` returns (its dtype and values) on a layer of `storage`, or the error it raises."""
    import torch

    module = fresh_import(root)
    layers = fresh_import(root, "proj.layers")
    layer = layers.QLinear(torch.float16 if storage == "missing" else getattr(torch, storage))
    if storage == "missing":
        del layer.weight  # AWQ/GPTQ: no `.weight` at all
    x = torch.tensor([0.5, -1.25, 3.0])
    try:
        result = module.Head(layer).forward(x)
    except (AttributeError, RuntimeError, TypeError) as error:
        return type(error).__name__
    return result.dtype, (result.real if result.is_complex() else result.float()).tolist()


def test_the_fix_through_a_second_name_runs_like_the_original_on_unpacked_storage(tmp_path):
    import torch

    root = write_tree(tmp_path / "fixed", {"pyproject.toml": STUB_PYPROJECT, "proj/__init__.py": "",
                                           "proj/layers.py": STUB_LAYERS, "proj/model.py": textwrap.dedent(ALIAS_MODEL)})
    original = tmp_path / "original"
    shutil.copytree(root, original)
    run = dtl(root, "check", ".", "--no-cache", "--fix", "--output-format", "concise")
    assert run.returncode == 0 and "(1 fixed, 0 remaining)" in run.stdout, run.stdout + run.stderr
    assert "get_layer_input_dtype(self.head, True)" in (root / "proj/model.py").read_text()
    changed = {}
    for storage in STORAGES:
        before, after = _outcome(original, storage), _outcome(root, storage)
        if before != after:
            changed[storage] = (before, after)
    # Packed and missing weights: the activation keeps the compute dtype instead of being cast to
    # an integer (or raising); fp8, float and complex storages behave exactly as before.
    values = [0.5, -1.25, 3.0]
    assert changed == {
        "int32": ((torch.int32, [0.0, -1.0, 3.0]), (torch.bfloat16, values)),
        "uint8": ((torch.uint8, [0.0, 255.0, 3.0]), (torch.bfloat16, values)),
        "int8": ((torch.int8, [0.0, -1.0, 3.0]), (torch.bfloat16, values)),
        "missing": ("AttributeError", (torch.bfloat16, values)),
    }, changed


# ---- two calls down -----------------------------------------------------------------------------

# A weight's dtype handed to a function that hands it on to one that allocates or casts with it,
# and a weight kept by a constructor whose method hands its dtype on (`sample_row_stats`' shape).
TWO_CALLS = """\
    import torch
    from vllm.model_executor.layers.linear import ColumnParallelLinear


    def allocate(n, out_dtype):
        return torch.empty(n, dtype=out_dtype)


    def cast(x, target):
        return x.to(target)


    def plain(n, out_dtype):
        return torch.empty(n, dtype=torch.float32)


    def step(n, dtype):
        return allocate(n, dtype)


    def step_cast(x, dtype):
        return cast(x, dtype)


    def step_plain(n, dtype):
        return plain(n, dtype)


    def three(n, dtype):
        return step(n, dtype)


    class Sampler:
        def __init__(self, embed_weight):
            self.embed_weight = embed_weight

        def sample(self, n, compute):
            probs_dtype = self.embed_weight.dtype if compute else None
            return allocate(n, probs_dtype)


    class Block(torch.nn.Module):
        def __init__(self, quant_config=None):
            super().__init__()
            self.proj = {build}

        def forward(self, x, n):
            a = step(n, self.proj.weight.dtype)
            b = step_cast(x, self.proj.weight.dtype)
            c = step_plain(n, self.proj.weight.dtype)
            d = three(n, self.proj.weight.dtype)
            sampler = Sampler(embed_weight=self.proj.weight)
            return a, b, c, d, sampler
"""


def test_a_dtype_handed_on_is_followed_two_calls_down(tmp_path):
    root = _project(tmp_path, {"proj/two.py": TWO_CALLS.format(build=QUANTIZABLE)})
    found = {(code, line): message for code, _path, line, message in _findings(root, "DTL001", "DTL002")}
    assert sorted(found) == [("DTL001", 49), ("DTL002", 39), ("DTL002", 48), ("DTL002", 52)], found
    assert "`self.proj.weight.dtype` is passed to `step`, which allocates a tensor in it" in found[("DTL002", 48)]
    assert "`self.proj.weight.dtype` is passed to `step_cast`, which casts an activation to it" in found[("DTL001", 49)]
    assert "`self.proj.weight` is passed to `Sampler`, which allocates a tensor in its dtype" in found[("DTL002", 52)]
    # and where the kept weight's dtype is taken and handed on, in the same file (test_recall_handed_layers.py)
    assert found[("DTL002", 39)].startswith("`probs_dtype`, the dtype of `self.proj.weight`, handed to `Sampler` at "
                                            "line 52, is passed to `allocate`, which allocates a tensor in it")
    # `step_plain` hands the dtype to a function that ignores it; `three` is three calls down: neither is followed.
    run = dtl(root, "check", ".", "--no-cache", "--output-format", "json", "--exit-zero", "--select", "DTL002")
    evidence = {f["line"]: f["evidence"][0] for f in json.loads(run.stdout)["findings"]}
    assert evidence[48]["line"] == 6 and "handed on to `allocate`" in evidence[48]["message"]
    assert evidence[52]["line"] == 6 and "(parameter `embed_weight`, handed on to `allocate`)" in evidence[52]["message"]


def test_nothing_is_followed_two_calls_down_from_an_unquantized_layer(tmp_path):
    root = _project(tmp_path, {"proj/two.py": TWO_CALLS.format(build="ColumnParallelLinear(8, 8, quant_config=None)")})
    assert _findings(root, "DTL001", "DTL002") == []


# ---- a model state typed `nn.Module` ----------------------------------------------------------

# DiffusionGemma's shape: a model state holds the model as `model: nn.Module`, and hands the
# backbone's embedding weight to a sampler whose step casts to its dtype, and whose row statistics
# allocate in it. The model class that builds `self.model` is in the same file.
STATE = """\
    import torch
    from torch import nn
    from vllm.model_executor.layers.vocab_parallel_embedding import VocabParallelEmbedding

    from proj.stats import sample_stats


    class Backbone(nn.Module):
        def __init__(self, vocab, hidden, quant_config=None):
            super().__init__()
            self.embed_tokens = VocabParallelEmbedding(vocab, hidden, quant_config=quant_config)


    class ForGeneration(nn.Module):
        def __init__(self, vocab, hidden, quant_config=None):
            super().__init__()
            self.model = Backbone(vocab, hidden, quant_config={config})


    class Sampler:
        def __init__(self, embed_weight):
            self.embed_weight = embed_weight

        def sample(self, logits, compute):
            probs_dtype = self.embed_weight.dtype if compute else None
            return sample_stats(logits, probs_dtype)


    class State:
        def __init__(self, model: nn.Module):
            self.model = model

        def custom_sampler(self):
            embed_tokens = self.model.model.embed_tokens
            return Sampler(embed_weight=embed_tokens.weight)
{more}"""

STATS = """\
    import torch


    def sample_stats(logits, probs_dtype):
        return torch.empty(logits.shape, dtype=probs_dtype)
"""

ANOTHER_MODEL = """

    class Other(nn.Module):
        def __init__(self, vocab, hidden):
            super().__init__()
            self.model = nn.Embedding(vocab, hidden)
"""


def test_a_model_state_typed_nn_module_is_resolved_from_its_files_model_class(tmp_path):
    root = _project(tmp_path, {"proj/state.py": STATE.format(config="quant_config", more=""), "proj/stats.py": STATS})
    run = dtl(root, "check", ".", "--no-cache", "--output-format", "json", "--exit-zero")
    findings = json.loads(run.stdout)["findings"]
    # the handover, and where the kept weight's dtype is handed on (test_recall_handed_layers.py)
    assert sorted((f["code"], f["path"], f["line"]) for f in findings) == [("DTL002", "proj/state.py", 26),
                                                                           ("DTL002", "proj/state.py", 35)], run.stdout
    findings = [f for f in findings if f["line"] == 35]
    evidence = [(e["path"], e["line"], e["message"]) for e in findings[0]["evidence"]]
    assert evidence[0][:2] == ("proj/stats.py", 5) and "handed on to `sample_stats`" in evidence[0][2]
    assert ("proj/state.py", 17, "a value typed `nn.Module`, its `.model`: `ForGeneration` is the only module "
            "class of this file that builds `self.model`") in evidence
    assert ("proj/state.py", 11, "`self.embed_tokens = VocabParallelEmbedding(...)`") in evidence


@pytest.mark.parametrize("config, more", [("None", ""), ("quant_config", ANOTHER_MODEL)],
                         ids=["backbone-unquantized", "two-model-classes"])
def test_a_model_state_typed_nn_module_is_left_alone_when_its_model_is_not_known_quantizable(tmp_path, config, more):
    root = _project(tmp_path, {"proj/state.py": STATE.format(config=config, more=more), "proj/stats.py": STATS})
    assert _findings(root, "ALL") == []
