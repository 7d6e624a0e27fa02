"""A progress bar on stderr for large interactive runs: never in CI or pre-commit, never when
stderr is not a terminal (a log file of escape codes helps nobody)."""

from __future__ import annotations

import os
import sys


def progress_bar(disabled: bool):
    """(tick(done, total, stage) or None, stop()). Stages of 200+ files show a bar, and the fix
    stage always does (each file there is slow)."""
    if disabled or not sys.stderr.isatty() or os.environ.get("CI") or os.environ.get("PRE_COMMIT"):
        return None, lambda: None
    state: dict = {}

    def tick(done: int, total: int, stage: str) -> None:
        if total < 200 and stage != "fix":
            return
        if "bar" not in state:
            from rich.console import Console
            from rich.progress import Progress

            state["bar"] = Progress(transient=True, console=Console(stderr=True))
            state["bar"].start()
        bar = state["bar"]
        if state.get("stage") != stage:
            state["task"] = bar.add_task(stage, total=total)
            state["stage"] = stage
        bar.update(state["task"], completed=done)

    def stop() -> None:
        if "bar" in state:
            state["bar"].stop()

    return tick, stop
