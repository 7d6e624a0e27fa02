"""benchmarks/bench.py runs end to end on a tiny synthetic tree and reports every row.

Smoke only: the figures must exist and be positive. No timing thresholds, ever: a loaded CI
machine must not fail a test because it is slow.
"""

from __future__ import annotations

import importlib.util
import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
BENCH = REPO / "benchmarks" / "bench.py"

STAGE_ROWS = ("read", "read+prefilter", "ast.parse", "libcst-prefiltered")
DTYPE_LINT_ROWS = ("dtype-lint-cold-j1", "dtype-lint-cold", "dtype-lint-warm-j1", "dtype-lint-warm")
# Every rule (`--select ALL`), cold, at 1x only: the default rules are DTL001/DTL002.
# `--fix` and `migrate --series`, each on a fresh copy, at 1x only (issue #37).
DTYPE_LINT_ROWS_1X = ("dtype-lint-cold-j1", "dtype-lint-cold", "dtype-lint-cold-all-j1", "dtype-lint-fix-j1",
                      "dtype-lint-series-j1", "dtype-lint-warm-j1", "dtype-lint-warm")
PRECOMMIT_ROWS = ("dtype-lint-precommit", "dtype-lint-precommit-clean", "dtype-lint-precommit-first",
                  "dtype-lint-precommit-edited")
RUFF_ROWS = ("ruff-cold", "ruff-cached", "ruff-precommit")
PEER_ROWS = (*RUFF_ROWS, "semgrep")
# The 10x corpus: ten renamed copies of the tree; the costly reference rows are measured at 1x only.
ROWS_10X = tuple(f"{r}@10x" for r in ("read+prefilter", *DTYPE_LINT_ROWS, *PRECOMMIT_ROWS, *RUFF_ROWS))
POSITIVE = ("files", "wall_s", "cpu_s", "files_per_s", "ratio_wall", "ratio_cpu", "peak_rss_mib")

LAYER = '''\
import torch
from torch import nn


class ColumnParallelLinear(nn.Module):
    def __init__(self, n, quant_config=None):
        super().__init__()
        self.weight = nn.Parameter(torch.empty(n, n))
        self.params_dtype = torch.bfloat16


class Attention(nn.Module):
    def __init__(self, quant_config=None):
        super().__init__()
        self.kv_b_proj = ColumnParallelLinear(8, quant_config=quant_config)

    def forward(self, kv_c_normed):
        kv_c_normed = kv_c_normed.to(self.kv_b_proj.weight.dtype)
        return self.kv_b_proj(kv_c_normed)
'''


@pytest.fixture(scope="module")
def tiny_tree(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("tree")
    pkg = root / "pkg"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "attention.py").write_text(LAYER)
    (pkg / "util.py").write_text("def add(a, b):\n    return a + b\n")
    (pkg / "norm.py").write_text("def scale(weight, x):\n    return weight * x\n")
    return root


@pytest.fixture(scope="module")
def quick_run(tiny_tree: Path, tmp_path_factory):
    out = tmp_path_factory.mktemp("bench") / "figures.json"
    cmd = [sys.executable, str(BENCH), "--quick", "--tree", str(tiny_tree), "--json", str(out),
           "--markdown", str(out.with_suffix(".md")), "--no-install", "--quiet"]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return proc.stdout, json.loads(out.read_text()), out.with_suffix(".md").read_text()


def rows_by_id(figures: dict) -> dict[str, dict]:
    return {r["id"]: r for r in figures["rows"]}


def assert_positive(row: dict) -> None:
    assert row["status"] == "ok", row
    assert row["runs"] == 1, row
    for key in POSITIVE:
        assert isinstance(row[key], (int, float)) and row[key] > 0, (key, row)


