"""The console entry point (`dtype-lint`, `python -m dtype_lint`): the pre-commit replay
(run/replay_index.py), else the fast path (fast_path.py), else the command line, all with stdout
guarded (stdout_guard.py). Nothing imports this module; it imports the standard library's
built-in modules only until the replay has declined (tests/test_precommit_replay.py)."""

from __future__ import annotations

import gc
import sys

from dtype_lint.stdout_guard import run_guarded


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    try:
        return run_guarded(lambda: _main(argv))
    finally:
        # The process exits with the command's code (the console script, `python -m`: nothing
        # else calls this). Its objects are out of the collector's sight from here: the full
        # collections of the interpreter's exit would walk every one of them (the modules, what
        # the run kept) for cycles the operating system frees anyway, 28 M instructions of the
        # pre-commit run of an edited file (3.8%). Nothing of ours finalizes at exit.
        gc.freeze()


def _main(argv: list[str]) -> int:
    from dtype_lint.run.replay_index import replay

    code = replay(argv)
    if code is not None:
        return code
    # From here the command line imports up to a hundred modules whose classes, functions and
    # tables live as long as the process: a collection every 700 allocations while they are built
    # finds no garbage, and cost the pre-commit run of an edited file 10 M instructions (1.3%).
    # The run collects as rarely (pipeline._gc_tuned).
    gc.set_threshold(100_000, 50, 100)
    from dtype_lint import fast_path

    code = fast_path.try_clean_exit(argv)
    if code is not None:
        return code
    from dtype_lint.cli import main as cli_main

    fast_path._already_tried = True
    try:
        return cli_main(argv)
    finally:
        fast_path._already_tried = False
