"""The console entry point (`dtype-lint`, `python -m dtype_lint`): the pre-commit replay
(run/replay_index.py), else the fast path (fast_path.py), else the command line, all with stdout
guarded (stdout_guard.py). Nothing imports this module; it imports the standard library's
built-in modules only until the replay has declined (tests/test_precommit_replay.py)."""

from __future__ import annotations

import sys

from dtype_lint.stdout_guard import run_guarded


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    return run_guarded(lambda: _main(argv))


def _main(argv: list[str]) -> int:
    from dtype_lint.run.replay_index import replay

    code = replay(argv)
    if code is not None:
        return code
    import gc

    # From here the command line imports up to a hundred modules whose classes, functions and
    # tables live as long as the process: a collection every 700 allocations while they are built
    # finds no garbage, and cost the pre-commit run of an edited file 10 M instructions (1.3%).
    # The run collects as rarely (pipeline._gc_tuned); the threshold is back once it returns.
    threshold = gc.get_threshold()
    gc.set_threshold(100_000, 50, 100)
    try:
        return _command_line(argv)
    finally:
        gc.set_threshold(*threshold)


def _command_line(argv: list[str]) -> int:
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
