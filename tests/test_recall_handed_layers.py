"""Issue #39, the labelled vLLM sites of DiffusionGemma that were still missed: a layer's weight
handed through a model state typed only `nn.Module` into a constructor, kept there as `self.table`,
and used further along: its dtype taken by a module function the weight is handed on to (a cast),
and read off `self.table.dtype` and handed on to functions that allocate or cast with it.

The call that hands the weight over was already reported; now every place in the same file where
the handed weight's dtype is taken is reported too (analysis/flow/flows.py, `anchors`). Our own
small code in the shape of vLLM 0.33.0's `diffusion_gemma.py` (:601, :1532, :1535); names differ
from vLLM's on purpose (`table`, not `embed_weight`): nothing is found by name. Each test has a
control where the layer cannot be quantized, on which nothing may be reported.

The handing method holds a comment naming `embed.weight)`, as vLLM's does: the prefilter keeps a
function for a line its patterns match, and `table=embed.weight,` alone matches none (a known
limit, docs/quantizability.md)."""

from __future__ import annotations

import json
import textwrap
from pathlib import Path

import pytest
from cli_runner import dtl
from tiny_project import PYPROJECT, write_tree

# A backbone whose embedding gets the model's quantization config (or none), the one module class
# of the file that builds `self.model`, and a model state typed `nn.Module` handing the
# embedding's weight to a denoiser. The denoiser keeps it (`self.table`), hands it to a compiled
# step function that casts to its dtype, and hands its dtype to row statistics that allocate in it
# (or cast to it, the reference path).
STATE = """\
    import torch
    from torch import nn
    from vllm.model_executor.layers.vocab_parallel_embedding import VocabParallelEmbedding

    from proj.rows import row_stats, row_stats_reference
    {step_import}

    class Backbone(nn.Module):
        def __init__(self, vocab, hidden, quant_config=None):
            super().__init__()
            self.embed_tokens = VocabParallelEmbedding(vocab, hidden, quant_config=quant_config)


    class ForDenoising(nn.Module):
        def __init__(self, vocab, hidden, quant_config=None):
            super().__init__()
            self.model = Backbone(vocab, hidden, quant_config={config})
    {step}

    class Denoiser:
        def __init__(self, steps, *, table, scale):
            self.steps = steps
            self.table = table
            self.scale = scale

        def __call__(self, logits, rows, allowed, on_gpu):
            table = self.table
            if allowed is not None:
                table = self.table[allowed]
            probs_dtype = self.table.dtype if rows else None
            if on_gpu:
                probs = row_stats(logits, probs_dtype)
            else:
                probs = row_stats_reference(
                    logits, probs_dtype
                )
            return denoise_step(probs, table, 0, rows)


    class State:
        def __init__(self, model: nn.Module):
            self.model = model

        def make_denoiser(self):
            # The step multiplies the probabilities by the table (probs @ embed.weight)
            embed = self.model.model.embed_tokens
            return Denoiser(
                4,
                table=embed.weight,
                scale=2.0,
            )
"""

STEP = """

    def denoise_step(probs, table, lo, hi):
        mixed = probs[..., lo:hi].to(table.dtype)
        return torch.matmul(mixed, table[: hi - lo])
"""

ROWS = """\
    import torch


    def row_stats(logits, probs_dtype):
        rows, vocab = logits.shape
        if probs_dtype is None:
            return None
        return torch.empty(rows, vocab, dtype=probs_dtype)


    def row_stats_reference(logits, probs_dtype):
        probs = logits.float().softmax(dim=-1)
        return probs.to(probs_dtype) if probs_dtype is not None else None
"""


def _run(root: Path) -> list[dict]:
    run = dtl(root, "check", ".", "--no-cache", "--output-format", "json", "--exit-zero")
    assert run.returncode == 0, run.stderr
    return sorted(json.loads(run.stdout)["findings"], key=lambda f: (f["path"], f["line"]))


def _project(root: Path, config: str, step_here: bool) -> Path:
    state = STATE.format(config=config, step=STEP if step_here else "",
                         step_import="" if step_here else "from proj.steps import denoise_step")
    files = {"pyproject.toml": PYPROJECT, "proj/__init__.py": "", "proj/state.py": textwrap.dedent(state),
             "proj/rows.py": textwrap.dedent(ROWS)}
    if not step_here:
        files["proj/steps.py"] = "import torch\n" + textwrap.dedent(STEP)
    return write_tree(root, files)


