"""Run vLLM's extracted MLA prefill functions on the reference kernels.

What the harness supplies, and why each piece is shaped so:

* **the module namespace** of each release: the extracted texts (:mod:`.upstream_source`)
  executed in one dict, in source order, compiled with ``from __future__ import annotations`` so
  that type annotations naming vLLM classes are never evaluated. On a machine without an
  accelerator its ``torch`` is a view of torch whose ``empty``/``zeros`` drop ``pin_memory=True``
  (0.27.1's chunk planner pins its CPU tensors, which CPU-only PyTorch refuses; pinning changes
  no value). Everything else is torch itself.
* **the provided names** (:data:`.upstream_source.PROVIDED`): ``ops`` with vLLM's cache gathers
  (:class:`HarnessOps`), ``merge_attn_states``/``mask_empty_context`` (looked up in
  ``kernels_ref.attention`` at call time, so :func:`kernels_ref.ops.installed` routes them to CUDA),
  ``current_platform`` (:mod:`.reference_platform`), the decode-context-parallel group
  (``get_dcp_group()`` for 0.27.1, ``MLADCPManager`` for 0.28.0: :class:`DcpEmulation`) and
  ``np_to_pinned_tensor`` (unpinned, as vLLM itself does where pinning is unavailable).
* **``self``**: an object of a class built from the extracted methods, with the attributes they
  read (head dims, ``kv_b_proj``, ``kv_cache_dtype``, ``_use_flashinfer_concat_mla_k = False``).
* **the metadata**: built by the release's own ``build_mla_chunked_context_metadata`` into its own
  ``MLACommonPrefillMetadata``, with :class:`ContextAttention` as the prefill backend (FlashAttention
  varlen semantics over :func:`kernels_ref.attention.mla_prefill_attention`, taking either
  release's call: ``chunk_idx=`` in 0.27.1, ``chunk=`` in 0.28.0).
* **the call**: as ``forward_mha`` makes it (q cast to fp8 first in an fp8 prefill). The main path
  runs on one rank; the context-parallel path runs as rank 0 of two decode-context-parallel ranks,
  each with its own interleaved share of the cache (:func:`.prefill_context.store_cache`), the
  all-gather replaying rank 0's gather on every rank's cache.
"""

from __future__ import annotations
import __future__

import inspect
import sys
import types
from contextlib import contextmanager
from dataclasses import dataclass
from types import SimpleNamespace
from typing import Protocol

import torch

from .. import attention
from .chunking import gather_cache
from .reference_platform import current_platform
from .upstream_source import METHODS, Extraction, helper_imports

DCP_WORLD_SIZE = 2
DCP_INTERLEAVE = 1


class UpstreamHarnessError(RuntimeError):
    """The extracted code could not be set up (not a failure of the code under test)."""


# ----------------------------------------------------------------------------- provided names


class _TorchWithoutPinnedMemory(types.ModuleType):
    """torch, except that ``pin_memory=True`` is dropped where no accelerator can pin memory."""

    def __init__(self) -> None:
        super().__init__("torch")

    def __getattr__(self, name: str):
        return getattr(torch, name)

    @staticmethod
    def empty(*args, pin_memory: bool = False, **kwargs):
        return torch.empty(*args, **kwargs)

    @staticmethod
    def zeros(*args, pin_memory: bool = False, **kwargs):
        return torch.zeros(*args, **kwargs)


def _torch_for_namespace():
    return torch if torch.cuda.is_available() else _TorchWithoutPinnedMemory()


