#!/usr/bin/env python
"""dtype-lint against the floor and its peers, on the vLLM 0.27.1 tree and ten copies of it, in one run.

Every row is a fresh child process timed by the same harness (runner.py, a small process that
starts them all): wall clock around it, CPU from `getrusage(RUSAGE_CHILDREN)` before and after
(user + system, including any worker processes the child waited for), peak RSS from `wait4` for
that child. Rows of every scale run round-robin, `--repeat` times, and the table shows medians,
each with its ratio to the floor and to ruff E,F of the same scale and round. See
benchmarks/README.md for what the figures mean.

    .venv/bin/python benchmarks/bench.py                       # vLLM 0.27.1, 1x and 10x, 5 rounds
    .venv/bin/python benchmarks/bench.py --save                # ... and write benchmarks/results/
    .venv/bin/python benchmarks/bench.py --quick --tree DIR    # each row once, on any tree
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
STAGES = Path(__file__).resolve().with_name("stages.py")
RESULTS = Path(__file__).resolve().with_name("results")
RUNNER = Path(__file__).resolve().with_name("runner.py")
RUFF_VERSION = "0.17.6"  # pinned so that figures from different days compare
SEMGREP_VERSION = "1.185.0"  # likewise (the reference row only)
FLOOR = "read+prefilter"  # the floor: reading and prefiltering every file

# Semgrep's rendering of the two DTL001 shapes DESIGN.md §7 measured it with.
SEMGREP_RULES = """\
rules:
  - id: cast-to-layer-weight-dtype
    languages: [python]
    severity: WARNING
    message: activation cast to a layer's storage dtype
    pattern-either:
      - pattern: $X.to($L.weight.dtype)
      - pattern: $X.to(dtype=$L.weight.dtype)
"""


# --------------------------------------------------------------------------------------------
# Harness


@dataclass
class Sample:
    wall_s: float
    cpu_s: float
    maxrss_mib: float
    returncode: int
    stdout: str
    stderr: str
    timed_out: bool = False


class Runner:
    """The measuring process (runner.py): every timed command is started from it, not from here.

    It stays small, so a child's peak RSS is the child's own and not this process's (Linux keeps
    the RSS high-water mark across exec; see runner.py).
    """

    _KEEP = 1 << 20  # bytes of a child's output kept: JSON reports are small, ruff's text is not

    def __init__(self) -> None:
        self._dir = tempfile.TemporaryDirectory(prefix="dtype-lint-bench-io-")
        self._proc = subprocess.Popen(
            [sys.executable, "-S", str(RUNNER)],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, bufsize=1,
        )

    def __enter__(self) -> "Runner":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def close(self) -> None:
        if self._proc.poll() is None:
            self._proc.stdin.close()
            self._proc.wait()
        self._dir.cleanup()

    def measure(self, cmd: list[str], cwd: Path, timeout: float) -> Sample:
        out, err = Path(self._dir.name, "stdout"), Path(self._dir.name, "stderr")
        req = {"cmd": cmd, "cwd": str(cwd), "stdout": str(out), "stderr": str(err),
               "timeout": timeout}
        self._proc.stdin.write(json.dumps(req) + "\n")
        self._proc.stdin.flush()
        line = self._proc.stdout.readline()
        if not line:
            raise RuntimeError("benchmark runner died")
        reply = json.loads(line)
        if "error" in reply:  # could not start the command at all
            return Sample(0.0, 0.0, 0.0, 127, "", reply["error"])
        return Sample(
            wall_s=reply["wall_s"], cpu_s=reply["cpu_s"], maxrss_mib=reply["maxrss_kib"] / 1024,
            returncode=reply["returncode"], stdout=self._tail(out), stderr=self._tail(err),
            timed_out=reply["timed_out"],
        )

    def _tail(self, path: Path) -> str:
        with open(path, "rb") as fh:
            size = fh.seek(0, os.SEEK_END)
            fh.seek(max(0, size - self._KEEP))
            return fh.read().decode("utf-8", "replace")


@dataclass
class Row:
    id: str
    label: str
    cmd: list[str] | None  # None: not available
    cwd: Path
    files: int | None = None
    note: str = ""
    status: str = "ok"  # ok | failed | not available
    samples: list[Sample] = field(default_factory=list)
    ok_codes: tuple[int, ...] = (0,)
    stage: bool = False  # a stages.py row: its stdout is JSON with the file count
    scale: int = 1  # which corpus: 1x or 10x the source tree
    prepare: object = None  # called (untimed) before each sample with the sample's number
    # A reference row (what other tools or a bare parse cost; no target reads it): measured in the
    # first `--reference-repeat` rounds only, so that a full run fits (libcst alone is 19 s a round).
    reference: bool = False
    instructions: int | None = None  # `--instructions`: one run under valgrind, after the timed rounds
    instructions_note: str = ""  # why there is no count

    def record(self, s: Sample) -> None:
        if s.timed_out or s.returncode not in self.ok_codes:
            self.status = "failed"
            tail = (s.stderr.strip() or s.stdout.strip()).splitlines()[-1:] or [""]
            why = "timed out" if s.timed_out else f"exit {s.returncode}"
            self.note = f"{why}: {tail[0][:160]}"
            return
        self.samples.append(s)
        if self.stage:
            info = json.loads(s.stdout)
            self.files = info["files"]
            self.note = stage_note(info)

    def median(self, attr: str) -> float | None:
        vals = [getattr(s, attr) for s in self.samples]
        return statistics.median(vals) if vals else None

    def figures(self, floor: Row | None, ruff: Row | None = None) -> dict:
        wall, cpu = self.median("wall_s"), self.median("cpu_s")
        fw = floor.median("wall_s") if floor else None
        fc = floor.median("cpu_s") if floor else None
        rw = ruff.median("wall_s") if ruff else None
        rc = ruff.median("cpu_s") if ruff else None
        return {
            "id": self.id,
            "label": self.label,
            "scale": self.scale,
            "status": self.status,
            "command": self.cmd,
            "files": self.files,
            "wall_s": wall,
            "cpu_s": cpu,
            "files_per_s": (self.files / wall) if wall and self.files is not None else None,
            "ratio_wall": (wall / fw) if wall and fw else None,
            "ratio_cpu": (cpu / fc) if cpu and fc else None,
            "ruff_ratio_wall": (wall / rw) if wall and rw else None,
            "ruff_ratio_cpu": (cpu / rc) if cpu and rc else None,
            "peak_rss_mib": max((s.maxrss_mib for s in self.samples), default=None),
            "instructions": self.instructions,
            "ruff_ratio_instructions": (self.instructions / ruff.instructions)
            if self.instructions and ruff is not None and ruff.instructions else None,
            "runs": len(self.samples),
            "samples": {
                "wall_s": [s.wall_s for s in self.samples],
                "cpu_s": [s.cpu_s for s in self.samples],
            },
            "note": self.note,
        }


def stage_note(info: dict) -> str:
    if info["stage"] == "read":
        return f"{info['chars'] / 1e6:.1f} M chars"
    if info["stage"] == "read+prefilter":
        return f"{info['matched']} files pass; {info['prefilter']}"
    if info["stage"] == "ast.parse":
        return f"{info['errors']} syntax errors" if info["errors"] else ""
    if info["stage"] == "libcst-prefiltered":
        return f"of {info['read']} read, incl. `import libcst`"
    return ""


# --------------------------------------------------------------------------------------------
# Peers


def find_ruff(install: bool, cache_root: Path) -> tuple[str | None, str]:
    """Path of a ruff binary and its version, or (None, why not)."""
    return find_peer("ruff", RUFF_VERSION, install, cache_root)


def find_semgrep(install: bool, cache_root: Path) -> tuple[str | None, str]:
    """Path of a semgrep binary and its version, or (None, why not). Its wheel carries a compiled
    core (about 390 MB installed with its dependencies): installed once into the cache, never
    into the project's venv."""
    return find_peer("semgrep", SEMGREP_VERSION, install, cache_root)