def _line(root: Path, path: str, text: str) -> int:
    """The 1-based line of `path` holding `text` (once)."""
    lines = [n for n, line in enumerate((root / path).read_text().splitlines(), 1) if text in line]
    assert len(lines) == 1, (text, lines)
    return lines[0]


def test_the_handed_weights_dtype_is_reported_where_it_is_taken(tmp_path):
    root = _project(tmp_path / "quantized", "quant_config", step_here=True)
    found = {(f["code"], f["line"]): f for f in _run(root)}
    cast = _line(root, "proj/state.py", ".to(table.dtype)")
    alloc = _line(root, "proj/state.py", "probs = row_stats(logits, probs_dtype)")
    reference = _line(root, "proj/state.py", "row_stats_reference(") + 1  # its argument line
    handover = _line(root, "proj/state.py", "table=embed.weight")
    assert sorted(found) == sorted([("DTL001", cast), ("DTL002", alloc), ("DTL001", reference),
                                    ("DTL001", handover)]), found
    # the cast in the step function, which reads the dtype of the weight handed to it
    step = found[("DTL001", cast)]
    assert step["scope"] == "denoise_step" and step["fix"] is None and step["no_fix_reason"]
    assert step["message"].startswith(
        "`probs[..., lo:hi].to(table.dtype)` casts an activation to the dtype of `embed.weight`, handed to "
        f"`Denoiser` at line {handover} and on to `denoise_step`: the storage dtype of quantizable layer `embed`")
    evidence = [(e["path"], e["line"], e["message"]) for e in step["evidence"]]
    assert evidence[0] == ("proj/state.py", handover, "`table` is `embed.weight`, handed to `Denoiser` in "
                                                      "`State.make_denoiser`")
    assert any("a value typed `nn.Module`, its `.model`" in message for _p, _l, message in evidence)
    assert ("proj/state.py", _line(root, "proj/state.py", "self.embed_tokens = Vocab"),
            "`self.embed_tokens = VocabParallelEmbedding(...)`") in evidence
    # the dtype read off the kept weight and handed to the row statistics, in the denoiser's method
    rows = found[("DTL002", alloc)]
    assert rows["scope"] == "Denoiser.__call__" and rows["expression"] == "probs_dtype"
    assert rows["message"].startswith(
        f"`probs_dtype`, the dtype of `embed.weight`, handed to `Denoiser` at line {handover}, is passed to "
        "`row_stats`, which allocates a tensor in it: the storage dtype of quantizable layer `embed`")
    assert rows["evidence"][1]["path"] == "proj/rows.py" and rows["evidence"][1]["line"] == 8
    assert "is passed to `row_stats_reference`, which casts an activation to it" in \
        found[("DTL001", reference)]["message"]


def test_a_use_in_another_file_is_reported_where_the_weight_leaves_this_file(tmp_path):
    # The step function in its own module: its cast cannot be reported from the file that knows
    # the layer, so the argument handing the weight to it is, with the cast as evidence.
    root = _project(tmp_path / "quantized", "quant_config", step_here=False)
    found = {(f["path"], f["code"], f["line"]): f for f in _run(root)}
    passed = _line(root, "proj/state.py", "return denoise_step(probs, table, 0, rows)")
    assert ("proj/state.py", "DTL001", passed) in found, sorted(found)
    assert not any(path == "proj/steps.py" for path, _code, _line_ in found)
    finding = found[("proj/state.py", "DTL001", passed)]
    assert finding["expression"] == "table" and finding["scope"] == "Denoiser.__call__"
    assert "`table` (the dtype of `embed.weight`, handed to `Denoiser` at line" in finding["message"]
    assert "is passed to `denoise_step`, which casts an activation to its dtype" in finding["message"]
    assert finding["evidence"][1]["path"] == "proj/steps.py"


@pytest.mark.parametrize("step_here", [True, False], ids=["step-in-file", "step-elsewhere"])
def test_handed_weights_are_judged_by_the_layers_construction(tmp_path, step_here):
    quantized = {(f["path"], f["line"]) for f in _run(_project(tmp_path / "q", "quant_config", step_here))}
    assert len(quantized) == 4, quantized  # the handover, the cast (or the argument), the two row statistics
    assert _run(_project(tmp_path / "plain", "None", step_here)) == []
