#!/usr/bin/env python
"""dtype-lint against the floor and its peers, on the vLLM 0.27.1 tree, in one run.

Every row is a fresh child process timed by the same harness (runner.py, a small process that
starts them all): wall clock around it, CPU from `getrusage(RUSAGE_CHILDREN)` before and after
(user + system, including any worker processes the child waited for), peak RSS from `wait4` for
that child. Rows run round-robin, `--repeat` times, and the table shows medians. See benchmarks/README.md for what the figures mean.

    .venv/bin/python benchmarks/bench.py                    # vLLM 0.27.1, 5 repetitions
    .venv/bin/python benchmarks/bench.py --quick --tree DIR  # each row once, on any tree
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
STAGES = Path(__file__).resolve().with_name("stages.py")
RUNNER = Path(__file__).resolve().with_name("runner.py")
RUFF_VERSION = "0.17.6"  # pinned so that figures from different days compare
FLOOR = "read+prefilter"  # DESIGN.md §7: the floor is reading + prefiltering every file

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

    def figures(self, floor: Row | None) -> dict:
        wall, cpu = self.median("wall_s"), self.median("cpu_s")
        fw = floor.median("wall_s") if floor else None
        fc = floor.median("cpu_s") if floor else None
        return {
            "id": self.id,
            "label": self.label,
            "status": self.status,
            "command": self.cmd,
            "files": self.files,
            "wall_s": wall,
            "cpu_s": cpu,
            "files_per_s": (self.files / wall) if wall and self.files is not None else None,
            "ratio_wall": (wall / fw) if wall and fw else None,
            "ratio_cpu": (cpu / fc) if cpu and fc else None,
            "peak_rss_mib": max((s.maxrss_mib for s in self.samples), default=None),
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
    on_path = shutil.which("ruff")
    if on_path:
        return on_path, _version([on_path, "--version"])
    venv = cache_root / f"bench-ruff-{RUFF_VERSION}"
    binary = venv / ("Scripts/ruff.exe" if os.name == "nt" else "bin/ruff")
    if binary.is_file():
        return str(binary), _version([str(binary), "--version"])
    if not install:
        return None, "not on PATH and not installed (--no-install)"
    # A throwaway venv beside the vLLM trees, never the project's: built aside, then renamed.
    cache_root.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=".bench-ruff-", dir=cache_root))
    try:
        subprocess.run([sys.executable, "-m", "venv", str(tmp)], check=True,
                       capture_output=True, text=True)
        py = tmp / ("Scripts/python.exe" if os.name == "nt" else "bin/python")
        proc = subprocess.run([str(py), "-m", "pip", "install", "-q", "--disable-pip-version-check",
                               f"ruff=={RUFF_VERSION}"], capture_output=True, text=True)
        if proc.returncode != 0:
            tail = (proc.stdout + proc.stderr).strip().splitlines()[-1:]
            return None, f"could not install ruff=={RUFF_VERSION}: {' '.join(tail)}"
        try:
            os.rename(tmp, venv)
        except OSError:
            if not binary.is_file():
                raise
        return str(binary), _version([str(binary), "--version"])
    except (OSError, subprocess.CalledProcessError) as exc:
        return None, f"could not create a venv for ruff: {exc}"
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def _version(cmd: list[str]) -> str:
    try:
        return subprocess.run(cmd, capture_output=True, text=True, timeout=60).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return "unknown version"


# --------------------------------------------------------------------------------------------


def build_rows(tree: Path, work: Path, n_files: int, ruff: tuple[str | None, str]) -> list[Row]:
    py = sys.executable
    tree_s = str(tree)

    def stage(id_: str, label: str) -> Row:
        return Row(id_, label, [py, str(STAGES), id_, tree_s], work, stage=True)

    def dtl(id_: str, label: str, *flags: str) -> Row:
        cmd = [py, "-m", "dtype_lint", "check", tree_s, "--exit-zero", *flags]
        return Row(id_, label, cmd, work, files=n_files)

    rows = [
        stage("read", "read every .py file"),
        stage("read+prefilter", "read + regex prefilter"),
        stage("ast.parse", "stdlib ast.parse, every file"),
        stage("libcst-prefiltered", "libcst parse_module, prefiltered files"),
        dtl("dtype-lint-cold-j1", "dtype-lint check --no-cache -j 1", "--no-cache", "-j", "1"),
        dtl("dtype-lint-cold", "dtype-lint check --no-cache", "--no-cache"),
        dtl("dtype-lint-warm-j1", "dtype-lint check -j 1 (warm cache)", "-j", "1"),
        dtl("dtype-lint-warm", "dtype-lint check (warm cache)"),
    ]
    ruff_bin, ruff_ver = ruff
    base = [ruff_bin, "check", "--select", "E,F", "--exit-zero", tree_s] if ruff_bin else None
    for id_, label, extra in (
        ("ruff-cold", "ruff check --select E,F --no-cache", ["--no-cache"]),
        ("ruff-cached", "ruff check --select E,F (cached)", ["--cache-dir", str(work / "ruff")]),
    ):
        rows.append(Row(id_, label, base + extra if base else None, work, files=n_files,
                        note=ruff_ver, status="ok" if base else "not available"))
    semgrep = shutil.which("semgrep")
    if semgrep:
        (work / "semgrep.yaml").write_text(SEMGREP_RULES, encoding="utf-8")
        cmd = [semgrep, "scan", "--config", str(work / "semgrep.yaml"), "--metrics", "off",
               "--disable-version-check", "--quiet", tree_s]
        rows.append(Row("semgrep", "semgrep, 2 patterns", cmd, work, files=n_files,
                        note=_version([semgrep, "--version"]), ok_codes=(0, 1)))
    else:
        rows.append(Row("semgrep", "semgrep, 2 patterns", None, work,
                        status="not available", note="not on PATH"))
    return rows


def warm_up(runner: Runner, rows: list[Row], timeout: float, log) -> None:
    """Untimed: page cache, dtype-lint's and ruff's caches; a JSON run for the file count."""
    by_id = {r.id: r for r in rows}
    log("warm-up: page cache")
    runner.measure(by_id["read"].cmd, by_id["read"].cwd, timeout)
    dtl = by_id["dtype-lint-warm"]
    log("warm-up: dtype-lint cache")
    s = runner.measure(dtl.cmd + ["--output-format", "json"], dtl.cwd, timeout)
    if s.returncode == 0:
        try:
            summary = json.loads(s.stdout)["summary"]
            note = f"{summary['files']} files, {summary['findings']} findings"
            for r in rows:
                if r.id.startswith("dtype-lint"):
                    r.files, r.note = summary["files"], note
        except (ValueError, KeyError, TypeError):
            pass
    ruff = by_id["ruff-cached"]
    if ruff.cmd:
        log("warm-up: ruff cache")
        runner.measure(ruff.cmd, ruff.cwd, timeout)


def run_all(runner: Runner, rows: list[Row], repeat: int, timeout: float, log) -> None:
    # Round-robin, so that a change in machine load touches every row alike.
    for rep in range(repeat):
        for row in rows:
            if row.cmd is None or row.status == "failed":
                continue
            log(f"[{rep + 1}/{repeat}] {row.label}")
            row.record(runner.measure(row.cmd, row.cwd, timeout))


def print_table(rows: list[Row], figures: list[dict], header: str) -> None:
    from rich.console import Console
    from rich.table import Table

    console = Console(width=None if sys.stdout.isatty() else 160)

    def num(v, fmt):
        return "" if v is None else format(v, fmt)

    table = Table(title=header, title_justify="left")
    for col, just in (("tool", "left"), ("files", "right"), ("wall s", "right"),
                      ("CPU s", "right"), ("files/s", "right"), ("× floor wall", "right"),
                      ("× floor CPU", "right"), ("peak RSS MiB", "right"), ("note", "left")):
        # The tool column never wraps: a log reader greps for it; notes fold instead.
        table.add_column(col, justify=just, overflow="fold", no_wrap=(col == "tool"))
    for f in figures:
        if f["status"] != "ok":
            table.add_row(f["label"], "", "", "", "", "", "", "", f"{f['status']}: {f['note']}")
            continue
        table.add_row(
            f["label"], num(f["files"], "d"), num(f["wall_s"], ".3f"), num(f["cpu_s"], ".3f"),
            num(f["files_per_s"], ",.0f"), num(f["ratio_wall"], ".1f"),
            num(f["ratio_cpu"], ".1f"), num(f["peak_rss_mib"], ".0f"), f["note"],
        )
    console.print(table)
    console.print(f"floor = `{FLOOR}` row; medians of wall and CPU; peak RSS = largest process.")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--tree", type=Path, help="analyse this tree instead of a vLLM release")
    ap.add_argument("--vllm-version", default="0.27.1", help="release to fetch (default 0.27.1)")
    ap.add_argument("--repeat", type=int, default=5, help="timed runs per row (default 5)")
    ap.add_argument("--quick", action="store_true", help="each row once: a smoke test")
    ap.add_argument("--json", type=Path, metavar="PATH", help="write the figures here")
    ap.add_argument("--no-install", action="store_true",
                    help="do not create a throwaway venv for ruff when it is not on PATH")
    ap.add_argument("--timeout", type=float, default=600, help="seconds per run (default 600)")
    ap.add_argument("--quiet", action="store_true", help="no progress lines on stderr")
    args = ap.parse_args(argv)

    sys.path.insert(0, str(STAGES.parent))
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
    repeat = 1 if args.quick else max(1, args.repeat)

    def log(msg: str) -> None:
        if not args.quiet:
            print(msg, file=sys.stderr, flush=True)

    n_files = len(py_files(tree))
    ruff = find_ruff(not args.no_install, releases.cache_root())
    if ruff[0] is None:
        log(f"ruff not available: {ruff[1]}")
    with tempfile.TemporaryDirectory(prefix="dtype-lint-bench-") as work_s:
        work = Path(work_s)
        rows = build_rows(tree, work, n_files, ruff)
        with Runner() as runner:
            warm_up(runner, rows, args.timeout, log)
            run_all(runner, rows, repeat, args.timeout, log)

    floor = next((r for r in rows if r.id == FLOOR and r.samples), None)
    figures = [r.figures(floor) for r in rows]
    header = (f"{source}: {n_files} .py files, {repeat} run(s) per row, median; "
              f"{os.cpu_count()} CPUs, Python {platform.python_version()}")
    print_table(rows, figures, header)
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps({
            "version": 1,
            "source": source,
            "tree": str(tree),
            "py_files": n_files,
            "repeat": repeat,
            "floor": FLOOR,
            "machine": {"cpus": os.cpu_count(), "python": platform.python_version(),
                        "platform": platform.platform()},
            "rows": figures,
        }, indent=2) + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
