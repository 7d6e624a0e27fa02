"""The pytest plugin: `pytest -p dtype_lint.guard` runs every test's call phase inside a
`DtypeGuard` (fixtures, where models are usually loaded, are not watched).

`--dtype-guard=strict` (the default once the plugin is loaded): a test that triggers the signature
fails, with the sites in its message. `--dtype-guard=report`: tests are not failed; the sites of
the whole session are written as JSON to `--dtype-guard-report` (default `dtype-guard.json`; its
folder must exist) and as SARIF beside it (the same path ending in `.sarif`), and listed in the
terminal summary. Under pytest-xdist each worker writes its own pair (`dtype-guard.gw0.json`, ...). `off` disables it;
`@pytest.mark.no_dtype_guard` exempts one test.
"""

from __future__ import annotations

import json
from dataclasses import field
from pathlib import Path

import pytest

from dtype_lint.core.records import record
from dtype_lint.guard.site import GuardSite
from dtype_lint.guard.watch import DtypeGuard

MODES = ("strict", "report", "off")
DEFAULT_REPORT = "dtype-guard.json"


@record
class GuardSession:
    """What the session's guards found: each site once, the tests that reached it."""

    mode: str
    report_path: Path | None
    sites: dict[tuple[str, int, str], GuardSite] = field(default_factory=dict)
    occurrences: dict[tuple[str, int, str], int] = field(default_factory=dict)
    tests: dict[tuple[str, int, str], list[str]] = field(default_factory=dict)

    def add(self, nodeid: str, guard: DtypeGuard) -> None:
        for site in guard.sites:
            key = (site.path, site.line, site.kind)
            self.sites.setdefault(key, site)
            self.occurrences[key] = self.occurrences.get(key, 0) + guard.occurrences.get(key, 1)
            self.tests.setdefault(key, []).append(nodeid)


_SESSION = pytest.StashKey[GuardSession]()


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("dtype-guard", "dtype-lint run-time guard (docs/guard.md)")
    group.addoption("--dtype-guard", choices=MODES, default="strict",
                    help="strict: fail a test that casts an activation to (or allocates in, or asks finfo of) a "
                         "quantized layer's storage dtype, or reads a missing .weight; report: write the sites as "
                         "JSON and SARIF instead; off: do nothing (default: strict)")
    group.addoption("--dtype-guard-report", metavar="PATH", default=None,
                    help=f"where report mode writes its JSON (default {DEFAULT_REPORT}); the SARIF goes beside "
                         "it, ending in .sarif")


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "no_dtype_guard: the dtype-lint run-time guard does not watch this test")
    mode = config.getoption("--dtype-guard")
    path = config.getoption("--dtype-guard-report")
    if mode == "report":
        report = Path(path or DEFAULT_REPORT)
        # Said now, not after the whole session has run: the folder must exist (it is not created).
        if not report.parent.is_dir():
            raise pytest.UsageError(f"--dtype-guard-report: folder {report.parent} does not exist")
        if report.is_dir():
            raise pytest.UsageError(f"--dtype-guard-report: {report} is a folder; name a file")
        worker = getattr(config, "workerinput", {}).get("workerid")
        if worker:  # one pair of files per pytest-xdist worker, not one clobbering the other
            report = report.with_name(f"{report.stem}.{worker}{report.suffix}")
        report_path: Path | None = report
    else:
        report_path = None
    config.stash[_SESSION] = GuardSession(mode, report_path)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_call(item: pytest.Item):
    session = item.config.stash.get(_SESSION, None)
    if session is None or session.mode == "off" or item.get_closest_marker("no_dtype_guard"):
        return (yield)
    guard = DtypeGuard(strict=False)
    guard.__enter__()
    try:
        result = yield
    except BaseException as error:
        guard.__exit__(type(error), error, error.__traceback__)
        session.add(item.nodeid, guard)
        if session.mode == "strict" and guard.sites and hasattr(error, "add_note"):
            error.add_note(guard.report_text())
        raise
    guard.__exit__(None, None, None)
    session.add(item.nodeid, guard)
    if session.mode == "strict" and guard.sites:
        pytest.fail(guard.report_text(), pytrace=False)
    return result


def sarif_path(report: Path) -> Path:
    return report.with_suffix(".sarif")


def pytest_sessionfinish(session: pytest.Session) -> None:
    state = session.config.stash.get(_SESSION, None)
    if state is None or state.report_path is None:
        return
    from dtype_lint.guard.report import guard_json, guard_sarif

    sites = list(state.sites.values())
    document = guard_json(sites, state.occurrences)
    for entry in document["sites"]:
        entry["tests"] = state.tests.get((entry["path"], entry["line"], entry["kind"]), [])
    from dtype_lint.core.writer import write_atomic

    # The project's one writer: each file is the old one or the new one, never half written.
    write_atomic(state.report_path, (json.dumps(document, indent=2) + "\n").encode("utf-8"))
    write_atomic(sarif_path(state.report_path), (json.dumps(guard_sarif(sites), indent=2) + "\n").encode("utf-8"))


def pytest_terminal_summary(terminalreporter, exitstatus: int, config: pytest.Config) -> None:
    state = config.stash.get(_SESSION, None)
    if state is None or state.mode != "report":
        return
    terminalreporter.section("dtype-lint guard")
    if not state.sites:
        terminalreporter.write_line("no run-time site of a dtype read from quantized storage")
    for key, site in state.sites.items():
        terminalreporter.write_line(f"{site.describe()} ({len(state.tests.get(key, []))} test(s))")
    if state.report_path is not None:
        terminalreporter.write_line(f"written: {state.report_path}, {sarif_path(state.report_path)}")