class HarnessOps:
    """vLLM's ``_custom_ops`` cache gathers, on torch; remembers the last gather so that the DCP
    emulation can replay it on the other ranks' caches."""

    def __init__(self) -> None:
        self.last_gather: tuple | None = None

    def gather_and_maybe_dequant_cache(
        self, src_cache, dst, block_table, cu_seq_lens, token_to_seq, num_tokens, kv_cache_dtype, scale, seq_starts=None
    ) -> None:
        """Rows ``[0, num_tokens)`` of ``dst`` from the paged cache; an fp8 cache is dequantized
        with ``scale`` into a 16-bit ``dst`` (``kv_cache_dtype`` "fp8"), an "auto" cache copied."""
        if kv_cache_dtype == "auto" and src_cache.dtype != dst.dtype:
            raise RuntimeError(f"gather_and_maybe_dequant_cache: auto cache {src_cache.dtype} into {dst.dtype}")
        kwargs = dict(block_table=block_table, cu_seq_lens=cu_seq_lens, token_to_seq=token_to_seq,
                      num_tokens=int(num_tokens), seq_starts=seq_starts, scale=scale)
        self.last_gather = (dst, kwargs)
        gather_cache(src_cache=src_cache, dst=dst, **kwargs)

    def cp_gather_cache(self, src_cache, dst, block_table, cu_seq_lens, batch_size, seq_starts=None) -> None:
        """``cu_seq_lens[b]:cu_seq_lens[b+1]`` rows of ``dst`` from request ``b``'s cache positions
        ``seq_starts[b] + t``, copied as they are (same dtype)."""
        if src_cache.dtype != dst.dtype:
            raise RuntimeError(f"cp_gather_cache: {src_cache.dtype} cache into a {dst.dtype} workspace")
        cu = cu_seq_lens[: int(batch_size) + 1].to("cpu", torch.int64)
        lens = cu[1:] - cu[:-1]
        token_to_seq = torch.repeat_interleave(torch.arange(int(batch_size)), lens).to(dst.device)
        starts = seq_starts if seq_starts is not None else torch.zeros(int(batch_size), dtype=torch.int32, device=dst.device)
        kwargs = dict(block_table=block_table, cu_seq_lens=cu.to(dst.device), token_to_seq=token_to_seq,
                      num_tokens=int(cu[-1]), seq_starts=starts, scale=None)
        self.last_gather = (dst, kwargs)
        gather_cache(src_cache=src_cache, dst=dst, **kwargs)

    def cp_gather_and_upconvert_fp8_kv_cache(self, *args, **kwargs):
        raise NotImplementedError("the harness has no fp8_ds_mla cache (kv_cache_dtype is 'auto' or 'fp8')")

    def replay_gather(self, src_cache: torch.Tensor, rows: int) -> torch.Tensor:
        """The last gather again, from ``src_cache`` into a fresh buffer; its first ``rows`` rows."""
        if self.last_gather is None:
            raise UpstreamHarnessError("all-gather before any cache gather")
        dst, kwargs = self.last_gather
        scratch = torch.zeros_like(dst)
        gather_cache(src_cache=src_cache, dst=scratch, **kwargs)
        return scratch[:rows]


class DcpEmulation:
    """Decode context parallelism with every rank's cache in one process, seen from rank 0.

    ``get_dcp_group()`` (0.27.1) returns it: ``all_gather(local, dim=0)`` is rank 0's ``local``
    followed by the same gather replayed on ranks 1.. . As ``MLADCPManager`` (0.28.0) it fills
    ``gathered`` the same way in ``kv_gather``.
    """

    def __init__(self, rank_caches: list[torch.Tensor], ops: HarnessOps) -> None:
        self.rank_caches = rank_caches
        self.ops = ops
        self.world_size = len(rank_caches)
        self.rank_in_group = 0

    def all_gather(self, local: torch.Tensor, dim: int = 0) -> torch.Tensor:
        if dim != 0:
            raise UpstreamHarnessError("the DCP emulation gathers along dim 0 only")
        parts = [local] + [self.ops.replay_gather(c, local.shape[0]) for c in self.rank_caches[1:]]
        return torch.cat(parts, dim=0)

    def kv_gather(self, gathered_kv: torch.Tensor, local_kv: torch.Tensor) -> None:
        gathered_kv.copy_(self.all_gather(local_kv))


def _merge_attn_states(*args, **kwargs):
    return attention.merge_attn_states(*args, **kwargs)


