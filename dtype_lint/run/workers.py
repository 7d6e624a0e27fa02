"""The one process pool: per-file work (headers, analysis, fixes) in parallel when it pays.

A worker process costs its start and a copy of the class index; it wins only on enough work, so
small batches run in this process. Jobs never exceed the CPU count (`-j 300` on two cores would
only thrash).
"""

from __future__ import annotations

import os
import sys
from typing import Callable, Iterable, Sequence

_STATE: dict = {}


def cpu_count() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count() or 1


def effective_jobs(requested: int | None) -> int:
    """`-j N` capped at the CPUs this process may use; None: all of them."""
    cpus = cpu_count()
    return max(1, min(requested or cpus, cpus))


def worker_state() -> dict:
    """What the initializer left for the jobs of this process (the index, the config...)."""
    return _STATE


def _init(init: Callable | None, args: tuple) -> None:
    _STATE.clear()
    if init is not None:
        init(*args)


def parallel_map(fn: Callable, items: Sequence, jobs: int, *, init: Callable | None = None,
                 initargs: tuple = (), progress: Callable | None = None, stage: str = "",
                 parallel: bool | None = None, chunks_per_job: int = 8) -> list:
    """[fn(x) for x in items], in order. `init(*initargs)` prepares each process's state
    (this one's too when run serially). `parallel`: force the choice; None: jobs > 1 and more
    than a handful of items. `chunks_per_job`: the items are handed out in runs of consecutive
    items, this many per process (fewer: each process reads fewer of the files its items share,
    more: the processes finish closer together)."""
    if not items:
        return []
    if parallel is None:
        parallel = jobs > 1 and len(items) >= 8
    if not parallel:
        _init(init, initargs)
        try:
            return list(_ticking((fn(x) for x in items), len(items), progress, stage))
        finally:
            _STATE.clear()  # the state (an index, its parsed files) must not outlive the stage
    # Imported here: a run that stays in one process (pre-commit) does not pay for them.
    import multiprocessing
    from concurrent.futures import ProcessPoolExecutor

    ctx = multiprocessing.get_context("fork" if sys.platform.startswith("linux") else "spawn")
    chunk = max(1, len(items) // (jobs * chunks_per_job))
    with ProcessPoolExecutor(max_workers=jobs, mp_context=ctx, initializer=_init,
                             initargs=(init, initargs)) as pool:
        return list(_ticking(pool.map(fn, items, chunksize=chunk), len(items), progress, stage))


def _ticking(results: Iterable, total: int, progress: Callable | None, stage: str):
    for i, result in enumerate(results, 1):
        yield result
        if progress:
            progress(i, total, stage)
