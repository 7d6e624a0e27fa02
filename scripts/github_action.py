"""The check step of the GitHub Action (action.yml): run `dtype-lint check` as a workflow step.

    python scripts/github_action.py        # inputs from INPUT_* variables, as action.yml passes them

- On a `pull_request` event, only the Python files the pull request changes (under `paths`) are
  checked, as GitHub annotations (`--output-format github`); each named file is still resolved
  against its whole project's class index. Elsewhere (push, schedule, or `changed-only: false`),
  the whole of `paths`.
- With `sarif-file`, a SARIF report of the whole of `paths` is written there for
  `github/codeql-action/upload-sarif`. It covers every file, not just the changed ones: code
  scanning would take an alert missing from a partial report as fixed.
- The job summary lists every finding (annotations show only the first ten of a step).
- Exit status: dtype-lint's (0 clean, 1 findings, 2 error), or 0 for findings when
  `fail-on-findings` is false. Outputs: `exit-code`, `findings`, `files` (how many were checked).

Standard library only: it runs with the interpreter of the virtualenv dtype-lint was installed in,
and calls that virtualenv's `dtype-lint` (`DTYPE_LINT` overrides it, for tests).
"""

from __future__ import annotations

import json
import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

PYTHON_SUFFIXES = (".py", ".pyi")
_SHA = re.compile(r"^[0-9a-f]{7,64}$")


def inputs(env=os.environ) -> dict:
    def get(name: str, default: str = "") -> str:
        return env.get(f"INPUT_{name.upper().replace('-', '_')}", default).strip()

    return {
        "paths": shlex.split(get("paths", ".")) or ["."],
        "args": shlex.split(get("args")),
        "fail_on_findings": get("fail-on-findings", "true").lower() not in ("false", "0", "no", "off"),
        "sarif_file": get("sarif-file"),
        "changed_only": get("changed-only", "true").lower() not in ("false", "0", "no", "off"),
    }


def dtype_lint_command(env=os.environ) -> list[str]:
    if env.get("DTYPE_LINT"):
        return shlex.split(env["DTYPE_LINT"])
    exe = Path(sys.executable).with_name("dtype-lint")
    # Never `python -m dtype_lint`: that puts the checked-out project first on sys.path, and its
    # own modules (a `json.py`) would shadow the standard library.
    return [str(exe)]


def _git(*args: str) -> subprocess.CompletedProcess:
    try:
        return subprocess.run(["git", "-c", "core.fsmonitor=false", "-c", "core.hooksPath=/dev/null", *args],
                              capture_output=True, text=True)
    except OSError as e:  # no git on the runner
        return subprocess.CompletedProcess(["git", *args], 127, "", str(e))


def changed_files(event: dict, paths: list[str]) -> tuple[list[str] | None, str]:
    """(the pull request's changed Python files under `paths`, or None for the whole tree; a note)."""
    pr = event.get("pull_request")
    if not isinstance(pr, dict):
        return None, ""
    base = str(pr.get("base", {}).get("sha", ""))
    if not _SHA.match(base):
        return None, "the event names no base commit; checking the whole tree"
    if _git("cat-file", "-e", f"{base}^{{commit}}").returncode != 0:
        # actions/checkout fetches one commit by default: fetch the base too.
        _git("fetch", "--no-tags", "--quiet", "--depth=1", "origin", base)
    # Three dots (since the merge base) when history allows; else two: the default checkout of a
    # pull request is its merge commit, whose difference from the base is the pull request.
    for spec in (f"{base}...HEAD", base):
        proc = _git("diff", "--name-only", "-z", "--diff-filter=ACMR", spec, *(["HEAD"] if spec == base else []),
                    "--", *paths)
        if proc.returncode == 0:
            names = [n for n in proc.stdout.split("\0") if n]
            return sorted(n for n in names if n.endswith(PYTHON_SUFFIXES) and os.path.isfile(n)), ""
    return None, f"cannot list the files changed since {base} ({proc.stderr.strip()}); checking the whole tree"


def _append(path: str | None, text: str) -> None:
    if path:
        with open(path, "a", encoding="utf-8") as f:
            f.write(text)


def main(env=os.environ) -> int:
    opts = inputs(env)
    cmd = dtype_lint_command(env)
    event: dict = {}
    if env.get("GITHUB_EVENT_PATH") and os.path.isfile(env["GITHUB_EVENT_PATH"]):
        with open(env["GITHUB_EVENT_PATH"], encoding="utf-8") as f:
            event = json.load(f)
    targets, note = (None, "")
    if opts["changed_only"]:
        targets, note = changed_files(event, opts["paths"])
    if note:
        print(f"::warning title=dtype-lint::{note}")
    common = ["--no-progress", *opts["args"]]
    summary_lines = ["## dtype-lint", ""]

    if targets == []:
        print("dtype-lint: this pull request changes no Python file under " + " ".join(opts["paths"]))
        rc, findings = 0, 0
        summary_lines.append("No Python file changed: nothing to check.")
        files = 0
    else:
        names = targets if targets is not None else opts["paths"]
        proc = subprocess.run([*cmd, "check", *names, "--output-format", "github", *common],
                              stdout=subprocess.PIPE, text=True)
        sys.stdout.write(proc.stdout)
        sys.stdout.flush()
        rc = proc.returncode
        findings = sum(1 for line in proc.stdout.splitlines() if line.startswith(("::error ", "::warning ")))
        listing = subprocess.run([*cmd, "check", *names, "--output-format", "concise", "--exit-zero", *common],
                                 capture_output=True, text=True)
        # The closing count line, wherever it stands (a `[*] N fixable` line may follow it).
        counts = [m for line in listing.stdout.splitlines() if (m := re.search(r"(\d+) files? checked", line))]
        files = int(counts[-1].group(1)) if counts else 0
        scope = f"{len(targets)} changed files" if targets is not None else "`" + " ".join(opts["paths"]) + "`"
        summary_lines += [f"Checked {scope}.", "", "```", listing.stdout.rstrip(), "```"]

    if opts["sarif_file"]:
        sarif = subprocess.run([*cmd, "check", *opts["paths"], "--output-format", "sarif", "-o", opts["sarif_file"],
                                "--exit-zero", *common], capture_output=True, text=True)
        sys.stderr.write(sarif.stderr)
        if sarif.returncode != 0:
            print(f"::error title=dtype-lint::could not write SARIF to {opts['sarif_file']}")
            rc = max(rc, 2)
        else:
            summary_lines += ["", f"SARIF for code scanning (all of `{' '.join(opts['paths'])}`): "
                                  f"`{opts['sarif_file']}`"]

    _append(env.get("GITHUB_OUTPUT"), f"exit-code={rc}\nfindings={findings}\nfiles={files}\n")
    _append(env.get("GITHUB_STEP_SUMMARY"), "\n".join(summary_lines) + "\n")
    if rc == 1 and not opts["fail_on_findings"]:
        return 0
    return rc


if __name__ == "__main__":
    sys.exit(main())