def _mask_empty_context(*args, **kwargs):
    return attention.mask_empty_context(*args, **kwargs)


@dataclass
class RunContext:
    """The per-run objects the provided names point at."""

    ops: HarnessOps
    dcp: DcpEmulation | None


class _CurrentRun:
    """Where the provided names find the current run: the namespace is built once per release,
    and each run only swaps the context (a run's cache gathers and DCP ranks are its own)."""

    def __init__(self) -> None:
        self.ctx: RunContext | None = None

    def get(self) -> RunContext:
        if self.ctx is None:
            raise UpstreamHarnessError("an upstream function ran outside upstream_runtime.run")
        return self.ctx


class _OpsProxy:
    def __init__(self, current: _CurrentRun) -> None:
        self._current = current

    def __getattr__(self, name: str):
        return getattr(self._current.get().ops, name)


def provided_names(current: _CurrentRun) -> dict[str, object]:
    def get_dcp_group():
        dcp = current.get().dcp
        if dcp is None:
            raise AssertionError("DCP group is not initialized")  # vLLM's own text, on one rank
        return dcp

    return {
        "ops": _OpsProxy(current),
        "current_platform": current_platform,
        "merge_attn_states": _merge_attn_states,
        "mask_empty_context": _mask_empty_context,
        "get_dcp_group": get_dcp_group,
        "MLADCPManager": DcpEmulation,
        "np_to_pinned_tensor": torch.from_numpy,
        # 0.33.0's chunk planner: no pinned memory here, and its host-to-device copy made plainly.
        "PIN_MEMORY": False,
        "async_tensor_h2d": _tensor_h2d,
    }


def _tensor_h2d(data, device=None, dtype=None, out=None):
    """vLLM 0.33.0's ``async_tensor_h2d`` with ``PIN_MEMORY`` false: the same copy, unpinned."""
    if dtype is None and out is not None:
        dtype = out.dtype
    t = torch.as_tensor(data, dtype=dtype)
    if out is not None:
        return out.copy_(t)
    return t.to(device=device, dtype=dtype)


# ----------------------------------------------------------------------------- the namespace


_FLAGS = __future__.annotations.compiler_flag


class CompiledRelease:
    """An :class:`Extraction`'s texts compiled once; :meth:`namespace` executes them per run."""

    def __init__(self, ext: Extraction) -> None:
        self.ext = ext
        self.label = ext.label
        self.imports = [compile(stmt, f"<{ext.label} imports>", "exec") for stmt in ext.imports]
        self.units = [
            (u, compile(u.text, f"<{ext.label}:{u.origin}:{u.line} {u.name}>", "exec", flags=_FLAGS, dont_inherit=True))
            for u in ext.units
        ]
        self.current = _CurrentRun()
        self._ns: dict | None = None
        self.helper: types.CodeType | None = None
        if ext.helper_text is not None:
            self.helper = compile(_strip_imports(ext.helper_text), f"<{ext.label} helper>", "exec", dont_inherit=True)

    @property
    def namespace(self) -> dict:
        """The release's module namespace, executed on first use."""
        if self._ns is None:
            self._ns = self._execute()
        return self._ns

    def _execute(self) -> dict:
        # A real module, registered while its classes are created: dataclasses resolves string
        # annotations through sys.modules[cls.__module__].
        name = f"dtl_upstream_{abs(hash(self.label)):x}_{id(self):x}"
        module = types.ModuleType(name)
        ns = module.__dict__
        sys.modules[name] = module
        try:
            for code in self.imports:
                exec(code, ns)
            if "torch" in ns:
                ns["torch"] = _torch_for_namespace()
            provided = provided_names(self.current)
            for pname in self.ext.provided:
                ns[pname] = provided[pname]
            if self.helper is not None:
                helper_name, helper_text = self.ext.helper_name, self.ext.helper_text
                if helper_name is None or helper_text is None:  # extract() names the helper it was given
                    raise UpstreamHarnessError(f"{self.label}: a helper text the release never imports")
                ns[helper_name] = self._helper_function(provided, self.helper, helper_text)
            for _unit, code in self.units:
                exec(code, ns)
        finally:
            del sys.modules[name]
        return ns

    @contextmanager
    def running(self, ctx: RunContext):
        """Point the provided names at ``ctx`` for one run."""
        if self.current.ctx is not None:
            raise UpstreamHarnessError(f"{self.label}: runs do not nest")
        self.current.ctx = ctx
        try:
            yield self.namespace
        finally:
            self.current.ctx = None

    def _helper_function(self, provided: dict[str, object], code: types.CodeType, text: str):
        hns: dict = {"__name__": self.ext.helper_module, "__builtins__": __builtins__}
        for module, name, stmt in helper_imports(text):
            if module.split(".")[0] == "vllm":
                if name not in provided:
                    raise UpstreamHarnessError(f"the helper imports {name} from {module}, which the harness does not provide")
                hns[name] = provided[name]
            else:
                exec(stmt, hns)
        exec(code, hns)
        return hns[self.ext.helper_name]

    def fixed_helper(self):
        """The function the release calls to pick the latent's dtype, if it has one
        (``_get_kv_b_proj_input_dtype`` in 0.28.0, the fixer's helper in the rewrite)."""
        if self.ext.helper_name:
            return self.namespace[self.ext.helper_name]
        return self.namespace.get("_get_kv_b_proj_input_dtype")


