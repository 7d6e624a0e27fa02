"""fixtures/shapes: quantizability read from the code, with zero configuration.

`servelm` is our own code in the shapes met in vLLM, its forks and peers (each module says which).
No class is named anywhere in configuration: `LinearBase` and `VocabEmbedding` are quantizable
because their code obtains a quant method for themselves; the quant method is exempt because it
is handed the layer it owns; an instance is quantized only where a config may reach its
construction. `expected.txt` lists every finding; the tests below also pin, by name, the sites
that must stay clean and why, so a regression says which inference broke.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from cli_runner import dtl
from golden import assert_golden, lines_text

from dtype_lint.core.config import load_config

SHAPES = Path(__file__).resolve().parents[1] / "fixtures" / "shapes"


@pytest.fixture(scope="module")
def findings() -> list[dict]:
    proc = dtl(SHAPES, "check", ".", "--no-cache", "--output-format", "json")
    assert proc.returncode == 1, proc.stderr
    return json.loads(proc.stdout)["findings"]


def entries(findings) -> list[str]:
    # `check .` reports paths without a leading `./` (every format alike).
    return [f"{f['path']}:{f['line']}:{f['col']} {f['code']}" for f in findings]


def at(findings, path: str) -> dict[int, dict]:
    return {f["line"]: f for f in findings if f["path"].endswith(path)}


def line_of(path: str, needle: str) -> int:
    lines = (SHAPES / "servelm" / path).read_text(encoding="utf-8").splitlines()
    return next(i for i, text in enumerate(lines, 1) if needle in text)


def test_zero_configuration():
    cfg = load_config(SHAPES)
    assert cfg.root == SHAPES
    assert cfg.quantizable == cfg.exempt_classes == cfg.not_quantizable == []
    assert not (SHAPES / "servelm" / "layers" / "__init__.py").exists()  # a namespace folder


def test_findings_match_expected_txt(findings):
    expected = [e for e in (SHAPES / "expected.txt").read_text(encoding="utf-8").splitlines() if e.strip()]
    assert entries(findings) == expected
    assert_golden(SHAPES / "expected.txt", lines_text(entries(findings)))


def test_structure_is_the_evidence(findings):
    f = at(findings, "router.py")[line_of("models/router.py", "self.proj(x.to(self.proj.weight.dtype))")]
    evidence = [e["message"] for e in f["evidence"]]
    assert any("`LinearBase`" in m and "create_weights(self" in m for m in evidence), evidence
    assert any("`ColumnLinear` subclasses `LinearBase`" in m for m in evidence), evidence


def test_the_same_class_is_quantized_per_construction(findings):
    assert line_of("models/multimodal.py", "pixels.to(target_dtype)") in at(findings, "multimodal.py")
    assert at(findings, "unified.py") == {}  # built without a config, also behind `X if c else None`


def test_configs_followed_through_constructors(findings):
    router = at(findings, "router.py")
    line = line_of("models/router.py", "logits + self.proj")
    assert [f["message"] for f in router.values()] and set(router) == {line}
    # One finding on that line: `self.proj` (config passed sixth, positionally); not `self.gate`
    # (GateLinear forwards quant_config=None) nor `self.proj_plain` (None passed positionally).
    assert "self.proj.weight.dtype" in router[line]["message"]


def test_guards_that_prove_the_layer_unquantized(findings):
    guards = at(findings, "models/guards.py")
    casts = {line for line, f in guards.items() if f["code"] != "DTL004"}  # DTL004: the uint8 test itself
    assert casts == {line_of("models/guards.py", "x = x.to(w_dtype)")}  # hasattr alone is no guard
    assert at(findings, "layers/embedding.py") == {}  # the use_fused flag
    assert line_of("models/router.py", "x = x.to(self.weight.dtype)") not in at(findings, "router.py")


def test_quant_methods_are_exempt_by_structure(findings):
    assert at(findings, "layers/quant.py") == {}


def test_model_level_config_restriction(findings):
    heads = at(findings, "heads.py")
    assert line_of("models/heads.py", "class LinearOnlyLM") + 4 not in heads
    assert len(heads) == 2


def test_embeddings_values_and_getters(findings):
    text = at(findings, "text.py")
    assert text[line_of("models/text.py", "self.embed_scale = torch.tensor")]["code"] == "DTL002"
    assert "`dtype` returns" in text[line_of("models/text.py", "return self.decoder.embed_tokens.weight.dtype")]["message"]
    assert line_of("models/text.py", "self.side_table(ids).to(") not in text  # **tp_kwargs() carries no config
    sampler = at(findings, "sampler.py")
    flows = [f for f in sampler.values() if "is passed to" in f["message"]]
    assert {f["message"].split("`")[3] for f in flows} == {"soft_embed", "Sampler"}
    assert any("new_zeros" in f["message"] for f in sampler.values())
    # and where the handed weight's dtype is taken, in this file: `soft_embed`'s cast
    taken = sampler[line_of("models/sampler.py", "probs.to(embed_weight.dtype)")]
    assert taken["code"] == "DTL001" and taken["scope"] == "soft_embed"
    assert "the dtype of `self.embed_tokens.weight`, handed to `soft_embed` at line 30" in taken["message"]


def test_a_family_that_never_quantizes_a_layer_type(findings):
    """Known only from an annotation (`head: OutputHead`), the head is judged by its model family:
    every OutputHead `fast_decode` builds has no config, while `draft` builds one with the model's."""
    assert at(findings, "fast_decode/head_kernels.py") == {}
    assert list(at(findings, "draft/head_kernels.py")) == [line_of("models/draft/head_kernels.py", "torch.zeros")]


