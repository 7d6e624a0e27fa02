"""A class of the tree that subclasses a transformers *module* class (no model class) and reads a
layer its base's `__init__` builds: `class FastAttention(LlamaAttention)` allocating in
`self.k_proj.weight.dtype`, the shape of optimum-habana's `Gaudi*Attention` classes.

transformers is not in the tree: which attributes its modeling classes build as `nn.Linear` is
the shipped list `linear-attributes-transformers-*.txt` (dtype_lint/ecosystems/hf/model_classes.py,
generated from the pinned release's own files by scripts/hf_model_classes.py). Before it, the
layer's class was "not resolved" and nothing was reported.
"""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest
from conftest import full_only, pinned_hf_tree
from tiny_project import json_findings

from dtype_lint.ecosystems.hf.model_classes import (
    PINNED,
    build_linear_attributes,
    linear_attribute,
    linear_attributes_path,
    render_linear_attributes,
)

MODEL = """
    import torch
    from torch import nn
    from transformers import LlamaForCausalLM
    from {base_module} import {base}


    class FastCausalLM(LlamaForCausalLM):
        pass


    class FastAttention({base}):
        def __init__(self, config, layer_idx):
            super().__init__(config, layer_idx)
    {init}

        def allocate(self, shape):
            return torch.zeros(shape, dtype=self.{attr}.weight.dtype)

        def allocate_values(self, shape):
            return torch.zeros(shape, dtype=self.v_proj.weight.dtype)
"""
LLAMA = "transformers.models.llama.modeling_llama"


def _findings(tmp_path: Path, base_module: str = LLAMA, base: str = "LlamaAttention", attr: str = "k_proj",
              init: str = "", extra: str = "") -> list[dict]:
    root = tmp_path / "proj"
    (root / "fast").mkdir(parents=True)
    (root / "fast" / "__init__.py").write_text("")
    text = textwrap.dedent(MODEL).format(base_module=base_module, base=base, attr=attr,
                                         init=textwrap.indent(init, " " * 8) if init else "")
    (root / "fast" / "modeling_fast.py").write_text(text.lstrip("\n") + textwrap.dedent(extra))
    return [(f["code"], f["line"], f) for f in json_findings(root)]


def _line(tmp_path: Path, needle: str) -> int:
    lines = (tmp_path / "proj" / "fast" / "modeling_fast.py").read_text().splitlines()
    return next(number for number, line in enumerate(lines, 1) if needle in line)


def test_a_linear_the_transformers_base_builds_is_quantizable(tmp_path: Path):
    found = _findings(tmp_path)
    assert [(code, line) for code, line, _ in found] == [("DTL002", 17), ("DTL002", 20)], found
    (_, _, finding) = found[0]
    assert finding["confidence"] == "high"
    assert "bitsandbytes 4-bit" in finding["message"], finding["message"]
    steps = " ".join(step["message"] for step in finding["evidence"])
    assert f"`self.k_proj` is an `nn.Linear` built in `LlamaAttention.__init__` (transformers {PINNED['transformers']}" \
        in steps, steps


def test_a_base_attribute_the_list_says_is_no_linear_is_not_reported(tmp_path: Path):
    # Qwen3's attention builds `q_norm` as an RMS norm, not a Linear; `v_proj` is one
    found = _findings(tmp_path, "transformers.models.qwen3.modeling_qwen3", "Qwen3Attention", "q_norm")
    assert [line for _, line, _ in found] == [_line(tmp_path, "self.v_proj.weight")], found


def test_a_base_outside_transformers_is_not_guessed(tmp_path: Path):
    # the same names from another library: nothing; a sibling over transformers' class: its read
    extra = """

        class KnownAttention(TransformersAttention):
            def allocate(self, shape):
                return torch.empty(shape, dtype=self.o_proj.weight.dtype)


        from transformers.models.llama.modeling_llama import LlamaAttention as TransformersAttention
    """
    found = _findings(tmp_path, "otherlib.attention", "LlamaAttention", extra=extra)
    assert [line for _, line, _ in found] == [_line(tmp_path, "self.o_proj.weight")], found