def load_helper(text: str, func: str, module: str = "dtl_lone_helper"):
    """The function ``func`` of the helper module ``text`` on its own, with vLLM's platform
    supplied by the harness: for the helper check where the fixer rewrote nothing."""
    hns: dict = {"__name__": module, "__builtins__": __builtins__}
    for imported, name, stmt in helper_imports(text):
        if imported.split(".")[0] == "vllm":
            if name != "current_platform":
                raise UpstreamHarnessError(f"the helper imports {name} from {imported}, which the harness does not provide")
            hns[name] = current_platform
        else:
            exec(stmt, hns)
    exec(compile(_strip_imports(text), f"<{module}>", "exec", dont_inherit=True), hns)
    return hns[func]


def _strip_imports(text: str) -> str:
    """The helper module without its import lines (they are bound by :meth:`_helper_function`)."""
    import ast

    tree = ast.parse(text)
    lines = text.splitlines(keepends=True)
    drop: set[int] = set()
    for node in tree.body:
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            # A parsed statement always has its end line (typeshed's `int | None` is for built nodes).
            drop.update(range(node.lineno, (node.end_lineno or node.lineno) + 1))
    return "".join("\n" if i + 1 in drop else line for i, line in enumerate(lines))


# ----------------------------------------------------------------------------- one run


class _ChunkedContextMetadata(Protocol):
    cu_seq_lens: torch.Tensor  # [chunks, requests + 1]


class _PrefillMetadata(Protocol):
    """What 0.27.1's chunk call reads of the release's own MLACommonPrefillMetadata (a class of
    the release's code, compiled at run time)."""

    query_start_loc: torch.Tensor
    chunked_context: _ChunkedContextMetadata


class ContextAttention:
    """The prefill backend both releases call: FlashAttention varlen over the chunk's requests."""

    def __init__(self, scale: float, output_dtype: torch.dtype) -> None:
        self.scale = scale
        self.output_dtype = output_dtype
        self._prefill_metadata: _PrefillMetadata | None = None  # set by upstream run() before 0.27.1 calls

    def run_prefill_context_chunk(self, q, k, v, chunk_idx=None, chunk=None, out=None):
        if chunk is not None:  # 0.28.0
            cu_q, cu_k = chunk.query_start_loc, chunk.cu_seq_lens
        else:  # 0.27.1
            assert self._prefill_metadata is not None  # run() sets it before the release's code runs
            cu_q = self._prefill_metadata.query_start_loc
            cu_k = self._prefill_metadata.chunked_context.cu_seq_lens[chunk_idx]
        o, lse = attention.mla_prefill_attention(q, k, v, cu_q, cu_k, self.scale, False, self.output_dtype)
        if out is not None:
            out.copy_(o)
            o = out
        return o, lse


