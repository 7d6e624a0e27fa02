"""The oracle sweep's CI share (scripts/oracle_sweep.py, benchmarks/accuracy/README.md): a few
transformers classes built from shrunk configs, loaded with real bitsandbytes 4-bit and 8-bit on
CPU, run under the run-time guard, and matched against `check`'s zero-configuration findings.

A known-bad class (LongT5: `hidden_states.to(self.wo.weight.dtype)`, docs/hf.md) must get a
run-time site under 4-bit that the static check reports, and none under 8-bit (its `!= torch.int8`
guard holds) nor unquantized; a clean decoder (Llama) gets none; the site's fix, re-run, leaves no
site and an output within the quantizer's own error of the twin.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

pytest.importorskip("bitsandbytes", reason="the `hf` extra (bitsandbytes) runs the quantized models")

SCRIPTS = Path(__file__).resolve().parent.parent / "scripts"
sys.path.insert(0, str(SCRIPTS))

import oracle_sweep  # noqa: E402

LONGT5_FILE = "transformers/models/longt5/modeling_longt5.py"


@pytest.fixture(scope="module")
def workers():
    oracle_sweep._worker_init()  # one torch thread, quiet logs, the per-class alarm
    yield


@pytest.fixture(scope="module")
def longt5_findings(transformers_5230):
    return oracle_sweep.static_findings(transformers_5230, [LONGT5_FILE])


@pytest.fixture(scope="module")
def longt5(workers, longt5_findings):
    return oracle_sweep.run_class("longt5", "LongT5ForConditionalGeneration", ("bnb-4bit", "bnb-8bit"),
                                  oracle_sweep.lines_to_watch(longt5_findings))


def test_shrunk_config_fits_bitsandbytes_cpu_4bit():
    from transformers import LlamaConfig

    from dtype_lint.ecosystems.hf.tiny_models import tiny_config

    config = tiny_config(LlamaConfig)
    assert (config.hidden_size, config.intermediate_size, config.num_hidden_layers) == (64, 128, 2)
    assert config.num_attention_heads * config.head_dim == 64 and config.vocab_size == 512
    # Special tokens beyond the vocabulary move inside it, above the dummy ids' range.
    from transformers import Qwen2VLConfig

    vl = tiny_config(Qwen2VLConfig)
    assert oracle_sweep_ids_inside(vl)


def oracle_sweep_ids_inside(config) -> bool:
    from dtype_lint.ecosystems.hf.tiny_models import INPUT_ID_RANGE

    vocab = config.text_config.vocab_size if hasattr(config, "text_config") else config.vocab_size
    ids = [getattr(config, name) for name in ("image_token_id", "video_token_id") if getattr(config, name, None)]
    return bool(ids) and all(INPUT_ID_RANGE <= token < vocab for token in ids)


@pytest.mark.network
def test_known_bad_class_site_is_reported_statically(longt5, longt5_findings):
    assert longt5.built, longt5.error
    four, eight = longt5.runs["bnb-4bit"], longt5.runs["bnb-8bit"]
    assert four["forward"] == "ok" and eight["forward"] == "ok"
    sites = [s for s in four["sites"] if s["path"] == LONGT5_FILE]
    assert sites, four["sites"]
    site = sites[0]
    assert site["kind"] == "activation-cast" and site["storage"] == "torch.uint8"
    assert site["function"] == "LongT5DenseActDense.forward"
    finding = oracle_sweep.match(site, longt5_findings)
    assert finding is not None and finding["code"] == "DTL001"
    assert "self.wo.weight.dtype" in finding["expression"]
    # 8-bit: the release's own `!= torch.int8` guard holds; unquantized: nothing to report.
    assert not eight["sites"]
    assert longt5.twin_sites == []
    # The static finding's line ran under both quantizers (the line tracer saw it).
    assert (LONGT5_FILE, finding["line"]) in {tuple(hit) for hit in four["executed"]}


@pytest.mark.network
def test_bridge_fix_leaves_no_site_and_matches_the_twin(longt5, longt5_findings):
    site = next(s for s in longt5.runs["bnb-4bit"]["sites"] if s["path"] == LONGT5_FILE)
    finding = oracle_sweep.match(site, longt5_findings)
    row = oracle_sweep.run_bridge("longt5", "LongT5ForConditionalGeneration", "bnb-4bit", site, finding)
    assert row["verdict"] == "fixed", row
    assert row["sites_after"] == 0 and row["forward"] == "ok"
    from dtype_lint.ecosystems.hf.verify import MAX_OWN_ERROR

    assert row["rel_error"] <= MAX_OWN_ERROR["bnb-4bit"]


def test_clean_decoder_gets_no_site(workers):
    run = oracle_sweep.run_class("llama", "LlamaForCausalLM", ("bnb-4bit", "bnb-8bit"))
    assert run.built, run.error
    for quantizer in ("bnb-4bit", "bnb-8bit"):
        result = run.runs[quantizer]
        assert result["forward"] == "ok" and result["generate"] == "ok", result
        assert result["sites"] == []
        assert result["rel_error"] is not None and result["rel_error"] < 1.0


def test_report_counts_recall_and_misses():
    from oracle_report import report

    site = {"path": "transformers/a.py", "line": 3, "function": "f", "kind": "activation-cast",
            "layer_class": "Linear4bit", "storage": "torch.uint8", "quantizers": ["bnb-4bit"], "classes": ["A"]}
    missed = dict(site, path="transformers/b.py")
    finding = {"code": "DTL001", "relpath": "transformers/a.py", "line": 3, "end_line": 3, "scope": "f",
               "expression": "x.to(l.weight.dtype)", "applicability": "safe"}
    silent = dict(finding, relpath="transformers/c.py")
    run = {"model_type": "a", "model_class": "A", "built": True, "stage": "done", "error": "", "seconds": 1,
           "twin_sites": [], "runs": {"bnb-4bit": {"forward": "ok", "generate": "", "rel_error": 0.1,
                                                   "sites": [site, missed], "executed": [["transformers/c.py", 3]]}}}
    text = report({"release": "transformers-5.23.0", "quantizers": ["bnb-4bit"], "seconds": 1, "jobs": 2,
                   "runs": [run], "sites": [site, missed], "findings": [finding, silent], "bridges": []})
    assert "| 2 | 1 | 50.0% |" in text
    assert "`transformers/b.py:3`" in text and "MISS: NOT YET JUDGED" in text
    assert "`transformers/c.py:3` DTL001" in text


# ---------------------------------------------------------------- diffusers 0.42.1 (scripts/oracle_diffusers.py)

def test_diffusers_class_builds_tiny_and_runs_under_real_bitsandbytes_on_cpu(workers):
    pytest.importorskip("diffusers", reason="the `hf` extra (diffusers) builds the diffusers models")
    import oracle_diffusers
    from diffusers import WanTransformer3DModel

    from dtype_lint.ecosystems.hf.tiny_diffusers import tiny_kwargs

    kwargs = tiny_kwargs(WanTransformer3DModel)
    assert (kwargs["num_layers"], kwargs["num_attention_heads"], kwargs["attention_head_dim"]) == (2, 4, 16)
    assert kwargs["ffn_dim"] == 128 and kwargs["text_dim"] == 64
    oracle_diffusers._worker_init()  # diffusers' bitsandbytes quantizer refuses a CPU: the sweep lets it load
    run = oracle_diffusers.run_class("diffusers", "WanTransformer3DModel", ("bnb-4bit", "bnb-8bit"))
    assert run.built, run.error
    assert run.twin_sites == []
    for quantizer in ("bnb-4bit", "bnb-8bit"):
        result = run.runs[quantizer]
        assert result["forward"] == "ok", result
        # Wan keeps `time_embedder` in fp32 (`_keep_in_fp32_modules`): no cast to packed storage.
        assert result["sites"] == []
        assert result["rel_error"] is not None and 0 < result["rel_error"] < 1.0


# ---------------------------------------------------------------- vLLM's MLA prefill (scripts/oracle_vllm.py)

MLA_FILE = "vllm/model_executor/layers/attention/mla_attention.py"


def test_guard_follows_a_conditional_expression_to_the_returned_dtype():
    """vLLM 0.28.0's `_get_kv_b_proj_input_dtype` reads `weight.dtype if weight is not None else ...`
    and returns it later: the caller's cast to int8 storage is the helper's dtype."""
    import torch

    from dtype_lint.guard import DtypeGuard

    def input_dtype(layer):
        weight = getattr(layer, "weight", None)
        weight_dtype = weight.dtype if weight is not None else torch.float32
        if weight_dtype == torch.int32:
            return torch.float32
        return weight_dtype

    def forward(layer, activation):
        return activation.to(input_dtype(layer))

    layer = torch.nn.Linear(4, 4)
    layer.weight = torch.nn.Parameter(torch.zeros(4, 4, dtype=torch.int8), requires_grad=False)
    with DtypeGuard(model=layer, strict=False) as guard:
        forward(layer, torch.ones(2, 4))
    assert [(site.function.rsplit(".", 1)[-1], site.kind, str(site.storage)) for site in guard.sites] == \
        [("forward", "activation-cast", "torch.int8")]


@pytest.mark.slow
@pytest.mark.network
@pytest.mark.full("the guard on every storage kind in test_guard.py; the MLA prefill's static site in test_verify.py")
def test_vllm_mla_prefill_sites_before_and_after_the_fix(vllm_0271, vllm_0280):
    import oracle_vllm

    data = oracle_vllm.sweep(["bf16", "marlin", "awq", "int8"])
    rows = {(r["release"], r["backend"], r["path"]): r for r in data["rows"]}
    # Unquantized: nothing in either release.
    assert all(not rows[(release, "bf16", path)]["sites"] for release in ("0.27.1", "0.28.0") for path in ("main", "cp"))
    # 0.27.1 casts the latent to the packed storage (Marlin int32) at the line `check` reports.
    before = rows[("0.27.1", "marlin", "main")]
    assert "unsupported `a` scalar_type" in before["outcome"]
    assert [(s["path"], s["line"], s["kind"], s["storage"]) for s in before["sites"]] == \
        [(MLA_FILE, 2373, "activation-cast", "torch.int32")]
    assert rows[("0.27.1", "awq", "main")]["sites"][0]["kind"] == "missing-weight"
    assert [s["line"] for s in rows[("0.27.1", "marlin", "cp")]["sites"]] == [2534]
    static_before = {f["line"] for f in data["findings"]["0.27.1"]}
    assert static_before == {2373, 2534}
    # 0.28.0 (the fix): Marlin and AWQ run clean, no site; `check` finds nothing.
    for backend in ("marlin", "awq"):
        for path in ("main", "cp"):
            assert rows[("0.28.0", backend, path)]["outcome"] == "ok"
            assert rows[("0.28.0", backend, path)]["sites"] == []
    assert data["findings"]["0.28.0"] == []
    # ... but W8A8's int8 still reaches the cast (its helper lists int32 and uint8 only): a
    # run-time site `check` misses, filed under a known limit in the report.
    after = rows[("0.28.0", "int8", "main")]
    assert [(s["line"], s["storage"]) for s in after["sites"]] == [(2650, "torch.int8")]
    assert ("0.28.0", MLA_FILE, 2650) in oracle_vllm.MISS_LIMITS
    text = oracle_vllm.report(data)
    assert "| 0.27.1 | 2 (+0 judged not the bug) | 2 | 100.0% |" in text