def test_guard_shapes_of_fused_fast_paths(findings):
    """models/fused.py: each guard shape keeps its method clean, and its `*_unguarded` twin (the
    same read without the check) is reported: an imported predicate that returns False when
    `getattr(L, "weight", None) is None` (kernels/fusion.py), a negated predicate (`is_quantized`
    returning `not isinstance(...)`), an early return unless `all(...)` of a group is unquantized,
    a flag computed on first use (`LazyFlag(lambda: ...)`), a flag derived from a storage check,
    and the re-reads an earlier read dominates (only that first read is reported)."""
    import ast as ast_module

    source = (SHAPES / "servelm" / "models" / "fused.py").read_text(encoding="utf-8")
    spans = {node.name: (node.lineno, node.end_lineno) for node in ast_module.walk(ast_module.parse(source))
             if isinstance(node, ast_module.FunctionDef)}
    fused = at(findings, "models/fused.py")

    def reported_in(method: str) -> list[int]:
        first, last = spans[method]
        return sorted(line for line in fused if first <= line <= last)
    for clean in ("gelu", "plain", "pack_qk", "cpu"):
        assert reported_in(clean) == [], clean
    for twin in ("gelu_unguarded", "plain_unguarded", "pack_qk_unguarded"):
        assert reported_in(twin), twin
    assert reported_in("bf16_only") == [line_of("models/fused.py", "use_bf16 = self.up.weight.dtype")]
    assert fused[reported_in("plain_unguarded")[0]]["code"] == "DTL001"
    assert at(findings, "kernels/fusion.py") == {}  # `linear` is untyped: no layer resolves


def test_a_dtype_getter_of_another_object(findings):
    """`target_hidden.to(dtype=self.drafter.context_dtype)`: the getter returns the drafter's
    `context_proj.weight.dtype`; reported at the cast, the getter named in the message and the
    evidence; the same cast through a drafter built without a config is clean."""
    drafter = at(findings, "models/drafter.py")
    line = line_of("models/drafter.py", "target_hidden.to(dtype=self.drafter.context_dtype)")
    assert set(drafter) == {line}
    finding = drafter[line]
    assert finding["code"] == "DTL001" and "`self.drafter.context_dtype`" in finding["message"]
    returns = line_of("models/drafter.py", "return self.context_proj.weight.dtype")
    assert any(e["line"] == returns and "`context_dtype` returns" in e["message"] for e in finding["evidence"])