def test_rows_and_header(quick_run, tiny_tree: Path):
    stdout, figures, _ = quick_run
    assert figures["version"] == 2
    assert figures["py_files"] == 4
    assert figures["scales"] == [1, 10]
    assert figures["repeat"] == 1
    assert figures["floor"] == "read+prefilter"
    # No finding here has a fix planned (no class is quantizable): no fixable-finding row.
    assert figures["touched"] == {"site": "pkg/attention.py", "clean": "pkg/norm.py", "fixable": None}
    rows = rows_by_id(figures)
    assert list(rows) == [*STAGE_ROWS, *DTYPE_LINT_ROWS_1X, *PRECOMMIT_ROWS, *PEER_ROWS, *ROWS_10X]
    for row in figures["rows"]:
        assert row["label"] in stdout, f"{row['label']!r} missing from the printed table"
        assert row["scale"] == (10 if row["id"].endswith("@10x") else 1)


def test_the_10x_corpus_is_ten_copies(quick_run):
    rows = rows_by_id(quick_run[1])
    assert rows["dtype-lint-cold@10x"]["files"] == 10 * rows["dtype-lint-cold"]["files"]
    assert rows["read+prefilter@10x"]["files"] == 40


def test_markdown_has_every_row_and_the_targets(quick_run):
    _, figures, md = quick_run
    for row in figures["rows"]:
        assert f"| {row['scale']}x | {row['label']} |" in md
    judged = {(t["target"], t["row"]) for t in figures["targets"]}
    assert {row for _, row in judged} >= {"dtype-lint-precommit", "dtype-lint-precommit@10x",
                                          "dtype-lint-warm", "dtype-lint-warm@10x"}
    for target, row in judged:
        assert f"| {target} | `{row}` |" in md
    # Issue #37 judges the every-rule row against ruff (CPU, and peak RSS at 1x) and the fix rows
    # against the cold check of the same run; it is no longer named beside the targets.
    assert {"dtype-lint-cold-all-j1", "dtype-lint-fix-j1", "dtype-lint-series-j1"} <= {row for _, row in judged}
    assert "Not a target: `dtype-lint-cold-all-j1`" not in md


def test_floor_and_parse_rows(quick_run):
    rows = rows_by_id(quick_run[1])
    for rid in STAGE_ROWS:
        assert_positive(rows[rid])
    assert rows["read"]["files"] == rows["ast.parse"]["files"] == 4
    # The prefilter picks a subset; the file with the cast must be in it.
    assert 1 <= rows["libcst-prefiltered"]["files"] <= 4
    assert rows["read+prefilter"]["ratio_cpu"] == pytest.approx(1.0)


@pytest.mark.parametrize("rid", [*DTYPE_LINT_ROWS, "dtype-lint-fix-j1", "dtype-lint-series-j1"])
def test_dtype_lint_rows(quick_run, rid: str):
    row = rows_by_id(quick_run[1])[rid]
    assert_positive(row)
    assert row["files"] == 4


@pytest.mark.parametrize("rid", [*PRECOMMIT_ROWS, *(f"{r}@10x" for r in PRECOMMIT_ROWS)])
def test_precommit_rows(quick_run, rid: str):
    row = rows_by_id(quick_run[1])[rid]
    assert_positive(row)
    assert row["files"] == 1
    assert row["command"][4].endswith(".py")  # one named file, relative to the corpus root


@pytest.mark.parametrize("rid", [*PEER_ROWS, *(f"{r}@10x" for r in RUFF_ROWS)])
def test_peer_rows(quick_run, rid: str):
    row = rows_by_id(quick_run[1])[rid]
    assert row["status"] in ("ok", "not available"), row
    if row["status"] == "ok":
        assert_positive(row)
    else:
        assert row["note"], "an unavailable peer must say why"


def _bench_module():
    spec = importlib.util.spec_from_file_location("dtype_lint_bench", BENCH)
    mod = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = mod  # dataclasses look their module up while the class is built
    spec.loader.exec_module(mod)
    return mod


def test_harness_measures_a_child(tmp_path: Path):
    bench = _bench_module()
    with bench.Runner() as runner:
        s = runner.measure([sys.executable, "-c", "print(sum(range(10**5)))"], tmp_path, 120)
    assert s.returncode == 0 and not s.timed_out
    assert s.wall_s > 0 and s.cpu_s > 0 and s.maxrss_mib > 0
    assert s.stdout.strip() == str(sum(range(10**5)))


