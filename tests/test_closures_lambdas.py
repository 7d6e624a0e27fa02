"""Lambdas and closures at any depth read the function's locals as code beside them does: a cast in
one to a weight's dtype (directly, or through a local of the function) is a site, found and fixed
like one in the function's own statements. Before, a function's walk entered no lambda and only
the `def`s that were statements of its body or of its blocks, so `lambda t: t.to(d)` beside `d =
L.weight.dtype`, or the same cast in a `def` inside a nested `def`, was never reported (found by
an adversarial round: no fix was wrong there; they were missed). A closure taking one of the
function's parameter names (`lambda self: ...`) is not entered: its `self` is not the method's.

Each shape is fixed with `--fix` and the fixed module run on every storage the helper's family
can meet: float and complex storage cast as before, packed storage (Marlin's int32, NVFP4's
uint8) and a layer without `.weight` (AWQ) to the layer's model dtype, where the old code cast
to the packed dtype or raised."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")

from cli_runner import dtl  # noqa: E402
from tiny_project import (  # noqa: E402
    STUB_MODEL_HEAD,
    assert_fixed_model_runs,
    fresh_import,
    stub_project,
    tree_bytes,
)

HEAD = STUB_MODEL_HEAD + "    def forward(self, x, flag=True):\n        out = x\n"

ALIAS = "d = self.proj.weight.dtype\n"
SHAPES = {
    "lambda": "f = lambda t: t.to(self.proj.weight.dtype)\nout = f(x)",
    "lambda on a local": ALIAS + "f = lambda t: t.to(d)\nout = f(x)",
    "lambda under if": ALIAS + "if flag:\n    f = lambda t: t.to(d)\n    out = f(x)",
    "lambda as an argument": ALIAS + "out = list(map(lambda t: t.to(d), [x]))[0]",
    "lambda in a lambda": ALIAS + "f = lambda t: (lambda u: u.to(d))(t)\nout = f(x)",
    "lambda in a closure": ALIAS + "def outer(y):\n    g = lambda z: z.to(d)\n    return g(y)\nout = outer(x)",
    "closure two deep": ALIAS + "def outer(y):\n    def inner(z):\n        return z.to(d)\n    return inner(y)\nout = outer(x)",
    "closure under a block of a closure": ALIAS + (
        "def outer(y):\n    if flag:\n        def inner(z):\n            return z.to(d)\n"
        "        return inner(y)\n    return y\nout = outer(x)"),
}


def model(shape: str) -> str:
    return HEAD + textwrap.indent(SHAPES[shape], " " * 8) + "\n        return out\n"


def _without_weight(layer):
    """An AWQ/GPTQ-like layer: its `weight` gone, its model dtype kept."""
    del layer.weight
    return layer


@pytest.mark.parametrize("shape", sorted(SHAPES))
def test_a_cast_in_a_lambda_or_a_deeper_closure_is_found_and_its_fix_runs(tmp_path: Path, shape: str):
    root = stub_project(tmp_path, model(shape))
    layer = fresh_import(root, "proj.layers").QLinear
    before = fresh_import(root)
    x = torch.ones(2, dtype=torch.float32)
    assert before.Model(layer(torch.int32)).forward(x).dtype == torch.int32  # the bug: packed dtype
    with pytest.raises(AttributeError):
        before.Model(_without_weight(layer(torch.bfloat16))).forward(x)
    found = dtl(root, "check", "proj", "--no-cache", "--output-format", "concise")
    lines = [line for line in found.stdout.splitlines() if "DTL001" in line]
    assert found.returncode == 1 and len(lines) == 1 and "[*]" in lines[0], found.stdout
    fixed = dtl(root, "check", "proj", "--fix", "--no-cache")
    assert fixed.returncode == 0, fixed.stdout + fixed.stderr
    assert_fixed_model_runs(before, fresh_import(root), layer, x)


SHADOWS = (
    HEAD +
    "        d = self.proj.weight.dtype\n"
    "        f = lambda d: x.to(d)\n"  # its own `d`: the dtype it is handed
    "        g = lambda self: x.to(self.proj.weight.dtype)\n"  # its own `self`: not entered
    "        def outer(y):\n"
    "            def inner(d):\n"  # a parameter two scopes down
    "                return y.to(d)\n"
    "            return inner(torch.float16)\n"
    "        return f(torch.float16), g(self), outer(x), d\n"
)


def test_a_lambda_or_deeper_closure_s_own_names_are_not_the_function_s(tmp_path: Path):
    """`lambda d: x.to(d)` beside `d = L.weight.dtype` casts to its argument, and `lambda self:`
    reads the layer of whatever object it is handed, not the method's: nothing is reported, and
    `--fix` leaves the file alone."""
    root = stub_project(tmp_path, SHADOWS)
    found = dtl(root, "check", "proj", "--no-cache", "--output-format", "concise")
    assert found.returncode == 0 and "DTL001" not in found.stdout, found.stdout
    before = tree_bytes(root)
    assert dtl(root, "check", "proj", "--fix", "--no-cache").returncode == 0
    assert tree_bytes(root) == before


def test_dtl003_says_a_read_in_a_closure_of_init_runs_later(tmp_path: Path):
    """DTL003 calls out a read in `__init__` (it is not a forward path); a read in a lambda defined
    there (a callback handed to a pooler, a hook) runs when it is called, and is said to be in a
    closure defined in `__init__`."""
    code = (STUB_MODEL_HEAD.rstrip("\n") + "\n"
            "        self.rows = lambda: self.proj.weight\n"
            "        self.width = self.proj.weight.shape[-1]\n")
    root = stub_project(tmp_path, code)
    found = dtl(root, "check", "proj", "--no-cache", "--select", "DTL003", "--output-format", "concise")
    lines = {line.split(":")[1]: line for line in found.stdout.splitlines() if "DTL003" in line}
    assert sorted(lines) == ["10", "9"], found.stdout
    assert "(in a closure defined in `__init__`)" in lines["9"]
    assert "(in `__init__`)" in lines["10"] and "closure" not in lines["10"]


HF_MODEL = '''\
from torch import nn
from transformers import PreTrainedModel


class Block(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.proj = nn.Linear(64, 64)

    def forward(self, hidden_states):
        d = self.proj.weight.dtype
        f = lambda t: t.to(d)
        g = lambda t: t.to(self.proj.weight.dtype)
        return self.proj(f(hidden_states)) + self.proj(g(hidden_states))


class Model(PreTrainedModel):
    def __init__(self, config):
        super().__init__(config)
        self.block = Block(config)
'''

HF_RUN = r"""
import json, sys
import torch
sys.path.insert(0, sys.argv[1])
from model import Block

