"""Scenarios, seeded data and one run of the fixture's MLA context prefill.

A scenario fixes the shapes and the requests (context and query lengths). From a seed it
yields the fp32 ground truth, all drawn on the CPU so every device sees the same numbers:
``W ~ N(0, 1/L)``, latent / ``k_pe`` / ``q ~ N(0, 1)``, and a shuffled block table. The
paged cache is then stored in the backend's cache dtype, and a variant (``pre``, ``post``,
either path) runs over it with freshly planned 0.27.1 chunks.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from types import ModuleType

import torch

from ..formats import FP8, to_fp8
from .chunking import ChunkedContext, cdiv, plan_chunked_context


@dataclass(frozen=True)
class Scenario:
    name: str
    num_heads: int
    kv_lora_rank: int
    qk_nope_head_dim: int
    qk_rope_head_dim: int
    v_head_dim: int
    block_size: int
    workspace_size: int
    context_lens: tuple[int, ...]
    query_lens: tuple[int, ...]

    @property
    def query_start_loc(self) -> list[int]:
        loc = [0]
        for query_len in self.query_lens:
            loc.append(loc[-1] + query_len)
        return loc

    @property
    def num_tokens(self) -> int:
        return sum(self.query_lens)

    @property
    def out_features(self) -> int:
        return self.num_heads * (self.qk_nope_head_dim + self.v_head_dim)

    @property
    def softmax_scale(self) -> float:
        return (self.qk_nope_head_dim + self.qk_rope_head_dim) ** -0.5


_SMALL = dict(num_heads=4, kv_lora_rank=256, qk_nope_head_dim=64, qk_rope_head_dim=32, v_head_dim=64)
# DeepSeek-V3 with TP8: per-rank heads 16, kv_b_proj N = 16·(128+128) = 4096.
_DSV3_TP8 = dict(num_heads=16, kv_lora_rank=512, qk_nope_head_dim=128, qk_rope_head_dim=64, v_head_dim=128)

SCENARIOS: dict[str, Scenario] = {
    s.name: s
    for s in (
        # 5 chunks of 64, every chunk has an empty span (request 2 never has context), ptwc 12.
        Scenario("A", **_SMALL, block_size=16, workspace_size=128, context_lens=(300, 130, 0), query_lens=(5, 7, 4)),
        # 4 chunks, no empty span: the masking branch is never taken.
        Scenario("B", **_SMALL, block_size=16, workspace_size=128, context_lens=(200, 200), query_lens=(3, 6)),
        # One request with context (3 chunks: 128, 128, 44) and one without. Both vLLM 0.27.1's and
        # 0.28.0's planners cut it into the same chunks, on one rank and on two DCP ranks, so their
        # prefill functions can be compared bit for bit.
        Scenario("S", **_SMALL, block_size=16, workspace_size=128, context_lens=(300, 0), query_lens=(5, 4)),
        # Shapes no Marlin thread tile fits: K = 160 (not a multiple of 64), N = 5·(32+32) = 320
        # (not of 128): Marlin pads both, to N = 384 and K = 192 (marlin_padded_nk). Cut as S is
        # (one request with context), so both releases' planners agree here too. The formats with
        # K blocks of 64 or 128 (AWQ, block-128 FP8, 128-group Marlin) do not apply.
        Scenario("P", num_heads=5, kv_lora_rank=160, qk_nope_head_dim=32, qk_rope_head_dim=32, v_head_dim=32,
                 block_size=16, workspace_size=128, context_lens=(300, 0), query_lens=(6, 3)),
        Scenario(
            "C", num_heads=8, kv_lora_rank=512, qk_nope_head_dim=128, qk_rope_head_dim=64, v_head_dim=128,
            block_size=16, workspace_size=256, context_lens=(700, 260, 0), query_lens=(6, 9, 3),
        ),
        # GPU sizes (gpu_check.py): mcc 1344, 7 chunks, ptwc 896.
        Scenario(
            "G1", **_DSV3_TP8, block_size=64, workspace_size=4096,
            context_lens=(8192, 3000, 1024, 0), query_lens=(512, 256, 128, 64),
        ),
        Scenario(
            "G2", **_DSV3_TP8, block_size=64, workspace_size=4096,
            context_lens=(4096, 4096), query_lens=(256, 256),
        ),
    )
}


@dataclass(frozen=True)
class ScenarioData:
    """fp32 ground truth for one (scenario, seed), on the CPU."""

    scenario: Scenario
    seed: int
    w: torch.Tensor  # [H*(nope+v), L]
    latent: torch.Tensor  # [Σctx, L], requests back to back
    k_pe: torch.Tensor  # [Σctx, R]
    q: torch.Tensor  # [T, H, nope+rope]
    block_table: torch.Tensor  # [P, max blocks] int32; unused entries 0
    num_blocks: int


def make_data(scenario: Scenario, seed: int) -> ScenarioData:
    s = scenario
    gen = torch.Generator().manual_seed(seed)
    w = torch.randn(s.out_features, s.kv_lora_rank, generator=gen) / s.kv_lora_rank**0.5
    total_ctx = sum(s.context_lens)
    latent = torch.randn(total_ctx, s.kv_lora_rank, generator=gen)
    k_pe = torch.randn(total_ctx, s.qk_rope_head_dim, generator=gen)
    q = torch.randn(s.num_tokens, s.num_heads, s.qk_nope_head_dim + s.qk_rope_head_dim, generator=gen)

    blocks_per_req = [cdiv(c, s.block_size) for c in s.context_lens]
    # One spare block so that physical block ids never line up with logical ones by accident.
    num_blocks = sum(blocks_per_req) + 1
    physical = torch.randperm(num_blocks, generator=gen)
    block_table = torch.zeros(len(s.context_lens), max(max(blocks_per_req), 1), dtype=torch.int32)
    used = 0
    for r, n in enumerate(blocks_per_req):
        block_table[r, :n] = physical[used : used + n].to(torch.int32)
        used += n
    return ScenarioData(s, seed, w, latent, k_pe, q, block_table, num_blocks)


def store_cache(data: ScenarioData, dtype: torch.dtype, *, rank: int = 0, world: int = 1, interleave: int = 1,
                k_scale: float = 1.0) -> torch.Tensor:
    """The paged cache ``[blocks, block, L+R]`` in ``dtype``; fp8 via clamp + RNE of ``x / k_scale``
    (vLLM's fp8 KV cache stores the rows divided by the layer's ``k_scale``; the gathers multiply
    it back when they dequantize into a 16-bit workspace).

    With ``world > 1`` it is decode-context-parallel rank ``rank``'s cache: context position ``p``
    lives on rank ``(p // interleave) % world`` at local position
    ``(p // (interleave·world))·interleave + p % interleave`` (vLLM's interleaved DCP layout,
    whose per-rank lengths are ``get_dcp_local_seq_lens``), in the same block table.
    """
    s = data.scenario
    rows = torch.cat((data.latent, data.k_pe), dim=1)
    if dtype == FP8:
        rows = to_fp8(rows / torch.tensor(k_scale, dtype=torch.float32))
    else:
        rows = rows.to(dtype)
    cache = torch.zeros(data.num_blocks, s.block_size, rows.shape[1], dtype=dtype)
    start = 0
    for r, ctx in enumerate(s.context_lens):
        pos = torch.arange(ctx)
        mine = (pos // interleave) % world == rank
        local = (pos // (interleave * world)) * interleave + pos % interleave
        lp = local[mine]
        cache[data.block_table[r].long()[lp // s.block_size], lp % s.block_size] = rows[start : start + ctx][mine]
        start += ctx
    return cache


@dataclass(frozen=True)
class PrefillMetadata:
    """The fields of vLLM's ``MLACommonPrefillMetadata`` the fixture reads."""

    block_table: torch.Tensor
    query_start_loc: torch.Tensor
    q_data_type: torch.dtype
    output_dtype: torch.dtype
    chunked_context: ChunkedContext


@dataclass
class DeviceInputs:
    """What one backend's runs share on the device: cache, q and the layer."""

    cache: torch.Tensor
    q: torch.Tensor  # model dtype, as the prefill receives it
    block_table: torch.Tensor
    layer: torch.nn.Module
    cache_dtype: torch.dtype
    q_data_type: torch.dtype
    model_dtype: torch.dtype
    k_scale: float = 1.0  # the fp8 KV cache's scale (1 for a 16-bit cache)


def build_layer(backend, data: ScenarioData, input_amax: float, *, twin: bool = False) -> torch.nn.Module:
    """``backend``'s kv_b_proj (or, ``twin=True``, its unquantized twin) for this data, on the CPU."""
    if twin:
        return backend.twin(data.w, backend.model_dtype, input_amax)
    return backend.build(data.w, backend.model_dtype, input_amax)


def prepare_inputs(
    data: ScenarioData, backend, device: str | torch.device, cache: torch.Tensor | None = None, *, twin: bool = False
) -> DeviceInputs:
    """Store the cache, build the backend's kv_b_proj (or its twin) from ``W`` on the CPU, move both."""
    cache = store_cache(data, backend.cache_dtype) if cache is None else cache
    # NVFP4's static input scale is calibrated on what it will see: the stored latent.
    input_amax = float(cache[..., : data.scenario.kv_lora_rank].float().abs().max())
    layer = build_layer(backend, data, input_amax, twin=twin).to(device)
    return DeviceInputs(
        cache=cache.to(device),
        q=data.q.to(backend.model_dtype).to(device),
        block_table=data.block_table.to(device),
        layer=layer,
        cache_dtype=backend.cache_dtype,
        q_data_type=backend.q_data_type,
        model_dtype=backend.model_dtype,
    )


def run_variant(
    module: ModuleType,
    path: str,
    scenario: Scenario,
    inputs: DeviceInputs,
    *,
    mask_empty_context: bool = True,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Run ``module.MLAPrefillImpl.<path>`` over the scenario's context chunks.

    ``path`` is ``"main"`` (``_compute_prefill_context``) or ``"cp"``
    (``_context_parallel_compute_prefill_context``). ``mask_empty_context=False`` is the
    negative control: it hides every chunk's ``has_empty_context`` flag from the loop.
    """
    s = scenario
    device = inputs.cache.device
    # vLLM sizes the workspace in the prefill's query dtype: fp8 for an fp8 prefill (the gather
    # copies fp8 rows), else the model dtype (an fp8 cache is dequantized into it).
    workspace = torch.zeros(s.workspace_size, s.kv_lora_rank + s.qk_rope_head_dim, dtype=inputs.q_data_type, device=device)
    chunked = plan_chunked_context(
        context_lens=torch.tensor(s.context_lens),
        query_start_loc=torch.tensor(s.query_start_loc),
        workspace=workspace,
        block_size=s.block_size,
    )
    if chunked is None:
        raise ValueError(f"scenario {s.name} has no context to attend to")
    if not mask_empty_context:
        chunked = dataclasses.replace(chunked, has_empty_context=[False] * len(chunked.has_empty_context))
    metadata = PrefillMetadata(
        block_table=inputs.block_table,
        query_start_loc=torch.tensor(s.query_start_loc, dtype=torch.int32, device=device),
        q_data_type=inputs.q_data_type,
        output_dtype=inputs.model_dtype,
        chunked_context=chunked,
    )
    impl = module.MLAPrefillImpl(
        inputs.layer,
        s.num_heads,
        s.kv_lora_rank,
        s.qk_nope_head_dim,
        s.qk_rope_head_dim,
        s.v_head_dim,
        s.softmax_scale,
    )
    method = {"main": impl._compute_prefill_context, "cp": impl._context_parallel_compute_prefill_context}[path]
    k_scale = torch.tensor(inputs.k_scale, dtype=torch.float32, device=device)
    return method(inputs.q, inputs.cache, metadata, k_scale)