def _call(fn, **kwargs):
    """Call ``fn`` with the keyword arguments it accepts; a required one it lacks is an error."""
    params = inspect.signature(fn).parameters
    missing = [n for n, p in params.items() if p.default is p.empty and p.kind is p.KEYWORD_ONLY and n not in kwargs]
    missing += [n for n, p in params.items() if p.default is p.empty and p.kind is p.POSITIONAL_OR_KEYWORD
                and n not in kwargs and n != "self"]
    if missing:
        raise UpstreamHarnessError(f"{getattr(fn, '__qualname__', fn)} needs {missing}, which the harness does not supply")
    return fn(**{k: v for k, v in kwargs.items() if k in params})


@dataclass
class UpstreamInputs:
    """One row's device tensors for an upstream run (see :func:`run`)."""

    q: torch.Tensor  # model dtype
    caches: list[torch.Tensor]  # rank 0 first; one entry on the main path
    block_table: torch.Tensor
    layer: torch.nn.Module
    kv_cache_dtype: str  # "auto" or "fp8"
    q_data_type: torch.dtype
    model_dtype: torch.dtype
    k_scale: float = 1.0  # the fp8 KV cache's scale, passed as forward_mha passes layer._k_scale


def workspace_dtype(path: str, inputs_q_data_type: torch.dtype, model_dtype: torch.dtype) -> torch.dtype:
    """What vLLM's metadata builder allocates: the query dtype on one rank, the model dtype with
    DCP (the all-gather path dequantizes into it)."""
    return model_dtype if path == "cp" else inputs_q_data_type


def run(release: CompiledRelease, path: str, scenario, inputs: UpstreamInputs, *, k_scale: torch.Tensor | None = None):
    """Run ``release``'s ``_compute_prefill_context`` (``path="main"``, one rank) or
    ``_context_parallel_compute_prefill_context`` (``"cp"``, rank 0 of :data:`DCP_WORLD_SIZE`)
    over ``scenario``; returns ``(output [T,H,v], lse [H,T])``."""
    s = scenario
    world = DCP_WORLD_SIZE if path == "cp" else 1
    if len(inputs.caches) != world:
        raise UpstreamHarnessError(f"{path} path needs {world} rank cache(s), got {len(inputs.caches)}")
    ops = HarnessOps()
    dcp = DcpEmulation(inputs.caches, ops) if world > 1 else None
    with release.running(RunContext(ops, dcp)) as ns:
        return _run(ns, release.label, path, s, inputs, world, dcp, k_scale)


