"""Mutation testing of the verification side: apply each committed mutant to a temporary copy of
the tree and report who kills it, ``dtype-lint verify`` and which tests.

    .venv/bin/python scripts/mutate.py                  # the whole set (scripts/mutants.toml)
    .venv/bin/python scripts/mutate.py --only cu-fp8-barrier-reduction,helper-uint8-casts
    .venv/bin/python scripts/mutate.py --ci --verify-args="--no-upstream --scenarios B"

For each mutant: copy the tree (tracked and untracked-not-ignored files), replace the mutant's
text in one file (exactly as often as it says, or report it *stale*), assemble an importable
package from the copy (``scripts/pkgroot.py``), then run verify and ``pytest`` on the mutant's
test files with that package first on ``sys.path``. verify is ``python -m dtype_lint verify`` on
the reference kernels (``verify = "reference"``, the default) or the same matrix on the emulated
CUDA kernels (``verify = "emulated"``: ``tests/kernels/emulated_verify.py``, for mutants of the
``.cu`` files and of formats whose writer and reader agree). A mutant is killed by verify when
verify exits non-zero, by a test when the test fails.

Each outcome records *what* killed it (``killed_by``), from verify's ``violations_by_check``:

* ``verify runtime``: a check decided by running code (outcomes, bounds, bit identity, empty
  contexts, the negative control, the helper on every row) fired. Where the fixer also refused to
  rewrite (check ``fixer``), only the helper check counts: the other failures then follow from the
  missing rewrite;
* ``verify runtime (emulated CUDA)``: the same, on the emulated kernels;
* ``fixer refusal``: verify failed only because the fixer rewrote nothing (or could not run: exit 2);
* ``unit tests``: verify passed and a test failed.

It must also be killed by what its ``must`` names (``runtime``: one of the two verify runtime
kinds; ``verify``: verify at all; ``emulated``: a test in ``test_cuda_emulated.py``; ``tests``:
anything). The exit status is 0 only when every selected mutant is killed as required.

``--until-killed`` runs a mutant's own tests only when verify did not already kill it as its
``must`` requires (CI: the verdict is the same, the tests' column stays empty); the committed report
runs both.

Mutants run in parallel (``--jobs``, default half the CPUs, at least 1); each subprocess gets one
intra-op thread. Nothing is written into this checkout except ``--json`` if given.
"""

from __future__ import annotations

import argparse
import concurrent.futures
import dataclasses
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
import xml.etree.ElementTree as ET
from dataclasses import asdict, dataclass, field
from pathlib import Path

try:
    import tomllib
except ImportError:  # Python 3.10
    import tomli as tomllib

REPO = Path(__file__).resolve().parents[1]
MUTANTS = REPO / "scripts" / "mutants.toml"
sys.path.insert(0, str(REPO / "scripts"))
import pkgroot  # noqa: E402

MUSTS = ("runtime", "verify", "emulated", "tests", "verify|emulated")
RUNTIME_KILLS = ("verify runtime", "verify runtime (emulated CUDA)")
KILLS = RUNTIME_KILLS + ("fixer refusal", "unit tests")
EMULATED_VERIFY = "tests/kernels/emulated_verify.py"


@dataclass(frozen=True)
class Mutant:
    id: str
    what: str
    file: str
    find: str
    replace: str
    tests: tuple[str, ...] = ()
    must: str = "tests"
    count: int = 1
    ci: bool = False
    kind: str = ""  # the class of code it breaks, for the report
    verify: str = "reference"  # or "emulated"
    verify_args: tuple[str, ...] = ()  # replaces the run's --verify-args for this mutant


@dataclass
class Outcome:
    id: str
    what: str
    status: str = "pending"  # killed, survived, weak (killed, not by what it must), stale, error
    kind: str = ""
    verify_mode: str = "reference"
    verify: str = ""  # "killed (exit 1)", "survived", "error: ..."
    verify_violations: list[str] = field(default_factory=list)
    verify_checks: dict[str, int] = field(default_factory=dict)  # violations per verify check
    killed_by: str = ""  # one of KILLS, or "" when it survived
    tests_failed: list[str] = field(default_factory=list)
    tests_run: int = 0
    must: str = ""
    seconds: float = 0.0
    detail: str = ""


def load_mutants(path: Path = MUTANTS) -> list[Mutant]:
    data = tomllib.loads(path.read_text())
    mutants = []
    for entry in data.get("mutant", []):
        entry = dict(entry)
        entry["tests"] = tuple(entry.get("tests", ()))
        entry["verify_args"] = tuple(entry.get("verify_args", ()))
        m = Mutant(**entry)
        if m.must not in MUSTS:
            raise ValueError(f"{m.id}: must is one of {MUSTS}, got {m.must!r}")
        if m.verify not in ("reference", "emulated"):
            raise ValueError(f"{m.id}: verify is reference or emulated, got {m.verify!r}")
        mutants.append(m)
    ids = [m.id for m in mutants]
    if len(ids) != len(set(ids)):
        raise ValueError("duplicate mutant ids")
    return mutants


