"""Chunked-context planning and cache gather for the fixture's MLA prefill, as vLLM 0.27.1 does it.

The fixture's variants (``pre`` and ``post``) chunk as 0.27.1's ``build_mla_chunked_context_metadata``
does with one decode-context-parallel rank, so the kv_b_proj input cast is the only difference
between them. vLLM's own functions (``upstream_runtime``) use each release's own planner instead.

Each request's context is cut into windows ``[i*mcc, (i+1)*mcc)``; a request whose context
ends before window ``i`` contributes zero keys there, which is what ``has_empty_context``
flags and what the fixture must mask before merging.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch


def cdiv(a: int, b: int) -> int:
    return -(a // -b)


def round_down(a: int, b: int) -> int:
    return a // b * b


@dataclass(frozen=True)
class ChunkedContext:
    """What the prefill loop reads per chunk ``i`` (0.27.1 ``ChunkedContextMetadata``).

    With one decode-context-parallel rank the context-parallel path reads the same fields:
    its padded local spans equal the global ones.
    """

    cu_seq_lens: torch.Tensor  # [chunks, prefills + 1] int32: workspace row offsets
    starts: torch.Tensor  # [chunks, prefills] int32: first context position per request
    seq_tot: list[int]  # rows gathered per chunk
    max_seq_lens: list[int]
    seq_lens: torch.Tensor  # [chunks, prefills] int32, on the CPU
    token_to_seq: torch.Tensor  # [chunks, max rows] int32: owning request of each row
    chunk_total_token: list[int]
    workspace: torch.Tensor  # [workspace rows, L + R]
    has_empty_context: list[bool]
    prefill_tokens_with_context: int
    chunk_size: int  # max_context_chunk (``mcc``)


def plan_chunked_context(
    *,
    context_lens: torch.Tensor,
    query_start_loc: torch.Tensor,
    workspace: torch.Tensor,
    block_size: int,
    align_chunk_to_block: bool = True,
) -> ChunkedContext | None:
    """Split each prefill's context into workspace-sized chunks; None if no request has context.

    ``context_lens`` and ``query_start_loc`` are CPU int tensors; requests with context must
    come first, because ``prefill_tokens_with_context`` is read at index ``n_with_context``.
    The device tensors land on ``workspace.device``.
    """
    context_lens = context_lens.to("cpu", torch.int32)
    query_start_loc = query_start_loc.to("cpu", torch.int32)
    num_prefills = context_lens.numel()
    max_context_len = int(context_lens.max().item())
    if max_context_len <= 0:
        return None
    has_ctx = (context_lens > 0).tolist()
    num_with_context = sum(has_ctx)
    if has_ctx != [True] * num_with_context + [False] * (num_prefills - num_with_context):
        raise ValueError(f"requests with context must come first, got context_lens={context_lens.tolist()}")

    workspace_size = workspace.shape[0]
    max_context_chunk = workspace_size // num_with_context
    if align_chunk_to_block:
        # The cache gather cannot start a chunk mid-block.
        max_context_chunk = round_down(max_context_chunk, block_size)
    if max_context_chunk <= 0:
        raise ValueError(
            f"workspace of {workspace_size} rows cannot hold one block of {block_size} "
            f"for each of {num_with_context} requests with context"
        )

    num_chunks = cdiv(max_context_len, max_context_chunk)
    chunk_starts = (torch.arange(num_chunks, dtype=torch.int32) * max_context_chunk).unsqueeze(1)
    chunk_starts = chunk_starts.expand(num_chunks, num_prefills).contiguous()
    chunk_ends = torch.minimum(context_lens.unsqueeze(0), chunk_starts + max_context_chunk)
    chunk_seq_lens = (chunk_ends - chunk_starts).clamp_(min=0)
    has_empty_context = torch.any(chunk_seq_lens == 0, dim=1).tolist()

    cu_seq_lens = torch.zeros(num_chunks, num_prefills + 1, dtype=torch.int32)
    cu_seq_lens[:, 1:] = torch.cumsum(chunk_seq_lens, dim=1, dtype=torch.int32)
    chunk_total_token = cu_seq_lens[:, -1]

    max_tokens = int(chunk_total_token.max().item())
    token_to_seq = torch.zeros(num_chunks, max_tokens, dtype=torch.int32)
    req_indices = torch.arange(num_prefills, dtype=torch.int32)
    for i in range(num_chunks):
        owners = torch.repeat_interleave(req_indices, chunk_seq_lens[i])
        token_to_seq[i, : owners.numel()] = owners

    device = workspace.device
    return ChunkedContext(
        cu_seq_lens=cu_seq_lens.to(device),
        starts=chunk_starts.to(device),
        seq_tot=chunk_seq_lens.sum(dim=1).tolist(),
        max_seq_lens=chunk_seq_lens.max(dim=1).values.tolist(),
        seq_lens=chunk_seq_lens,
        token_to_seq=token_to_seq.to(device),
        chunk_total_token=chunk_total_token.tolist(),
        workspace=workspace,
        has_empty_context=has_empty_context,
        prefill_tokens_with_context=int(query_start_loc[num_with_context].item()),
        chunk_size=max_context_chunk,
    )


def gather_cache(
    *,
    src_cache: torch.Tensor,
    dst: torch.Tensor,
    block_table: torch.Tensor,
    cu_seq_lens: torch.Tensor,
    token_to_seq: torch.Tensor,
    num_tokens: int,
    seq_starts: torch.Tensor,
    scale: torch.Tensor | None = None,
) -> None:
    """Copy one chunk's context rows from the paged cache into ``dst[:num_tokens]``.

    Row ``t`` of request ``r = token_to_seq[t]`` is context position
    ``seq_starts[r] + t - cu_seq_lens[r]``, found in block ``block_table[r, pos // block]``.
    This is ``gather_and_maybe_dequant_cache`` with ``kv_cache_dtype="auto"`` when the cache
    and workspace dtypes agree, and ``cp_gather_cache`` for an fp8 cache gathered into an fp8
    workspace; a 16-bit workspace fed from an fp8 cache is dequantized with ``scale``.
    """
    if num_tokens == 0:
        return
    block_size = src_cache.shape[1]
    owner = token_to_seq[:num_tokens].long()
    rows = torch.arange(num_tokens, device=dst.device)
    pos = seq_starts.long()[owner] + rows - cu_seq_lens.long()[owner]
    blocks = block_table.long()[owner, pos // block_size]
    values = src_cache[blocks, pos % block_size]
    if values.dtype != dst.dtype:
        values = values.float() * (1.0 if scale is None else scale.float())
    dst[:num_tokens] = values.to(dst.dtype)
