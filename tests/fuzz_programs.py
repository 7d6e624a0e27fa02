"""Hypothesis strategies for modules shaped like inference code, full of what a fix can trip on.

`modules()` draws a module with classes holding vLLM linear layers (so the casts are real
DTL001 sites) and functions mixing, at random: casts in every form the planner rewrites
(statement, expression, `dtype=` keyword, through a local alias), loops, branches, `with`,
`try`, nested functions, comprehensions and lambdas; and names in the way of a fix (a local, a
parameter, a module-level function, an import or a star import named like the helper; locals,
globals and `global` statements named like the variable a fix adds). Formatting varies too:
indentation unit, blank lines, comments, CRLF line breaks.
"""

from __future__ import annotations

from hypothesis import strategies as st

HELPER = "get_layer_input_dtype"
LAYER_CLASSES = ("ColumnParallelLinear", "RowParallelLinear")
ATTRS = ("kv_b_proj", "o_proj", "qkv_proj", "_gate")

# Statements that get in a fix's way, at module level.
MODULE_DECOYS = (
    f"def {HELPER}(layer, fp8_input):\n    return None\n",
    f"from somewhere.else_ import {HELPER}\n",
    "from somewhere.else_ import *\n",
    f"{HELPER} = None\n",
    "kv_b_proj_input_dtype = 'module'\n",
    f"_{HELPER} = None\n",
)
# ...and inside a function (each a list of lines, before the function's other statements).
LOCAL_DECOYS = (
    [f"{HELPER} = 3"],
    ["kv_b_proj_input_dtype = 'local'"],
    ["global kv_b_proj_input_dtype"],
    [f"from somewhere.else_ import {HELPER}"],
    [f"ys = [{HELPER} for {HELPER} in range(2)]"],
    ["try:", "    pass", f"except Exception as {HELPER}:", "    pass"],
    [f"def {HELPER}():", "    return 0"],
    [f"f = lambda {HELPER}: {HELPER}"],
)


@st.composite
def _cast(draw, receiver: str, layers: list[str]) -> list[str]:
    """Statements holding one cast of `receiver` to a layer's weight dtype."""
    layer = draw(st.sampled_from(layers))
    form = draw(st.sampled_from(["statement", "expression", "keyword", "alias", "call-arg", "device"]))
    dtype = f"{layer}.weight.dtype"
    if form == "statement":
        return [f"{receiver} = {receiver}.to({dtype})"]
    if form == "expression":
        return [f"y = torch.relu({receiver}.to({dtype}))"]
    if form == "keyword":
        return [f"{receiver} = {receiver}.to(dtype={dtype})"]
    if form == "alias":
        return [f"w = {dtype}", f"{receiver} = {receiver}.to(w)"]
    if form == "device":
        return [f"{receiver} = {receiver}.to(device='cpu', dtype={dtype})"]
    return [f"{layer}({receiver}.to({dtype}))"]


@st.composite
def _block(draw, depth: int, layers: list[str]) -> list[str]:
    """A list of lines (indented by "    " per level, re-indented later)."""
    lines: list[str] = []
    for _ in range(draw(st.integers(1, 4))):
        kind = draw(st.sampled_from(["cast", "cast", "plain", "for", "while", "if", "with", "try", "def",
                                     "comprehension"] if depth < 2 else ["cast", "plain"]))
        if kind == "cast":
            lines += draw(_cast(draw(st.sampled_from(["x", "h"])), layers))
        elif kind == "plain":
            lines.append(draw(st.sampled_from(["x = x + 1", "pass", "h = x * 2", "print(x)  # a comment"])))
        elif kind == "comprehension":
            layer = draw(st.sampled_from(layers))
            lines.append(f"zs = [z.to({layer}.weight.dtype) for z in (x, h)]")
        else:
            head = {"for": "for _ in range(2):", "while": "while x is None:", "if": "if x is not None:",
                    "with": "with torch.no_grad():", "try": "try:", "def": "def inner(x, h):"}[kind]
            inner = draw(_block(depth + 1, layers))
            lines.append(head)
            lines += ["    " + line for line in inner]
            if kind == "try":
                lines += ["except RuntimeError:", "    raise"]
            if kind == "def":
                lines.append("x = inner(x, h)")
    return lines


@st.composite
def modules(draw) -> str:
    """A whole module's text."""
    out = ["import torch", f"from vllm.model_executor.layers.linear import {', '.join(LAYER_CLASSES)}"]
    out += [line for d in draw(st.lists(st.sampled_from(MODULE_DECOYS), max_size=2, unique=True))
            for line in d.rstrip("\n").split("\n")]
    out.append("")
    for c in range(draw(st.integers(1, 2))):
        attrs = draw(st.lists(st.sampled_from(ATTRS), min_size=1, max_size=3, unique=True))
        classes = [draw(st.sampled_from(LAYER_CLASSES)) for _ in attrs]
        out += ["", "", f"class Layer{c}(torch.nn.Module):"]
        out.append("    def __init__(self, " + ", ".join(f"{a}: {k}" for a, k in zip(attrs, classes)) + "):")
        out.append("        super().__init__()")
        out += [f"        self.{a} = {a}" for a in attrs]
        for m in range(draw(st.integers(1, 3))):
            params = ["self", "x", "h=None"]
            if draw(st.booleans()):
                params.append(draw(st.sampled_from([f"{HELPER}=None", "kv_b_proj_input_dtype=None",
                                                    "layer: ColumnParallelLinear = None"])))
            layers = [f"self.{a}" for a in attrs] + (["layer"] if any(p.startswith("layer") for p in params) else [])
            body = [line for d in draw(st.lists(st.sampled_from(LOCAL_DECOYS), max_size=2)) for line in d]
            body += draw(_block(0, layers))
            body.append("return x")
            out.append("")
            if draw(st.booleans()):
                out.append("    # forward pass")
            out.append(f"    def m{m}(" + ", ".join(params) + "):")
            out += ["        " + line for line in body]
    text = "\n".join(out) + "\n"
    unit = draw(st.sampled_from(["    ", "  ", "\t"]))
    if unit != "    ":
        text = "\n".join(_reindent(line, unit) for line in text.split("\n"))
    if draw(st.booleans()):
        text = text.replace("\n", "\r\n")
    return text


def _reindent(line: str, unit: str) -> str:
    stripped = line.lstrip(" ")
    levels = (len(line) - len(stripped)) // 4
    return unit * levels + stripped