def _tree_files(repo: Path) -> list[str]:
    out = subprocess.run(["git", "-C", str(repo), "ls-files", "-z", "-c", "-o", "--exclude-standard"],
                         capture_output=True, check=True).stdout
    return [f for f in out.decode().split("\0") if f and (repo / f).is_file()]


def copy_tree(repo: Path, dest: Path) -> None:
    for rel in _tree_files(repo):
        target = dest / rel
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(repo / rel, target)


def apply(m: Mutant, root: Path) -> None:
    path = root / m.file
    text = path.read_text()
    found = text.count(m.find)
    if found != m.count:
        raise LookupError(f"{m.file}: the mutant's text occurs {found} time(s), expected {m.count}")
    path.write_text(text.replace(m.find, m.replace))


def _env(pkg: Path) -> dict:
    env = dict(os.environ)
    env["PYTHONPATH"] = str(pkg) + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    env["OMP_NUM_THREADS"] = "1"
    env["PYTHONDONTWRITEBYTECODE"] = "1"
    return env


def run_verify(pkg: Path, args: list[str], timeout: float, mode: str = "reference",
               copy: Path | None = None) -> tuple[str, list[str], dict[str, int]]:
    """``(verdict, violations, violations per check)`` of verify on the assembled package."""
    report = pkg / "verify.json"
    if mode == "emulated":
        cmd = [sys.executable, str((copy or REPO) / EMULATED_VERIFY), "--json", str(report), *args]
    else:
        cmd = [sys.executable, "-m", "dtype_lint", "verify", "--no-table", "--json", str(report), *args]
    res = subprocess.run(cmd, cwd=pkg, env=_env(pkg), capture_output=True, text=True, timeout=timeout)
    if res.returncode == 0:
        return "survived", [], {}
    violations, checks = [], {}
    if report.exists():
        data = json.loads(report.read_text())
        violations, checks = data.get("violations", []), data.get("violations_by_check", {})
    if res.returncode == 1:
        return "killed (exit 1)", violations, checks
    last = res.stderr.strip().splitlines()[-1][:200] if res.stderr.strip() else "no message"
    return f"killed (exit {res.returncode}: {last})", violations, checks


def killed_by(o: "Outcome") -> str:
    """What killed the mutant (see the module docstring), or "" if nothing did."""
    if o.verify.startswith("killed"):
        checks = {c for c, n in o.verify_checks.items() if n}
        runtime = bool(checks & {"helper"}) if "fixer" in checks else bool(checks - {"fixer"})
        if runtime:
            return RUNTIME_KILLS[1] if o.verify_mode == "emulated" else RUNTIME_KILLS[0]
        return "fixer refusal"
    return "unit tests" if o.tests_failed else ""


def run_tests(pkg: Path, copy: Path, tests: tuple[str, ...], timeout: float) -> tuple[list[str], int]:
    if not tests:
        return [], 0
    junit = pkg / "junit.xml"
    targets = [str(copy / t) for t in tests]
    # Run from the package root: pytest puts the current folder first on sys.path, and the copy's
    # own dtype_lint/ (without kernels_ref/) must not win over the assembled package.
    subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", f"--rootdir={copy}",
         "-c", str(copy / "pyproject.toml"), f"--junitxml={junit}", *targets],
        cwd=pkg, env=_env(pkg), capture_output=True, text=True, timeout=timeout,
    )
    if not junit.exists():
        return ["(pytest did not run)"], 0
    failed, total = [], 0
    for case in ET.parse(junit).getroot().iter("testcase"):
        total += 1
        if case.find("failure") is not None or case.find("error") is not None:
            failed.append(f"{case.get('classname', '').rsplit('.', 1)[-1]}::{case.get('name')}")
    return failed, total


def required_kill(m: Mutant, o: Outcome) -> bool:
    by_verify = o.verify.startswith("killed")
    by_emulated = any("test_cuda_emulated" in t for t in o.tests_failed) or o.killed_by == RUNTIME_KILLS[1]
    return {
        "runtime": o.killed_by in RUNTIME_KILLS,
        "verify": by_verify,
        "emulated": by_emulated,
        "verify|emulated": by_verify or by_emulated,
        "tests": bool(o.tests_failed) or by_verify,
    }[m.must]


