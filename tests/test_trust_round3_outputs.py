"""Trusted like a compiler, round three (#36): outputs a user did not name, and output streams.

- `migrate --series DIR` writes only what is its own: a folder holding the user's README.md or
  PR.md, or a file under a patch's name, is refused (one line, exit 2, nothing written); the
  printed `git am` names exactly this run's patches, never `DIR/*.patch`; a rerun replaces the
  tool's own files (its manifest) and removes its stale patches, never the user's.
- stdout: a failed write (`> /dev/full`, a reader that left) is a one-line message (none for a
  reader that left) and exit 2, never a traceback or exit 1 ("findings remain"); a character the
  stream's encoding cannot hold is escaped, the exit code unchanged.
- A report (`-o`) that cannot be written is one line and exit 2.

The stream cases run the console entry point in a subprocess (a real file descriptor 1: the
interpreter's own flush at exit is part of what is tested); what they are compared with, and the
report cases, run in this process. Each case failed on de0faa5 (the note
says how) unless its note says it guards behaviour that was already right.
"""

from __future__ import annotations

import json
import os
import shlex
import subprocess
import sys
from pathlib import Path

import pytest
from cli_runner import dtl
from tiny_project import ATTN, tiny_project, tree_bytes

from dtype_lint.migrate import series

# The manifest that marks a folder as the tool's (docs/architecture.md names it).
MANIFEST = ".dtype-lint-series.json"

AUTHOR = "Ann Maintainer <ann@example.org>"
# A code frame holding characters ASCII cannot: the comment on the finding's own line.
NON_ASCII = ATTN.replace("x = x.to(self.kv_b_proj.weight.dtype)",
                         "x = x.to(self.kv_b_proj.weight.dtype)  # f\u00fcr \u2192 bf16")


def checked_out(root: Path) -> Path:
    """The tiny project as a git checkout (what a series applies to)."""
    tiny_project(root)
    series.git(["init", "-q", "-b", "main"], root)
    series.git(["add", "-A"], root)
    series.git(["commit", "-q", "-m", "base"], root)
    return root


def run_cli(cwd: Path, *args: str, stdout=subprocess.PIPE, env: dict | None = None) -> subprocess.CompletedProcess:
    """`python -m dtype_lint ARGS` in a fresh interpreter, stdout where the test puts it."""
    full_env = {k: v for k, v in os.environ.items() if k not in ("CI", "PRE_COMMIT", "FORCE_COLOR", "PYTHONIOENCODING")}
    full_env.update(NO_COLOR="1", **(env or {}))
    return subprocess.run([sys.executable, "-m", "dtype_lint", *args], cwd=cwd, stdout=stdout,
                          stderr=subprocess.PIPE, env=full_env, timeout=120)


def one_error_line(stderr: bytes | str) -> str:
    text = stderr.decode("utf-8", "replace") if isinstance(stderr, bytes) else stderr
    assert "Traceback" not in text and "Exception ignored" not in text, text
    errors = [line for line in text.splitlines() if line.startswith("dtype-lint: error:")]
    assert len(errors) == 1, text
    return errors[0]


# ---- --series: only what is its own -----------------------------------------------------------

# de0faa5: the user's tracked docs/README.md and docs/PR.md were overwritten by the series' own.
def test_series_into_a_folder_holding_the_users_readme_is_refused(tmp_path: Path):
    root = checked_out(tmp_path / "p")
    docs = root / "docs"
    docs.mkdir()
    (docs / "README.md").write_text("# Our docs\n", encoding="utf-8")
    (docs / "PR.md").write_text("our PR template\n", encoding="utf-8")
    before = tree_bytes(root)
    proc = dtl(root, "migrate", ".", "--series", "docs", "--author", AUTHOR)
    assert proc.returncode == 2
    line = one_error_line(proc.stderr)
    assert "docs/" in line and "not" in line
    assert tree_bytes(root) == before, "nothing written"


