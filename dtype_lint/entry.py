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