def run_one(m: Mutant, verify_args: list[str], timeout: float, keep: bool, until_killed: bool = False) -> Outcome:
    o = Outcome(m.id, m.what, must=m.must, kind=m.kind, verify_mode=m.verify)
    t0 = time.perf_counter()
    work = Path(tempfile.mkdtemp(prefix=f"dtl_mutant_{m.id}_"))
    try:
        copy, pkg = work / "tree", work / "pkg"
        copy_tree(REPO, copy)
        try:
            apply(m, copy)
        except LookupError as exc:
            o.status, o.detail = "stale", str(exc)
            return o
        pkgroot.build(pkg, copy)
        args = list(m.verify_args) if m.verify_args else ([] if m.verify == "emulated" else verify_args)
        o.verify, o.verify_violations, o.verify_checks = run_verify(pkg, args, timeout, m.verify, copy)
        o.verify_violations = o.verify_violations[:20]
        o.killed_by = killed_by(o)
        if not (until_killed and o.killed_by and required_kill(m, o)):
            o.tests_failed, o.tests_run = run_tests(pkg, copy, m.tests, timeout)
        o.killed_by = killed_by(o)
        killed = bool(o.killed_by)
        o.status = "survived" if not killed else ("killed" if required_kill(m, o) else "weak")
    except subprocess.TimeoutExpired as exc:
        o.status, o.detail = "error", f"timeout after {exc.timeout} s"
    except Exception as exc:  # noqa: BLE001 - one mutant's failure must not stop the others
        o.status, o.detail = "error", f"{type(exc).__name__}: {exc}"
    finally:
        o.seconds = round(time.perf_counter() - t0, 1)
        if keep:
            o.detail = (o.detail + f" (kept in {work})").strip()
        else:
            shutil.rmtree(work, ignore_errors=True)
    return o


def summary(outcomes: list[Outcome]) -> dict:
    """Counts by what killed each mutant, and by kind."""
    counted = [o for o in outcomes if o.status not in ("stale", "error")]
    by = {k: sum(o.killed_by == k for o in counted) for k in KILLS}
    runtime = sum(by[k] for k in RUNTIME_KILLS)
    kinds: dict[str, dict[str, int]] = {}
    for o in counted:
        kinds.setdefault(o.kind or "-", {}).setdefault(o.killed_by or "survived", 0)
        kinds[o.kind or "-"][o.killed_by or "survived"] += 1
    return {
        "mutants": len(outcomes),
        "killed_as_required": sum(o.status == "killed" for o in outcomes),
        "killed_by": by,
        "survived": sum(not o.killed_by for o in counted),
        "stale_or_error": len(outcomes) - len(counted),
        "runtime_share": round(runtime / len(counted), 3) if counted else 0.0,
        "by_kind": kinds,
    }


def _checks(o: Outcome) -> str:
    return ",".join(f"{c}:{n}" for c, n in sorted(o.verify_checks.items())) or "—"


def render(outcomes: list[Outcome]) -> str:
    lines = [f"{'mutant':36} {'status':9} {'killed by':31} {'verify checks':28} tests that fail", "-" * 140]
    for o in outcomes:
        tests = ", ".join(o.tests_failed[:2]) + (f" (+{len(o.tests_failed) - 2})" if len(o.tests_failed) > 2 else "")
        if o.tests_run and not o.tests_failed:
            tests = f"none of {o.tests_run}"
        lines.append(f"{o.id:36} {o.status:9} {o.killed_by or 'nothing':31} {_checks(o):28} {tests or '—'}"
                     + (f"  [{o.detail}]" if o.detail else ""))
    s = summary(outcomes)
    by = s["killed_by"]
    lines.append(f"{s['killed_as_required']}/{s['mutants']} killed as required")
    lines.append(f"killed at run time in verify: {by[RUNTIME_KILLS[0]]} (reference kernels) + {by[RUNTIME_KILLS[1]]} "
                 f"(emulated CUDA kernels) = {s['runtime_share']:.0%}; "
                 f"only by the fixer's refusal: {by['fixer refusal']}; "
                 f"only in unit tests: {by['unit tests']}; survived: {s['survived']}")
    return "\n".join(lines)