def find_peer(name: str, version: str, install: bool, cache_root: Path) -> tuple[str | None, str]:
    """Path of the peer tool `name` and its version: the one beside the interpreter running the
    benchmark (the test extra pins ruff there), else on PATH, else `name==version` installed
    once into a throwaway venv in the cache; or (None, why not)."""
    exe = name + (".exe" if os.name == "nt" else "")
    beside = Path(sys.executable).parent / exe
    on_path = str(beside) if beside.is_file() else shutil.which(name)
    if on_path:
        return on_path, _version([on_path, "--version"])
    venv = cache_root / f"bench-{name}-{version}"
    binary = venv / ("Scripts" if os.name == "nt" else "bin") / exe
    marker = venv / ".bench-peer-complete"
    if binary.is_file() and marker.is_file():
        return str(binary), _version([str(binary), "--version"])
    if not install:
        return None, "not on PATH and not installed (--no-install)"
    # A throwaway venv beside the vLLM trees, never the project's. It is built where it stays: a
    # venv's scripts name its interpreter by path, so one renamed after the install cannot run.
    # The marker, written last, tells a finished venv from one an interrupted install left.
    cache_root.mkdir(parents=True, exist_ok=True)
    shutil.rmtree(venv, ignore_errors=True)
    try:
        subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True,
                       capture_output=True, text=True)
        py = venv / ("Scripts/python.exe" if os.name == "nt" else "bin/python")
        proc = subprocess.run([str(py), "-m", "pip", "install", "-q", "--disable-pip-version-check",
                               f"{name}=={version}"], capture_output=True, text=True)
        if proc.returncode != 0:
            tail = (proc.stdout + proc.stderr).strip().splitlines()[-1:]
            shutil.rmtree(venv, ignore_errors=True)
            return None, f"could not install {name}=={version}: {' '.join(tail)}"
        marker.write_text(f"{name}=={version}\n", encoding="utf-8")
        return str(binary), _version([str(binary), "--version"])
    except (OSError, subprocess.CalledProcessError) as exc:
        shutil.rmtree(venv, ignore_errors=True)
        return None, f"could not create a venv for {name}: {exc}"


def _version(cmd: list[str]) -> str:
    # semgrep asks the network for a newer release after printing its version when stdout is no
    # terminal: offline that waits for minutes (seen: past the 60 s below).
    env = dict(os.environ, SEMGREP_ENABLE_VERSION_CHECK="0")
    try:
        return subprocess.run(cmd, capture_output=True, text=True, timeout=60, env=env).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return "unknown version"


# --------------------------------------------------------------------------------------------


@dataclass
class Corpus:
    scale: int
    root: Path  # the project root (holds pyproject.toml)
    touch_site: Path | None  # the file the pre-commit rows touch: one that holds a weight site ...
    touch_clean: Path | None  # ... and one that the prefilter passes over
    # ... and one with a finding whose fix is planned (its answer depends on the compiled-code
    # census, which reads every file: dtype_lint/analysis/compiled_elsewhere.py)
    touch_fixable: Path | None = None


def suffix(scale: int) -> str:
    return "" if scale == 1 else f"@{scale}x"