torch.manual_seed(0)
block = Block(None).eval()
linear = block.proj
x = torch.randn(4, 64)
with torch.no_grad():
    twin = block(x)
    out = {}
    for kind in ("bnb-4bit", "bnb-8bit"):
        block.proj = bnb_layer(linear, kind)
        try:
            got = block(x)
            out[kind] = [str(got.dtype), ((got.float() - twin).norm() / twin.norm()).item()]
        except Exception as e:
            out[kind] = ["raises", f"{type(e).__name__}: {e}"]
        block.proj = linear
print(json.dumps(out))
"""


def test_the_hf_familys_fix_in_a_lambda_runs_on_real_bitsandbytes_layers(tmp_path: Path):
    """In Hugging Face code the family's helper fixes a lambda's cast (`t.to(d or t.dtype)`, the
    receiver a name): the fixed block, handed real Linear4bit / Linear8bitLt layers, matches its
    float twin, where the code before cast the activation to uint8 / int8."""
    pytest.importorskip("bitsandbytes", reason="the `hf` extra (pip install -e '.[hf]') is not installed")
    from tiny_project import run_on_quantized_layers, write_tree

    root = write_tree(tmp_path / "p", {"model.py": HF_MODEL})
    before = run_on_quantized_layers(HF_RUN, root)
    assert all(before[kind][0] != "torch.float32" for kind in before), before
    found = dtl(root, "check", ".", "--no-cache", "--output-format", "concise")
    assert found.stdout.count("DTL001 [*]") == 2, found.stdout
    fixed = dtl(root, "check", ".", "--fix", "--no-cache")
    assert fixed.returncode == 0, fixed.stdout + fixed.stderr
    assert "lambda t: t.to(d or t.dtype)" in (root / "model.py").read_text(encoding="utf-8")
    after = run_on_quantized_layers(HF_RUN, root)
    assert after["bnb-4bit"][0] == "torch.float32" and after["bnb-4bit"][1] < 0.5, after
    assert after["bnb-8bit"][0] == "torch.float32" and after["bnb-8bit"][1] < 0.2, after
