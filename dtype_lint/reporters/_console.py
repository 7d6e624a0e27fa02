"""The rich Console every rich-based format writes through (imports rich: use lazily)."""

from __future__ import annotations

from typing import TextIO

from rich.console import Console

from dtype_lint.reporters._common import PIPE_WIDTH, is_tty, want_color


def make_console(out: TextIO, color: bool | None) -> Console:
    """A Console on `out` whose output is deterministic unless `out` is a terminal.

    - colour (ANSI) only when `want_color`: a TTY without NO_COLOR, or color=True;
      otherwise no escape codes at all (rich's FORCE_COLOR/TTY_COMPATIBLE are overridden);
    - width: the terminal's on a TTY, else a fixed PIPE_WIDTH (not $COLUMNS);
    - no markup, emoji or highlighting: paths and code are printed verbatim.
    """
    use_color = want_color(out, color)
    tty = is_tty(out)
    return Console(
        file=out,
        force_terminal=use_color,
        # Forced colour into a pipe/file: a fixed palette, not one sniffed from $TERM.
        color_system=("auto" if tty else "standard") if use_color else None,
        no_color=not use_color,
        width=None if tty else PIPE_WIDTH,
        height=None if tty else 25,
        legacy_windows=False,
        force_jupyter=False,
        force_interactive=False,
        markup=False,
        emoji=False,
        highlight=False,
        tab_size=4,
    )