def test_callers_traced_for_a_generically_typed_holder(findings):
    """`project_into(x, layer: nn.Module)` is judged by what its caller passes (`self.o_proj`,
    built with the config), the call named in the evidence; `project_plain`'s caller passes a
    torch layer, so it is clean."""
    holders = at(findings, "models/holders.py")
    line = line_of("models/holders.py", "return x.to(layer.weight.dtype) @ layer.weight.t()")
    assert set(holders) == {line}
    cast = next(f for f in findings if f["path"].endswith("holders.py") and f["code"] == "DTL001")
    call = line_of("models/holders.py", "return project_into(x, self.o_proj)")
    assert any(e["line"] == call and "`layer` is `self.o_proj`" in e["message"] for e in cast["evidence"])


def test_dispatch_guards_of_dtl003(findings):
    """models/dispatch.py: each clean read is kept by one mechanism, its twin is reported."""
    dispatch = at(findings, "models/dispatch.py")
    reported = {line_of("models/dispatch.py", "weight = self.proj.weight"),  # the first read: it raises
                line_of("models/dispatch.py", "return self.fused_unguarded(x, self.down.weight)"),
                line_of("models/dispatch.py", "class SharedGate") + 4}
    assert {n for n, f in dispatch.items() if f["code"] == "DTL003"} >= reported
    # A callee run only after the caller's own read of the same `.weight` (dominated re-read).
    assert line_of("models/dispatch.py", "def _gemm_dense(self") + 1 not in dispatch
    assert line_of("models/dispatch.py", "def _gemm_dense_unguarded(self") + 1 in dispatch
    # A kernel object kept only when its `can_run(layer)` predicate held.
    assert line_of("models/dispatch.py", "return self.fused(x, self.o_proj.weight)") not in dispatch
    # `isinstance(getattr(L, "weight", None), torch.Tensor) and L.weight...`.
    assert line_of("models/dispatch.py", "and self.down.weight.dtype == torch.bfloat16") not in dispatch
    # A guard two callers up.
    assert line_of("models/dispatch.py", "a guard two callers up") + 1 not in dispatch
    # An imported predicate returning `(verdict, reason)`, unpacked.
    assert line_of("models/dispatch.py", "return x @ self.o_proj.weight[: x.shape[-1]].t()") not in dispatch
    # A method a later `def` of the same name replaces never runs.
    assert line_of("models/dispatch.py", "return self.o_proj.weight.shape[0]") not in dispatch
    # A subclass the project builds only with `quant_config=None`.
    assert line_of("models/dispatch.py", "class TinyGate") + 5 not in dispatch
    # Test modules are not checked.
    assert not [f for f in findings if f["path"].startswith("servelm/tests/")]


def test_paths_that_never_meet_a_quantized_layer(findings):
    """models/dispatch.py: a layer quantizable only under one outcome of a module-level flag, read
    under the other; the fallback arm after a `hasattr` every construction satisfies."""
    dispatch = at(findings, "models/dispatch.py")
    lines = (SHAPES / "servelm" / "models" / "dispatch.py").read_text(encoding="utf-8").splitlines()
    reads = [i for i, text in enumerate(lines, 1) if "return x @ self.pre_proj.weight.t()" in text]
    assert len(reads) == 2
    assert reads[0] not in dispatch and reads[1] in dispatch  # the GPU path; the unguarded twin
    assert line_of("models/dispatch.py", "return self.language_model.lm_head.weight") not in dispatch
    assert line_of("models/dispatch.py", "return self.drafter.lm_head.weight") in dispatch