def _run(ns: dict, label: str, path: str, s, inputs: UpstreamInputs, world: int, dcp, k_scale):
    device = inputs.q.device

    rows = s.workspace_size + (s.workspace_size // world if world > 1 else 0)
    workspace = torch.empty(rows, s.kv_lora_rank + s.qk_rope_head_dim,
                            dtype=workspace_dtype(path, inputs.q_data_type, inputs.model_dtype), device=device)
    query_start_loc = torch.tensor(s.query_start_loc, dtype=torch.int32)
    chunked = _call(
        ns["build_mla_chunked_context_metadata"],
        context_lens_cpu=torch.tensor(s.context_lens, dtype=torch.int32),
        prefill_query_start_loc_cpu=query_start_loc,
        num_prefills=len(s.context_lens),
        chunked_prefill_workspace=workspace,
        chunked_prefill_workspace_size=s.workspace_size,
        block_size=s.block_size,
        align_chunk_to_block=True,
        device=device,
        dcp_world_size=world,
        dcp_local_block_size=DCP_INTERLEAVE,
        dcp_virtual_block_size=DCP_INTERLEAVE * world,
        dcp_manager=dcp,
    )
    if chunked is None:
        raise UpstreamHarnessError(f"scenario {s.name} has no context")
    backend = ContextAttention(s.softmax_scale, inputs.model_dtype)
    prefill = _call(
        ns["MLACommonPrefillMetadata"],
        block_table=inputs.block_table,
        query_start_loc=query_start_loc.to(device),
        max_query_len=max(s.query_lens),
        chunked_context=chunked,
        q_data_type=inputs.q_data_type,
        output_dtype=inputs.model_dtype,
        prefill_backend=backend,
    )
    backend._prefill_metadata = prefill
    attn_metadata = SimpleNamespace(prefill=prefill, num_prefills=len(s.context_lens))

    impl_cls = type(f"MLAPrefill[{label}]", (), {name: ns[name] for name in METHODS})
    impl = impl_cls()
    impl.num_heads = s.num_heads
    impl.kv_lora_rank = s.kv_lora_rank
    impl.qk_nope_head_dim = s.qk_nope_head_dim
    impl.qk_rope_head_dim = s.qk_rope_head_dim
    impl.qk_head_dim = s.qk_nope_head_dim + s.qk_rope_head_dim
    impl.v_head_dim = s.v_head_dim
    impl.scale = float(s.softmax_scale)
    impl.kv_cache_dtype = inputs.kv_cache_dtype
    impl.kv_b_proj = inputs.layer
    impl.dcp_world_size = world
    impl._use_flashinfer_concat_mla_k = False

    k_scale = torch.tensor(inputs.k_scale, dtype=torch.float32, device=device) if k_scale is None else k_scale
    q = inputs.q
    if inputs.q_data_type == current_platform.fp8_dtype():  # forward_mha's prologue
        q = q.to(inputs.q_data_type)
    if path == "main":
        return impl._compute_prefill_context(q, inputs.caches[0], attn_metadata, k_scale)
    return impl._context_parallel_compute_prefill_context(q, inputs.caches[0], attn_metadata, k_scale=k_scale, dcp_world_size=world)


def chunk_plan(release: CompiledRelease, scenario, path: str) -> list[list[tuple[int, int]]]:
    """The chunks the release's planner cuts, each as its ``(request, context rows)`` pieces, in
    order. Two releases can compute the same bits only where these agree: the merge order, and
    the rows each kv_b_proj GEMM sees, follow from them."""
    s = scenario
    world = DCP_WORLD_SIZE if path == "cp" else 1
    ns = release.namespace
    rows = s.workspace_size + (s.workspace_size // world if world > 1 else 0)
    chunked = _call(
        ns["build_mla_chunked_context_metadata"],
        context_lens_cpu=torch.tensor(s.context_lens, dtype=torch.int32),
        prefill_query_start_loc_cpu=torch.tensor(s.query_start_loc, dtype=torch.int32),
        num_prefills=len(s.context_lens),
        chunked_prefill_workspace=torch.empty(rows, 1),
        chunked_prefill_workspace_size=s.workspace_size,
        block_size=s.block_size,
        align_chunk_to_block=True,
        device=torch.device("cpu"),
        dcp_world_size=world,
        dcp_local_block_size=DCP_INTERLEAVE,
        dcp_virtual_block_size=DCP_INTERLEAVE * world,
        dcp_manager=None,
    )
    plan = []
    if hasattr(chunked, "chunks"):  # 0.28.0: chunks over a run of requests
        for chunk in chunked.chunks:
            cu = chunk.cu_seq_lens.tolist()
            r0 = chunk.request_slice.start
            plan.append([(r0 + i, cu[i + 1] - cu[i]) for i in range(len(cu) - 1)])
    else:  # 0.27.1: chunk i is window i of every request
        for i in range(len(chunked.seq_tot)):
            cu = chunked.cu_seq_lens[i].tolist()
            pieces = [(r, cu[r + 1] - cu[r]) for r in range(len(cu) - 1) if cu[r + 1] > cu[r]]
            if pieces:
                plan.append(pieces)
    return plan