def test_child_peak_rss_is_its_own(tmp_path: Path):
    # Linux keeps the RSS high-water mark across exec: measured from a large process, a tiny
    # child would "peak" at that process's size. The runner exists to prevent that.
    bench = _bench_module()
    ballast = bytearray(256 * 2**20)
    ballast[:: 4096] = b"\1" * len(ballast[:: 4096])  # touch every page: make it resident
    with bench.Runner() as runner:
        s = runner.measure([sys.executable, "-c", "pass"], tmp_path, 120)
    del ballast
    assert s.returncode == 0
    assert 0 < s.maxrss_mib < 128, s.maxrss_mib


def test_harness_reports_a_failing_row(tmp_path: Path):
    bench = _bench_module()
    row = bench.Row("x", "x", [sys.executable, "-c", "raise SystemExit('boom')"], tmp_path)
    with bench.Runner() as runner:
        row.record(runner.measure(row.cmd, row.cwd, 120))
        missing = runner.measure([str(tmp_path / "no-such-tool")], tmp_path, 120)
    assert row.status == "failed"
    assert "exit 1" in row.note and "boom" in row.note
    assert row.figures(None)["wall_s"] is None
    assert missing.returncode != 0 and "No such file" in missing.stderr


def test_the_readme_table_comes_from_the_committed_results():
    """`bench.py --save` writes results/<date>-<host>.{json,md} and the README's table from the
    same figures: what the README says is what the latest committed run measured."""
    bench = _bench_module()
    results = sorted((REPO / "benchmarks" / "results").glob("*.json"))
    assert results, "no committed benchmark results"
    latest = results[-1]
    doc = json.loads(latest.read_text(encoding="utf-8"))
    readme = (REPO / "README.md").read_text(encoding="utf-8")
    start = readme.index(bench.README_START)
    end = readme.index("\n", readme.index(bench.README_END)) + 1
    assert readme[start:end] == bench.readme_table(doc, latest.with_suffix(".md").name)
    assert latest.with_suffix(".md").read_text(encoding="utf-8") == bench.markdown(doc)
    assert {t["row"] for t in doc["targets"]} >= {"dtype-lint-cold-j1", "dtype-lint-precommit@10x"}


def test_reference_rows_run_in_the_first_rounds_only(tmp_path: Path):
    # A full run fits the machine: the reference rows (libcst, ast.parse...) are no target's.
    bench = _bench_module()

    class Counting:
        def __init__(self):
            self.cmds = []

        def measure(self, cmd, cwd, timeout):
            self.cmds.append(cmd[0])
            return bench.Sample(0.1, 0.1, 10.0, 0, "", "")

    rows = [bench.Row("ref", "ref", ["ref"], tmp_path, reference=True), bench.Row("row", "row", ["row"], tmp_path)]
    runner = Counting()
    bench.run_all(runner, rows, 3, 60, lambda _msg: None)
    assert runner.cmds.count("ref") == 1 and runner.cmds.count("row") == 3
    assert rows[0].figures(None)["runs"] == 1 and rows[1].figures(None)["runs"] == 3


def test_a_selection_of_rows_keeps_what_their_ratios_need(tmp_path: Path):
    bench = _bench_module()
    ids = ["read+prefilter", "dtype-lint-cold-j1", "dtype-lint-precommit", "dtype-lint-precommit-edited",
           "ruff-cold", "ruff-cached", "read+prefilter@10x", "dtype-lint-precommit-edited@10x", "ruff-cold@10x"]
    rows = [bench.Row(i, i, ["x"], tmp_path) for i in ids]
    kept = [r.id for r in bench.select_rows(rows, ["dtype-lint-precommit-edited"])]
    assert kept == ["read+prefilter", "dtype-lint-precommit-edited", "ruff-cold", "read+prefilter@10x",
                    "dtype-lint-precommit-edited@10x", "ruff-cold@10x"]