def build_rows(corpora: list[Corpus], work: Path, ruff: tuple[str | None, str],
               semgrep: tuple[str | None, str] = (None, "not looked for")) -> list[Row]:
    py = sys.executable
    rows: list[Row] = []
    ruff_bin, ruff_ver = ruff
    for c in corpora:
        tree_s = str(c.root)
        n_files = len(py_files(c.root))
        sfx = suffix(c.scale)
        tag = "" if c.scale == 1 else f" [{c.scale}x]"

        def stage(id_: str, label: str, reference: bool = False) -> Row:
            return Row(id_ + sfx, label + tag, [py, str(STAGES), id_, tree_s], work, stage=True, scale=c.scale,
                       reference=reference)

        def rewarm(_seq: int, root: Path = c.root) -> None:
            # The pre-commit rows of the previous round touched two files: "warm" means nothing
            # changed since the cache was written, so an untimed run catches up first. The whole
            # project is named as its users name it, `.` from its root (as the warm rows do): the
            # answers a run on the whole project keeps for the first run on named files are its
            # report as it showed it (run/replay_index.py), and the pre-commit rows name their file
            # from the root. Named by its absolute path, the first round's touched rows found no
            # answer to replay and ran in full (0.43-0.63 s at 10x, against 0.14 s).
            subprocess.run([py, "-m", "dtype_lint", "check", ".", "--exit-zero", "-q"], cwd=root,
                           stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)

        def dtl(id_: str, label: str, *flags: str, path: str = tree_s, prepare=None, files=n_files) -> Row:
            cmd = [py, "-m", "dtype_lint", "check", path, "--exit-zero", *flags]
            return Row(id_ + sfx, label + tag, cmd, c.root, files=files, scale=c.scale, prepare=prepare)

        if c.scale == 1:
            rows.append(stage("read", "read every .py file", reference=True))
        rows.append(stage("read+prefilter", "read + regex prefilter"))
        if c.scale == 1:
            rows.append(stage("ast.parse", "stdlib ast.parse, every file", reference=True))
            rows.append(stage("libcst-prefiltered", "libcst parse_module, prefiltered files", reference=True))
        rows += [
            dtl("dtype-lint-cold-j1", "dtype-lint check --no-cache -j 1", "--no-cache", "-j", "1"),
            dtl("dtype-lint-cold", "dtype-lint check --no-cache", "--no-cache"),
        ]
        if c.scale == 1:
            # The default rules are DTL001/DTL002; the opt-in DTL003-DTL005 read far more of a tree.
            rows.append(dtl("dtype-lint-cold-all-j1", "dtype-lint check --no-cache -j 1 --select ALL",
                            "--no-cache", "-j", "1", "--select", "ALL"))
        if c.scale == 1:
            # What a fix costs beside the cold check (issue #37): each sample on a fresh copy of
            # the corpus (made untimed by `prepare`), since `--fix` rewrites it; `--series` leaves
            # the tree as it is but writes its patches, into a folder emptied first.
            copy = work / "fix-tree"

            def fresh_copy(_seq: int, root: Path = c.root, copy: Path = copy) -> None:
                shutil.rmtree(copy, ignore_errors=True)
                shutil.rmtree(work / "series", ignore_errors=True)
                shutil.copytree(root, copy, ignore=shutil.ignore_patterns(".dtype_lint_cache"))

            rows.append(Row("dtype-lint-fix-j1", "dtype-lint check --fix --no-cache -j 1",
                            [py, "-m", "dtype_lint", "check", str(copy), "--fix", "--no-cache", "-j", "1",
                             "--exit-zero"], work, files=n_files, prepare=fresh_copy))
            rows.append(Row("dtype-lint-series-j1", "dtype-lint migrate --series -j 1",
                            [py, "-m", "dtype_lint", "migrate", str(copy), "--series", str(work / "series"),
                             "-j", "1", "--no-progress"], work, files=n_files, prepare=fresh_copy,
                            ok_codes=(0, 1)))  # 1: findings remain that no fix applies to
        rows += [
            dtl("dtype-lint-warm-j1", "dtype-lint check -j 1 (warm cache)", "-j", "1", path=".", prepare=rewarm),
            dtl("dtype-lint-warm", "dtype-lint check (warm cache)", path=".", prepare=rewarm),
        ]
        for id_, label, target in (("dtype-lint-precommit", "pre-commit: 1 touched file with a site", c.touch_site),
                                   ("dtype-lint-precommit-clean", "pre-commit: 1 touched file, no site",
                                    c.touch_clean)):
            if target is not None:
                rows.append(dtl(id_, label, path=str(target.relative_to(c.root)), files=1,
                                prepare=lambda seq, t=target: corpus.touch(t, seq)))
        if c.touch_fixable is not None:
            fixable_rel = str(c.touch_fixable.relative_to(c.root))

            def caught_up_touch(seq: int, root: Path = c.root, target: Path = c.touch_fixable,
                                rel: str = fixable_rel) -> None:
                # Warm, as the warm rows are: the edited row of the previous round changed a file
                # this file's answer read (vLLM: `mla_attention.py`), so an untimed run on it
                # catches up first, with the timed run's arguments (the answer it keeps holds the
                # output it printed: `-q` here would leave the timed run none to replay). The row
                # after this one measures the run that catches up.
                subprocess.run([py, "-m", "dtype_lint", "check", rel, "--exit-zero"], cwd=root,
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
                corpus.touch(target, seq)

            rows.append(dtl("dtype-lint-precommit-fixable", "pre-commit: 1 touched file with a fixable finding",
                            path=fixable_rel, files=1, prepare=caught_up_touch))
            if c.touch_site is not None:
                def edit_then_touch(seq: int, site: Path = c.touch_site, target: Path = c.touch_fixable) -> None:
                    corpus.edit(site, seq)
                    corpus.touch(target, seq)

                rows.append(dtl("dtype-lint-precommit-fixable-after-edit",
                                "pre-commit: 1 touched file with a fixable finding, another file edited",
                                path=fixable_rel, files=1, prepare=edit_then_touch))
        if c.touch_site is not None:
            # The first named-file run after a full `check .` (issue #37): no named-file run kept
            # an answer before it. On the corpus itself the touched row of the same round had kept
            # one, which this row replayed (a second named run, not the first); so it runs on a copy
            # of its own, whose kept answers for named files (the run memo, the replay index) are
            # removed before each full run, without touching what the other rows replay.
            first = work / f"first-x{c.scale}"
            site_rel = c.touch_site.relative_to(c.root)

            def full_then_touch(seq: int, root: Path = c.root, first: Path = first, rel: Path = site_rel) -> None:
                if not first.is_dir():
                    shutil.copytree(root, first, ignore=shutil.ignore_patterns(".dtype_lint_cache"))
                for kept in ("run-memo.json", "replay-index.bin"):
                    (first / ".dtype_lint_cache" / kept).unlink(missing_ok=True)
                subprocess.run([py, "-m", "dtype_lint", "check", ".", "--exit-zero", "-q"], cwd=first,
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
                corpus.touch(first / rel, seq)

            rows.append(Row("dtype-lint-precommit-first" + sfx,
                            "pre-commit: first touched file after a full check" + tag,
                            [py, "-m", "dtype_lint", "check", str(site_rel), "--exit-zero"], first, files=1,
                            scale=c.scale, prepare=full_then_touch))
            # The same file edited for real (a comment added): its cached analysis is stale, so
            # the file is analysed again, with the class facts of the files its layers come from.
            rows.append(dtl("dtype-lint-precommit-edited", "pre-commit: 1 edited file with a site",
                            path=str(c.touch_site.relative_to(c.root)), files=1,
                            prepare=lambda seq, t=c.touch_site: corpus.edit(t, seq)))
        base = [ruff_bin, "check", "--select", "E,F", "--exit-zero"] if ruff_bin else None
        cache_dir = ["--cache-dir", str(work / f"ruff-{c.scale}")]
        for id_, label, extra, files, prepare in (
            ("ruff-cold", "ruff check --select E,F --no-cache", ["--no-cache", tree_s], n_files, None),
            ("ruff-cached", "ruff check --select E,F (cached)", [*cache_dir, tree_s], n_files, None),
            ("ruff-precommit", "ruff check --select E,F, 1 touched file", [*cache_dir, str(c.touch_site)], 1,
             (lambda seq, t=c.touch_site: corpus.touch(t, seq)) if c.touch_site else None),
        ):
            rows.append(Row(id_ + sfx, label + tag, base + extra if base else None, c.root, files=files,
                            note=ruff_ver, status="ok" if base else "not available", scale=c.scale,
                            prepare=prepare))
        if c.scale == 1:
            semgrep_bin, semgrep_note = semgrep
            if semgrep_bin:
                (work / "semgrep.yaml").write_text(SEMGREP_RULES, encoding="utf-8")
                # One job, as dtype-lint's `-j 1` row: CPU is compared, and semgrep's workers
                # each load the rules and the parser again.
                cmd = [semgrep_bin, "scan", "--config", str(work / "semgrep.yaml"), "--metrics", "off",
                       "--disable-version-check", "--quiet", "--jobs", "1", tree_s]
                rows.append(Row("semgrep", "semgrep, 2 patterns, -j 1", cmd, work, files=n_files,
                                note=semgrep_note, ok_codes=(0, 1), reference=True))
            else:
                rows.append(Row("semgrep", "semgrep, 2 patterns", None, work,
                                status="not available", note=semgrep_note))
    return rows


def warm_up(runner: Runner, rows: list[Row], timeout: float, log) -> None:
    """Untimed: page cache, dtype-lint's and ruff's caches; a JSON run for the file count."""
    by_id = {r.id: r for r in rows}
    for scale in sorted({r.scale for r in rows}):
        sfx = suffix(scale)
        floor = by_id.get("read+prefilter" + sfx)
        log(f"warm-up [{scale}x]: page cache")
        runner.measure(floor.cmd, floor.cwd, timeout)
        dtl = by_id["dtype-lint-warm" + sfx]
        log(f"warm-up [{scale}x]: dtype-lint cache")
        s = runner.measure(dtl.cmd + ["--output-format", "json"], dtl.cwd, timeout)
        if s.returncode == 0:
            try:
                summary = json.loads(s.stdout)["summary"]
                note = f"{summary['files']} files, {summary['findings']} findings"
                for r in rows:
                    if r.id.startswith("dtype-lint") and r.scale == scale and "precommit" not in r.id:
                        r.files, r.note = summary["files"], note
            except (ValueError, KeyError, TypeError):
                pass
        ruff = by_id["ruff-cached" + sfx]
        if ruff.cmd:
            log(f"warm-up [{scale}x]: ruff cache")
            runner.measure(ruff.cmd, ruff.cwd, timeout)


def select_rows(rows: list[Row], prefixes: list[str]) -> list[Row]:
    """The rows whose id (scale suffix aside) starts with one of `prefixes`, plus what their ratios
    are taken against: the floor and ruff's cold row of each scale."""
    # The fix rows are judged against the cold check of the same round.
    always = (FLOOR, "ruff-cold") + (("dtype-lint-cold-j1",) if any(
        p.startswith(("dtype-lint-fix", "dtype-lint-series")) for p in prefixes) else ())
    return [r for r in rows if r.id.split("@")[0] in always
            or any(r.id.split("@")[0].startswith(p) for p in prefixes)]


def run_all(runner: Runner, rows: list[Row], repeat: int, timeout: float, log, reference_repeat: int = 1) -> None:
    # Round-robin over every row of every scale, so that a change in machine load touches every
    # row (and every ratio's two sides) alike.
    import time

    start = time.monotonic()
    for rep in range(repeat):
        for row in rows:
            if row.cmd is None or row.status == "failed" or (row.reference and rep >= reference_repeat):
                continue
            log(f"[{rep + 1}/{repeat}] {row.label}")
            if row.prepare is not None:
                row.prepare(rep)
            row.record(runner.measure(row.cmd, row.cwd, timeout))
        spent = time.monotonic() - start
        # Later rounds skip the reference rows: the first round's pace overestimates the rest.
        log(f"round {rep + 1}/{repeat} done: {spent / 60:.1f} min so far")


# --------------------------------------------------------------------------------------------
# Instruction counts (`--instructions`)

# The rows whose CPU seconds move by more than the 10% a change must show (issue #37): the cold
# check, the pre-commit runs, and what they are judged against. Counted at 1x, and the pre-commit
# rows (one file each: seconds under valgrind) at every scale: valgrind runs a program about 50
# times slower, and at 10x a cold row alone would take a quarter of an hour.
PRECOMMIT_INSTRUCTION_ROWS = ("dtype-lint-precommit", "dtype-lint-precommit-clean", "dtype-lint-precommit-first",
                              "dtype-lint-precommit-edited", "dtype-lint-precommit-fixable",
                              "dtype-lint-precommit-fixable-after-edit")
INSTRUCTION_ROWS = ("read+prefilter", "dtype-lint-cold-j1", "dtype-lint-cold", *PRECOMMIT_INSTRUCTION_ROWS,
                    "ruff-cold")
# A dtype-lint row without `-j 1` forks its workers: callgrind zeroes each forked worker's count
# where the child starts (it inherits the parent's), and each process writes its own total.
_FORKED_CHILD = "PyOS_AfterFork_Child"


def counted_rows(rows: list[Row]) -> list[Row]:
    """The rows `--instructions` counts, in the order of `rows`."""
    return [r for r in rows if r.cmd is not None and r.status == "ok" and (
        r.id in INSTRUCTION_ROWS or r.id.split("@")[0] in PRECOMMIT_INSTRUCTION_ROWS)]


def count_instructions(rows: list[Row], timeout: float, log, first_seq: int) -> None:
    """One run of each counted row under valgrind (`--cache-sim=no`: instructions executed, every
    thread and process the row starts), `PYTHONHASHSEED=0` (a random seed moves a count by about
    0.1%; fixed, the count repeats to 0.01%). Each row's `prepare` runs first, as before a timed
    sample. A row valgrind cannot count says why in its note."""
    valgrind = shutil.which("valgrind")
    todo = counted_rows(rows)
    if valgrind is None:
        for row in todo:
            row.instructions_note = "valgrind not on PATH"
        log("instructions: valgrind not on PATH, not counted")
        return
    env = dict(os.environ, PYTHONHASHSEED="0")
    for seq, row in enumerate(todo, first_seq):
        log(f"instructions: {row.label}")
        if row.prepare is not None:
            row.prepare(seq)
        with tempfile.TemporaryDirectory(prefix="dtype-lint-bench-vg-") as out:
            forks = row.id.startswith("dtype-lint") and "-j" not in row.cmd
            tool = ["--tool=callgrind", "--trace-children=yes", f"--zero-before={_FORKED_CHILD}",
                    f"--callgrind-out-file={out}/cg.%p"] if forks else \
                ["--tool=cachegrind", "--cache-sim=no", "--trace-children=yes", f"--cachegrind-out-file={out}/cg.%p"]
            try:
                proc = subprocess.run([valgrind, *tool, *row.cmd], cwd=row.cwd, env=env, capture_output=True,
                                      text=True, errors="replace", timeout=timeout * 50)
            except subprocess.TimeoutExpired:
                row.instructions_note = "timed out under valgrind"
                continue
            if proc.returncode not in row.ok_codes:
                row.instructions_note = f"exit {proc.returncode} under valgrind"
                continue
            row.instructions = instructions_of(Path(out)) or None
            if row.instructions is None:
                row.instructions_note = "no count written"


def instructions_of(out: Path) -> int:
    """The instructions every process counted into `out` (one file per process, `cg.<pid>`): the
    last total each file states (callgrind writes a part per dump, the last one whole)."""
    total = 0
    for path in sorted(out.glob("cg.*")):
        last = 0
        with open(path, encoding="utf-8", errors="replace") as fh:
            for line in fh:
                if line.startswith(("summary:", "totals:")):
                    last = int(line.split()[1])
        total += last
    return total


def print_table(rows: list[Row], figures: list[dict], header: str) -> None:
    from rich.console import Console
    from rich.table import Table

    console = Console(width=None if sys.stdout.isatty() else 180)

    def num(v, fmt):
        return "" if v is None else format(v, fmt)

    table = Table(title=header, title_justify="left")
    for col, just in (("tool", "left"), ("files", "right"), ("wall s", "right"),
                      ("CPU s", "right"), ("files/s", "right"), ("× floor wall", "right"),
                      ("× floor CPU", "right"), ("× ruff CPU", "right"), ("peak RSS MiB", "right"),
                      ("note", "left")):
        # The tool column never wraps: a log reader greps for it; notes fold instead.
        table.add_column(col, justify=just, overflow="fold", no_wrap=(col == "tool"))
    for f in figures:
        if f["status"] != "ok":
            table.add_row(f["label"], "", "", "", "", "", "", "", "", f"{f['status']}: {f['note']}")
            continue
        table.add_row(
            f["label"], num(f["files"], "d"), num(f["wall_s"], ".3f"), num(f["cpu_s"], ".3f"),
            num(f["files_per_s"], ",.0f"), num(f["ratio_wall"], ".1f"),
            num(f["ratio_cpu"], ".1f"), num(f["ruff_ratio_cpu"], ".2f"), num(f["peak_rss_mib"], ".0f"),
            f["note"],
        )
    console.print(table)
    console.print(f"floor = `{FLOOR}` row of the same scale; × ruff = against `ruff check --select E,F "
                  "--no-cache` of the same scale; medians of wall and CPU; peak RSS = largest process.")


# (target, row ids, how the figure is judged, limit): issue #37's targets, which replaced issue
# #23's (cold ≤ 2.0× ruff, peak RSS ≤ ruff's at 10x only). They concern the check as shipped: the
# default rules DTL001/DTL002, and the opt-in rules' `--select ALL` row apart.
TARGETS = [
    ("cold CPU ≤ 1.0× ruff E,F --no-cache", ("dtype-lint-cold-j1", "dtype-lint-cold"), "ruff_ratio_cpu", 1.0),
    ("warm CPU ≤ 0.5× ruff E,F --no-cache", ("dtype-lint-warm-j1", "dtype-lint-warm"), "ruff_ratio_cpu", 0.5),
    # Issue #37: a touched file (same bytes) replays the kept answer; an edited one is analysed.
    ("pre-commit, 1 touched file, warm: CPU ≤ 0.05 s", ("dtype-lint-precommit", "dtype-lint-precommit-clean",
                                                        "dtype-lint-precommit-first", "dtype-lint-precommit-fixable"),
     "cpu_s", 0.05),
    # Another file was edited (vLLM: one the fixable file's answer read): that answer is computed again.
    ("pre-commit, 1 edited file with a site, warm: CPU ≤ 0.15 s", ("dtype-lint-precommit-edited",
                                                                   "dtype-lint-precommit-fixable-after-edit"),
     "cpu_s", 0.15),
    ("peak RSS ≤ ruff's (1x)", ("dtype-lint-cold-j1", "dtype-lint-cold"), "rss1", None),
    ("peak RSS ≤ ruff's (10x)", ("dtype-lint-cold-j1", "dtype-lint-cold"), "rss", None),
    # Issue #37: a fix costs about a check, every rule about a few ruffs.
    ("`--fix` CPU ≤ 1.5× a cold check (`--no-cache -j 1`)", ("dtype-lint-fix-j1",), "cold_ratio_cpu", 1.5),
    ("`migrate --series` CPU ≤ 2.0× a cold check (`--no-cache -j 1`)", ("dtype-lint-series-j1",),
     "cold_ratio_cpu", 2.0),
    ("every rule (`--select ALL`): CPU ≤ 3.0× ruff E,F --no-cache", ("dtype-lint-cold-all-j1",),
     "ruff_ratio_cpu", 3.0),
    ("every rule (`--select ALL`): peak RSS ≤ ruff's (1x)", ("dtype-lint-cold-all-j1",), "rss1", None),
]


# Rows shown beside the targets, with why none applies: in runs saved before issue #37 judged
# `--select ALL`, which the committed tables of those runs still say.
UNJUDGED = {"dtype-lint-cold-all-j1": "every rule: the opt-in DTL003-DTL005 parse every file with a `.weight` "
                                      "read; the targets measure the default rules"}


def judge(figures: list[dict]) -> list[dict]:
    """Each target, each row it concerns: the figure, the limit, met or not."""
    by_id = {f["id"]: f for f in figures}
    out = []
    for what, ids, key, limit in TARGETS:
        for f in figures:
            base = f["id"].split("@")[0]
            if base not in ids or f["status"] != "ok":
                continue
            if key in ("rss", "rss1"):
                if f["scale"] != (10 if key == "rss" else 1):
                    continue
                ruff = by_id.get(f"ruff-cold{suffix(f['scale'])}")
                value, lim = f["peak_rss_mib"], (ruff or {}).get("peak_rss_mib")
            elif key == "cold_ratio_cpu":
                cold = by_id.get(f"dtype-lint-cold-j1{suffix(f['scale'])}")
                cold_cpu = (cold or {}).get("cpu_s") if (cold or {}).get("status") == "ok" else None
                value, lim = (f["cpu_s"] / cold_cpu if f["cpu_s"] and cold_cpu else None), limit
            else:
                value, lim = f[key], limit
            if value is None or lim is None:
                continue
            out.append({"target": what, "row": f["id"], "scale": f["scale"], "value": value, "limit": lim,
                        "met": value <= lim})
    return out


def markdown(doc: dict) -> str:
    """The committed table (and the README's): every row, then each target met or not."""
    m = doc["machine"]
    ref = doc.get("reference_repeat", doc["repeat"])
    reference = (f" (the reference rows, read, ast.parse, libcst and semgrep, in the first {ref})"
                 if ref < doc["repeat"] else "")
    lines = [
        f"# dtype-lint benchmark: {doc['source']}, {doc['date']}",
        "",
        f"Machine: `{m['host']}`, {m['cpus']} CPUs, Python {m['python']}, {m['platform']}; load average "
        f"{m['load_start']:.1f} at the start, {m['load_end']:.1f} at the end. {doc['repeat']} interleaved "
        f"rounds{reference}, medians. Floor: `{doc['floor']}` of the same scale; × ruff: against `ruff check --select "
        f"E,F --no-cache` of the same scale ({doc['ruff']}). Written by `benchmarks/bench.py --save`.",
        "",
        "| scale | row | files | CPU s | wall s | × floor CPU | × ruff CPU | × ruff wall | peak RSS MiB |",
        "|---|---|---:|---:|---:|---:|---:|---:|---:|",
    ]

    def num(v, fmt):
        return "" if v is None else format(v, fmt)

    for f in doc["rows"]:
        if f["status"] != "ok":
            lines.append(f"| {f['scale']}x | {f['label']} | | | | | | | {f['status']} |")
            continue
        lines.append(f"| {f['scale']}x | {f['label']} | {num(f['files'], ',d')} | {num(f['cpu_s'], '.3f')} | "
                     f"{num(f['wall_s'], '.3f')} | {num(f['ratio_cpu'], '.2f')} | {num(f['ruff_ratio_cpu'], '.2f')} | "
                     f"{num(f['ruff_ratio_wall'], '.2f')} | {num(f['peak_rss_mib'], '.0f')} |")
    counted = [f for f in doc["rows"] if f.get("instructions")]
    if doc.get("instructions"):
        lines += ["", f"Instructions ({doc['instructions']}; a count repeats to about 0.01% where CPU seconds "
                      "move by 5-10% between rounds):", "",
                  "| scale | row | instructions | × ruff |", "|---|---|---:|---:|"]
        lines += [f"| {f['scale']}x | {f['label']} | {_count(f['instructions'])} | "
                  f"{num(f['ruff_ratio_instructions'], '.2f')} |" for f in counted]
        if not counted:
            lines.append("| | none counted | | |")
    lines += ["", "| target | row | measured | limit | met |", "|---|---|---:|---:|---|"]
    for t in doc["targets"]:
        unit = " MiB" if "RSS" in t["target"] else ("×" if "×" in t["target"] else " s")  # `--fix` rows: ×
        # A tenth of a MiB: judged unrounded, 41.9 against ruff's 41.8 read "42 MiB | 42 MiB | no".
        fmt = ".1f" if unit == " MiB" else (".2f" if unit == "×" else ".3f")
        lines.append(f"| {t['target']} | `{t['row']}` | {t['value']:{fmt}}{unit} | {t['limit']:{fmt}}{unit} | "
                     f"{'yes' if t['met'] else '**no**'} |")
    for f in doc["rows"]:
        if f["id"] in UNJUDGED and f["status"] == "ok" and not any(t["row"] == f["id"] for t in doc["targets"]):
            ratio = "" if f["ruff_ratio_cpu"] is None else f", {f['ruff_ratio_cpu']:.2f}× ruff's"
            lines += ["", f"Not a target: `{f['id']}` ({UNJUDGED[f['id']]}): {f['cpu_s']:.3f} CPU s{ratio}."]
    return "\n".join(lines) + "\n"


def _count(n: int) -> str:
    """An instruction count as the tables write it: 24.13 G, 689.6 M."""
    return f"{n / 1e9:.2f} G" if n >= 1e9 else f"{n / 1e6:.1f} M"


README = REPO / "README.md"
README_START = "<!-- benchmarks/bench.py --save writes this table; do not edit by hand -->"
README_END = "<!-- end of the benchmark table -->"
README_ROWS = (
    ("read + regex prefilter (the floor)", "read+prefilter"),
    ("dtype-lint, cold (`--no-cache -j 1`)", "dtype-lint-cold-j1"),
    ("dtype-lint, cold (`--no-cache`, default `-j`)", "dtype-lint-cold"),
    ("dtype-lint, cold, every rule (`--no-cache -j 1 --select ALL`, 1x)", "dtype-lint-cold-all-j1"),
    ("dtype-lint `--fix` (`--no-cache -j 1`, 1x)", "dtype-lint-fix-j1"),
    ("dtype-lint `migrate --series` (`-j 1`, 1x)", "dtype-lint-series-j1"),
    ("dtype-lint, warm cache", "dtype-lint-warm"),
    ("pre-commit: 1 touched file with a site, warm", "dtype-lint-precommit"),
    ("pre-commit: 1 edited file with a site, warm", "dtype-lint-precommit-edited"),
    ("pre-commit: first touched file after a full check", "dtype-lint-precommit-first"),
    ("pre-commit: 1 touched file without one, warm", "dtype-lint-precommit-clean"),
    ("pre-commit: 1 touched file with a fixable finding, warm", "dtype-lint-precommit-fixable"),
    ("pre-commit: the same, another file with a site edited", "dtype-lint-precommit-fixable-after-edit"),
    ("ruff `--select E,F --no-cache`", "ruff-cold"),
    ("ruff `--select E,F`, cached", "ruff-cached"),
    ("ruff `--select E,F`, 1 touched file", "ruff-precommit"),
)


def readme_table(doc: dict, results_name: str) -> str:
    """The README's performance table: CPU at each scale and its ratio to ruff, from `doc`."""
    by_id = {f["id"]: f for f in doc["rows"]}
    scales = doc["scales"]
    head = " | ".join(f"{s}x CPU s | × ruff" for s in scales)
    files = ", ".join(f"{s}x: {doc['py_files'] * s:,} files" for s in scales)
    lines = [README_START, "",
             f"| {doc['source']} ({files}) | {head} | peak RSS MiB ({scales[-1]}x) |",
             "|---|" + "---:|" * (2 * len(scales) + 1)]
    for label, rid in README_ROWS:
        if not any(rid + suffix(s) in by_id for s in scales):
            continue  # a row added after this run was saved (the fix rows of issue #37)
        cells = []
        for s in scales:
            f = by_id.get(rid + suffix(s))
            ok = f is not None and f["status"] == "ok"
            cells.append(f"{f['cpu_s']:.3f}" if ok else "")
            cells.append(f"{f['ruff_ratio_cpu']:.2f}" if ok and f["ruff_ratio_cpu"] is not None else "")
        last = by_id.get(rid + suffix(scales[-1]))
        rss = f"{last['peak_rss_mib']:.0f}" if last and last["status"] == "ok" else ""
        lines.append(f"| {label} | {' | '.join(cells)} | {rss} |")
    m = doc["machine"]
    lines += ["", f"Medians of {doc['repeat']} interleaved rounds on `{m['host']}` ({m['cpus']} CPUs, load average "
                  f"{m['load_start']:.1f}), {doc['date']}: [benchmarks/results/{results_name}]"
                  f"(benchmarks/results/{results_name}), with wall times and the targets.", README_END]
    return "\n".join(lines) + "\n"


def update_readme(doc: dict, results_name: str, readme: Path = README) -> bool:
    text = readme.read_text(encoding="utf-8")
    start, end = text.find(README_START), text.find(README_END)
    if start < 0 or end < start:
        return False
    end = text.index("\n", end) + 1
    readme.write_text(text[:start] + readme_table(doc, results_name) + text[end:], encoding="utf-8")
    return True


def default_touches(tree: Path, files: list[str], source_is_vllm: bool) -> tuple[str | None, str | None]:
    """(a file holding a weight site, a file the prefilter passes over), relative to the tree."""
    from stages import _prefilter, _read

    might_match, _ = _prefilter()
    site = clean = small = None
    mla = "vllm/model_executor/layers/attention/mla_attention.py"
    if source_is_vllm and (tree / mla).is_file():
        site = mla
    for p in files:
        rel = Path(p).relative_to(tree).as_posix()
        text = _read(p)
        if site is None and might_match(text) and ".weight.dtype" in text:
            site = rel
        if not might_match(text) and not rel.endswith("__init__.py"):
            if len(text) >= 1000:  # a module of some size, not a stub
                clean = clean or rel
            small = small or rel
        if site and clean:
            break
    return site, clean or small


def fixable_touch(tree: Path) -> str | None:
    """A file of `tree` (relative) holding a finding with a fix planned as safe, found by an
    untimed check of the tree with the default rules; None when there is none."""
    proc = subprocess.run([sys.executable, "-m", "dtype_lint", "check", ".", "--no-cache", "--exit-zero",
                           "--output-format", "json"], cwd=tree, capture_output=True, text=True)
    try:
        findings = json.loads(proc.stdout)["findings"]
    except (ValueError, KeyError, TypeError):
        return None
    paths = sorted({f["path"] for f in findings if (f.get("fix") or {}).get("applicability") == "safe"})
    return Path(paths[0]).as_posix() if paths else None


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--tree", type=Path, help="analyse this tree instead of a vLLM release")
    ap.add_argument("--vllm-version", default="0.27.1", help="release to fetch (default 0.27.1)")
    ap.add_argument("--scales", default="1,10", help="corpora: comma-separated copies of the tree (default 1,10)")
    ap.add_argument("--repeat", type=int, default=5, help="timed runs per row (default 5)")
    ap.add_argument("--reference-repeat", type=int, default=1, metavar="N",
                    help="rounds that also run the reference rows (read, ast.parse, libcst, semgrep; default 1)")
    ap.add_argument("--rows", metavar="PREFIX,...",
                    help="only the rows whose id starts with one of these (the floor and ruff's cold row always)")
    ap.add_argument("--quick", action="store_true", help="each row once: a smoke test")
    ap.add_argument("--json", type=Path, metavar="PATH", help="write the figures here")
    ap.add_argument("--markdown", type=Path, metavar="PATH", help="write the table and the targets here")
    ap.add_argument("--save", action="store_true",
                    help=f"write both to {RESULTS.relative_to(REPO)}/<date>-<host>.{{json,md}}")
    ap.add_argument("--no-install", action="store_true",
                    help="do not create a throwaway venv for ruff or semgrep when it is not on PATH")
    ap.add_argument("--ruff", metavar="PATH", help="the ruff binary to measure (else PATH, else installed)")
    ap.add_argument("--semgrep", metavar="PATH",
                    help="the semgrep binary for the reference row (else PATH, else installed)")
    ap.add_argument("--timeout", type=float, default=600, help="seconds per run (default 600)")
    ap.add_argument("--instructions", action="store_true",
                    help="after the timed rounds, count the instructions of the cold, pre-commit, floor and ruff "
                         "rows at 1x and of the pre-commit rows at every scale, one run each under valgrind "
                         "(minutes: valgrind runs them 50 times slower)")
    ap.add_argument("--quiet", action="store_true", help="no progress lines on stderr")
    args = ap.parse_args(argv)

    sys.path.insert(0, str(STAGES.parent))
    global py_files, corpus
    import corpus
    from stages import py_files

    from dtype_lint import releases

    if args.tree:
        tree, source = args.tree.resolve(), str(args.tree)
    else:
        try:
            tree = releases.vllm_tree(args.vllm_version)
        except releases.ReleaseFetchError as exc:
            print(f"error: {exc}", file=sys.stderr)
            return 2
        source = f"vLLM {args.vllm_version}"
    if not tree.is_dir():
        print(f"error: {tree}: not a directory", file=sys.stderr)
        return 2
    try:
        scales = sorted({int(x) for x in args.scales.split(",")})
    except ValueError:
        print(f"error: --scales {args.scales!r}: not a list of numbers", file=sys.stderr)
        return 2
    repeat = 1 if args.quick else max(1, args.repeat)

    def log(msg: str) -> None:
        if not args.quiet:
            print(msg, file=sys.stderr, flush=True)

    # As an installed dtype-lint has: bytecode for every module (PYTHONDONTWRITEBYTECODE, set in
    # some environments, would otherwise make every row compile the tool's sources again).
    import compileall

    for pkg in (REPO / "dtype_lint", REPO / "rules"):
        compileall.compile_dir(str(pkg), quiet=1)
    n_files = len(py_files(tree))
    site, clean = default_touches(tree, py_files(tree), not args.tree)
    # (Only when a row touches it: finding it is a whole check of the tree.)
    fixable = fixable_touch(tree) if not args.rows or any(p.startswith("dtype-lint-precommit")
                                                          for p in args.rows.split(",")) else None
    # absolute: the rows run in the run's temporary folder
    ruff_bin = os.path.abspath(args.ruff) if args.ruff and os.sep in args.ruff else args.ruff
    ruff = (ruff_bin, _version([ruff_bin, "--version"])) if ruff_bin else \
        find_ruff(not args.no_install, releases.cache_root())
    if ruff[0] is None:
        log(f"ruff not available: {ruff[1]}")
    semgrep_bin = os.path.abspath(args.semgrep) if args.semgrep and os.sep in args.semgrep else args.semgrep
    semgrep = (semgrep_bin, _version([semgrep_bin, "--version"])) if semgrep_bin else \
        find_semgrep(not args.no_install, releases.cache_root())
    if semgrep[0] is None:
        log(f"semgrep not available: {semgrep[1]}")
    load_start = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    with tempfile.TemporaryDirectory(prefix="dtype-lint-bench-") as work_s:
        work = Path(work_s)
        corpora = []
        for scale in scales:
            # A release's corpora are kept beside the release (built once); any other tree's are
            # built in this run's temporary folder.
            dest = (work / f"corpus-x{scale}") if args.tree else corpus.corpus_dir(releases.cache_root(), tree, scale)
            log(f"corpus [{scale}x]: {dest}")
            root = corpus.build(tree, scale, dest)
            top = {n: n for n in corpus.top_level(tree)}  # the touched files are in copy 0, the original

            def where(rel: str | None) -> Path | None:
                if rel is None:
                    return None
                head, _, rest = rel.partition("/")
                return root / (f"{top[head]}/{rest}" if rest else top[rel[:-3]] + ".py")

            corpora.append(Corpus(scale, root, where(site), where(clean), where(fixable)))
        every = build_rows(corpora, work, ruff, semgrep)
        rows = select_rows(every, [p for p in args.rows.split(",") if p]) if args.rows else every
        with Runner() as runner:
            warm_up(runner, every, args.timeout, log)  # the caches every row expects, measured or not
            run_all(runner, rows, repeat, args.timeout, log, max(1, args.reference_repeat))
        if args.instructions:
            count_instructions(rows, args.timeout, log, first_seq=repeat)
    load_end = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")

    figures = []
    for r in rows:
        sfx = suffix(r.scale)
        floor = next((x for x in rows if x.id == FLOOR + sfx and x.samples), None)
        ruff_row = next((x for x in rows if x.id == "ruff-cold" + sfx and x.samples), None)
        figures.append(r.figures(floor, ruff_row))
    header = (f"{source}: {n_files} .py files × {', '.join(map(str, scales))}, {repeat} run(s) per row, median; "
              f"{os.cpu_count()} CPUs, Python {platform.python_version()}, load {load_start:.1f}→{load_end:.1f}")
    print_table(rows, figures, header)
    doc = {
        "version": 2,
        "source": source,
        "date": datetime.date.today().isoformat(),
        "tree": str(tree),
        "py_files": n_files,
        "scales": scales,
        "touched": {"site": site, "clean": clean, "fixable": fixable},
        "repeat": repeat,
        "reference_repeat": min(repeat, max(1, args.reference_repeat)),
        "floor": FLOOR,
        "ruff": ruff[1] if ruff[0] else "not available",
        "machine": {"host": socket.gethostname(), "cpus": os.cpu_count(), "python": platform.python_version(),
                    "platform": platform.platform(), "load_start": load_start, "load_end": load_end},
        "rows": figures,
        "targets": judge(figures),
        "instructions": "valgrind --cache-sim=no, PYTHONHASHSEED=0, one run per row: 1x, and the pre-commit rows "
                        "at every scale" if args.instructions
        else None,
    }
    outputs = []
    if args.save:
        stem = RESULTS / f"{doc['date']}-{doc['machine']['host']}"
        if stem.with_suffix(".json").exists():
            # A second run on the same day keeps the first: named by its time too, which sorts
            # after the day's first name ("T" after "-"), so the latest is still the last.
            stem = RESULTS / f"{doc['date']}T{time.strftime('%H%M')}-{doc['machine']['host']}"
        outputs += [(stem.with_suffix(".json"), "json"), (stem.with_suffix(".md"), "md")]
    if args.json:
        outputs.append((args.json, "json"))
    if args.markdown:
        outputs.append((args.markdown, "md"))
    for path, kind in outputs:
        path.parent.mkdir(parents=True, exist_ok=True)
        text = json.dumps(doc, indent=2) + "\n" if kind == "json" else markdown(doc)
        path.write_text(text, encoding="utf-8")
        log(f"wrote {path}")
    if args.save and update_readme(doc, outputs[1][0].name):
        log(f"updated the table in {README}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
