"""The one process pool: per-file work (headers, analysis, fixes) in parallel when it pays.

A worker process costs its start and a copy of the class index; it wins only on enough work, so
small batches run in this process. Jobs never exceed the CPU count (`-j 300` on two cores would
only thrash).
"""

from __future__ import annotations

import os
import sys
from typing import Any, Callable, Iterable, Sequence

from dtype_lint.core.trees import ignore_parser_warnings

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


def _init_spawned(init: Callable | None, args: tuple) -> None:
    ignore_parser_warnings()  # a spawned worker starts with the default filters (a forked one has the run's)
    _init(init, args)


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
    chunk = max(1, len(items) // (jobs * chunks_per_job))
    if sys.platform.startswith("linux"):
        return list(_ticking(_forked_map(fn, items, jobs, chunk, init, initargs), len(items), progress, stage))
    # Imported here: a run that stays in one process (pre-commit) does not pay for them.
    import multiprocessing
    from concurrent.futures import ProcessPoolExecutor

    ctx = multiprocessing.get_context("spawn")
    with ProcessPoolExecutor(max_workers=jobs, mp_context=ctx, initializer=_init_spawned,
                             initargs=(init, initargs)) as pool:
        return list(_ticking(pool.map(fn, items, chunksize=chunk), len(items), progress, stage))


class WorkerDied(RuntimeError):
    """A worker process ended without answering (killed, out of memory)."""


class RemoteTraceback(Exception):
    """Where in a worker an exception raised again here was raised (its traceback's text)."""

    def __str__(self) -> str:
        return self.args[0] if self.args else ""


def _forked_map(fn: Callable, items: Sequence, jobs: int, chunk: int, init: Callable | None, initargs: tuple):
    """`fn` of each item, in order, computed by `jobs` forked processes that take runs of `chunk`
    consecutive items as they come free (what ProcessPoolExecutor.map does with `chunksize`);
    an exception `fn` raises is raised here when its item's turn comes. The items and the state
    are the workers' by the fork: only run starts go to them and pickled results come back, over
    pipes. Not concurrent.futures and multiprocessing: their imports (logging, threading, socket,
    subprocess, queues) cost 3.9 MiB of RSS in this process, which every worker inherits and so
    adds to the peak of a default `-j` check."""
    import pickle
    import select

    starts = list(range(0, len(items), chunk))
    workers: list[tuple[int, int, int]] = []  # (pid, fd its runs go to, fd its results come from)
    _flush_std_streams()  # (else what they hold would be printed again by each worker)
    try:
        for _ in range(min(jobs, len(starts))):
            run_read, run_write = os.pipe()
            result_read, result_write = os.pipe()
            pid = os.fork()
            if pid == 0:  # the worker: never returns
                for _pid, other_run, other_result in workers:
                    os.close(other_run)  # (else a worker would hold another's pipe open past its end)
                    os.close(other_result)
                os.close(run_write)
                os.close(result_read)
                _work(fn, items, chunk, init, initargs, run_read, result_write, pickle)
            os.close(run_read)
            os.close(result_write)
            workers.append((pid, run_write, result_read))
        poller = select.poll()
        busy: dict[int, tuple[int, int]] = {}  # result fd -> (its run fd, the run's start)
        given = 0
        for _pid, run_fd, result_fd in workers:
            _send(run_fd, starts[given].to_bytes(8, "little"))
            busy[result_fd] = (run_fd, starts[given])
            given += 1
            poller.register(result_fd, select.POLLIN)
        done: dict[int, tuple[bool, Any]] = {}
        for start in starts:
            while start not in done:
                for result_fd, _event in poller.poll():
                    data = _receive(result_fd)
                    if data is None:
                        raise WorkerDied("a worker process ended without answering")
                    run_fd, finished = busy.pop(result_fd)
                    done[finished] = pickle.loads(data)
                    if given < len(starts):
                        _send(run_fd, starts[given].to_bytes(8, "little"))
                        busy[result_fd] = (run_fd, starts[given])
                        given += 1
            ok, value = done.pop(start)
            if not ok:
                error, where = value
                raise error from RemoteTraceback(where)
            yield from value
    finally:
        for _pid, run_fd, result_fd in workers:
            os.close(run_fd)  # the end of its runs: a waiting worker exits
            os.close(result_fd)  # (one still computing gets EPIPE on answering, and exits)
        for pid, _run_fd, _result_fd in workers:
            os.waitpid(pid, 0)


def _work(fn: Callable, items: Sequence, chunk: int, init: Callable | None, initargs: tuple,
          run_fd: int, result_fd: int, pickle) -> None:
    """A forked worker's life: the state made, then each run it is given computed and answered
    (the results, or the exception that stopped them) until its run pipe ends."""
    status = 0
    try:
        try:
            _init(init, initargs)
            failed: BaseException | None = None
        except BaseException as error:  # every run is answered with it
            failed = error
        while (head := _receive(run_fd, 8)) is not None:
            start = int.from_bytes(head, "little")
            answer: tuple[bool, Any]
            if failed is not None:
                answer = (False, (failed, _traceback_text(failed)))
            else:
                try:
                    answer = (True, [fn(x) for x in items[start:start + chunk]])
                except BaseException as error:
                    answer = (False, (error, _traceback_text(error)))
            try:
                data = pickle.dumps(answer, pickle.HIGHEST_PROTOCOL)
            except Exception as error:  # what cannot be pickled (an exception, a result): said in a RuntimeError
                failure, where = answer[1] if not answer[0] else (answer[1], _traceback_text(error))
                data = pickle.dumps((False, (RuntimeError(f"{failure!r} cannot be sent back ({error})"), where)),
                                    pickle.HIGHEST_PROTOCOL)
            _send(result_fd, len(data).to_bytes(8, "little") + data)
    except BaseException:
        status = 1
    finally:
        if not _flush_std_streams():  # what the worker printed, as a process exit would
            status = 1
        os._exit(status)  # not the parent's exit handlers and buffers a second time


def _flush_std_streams() -> bool:
    flushed = True
    for stream in (sys.stdout, sys.stderr):
        try:
            if stream is not None:
                stream.flush()
        except BaseException:
            flushed = False
    return flushed


def _traceback_text(error: BaseException) -> str:
    import traceback  # (a worker's error only)

    return "\n\"\"\"\n" + "".join(traceback.format_exception(type(error), error, error.__traceback__)) + "\"\"\""


def _send(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view):]


def _receive(fd: int, size: int | None = None) -> bytes | None:
    """`size` bytes (a length-prefixed message when None) from a pipe; None at its end."""
    if size is None:
        head = _receive(fd, 8)
        if head is None:
            return None
        size = int.from_bytes(head, "little")
    parts: list[bytes] = []
    while size:
        part = os.read(fd, min(size, 1 << 20))
        if not part:
            return None
        parts.append(part)
        size -= len(part)
    return b"".join(parts)


def _ticking(results: Iterable, total: int, progress: Callable | None, stage: str):
    for i, result in enumerate(results, 1):
        yield result
        if progress:
            progress(i, total, stage)