# de0faa5: the printed command was `git am out/*.patch`, which applies the user's own patch too.
def test_series_beside_the_users_files_names_exactly_its_patches(tmp_path: Path):
    root = checked_out(tmp_path / "p")
    out = tmp_path / "out"
    out.mkdir()
    mine = {"0001-mine.patch": b"From: me\nnot a patch of dtype-lint\n", "notes.txt": b"mine\n"}
    for name, data in mine.items():
        (out / name).write_bytes(data)
    proc = dtl(root, "migrate", ".", "--series", "../out", "--author", AUTHOR)
    assert proc.returncode in (0, 1), proc.stderr
    written = [Path(line) for line in proc.stdout.splitlines()]
    assert written and all(p.suffix == ".patch" for p in written)
    command = next(line for line in proc.stderr.splitlines() if "git am" in line)
    am = command.split("`")[1]
    assert "*" not in am
    assert shlex.split(am) == ["git", "am", *[str(p) for p in written]]
    assert "0001-mine.patch" not in am
    for name, data in mine.items():
        assert (out / name).read_bytes() == data, "the user's files are untouched"
    manifest = json.loads((out / MANIFEST).read_text(encoding="utf-8"))
    assert sorted(manifest["files"]) == sorted([p.name for p in written] + ["PR.md", "README.md"])
    assert "git am *.patch" not in (out / "README.md").read_text(encoding="utf-8")
    # The printed command, run as printed, applies the series to a checkout of the tree.
    applied = series.checkout(root, tmp_path / "applied", ignore=(".git", "__pycache__", ".dtype_lint_cache"))
    series.git(["am", "-q", *[str((root / p).resolve()) for p in written]], applied)
    compile((applied / "proj/attn.py").read_bytes(), "attn.py", "exec")
    assert (applied / "proj/dtypes.py").is_file()


def test_series_rerun_replaces_its_own_files_and_removes_its_stale_patch(tmp_path: Path):
    """A folder the tool made (its manifest) is the tool's to update: this run's files replace
    the earlier run's, an earlier patch this run does not write again is removed (`git am` by
    habit would apply it), the user's file beside them stays. (de0faa5 wrote no manifest and
    left stale patches; the user's file was kept.)"""
    root = checked_out(tmp_path / "p")
    out = tmp_path / "out"
    assert dtl(root, "migrate", ".", "--series", "../out", "--author", AUTHOR).returncode in (0, 1)
    first = tree_bytes(out)
    # An earlier series of three patches: its third, unedited, is in the manifest.
    stale = b"From: dtype-lint\nan earlier series' third patch\n"
    (out / "0003-earlier.patch").write_bytes(stale)
    manifest = json.loads((out / MANIFEST).read_text(encoding="utf-8"))
    import hashlib

    manifest["files"]["0003-earlier.patch"] = hashlib.sha256(stale).hexdigest()
    (out / MANIFEST).write_text(json.dumps(manifest), encoding="utf-8")
    (out / "notes.txt").write_text("mine\n", encoding="utf-8")
    proc = dtl(root, "migrate", ".", "--series", "../out", "--author", AUTHOR)
    assert proc.returncode in (0, 1), proc.stderr
    assert not (out / "0003-earlier.patch").exists()
    assert (out / "notes.txt").read_text(encoding="utf-8") == "mine\n"
    assert tree_bytes(out) == {**first, "notes.txt": b"mine\n"}


def test_series_refuses_to_overwrite_a_patch_the_user_edited_or_owns(tmp_path: Path):
    """Whether the name is a patch of the tool's the user edited since, or the user's own file
    under the name a patch gets: the whole series is refused, nothing written."""
    root = checked_out(tmp_path / "p")
    out = tmp_path / "out"
    assert dtl(root, "migrate", ".", "--series", "../out", "--author", AUTHOR).returncode in (0, 1)
    patch = sorted(out.glob("0002-*.patch"))[0]
    patch.write_bytes(patch.read_bytes() + b"-- \nreviewed by me\n")
    before = tree_bytes(out)
    proc = dtl(root, "migrate", ".", "--series", "../out", "--author", AUTHOR)
    assert proc.returncode == 2
    assert "edited" in one_error_line(proc.stderr)
    assert tree_bytes(out) == before
    # The user's own file under a patch's name, in a folder the tool never wrote to.
    other = tmp_path / "other"
    other.mkdir()
    (other / patch.name).write_bytes(b"mine\n")
    proc = dtl(root, "migrate", ".", "--series", "../other", "--author", AUTHOR)
    assert proc.returncode == 2
    assert patch.name in one_error_line(proc.stderr)
    assert tree_bytes(other) == {patch.name: b"mine\n"}