def test_a_peer_venv_is_used_only_once_its_install_finished(tmp_path):
    # The peer's venv is built where it stays (a renamed venv's scripts name a gone interpreter)
    # and marked complete last: one an interrupted install left is not used.
    bench = _bench_module()
    name = "dtl-no-such-peer"
    binary = tmp_path / f"bench-{name}-1.0" / "bin" / name
    binary.parent.mkdir(parents=True)
    binary.write_text("#!/bin/sh\necho 1.0\n", encoding="utf-8")
    binary.chmod(0o755)
    path, why = bench.find_peer(name, "1.0", False, tmp_path)
    assert path is None and "not installed" in why
    (tmp_path / f"bench-{name}-1.0" / ".bench-peer-complete").write_text("x", encoding="utf-8")
    assert bench.find_peer(name, "1.0", False, tmp_path) == (str(binary), "1.0")


def test_instruction_counts_sum_each_process_file(tmp_path: Path):
    # `--instructions`: cachegrind writes one `summary:` per process; callgrind one `totals:` per
    # dump (a forked worker zeroed at its start dumps its own count last): the last of each file.
    bench = _bench_module()
    (tmp_path / "cg.101").write_text("events: Ir\nfn=main\n3 5\nsummary: 1000\n", encoding="utf-8")
    (tmp_path / "cg.102").write_text("events: Ir\ntotals: 40\nfn=w\n1 2\ntotals: 250\n", encoding="utf-8")
    (tmp_path / "other.txt").write_text("summary: 999999\n", encoding="utf-8")
    assert bench.instructions_of(tmp_path) == 1250


def test_without_valgrind_the_counted_rows_say_why(tmp_path: Path, monkeypatch):
    bench = _bench_module()
    rows = [bench.Row(i, i, ["x"], tmp_path) for i in ("dtype-lint-cold-j1", "dtype-lint-warm", "ruff-cold@10x",
                                                         "dtype-lint-precommit-edited@10x")]
    monkeypatch.setattr(bench.shutil, "which", lambda _name: None)
    bench.count_instructions(rows, 60, lambda _msg: None, first_seq=0)
    # the 1x cold and pre-commit rows are counted, and the pre-commit rows of every scale
    assert [(r.instructions, r.instructions_note) for r in rows] == [
        (None, "valgrind not on PATH"), (None, ""), (None, ""), (None, "valgrind not on PATH")]


@pytest.mark.skipif(shutil.which("valgrind") is None, reason="valgrind is not installed")
def test_instructions_are_counted_under_valgrind(tmp_path: Path):
    # A row that forks (a dtype-lint row without `-j 1`) is counted with callgrind, each child from
    # its fork: the parent's count is not counted twice. Both ways give a count of the row's own run.
    bench = _bench_module()
    fork = "import os\npid = os.fork()\nif pid == 0:\n    os._exit(0)\nos.waitpid(pid, 0)\n"
    plain = bench.Row("dtype-lint-cold-j1", "plain", [sys.executable, "-c", "pass"], tmp_path)
    forked = bench.Row("dtype-lint-cold", "forked", [sys.executable, "-c", fork], tmp_path)
    failing = bench.Row("ruff-cold", "failing", [sys.executable, "-c", "raise SystemExit(3)"], tmp_path)
    bench.count_instructions([plain, forked, failing], 120, lambda _msg: None, first_seq=0)
    assert plain.instructions and plain.instructions > 1_000_000, plain.instructions_note
    assert forked.instructions and forked.instructions > plain.instructions, forked.instructions_note
    assert forked.instructions < 3 * plain.instructions  # the child counted from its fork, not from the start
    assert failing.instructions is None and failing.instructions_note == "exit 3 under valgrind"


def test_markdown_lists_the_instruction_counts(tmp_path: Path):
    bench = _bench_module()
    ruff = bench.Row("ruff-cold", "ruff", ["r"], tmp_path)
    cold = bench.Row("dtype-lint-cold-j1", "cold", ["c"], tmp_path)
    for row, n in ((ruff, 10_610_000_000), (cold, 24_130_000_000)):
        row.samples.append(bench.Sample(1.0, 1.0, 40.0, 0, "", ""))
        row.instructions = n
    figures = [cold.figures(None, ruff), ruff.figures(None, ruff)]
    assert figures[0]["ruff_ratio_instructions"] == pytest.approx(24.13 / 10.61)
    doc = {"source": "t", "date": "d", "repeat": 1, "floor": "f", "ruff": "r", "rows": figures, "targets": [],
           "machine": {"host": "h", "cpus": 2, "python": "3", "platform": "p", "load_start": 0.0, "load_end": 0.0},
           "instructions": "valgrind"}
    text = bench.markdown(doc)
    assert "| 1x | cold | 24.13 G | 2.27 |" in text and "| 1x | ruff | 10.61 G | 1.00 |" in text
    assert "Instructions" not in bench.markdown(dict(doc, instructions=None))


