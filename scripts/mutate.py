"""Mutation testing of the verification side: apply each committed mutant to a temporary copy of
the tree and report who kills it, ``dtype-lint verify`` and which tests.

    .venv/bin/python scripts/mutate.py                  # the whole set (scripts/mutants.toml)
    .venv/bin/python scripts/mutate.py --only cu-fp8-barrier-reduction,helper-uint8-casts
    .venv/bin/python scripts/mutate.py --ci --verify-args="--no-upstream --scenarios B"

For each mutant: copy the tree (tracked and untracked-not-ignored files), replace the mutant's
text in one file (exactly as often as it says, or report it *stale*), assemble an importable
package from the copy (``scripts/pkgroot.py``), then run ``python -m dtype_lint verify`` and
``pytest`` on the mutant's test files with that package first on ``sys.path``. A mutant is killed
by verify when verify exits non-zero, by a test when the test fails. It must also be killed by
what its ``must`` names (``verify``, ``emulated``: a test in ``test_cuda_emulated.py``, ``tests``:
any test). The exit status is 0 only when every selected mutant is killed as required.

Mutants run in parallel (``--jobs``, default half the CPUs, at least 1); each subprocess gets one
intra-op thread. Nothing is written into this checkout except ``--json`` if given.
"""

from __future__ import annotations

import argparse
import concurrent.futures
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

MUSTS = ("verify", "emulated", "tests", "verify|emulated")


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


@dataclass
class Outcome:
    id: str
    what: str
    status: str = "pending"  # killed, survived, weak (killed, not by what it must), stale, error
    verify: str = ""  # "killed (exit 1)", "survived", "error: ..."
    verify_violations: list[str] = field(default_factory=list)
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
        m = Mutant(**entry)
        if m.must not in MUSTS:
            raise ValueError(f"{m.id}: must is one of {MUSTS}, got {m.must!r}")
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


def run_verify(pkg: Path, args: list[str], timeout: float) -> tuple[str, list[str]]:
    report = pkg / "verify.json"
    res = subprocess.run([sys.executable, "-m", "dtype_lint", "verify", "--no-table", "--json", str(report), *args],
                         cwd=pkg, env=_env(pkg), capture_output=True, text=True, timeout=timeout)
    if res.returncode == 0:
        return "survived", []
    violations = []
    if report.exists():
        violations = json.loads(report.read_text()).get("violations", [])
    if res.returncode == 1:
        return "killed (exit 1)", violations
    return f"killed (exit {res.returncode}: {res.stderr.strip().splitlines()[-1][:200] if res.stderr.strip() else 'no message'})", violations


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
    by_emulated = any("test_cuda_emulated" in t for t in o.tests_failed)
    return {
        "verify": by_verify,
        "emulated": by_emulated,
        "verify|emulated": by_verify or by_emulated,
        "tests": bool(o.tests_failed) or by_verify,
    }[m.must]


def run_one(m: Mutant, verify_args: list[str], timeout: float, keep: bool) -> Outcome:
    o = Outcome(m.id, m.what, must=m.must)
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
        o.verify, o.verify_violations = run_verify(pkg, verify_args, timeout)
        o.tests_failed, o.tests_run = run_tests(pkg, copy, m.tests, timeout)
        killed = o.verify.startswith("killed") or bool(o.tests_failed)
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


def render(outcomes: list[Outcome]) -> str:
    lines = [f"{'mutant':34} {'status':9} {'verify':16} tests that fail", "-" * 110]
    for o in outcomes:
        verify = "killed" if o.verify.startswith("killed") else (o.verify or "—")
        tests = ", ".join(o.tests_failed[:3]) + (f" (+{len(o.tests_failed) - 3})" if len(o.tests_failed) > 3 else "")
        if o.tests_run and not o.tests_failed:
            tests = f"none of {o.tests_run}"
        lines.append(f"{o.id:34} {o.status:9} {verify:16} {tests or '—'}" + (f"  [{o.detail}]" if o.detail else ""))
    killed = sum(o.status == "killed" for o in outcomes)
    lines.append(f"{killed}/{len(outcomes)} killed as required")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--only", default="", help="comma list of mutant ids")
    ap.add_argument("--ci", action="store_true", help="only the mutants marked ci = true")
    ap.add_argument("--list", action="store_true", help="list the mutants and exit")
    ap.add_argument("--check", action="store_true", help="only check that every mutant applies to this tree")
    ap.add_argument("--verify-args", default="", help="extra arguments for dtype-lint verify (default: its defaults)")
    ap.add_argument("--jobs", type=int, default=max(1, (os.cpu_count() or 2) // 2))
    ap.add_argument("--timeout", type=float, default=900.0, help="seconds per verify or pytest run")
    ap.add_argument("--json", help="write the outcomes as JSON")
    ap.add_argument("--keep", action="store_true", help="keep each mutant's temporary tree")
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
            print(f"{m.id:34} {m.file:34} must={m.must:9} {m.what}")
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
        outcomes = list(pool.map(lambda m: run_one(m, verify_args, args.timeout, args.keep), mutants))
    print(render(outcomes))
    print(f"({time.perf_counter() - t0:.0f} s, {args.jobs} job(s))")
    if args.json:
        Path(args.json).write_text(json.dumps([asdict(o) for o in outcomes], indent=2) + "\n")
    return 0 if all(o.status == "killed" for o in outcomes) else 1


if __name__ == "__main__":
    sys.exit(main())