def markdown(outcomes: list[Outcome], seconds: float, jobs: int, verify_args: list[str],
             rerun: list[str] | None = None) -> str:
    """The committed report (benchmarks/mutation/mutation-report.md)."""
    s = summary(outcomes)
    by = s["killed_by"]
    out = ["# Mutation report", "",
           f"`scripts/mutate.py` over `scripts/mutants.toml`: {s['mutants']} mutants, "
           f"{s['killed_as_required']} killed as required, {s['survived']} survived, "
           f"{s['stale_or_error']} stale or in error ({seconds:.0f} s, {jobs} job(s); "
           f"verify arguments: `{' '.join(verify_args) or '(defaults)'}`).", "",
           "| killed by | mutants |", "|---|---|"]
    if rerun:
        out[3:3] = ["", f"Re-run alone after the whole run (`--update`): {', '.join(f'`{r}`' for r in rerun)}."]
    out += [f"| {k} | {by[k]} |" for k in KILLS]
    out += [f"| survived | {s['survived']} |", "",
            f"Killed at run time by verify's matrix: {by[RUNTIME_KILLS[0]] + by[RUNTIME_KILLS[1]]} of "
            f"{s['mutants'] - s['stale_or_error']} ({s['runtime_share']:.0%}).", "",
            "| mutant | kind | must | status | killed by | verify checks that fired | tests that fail |",
            "|---|---|---|---|---|---|---|"]
    for o in outcomes:
        more = f" (+{len(o.tests_failed) - 2})" if len(o.tests_failed) > 2 else ""
        tests = ", ".join(f"`{x}`" for x in o.tests_failed[:2]) + more
        if o.tests_run and not o.tests_failed:
            tests = f"none of {o.tests_run}"
        out.append(f"| `{o.id}` | {o.kind} | {o.must} | {o.status} | {o.killed_by or '—'} | {_checks(o)} "
                   f"| {tests or '—'} |")
    return "\n".join(out) + "\n"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--only", default="", help="comma list of mutant ids")
    ap.add_argument("--ci", action="store_true", help="only the mutants marked ci = true")
    ap.add_argument("--list", action="store_true", help="list the mutants and exit")
    ap.add_argument("--check", action="store_true", help="only check that every mutant applies to this tree")
    ap.add_argument("--verify-args", default="", help="extra arguments for dtype-lint verify (default: its defaults)")
    ap.add_argument("--jobs", type=int, default=max(1, (os.cpu_count() or 2) // 2))
    ap.add_argument("--timeout", type=float, default=900.0, help="seconds per verify or pytest run")
    ap.add_argument("--json", help="write the outcomes and the summary as JSON")
    ap.add_argument("--report", help="write the markdown report (benchmarks/mutation/mutation-report.md)")
    ap.add_argument("--update", metavar="JSON", help="a whole run's --json: re-run only the selected mutants and "
                    "write the merged outcomes (the report says which were re-run)")
    ap.add_argument("--keep", action="store_true", help="keep each mutant's temporary tree")
    ap.add_argument("--until-killed", action="store_true",
                    help="skip a mutant's tests when verify already killed it as required")
    args = ap.parse_args(argv)

    mutants = load_mutants()
    if args.ci:
        mutants = [m for m in mutants if m.ci]
    if args.only:
        wanted = [x for x in args.only.split(",") if x]
        unknown = set(wanted) - {m.id for m in mutants}
        if unknown:
            print(f"unknown mutant(s): {', '.join(sorted(unknown))}", file=sys.stderr)
            return 2
        mutants = [m for m in mutants if m.id in wanted]
    if args.list:
        for m in mutants:
            print(f"{m.id:36} {m.file:40} {m.verify:9} must={m.must:8} {m.kind:16} {m.what}")
        return 0
    if args.check:
        stale = []
        for m in mutants:
            text = (REPO / m.file).read_text()
            if text.count(m.find) != m.count:
                stale.append(f"{m.id}: {m.file} holds its text {text.count(m.find)} time(s), expected {m.count}")
        print("\n".join(stale) or f"all {len(mutants)} mutants apply")
        return 1 if stale else 0

    verify_args = args.verify_args.split()
    t0 = time.perf_counter()
    with concurrent.futures.ThreadPoolExecutor(max_workers=max(1, args.jobs)) as pool:
        outcomes = list(pool.map(lambda m: run_one(m, verify_args, args.timeout, args.keep, args.until_killed),
                                 mutants))
    seconds = time.perf_counter() - t0
    rerun: list[str] = []
    if args.update:
        previous = json.loads(Path(args.update).read_text())
        fresh = {o.id: o for o in outcomes}
        rerun = sorted(fresh)
        known = {f.name for f in dataclasses.fields(Outcome)}
        outcomes = [fresh.get(o["id"]) or Outcome(**{k: v for k, v in o.items() if k in known})
                    for o in previous["outcomes"]]
        outcomes += [o for o in fresh.values() if o.id not in {p["id"] for p in previous["outcomes"]}]
        seconds += previous.get("seconds", 0)
        rerun = sorted(set(rerun) | set(previous.get("rerun", [])))
    print(render(outcomes))
    print(f"({seconds:.0f} s, {args.jobs} job(s))")
    if args.json:
        data = {"summary": summary(outcomes), "seconds": round(seconds), "rerun": rerun,
                "outcomes": [asdict(o) for o in outcomes]}
        Path(args.json).write_text(json.dumps(data, indent=2) + "\n")
    if args.report:
        Path(args.report).write_text(markdown(outcomes, seconds, args.jobs, verify_args, rerun))
    return 0 if all(o.status == "killed" for o in outcomes) else 1


if __name__ == "__main__":
    sys.exit(main())