def test_rss_targets_show_the_tenths_that_decide_them(tmp_path: Path):
    """Judged unrounded, 41.9 MiB against ruff's 41.8 is a miss; shown rounded it read "42 | 42 | no"."""
    bench = _bench_module()
    ruff = bench.Row("ruff-cold", "ruff", ["r"], tmp_path)
    cold = bench.Row("dtype-lint-cold", "cold", ["c"], tmp_path)
    ruff.samples.append(bench.Sample(1.0, 1.0, 41.79, 0, "", ""))
    cold.samples.append(bench.Sample(1.0, 1.0, 41.91, 0, "", ""))
    figures = [cold.figures(None, ruff), ruff.figures(None, ruff)]
    targets = [t for t in bench.judge(figures) if "RSS" in t["target"]]
    assert [(t["row"], t["met"]) for t in targets] == [("dtype-lint-cold", False)]
    doc = {"source": "t", "date": "d", "repeat": 1, "floor": "f", "ruff": "r", "rows": figures, "targets": targets,
           "machine": {"host": "h", "cpus": 2, "python": "3", "platform": "p", "load_start": 0.0, "load_end": 0.0}}
    assert "| `dtype-lint-cold` | 41.9 MiB | 41.8 MiB | **no** |" in bench.markdown(doc)


def test_the_fixable_touch_is_a_file_whose_finding_has_a_safe_fix(tiny_tree: Path, tmp_path: Path):
    """The pre-commit row for a touched file with a fixable finding (issue #37) touches the first
    file holding a finding whose fix is planned as safe; none in a tree without one."""
    bench = _bench_module()
    assert bench.fixable_touch(tiny_tree) is None
    tree = tmp_path / "tree"
    shutil.copytree(tiny_tree, tree)
    (tree / "pyproject.toml").write_text('[tool.dtype-lint]\nquantizable = ["pkg.attention.ColumnParallelLinear"]\n')
    assert bench.fixable_touch(tree) == "pkg/attention.py"
    sys.path.insert(0, str(BENCH.parent))  # what bench.main imports before building rows
    try:
        import corpus as corpus_module
        from stages import py_files
    finally:
        sys.path.remove(str(BENCH.parent))
    bench.corpus, bench.py_files = corpus_module, py_files
    pkg = tree / "pkg"
    with_fixable = bench.Corpus(1, tree, pkg / "attention.py", pkg / "norm.py", pkg / "attention.py")
    without = bench.Corpus(1, tree, pkg / "attention.py", pkg / "norm.py")
    ids = lambda c: [r.id for r in bench.build_rows([c], tmp_path / "work", (None, "not here"))]  # noqa: E731
    fixable_rows = {"dtype-lint-precommit-fixable", "dtype-lint-precommit-fixable-after-edit"}
    assert fixable_rows <= set(ids(with_fixable)) and not fixable_rows & set(ids(without))
    # The second edits another file (the edited row's), then touches the fixable file: its answer
    # is computed again. (The first catches up with an untimed run, as the warm rows do.)
    site, fixable = pkg / "norm.py", pkg / "attention.py"
    other = bench.Corpus(1, tree, site, pkg / "norm.py", fixable)
    (after_edit,) = [r for r in bench.build_rows([other], tmp_path / "work", (None, "not here"))
                     if r.id == "dtype-lint-precommit-fixable-after-edit"]
    before = fixable.stat().st_mtime_ns
    after_edit.prepare(0)
    assert corpus_module.EDIT_MARK in site.read_text() and fixable.stat().st_mtime_ns != before