def test_the_subclass_s_own_assignment_decides(tmp_path: Path):
    # the subclass replaces `k_proj` with a float layer of its own, which no quantizer replaces;
    # `v_proj` is still the base's Linear
    init = "self.k_proj = FloatProjection(config.hidden_size)\n"
    extra = """

        class FloatProjection(nn.Module):
            def __init__(self, size):
                super().__init__()
                self.weight = nn.Parameter(torch.ones(size, size, dtype=torch.float32))
    """
    found = _findings(tmp_path, init=init, extra=extra)
    assert [line for _, line, _ in found] == [_line(tmp_path, "self.v_proj.weight")], found


def test_the_shipped_list_names_linear_attributes_of_module_classes_only():
    assert linear_attribute(f"{LLAMA}.LlamaAttention", "k_proj")
    assert linear_attribute(f"{LLAMA}.LlamaMLP", "gate_proj")
    assert not linear_attribute(f"{LLAMA}.LlamaAttention", "rotary_emb")
    assert not linear_attribute("transformers.models.qwen3.modeling_qwen3.Qwen3Attention", "q_norm")
    assert not linear_attribute(f"{LLAMA}.LlamaForCausalLM", "lm_head")  # a model class: not listed
    assert not linear_attribute("otherlib.attention.LlamaAttention", "k_proj")


def test_the_builder_reads_init_assignments_and_ancestors_in_the_release(tmp_path: Path):
    """The builder on a small tree of our own: a Linear in every branch, a subclass of it defined
    in the file (falcon's `FalconLinear`), a name also given another value, an ancestor in another modeling file through `super().__init__`, a subclass
    that replaces a name, one whose `__init__` does not call its base's, and a model class."""
    models = tmp_path / "transformers" / "models"
    (models / "alpha").mkdir(parents=True)
    (models / "beta").mkdir(parents=True)
    (tmp_path / "transformers" / "modeling_utils.py").write_text("class PreTrainedModel:\n    pass\n")
    (models / "alpha" / "modeling_alpha.py").write_text(textwrap.dedent("""
        from torch import nn
        class AlphaLinear(nn.Linear):
            pass
        class AlphaMixer(nn.Module):
            def __init__(self, wide):
                super().__init__()
                self.fused = AlphaLinear(4, 12)
                if wide:
                    self.up = nn.Linear(4, 8)
                else:
                    self.up = nn.Linear(4, 4)
                self.gate = nn.Linear(4, 4) if wide else None
                self.norm = nn.LayerNorm(4)
                self.down = nn.Linear(8, 4)
        class AlphaModel(PreTrainedModel):
            def __init__(self):
                self.head = nn.Linear(4, 4)
    """))
    (models / "beta" / "modeling_beta.py").write_text(textwrap.dedent("""
        from torch import nn
        from ..alpha.modeling_alpha import AlphaMixer
        class BetaMixer(AlphaMixer):
            def __init__(self):
                super().__init__(True)
                self.down = Norm()
        class BetaLone(AlphaMixer):
            def __init__(self):
                nn.Module.__init__(self)
        class BetaPlain(AlphaMixer):
            pass
    """))
    assert build_linear_attributes(tmp_path, "transformers") == [
        "models.alpha.modeling_alpha.AlphaMixer down fused up",
        "models.beta.modeling_beta.BetaMixer fused up",
        "models.beta.modeling_beta.BetaPlain down fused up",
    ]


# A whole-release parse (minutes under CI's load): CI keeps the builder on a tree of our own above.
@pytest.mark.parametrize("library", [full_only("transformers", "the builder on a tree of our own")])
def test_the_shipped_linear_attributes_are_fresh(library: str):
    """The shipped list is what the pinned release's own files give (scripts/hf_model_classes.py)."""
    tree = pinned_hf_tree(library)
    assert linear_attributes_path(library).read_text(encoding="utf-8") == \
        render_linear_attributes(library, PINNED[library], build_linear_attributes(tree, library))