# ---- stdout ------------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def project(tmp_path_factory) -> Path:
    return tiny_project(tmp_path_factory.mktemp("streams") / "p", {"proj/attn.py": NON_ASCII})


# de0faa5: a traceback (OSError: No space left on device) and exit 1.
@pytest.mark.parametrize("args", [("check", "--no-cache", "proj"),  # a report larger than the buffer
                                  ("rule", "--all"),  # short: it fails only at the final flush
                                  ("--help",)])
def test_stdout_on_a_full_device_is_one_line_and_exit_2(project: Path, args: tuple[str, ...]):
    with open("/dev/full", "wb") as full:
        proc = run_cli(project, *args, stdout=full)
    assert proc.returncode == 2
    assert "cannot write to standard output" in one_error_line(proc.stderr)


# de0faa5 (text): UnicodeEncodeError in the code frame's line, a traceback and exit 1 after half a
# report. concise and json were already right (no code frame; JSON escapes): guarded beside it.
@pytest.mark.parametrize("fmt", ["text", "concise", "json"])
def test_an_ascii_stdout_gets_escapes_and_the_same_exit_code(project: Path, fmt: str):
    # The run it is compared with prints the same report in this process (a subprocess added
    # nothing to it); the ASCII stream is a subprocess's real one, its encoding set at start.
    plain = dtl(project, "check", "--no-cache", "proj", "--output-format", fmt)
    ascii_run = run_cli(project, "check", "--no-cache", "proj", "--output-format", fmt,
                        env={"PYTHONIOENCODING": "ascii"})
    assert plain.returncode == ascii_run.returncode == 1
    assert b"Traceback" not in ascii_run.stderr
    ascii_run.stdout.decode("ascii")  # nothing but ASCII reached the stream
    if fmt == "text":
        assert "f\u00fcr \u2192 bf16" in plain.stdout
        assert b"f\\xfcr \\u2192 bf16" in ascii_run.stdout
    assert len(ascii_run.stdout.splitlines()) == len(plain.stdout.splitlines())


# Already right on de0faa5 (exit 2 and silent, what the command line has always done; Ruff exits
# 0 here): guarded, since the stdout guard now handles the broken pipe before cli.main's handler.
@pytest.mark.parametrize("args", [("check", "--no-cache", "proj"), ("rule", "--all")])
def test_a_reader_that_left_is_exit_2_without_a_traceback(project: Path, args: tuple[str, ...]):
    read_end, write_end = os.pipe()
    os.close(read_end)  # `| head -1` after head exited: every write is EPIPE
    try:
        proc = run_cli(project, *args, stdout=write_end)
    finally:
        os.close(write_end)
    assert proc.returncode == 2
    assert proc.stderr == b"" or b"warning" in proc.stderr, proc.stderr


# Already right on de0faa5 (checked before the run): guarded with the stream cases, in this
# process (a report is a file the run opens, not its stdout).
# A folder that is a file stands in for an unwritable one: it fails for root too (CI runs as root).
@pytest.mark.parametrize("target", ["missing/report.txt", "a_file/report.txt", "/dev/full"])
def test_a_report_that_cannot_be_written_is_one_line_and_exit_2(project: Path, target: str):
    (project / "a_file").write_text("not a folder\n")
    proc = dtl(project, "check", "--no-cache", "proj", "-o", target)
    assert proc.returncode == 2
    one_error_line(proc.stderr)
    assert not (project / target).exists() or target.startswith("/dev/")
