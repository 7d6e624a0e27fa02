"""Standard output as a run's output, not a source of tracebacks: every command runs with its
stdout guarded (`run_guarded`).

- A character the stream's encoding cannot hold (`PYTHONIOENCODING=ascii`, a C locale, a Windows
  code page) is written escaped (`\\xfc`, `\\u2192`), as Python writes stderr: a code frame
  holding a non-ASCII comment must not turn "findings remain" into a crash. The exit code is
  the one the run would have had.
- A write that fails (`> /dev/full`, a disk filling up, a closed terminal) is one line on stderr
  and exit 2: exit 1 means "findings remain", and the output the caller relied on is incomplete.
- A reader that left (`dtype-lint check | head -1`, EPIPE) ends the run silently with exit 2, as
  the command line has always done (Ruff exits 0 there; this run cannot claim "clean" when its
  output was not read to the end).

Imported by the console entry point before anything else: standard library only.
"""

from __future__ import annotations

import errno
import os
import sys

# Not `typing.TYPE_CHECKING`: importing `typing` costs the pre-commit replay (run/replay_index.py)
# about a tenth of its budget. Type checkers read the name as theirs.
TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Callable, TextIO

EXIT_ERROR = 2


class StdoutWriteError(Exception):
    """A write to stdout failed. Deliberately not an OSError: code that handles a file's OSError
    (a cache that cannot be read, the fast path falling back to the full run) must not take a
    failed output for one of its own and carry on writing."""

    def __init__(self, error: OSError) -> None:
        super().__init__(error)
        self.error = error


class _GuardedStream:
    """A text stream whose write and flush failures raise StdoutWriteError; everything else
    (isatty, fileno, encoding, buffer) is the wrapped stream's, so rich and the reporters see a
    terminal or a pipe exactly as before."""

    def __init__(self, stream: TextIO) -> None:
        self._stream = stream

    def write(self, text: str) -> int:
        try:
            return self._stream.write(text)
        except OSError as error:
            raise StdoutWriteError(error) from None

    def writelines(self, lines) -> None:
        for line in lines:
            self.write(line)

    def flush(self) -> None:
        try:
            self._stream.flush()
        except OSError as error:
            raise StdoutWriteError(error) from None

    def __getattr__(self, name: str):
        return getattr(self._stream, name)


def _escape_unencodable(stream: TextIO) -> None:
    """Non-encodable characters written as backslash escapes (only a real text stream can be
    reconfigured; a StringIO holds any character)."""
    reconfigure = getattr(stream, "reconfigure", None)
    if reconfigure is None:
        return
    try:
        reconfigure(errors="backslashreplace")
    except (ValueError, OSError):  # a detached or closed stream: nothing will be written to it anyway
        pass


def _silence(stream: TextIO) -> None:
    """Point stdout's file descriptor at /dev/null and drop what is still buffered, so that the
    interpreter's own flush at exit neither fails again nor prints "Exception ignored"."""
    try:
        descriptor = stream.fileno()
    except (AttributeError, ValueError, OSError):
        return  # an in-memory stream: nothing is flushed at exit
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, descriptor)
        os.close(devnull)
        stream.flush()  # what was buffered now goes to /dev/null
    except (OSError, ValueError):
        pass


def _say(message: str) -> None:
    try:
        print(f"dtype-lint: error: {message}", file=sys.stderr)
        sys.stderr.flush()
    except (OSError, ValueError):  # stderr is gone too: the exit code still says it
        pass


def run_guarded(command: Callable[[], int]) -> int:
    """`command()`'s exit code, with stdout guarded as the module docstring says: its output
    flushed before the code is returned (a failure at the interpreter's final flush would be
    a traceback and exit 120, after the code was decided)."""
    if isinstance(sys.stdout, _GuardedStream):  # entry.main already guards cli.main
        return command()
    original = sys.stdout
    if original is None:  # pythonw, or stdout closed by the caller: nothing can be printed
        return command()
    _escape_unencodable(original)
    sys.stdout = _GuardedStream(original)
    try:
        try:
            code = command()
        except SystemExit:  # argparse's --help and usage errors: their output is flushed here too
            sys.stdout.flush()
            raise
        sys.stdout.flush()
        return code
    except StdoutWriteError as error:
        _silence(original)
        if isinstance(error.error, BrokenPipeError) or error.error.errno == errno.EPIPE:
            return EXIT_ERROR  # the reader left: nothing to tell it
        reason = error.error.strerror or str(error.error)
        _say(f"cannot write to standard output: {reason}; the output is incomplete")
        return EXIT_ERROR
    finally:
        sys.stdout = original
