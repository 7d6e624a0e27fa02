"""Issue #39 on the release the issue was found on: vLLM 0.34.0, zero configuration, default rules.

MiniMax-M3's vision tower stores `self.dtype = self.multi_modal_projector.linear_1.weight.dtype`
in `__init__` (a `ColumnParallelLinear` built with the model's quantization config), and both
model variants cast the pixel values to `self.vision_tower.dtype`; the CUDA-graph runner
allocates its dummy pixel buffer in it. DiffusionGemma's model state (`model: nn.Module`) hands
the backbone's embedding weight to the sampler, whose step casts to its dtype and whose row
statistics allocate in it two calls down. The lines are found in the release's text, not
hard-coded."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from release_runs import check_tree

from dtype_lint import releases

# A whole-tree run of 0.34.0 (a minute under CI's load): beyond the CI budget, as 0.34.0's triage is.
pytestmark = [pytest.mark.network,
              pytest.mark.full("the same shapes on our own code: tests/test_recall_value_flow.py")]

TOWER = "vllm/models/minimax_m3/common/vision_tower.py"
MODELS = ("vllm/models/minimax_m3/nvidia/model.py", "vllm/models/minimax_m3/amd/model.py")
CUDAGRAPH = "vllm/models/minimax_m3/common/encoder_cudagraph.py"
DIFFUSION = "vllm/model_executor/models/diffusion_gemma.py"


@pytest.fixture(scope="module")
def vllm_0340() -> Path:
    try:
        return releases.release_tree("vllm", "0.34.0")
    except releases.ReleaseFetchError as exc:
        pytest.fail(f"vllm 0.34.0 is needed and could not be fetched: {exc}", pytrace=False)


@pytest.fixture(scope="module")
def report(vllm_0340: Path) -> list[dict]:
    import json

    run = check_tree(vllm_0340)
    assert run.returncode == 0, run.stderr[-4000:]
    return json.loads(run.stdout)["findings"]


def _lines(tree: Path, rel: str, pattern: str) -> list[int]:
    """1-based lines of `rel` whose text matches `pattern`."""
    text = (tree / rel).read_text(encoding="utf-8").splitlines()
    return [number for number, line in enumerate(text, 1) if re.search(pattern, line)]


def _at(report: list[dict], rel: str) -> dict[int, dict]:
    return {f["line"]: f for f in report if f["path"].endswith(rel)}


def test_minimax_m3_pixel_casts_to_the_stored_tower_dtype_are_reported(vllm_0340, report):
    stored = _lines(vllm_0340, TOWER, r"self\.dtype = self\.multi_modal_projector\.linear_1\.weight\.dtype")
    assert len(stored) == 1
    for model in MODELS:
        # `pixel_values = ...["pixel_values..."].type(` on one line, `self.vision_tower.dtype` on the next.
        casts = _lines(vllm_0340, model, r"\]\.type\($")
        assert len(casts) == 2, (model, casts)
        found = _at(report, model)
        for line in casts:
            assert line in found, (model, line, sorted(found))
            finding = found[line]
            assert finding["code"] == "DTL001"
            assert "which holds `self.vision_tower.multi_modal_projector.linear_1.weight.dtype`" in finding["message"]
            assert any(e["path"].endswith(TOWER) and e["line"] == stored[0] for e in finding["evidence"])


def test_minimax_m3_dummy_pixels_allocated_in_the_stored_dtype_are_reported(vllm_0340, report):
    dummy = _lines(vllm_0340, CUDAGRAPH, r"dummy_pixel_values = torch\.zeros\($")
    assert len(dummy) == 1
    finding = _at(report, CUDAGRAPH).get(dummy[0])
    assert finding is not None and finding["code"] == "DTL002", sorted(_at(report, CUDAGRAPH))
    assert "allocates in `self.vision_tower.dtype`" in finding["message"]


def test_diffusion_gemma_embedding_handed_through_the_nn_module_state_is_reported(vllm_0340, report):
    handed = _lines(vllm_0340, DIFFUSION, r"^\s*embed_weight=embed_tokens\.weight,$")
    assert len(handed) == 1
    finding = _at(report, DIFFUSION).get(handed[0])
    assert finding is not None and finding["code"] == "DTL001", sorted(_at(report, DIFFUSION))
    messages = [e["message"] for e in finding["evidence"]]
    assert any("`DiffusionGemmaForConditionalGeneration` is the only module class of this file that builds "
               "`self.model`" in m for m in messages), messages
    assert any("`self.embed_tokens = VocabParallelEmbedding(...)` with a quantization config" in m for m in messages)


def test_diffusion_gemma_sampler_sites_are_reported_where_the_handed_weights_dtype_is_taken(vllm_0340, report):
    # Issue #39's labelled sites (0.33.0 :601, :1532, :1535; here 0.34.0's lines, found in its text):
    # the step's cast to `embed_weight.dtype`, and `probs_dtype = self.embed_weight.dtype` handed
    # to the row statistics (which allocate in it) and to their reference twin (which casts to it).
    cast = _lines(vllm_0340, DIFFUSION, r"\]\.to\(embed_weight\.dtype\)$")
    stats = _lines(vllm_0340, DIFFUSION, r"= sample_row_stats\(tile_logits, temp, W, seed, probs_dtype\)$")
    reference = [line + 1 for line in _lines(vllm_0340, DIFFUSION, r"= sample_row_stats_reference\($")]
    handed = _lines(vllm_0340, DIFFUSION, r"^\s*embed_weight=embed_tokens\.weight,$")
    assert len(cast) == len(stats) == len(reference) == len(handed) == 1
    found = _at(report, DIFFUSION)
    for line, code in ((cast[0], "DTL001"), (stats[0], "DTL002"), (reference[0], "DTL001")):
        assert line in found and found[line]["code"] == code, (line, sorted(found))
        assert f"handed to `DiffusionSampler` at line {handed[0]}" in found[line]["message"]
        assert found[line]["evidence"][0]["line"] == handed[0]
