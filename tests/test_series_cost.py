"""`migrate --series` re-checks the patched copy with the fixing run's per-file results (#37).

The re-check exists to prove the patched tree clean, so it is a real check of a scratch copy; but
a file whose analysis read nothing the series changed cannot get other findings there, and its
findings from the fixing run serve (run/memory_cache.py). These tests hold both halves:

- the re-check analyses again exactly the rewritten files, the files the series creates and the
  files whose analysis read one of them (counted by patching `analyze_path`); a file that reads
  none of them is not analysed again;
- a fix that changes the finding of a file it does not rewrite is seen: fixing an unsound
  helper in place makes its caller in another file clean, and the re-check says so (the fixing
  run reported that call); with the dependency check switched off, the stale finding would
  survive (so the tree really tests it);
- an entry is never reused after something its analysis read changed: a file it read, or the
  set of modules when its analysis walked the whole module table (a module the series creates).
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

from dtype_lint.core.config import load_config
from dtype_lint.migrate import series
from dtype_lint.migrate.migration import migration_series
from dtype_lint.run import pipeline
from dtype_lint.run.cache import Cache
from dtype_lint.run.pipeline import RunOptions

CALLERS = Path(__file__).resolve().parents[1] / "fixtures" / "helper_callers"
AUTHOR = "Ann Maintainer <ann@example.org>"

# A file the analysis reads (an allocation in a vLLM layer's `.weight.dtype`, its finding suppressed
# by the user) that reads nothing of dtypes.py and walks no census of the project's modules: the
# shipped catalogue knows ColumnParallelLinear. (Not a cast: a cast's fix is planned, and a planned
# fix asks which files of the project compile the site, every file's text: analysis/compiled_elsewhere.py.)
UNRELATED = """\
import torch
from torch import nn
from vllm.model_executor.layers.linear import ColumnParallelLinear


class Probe(nn.Module):
    def __init__(self, quant_config):
        super().__init__()
        self.proj = ColumnParallelLinear(4, 4, quant_config=quant_config)

    def forward(self, x):
        return self.proj(x) + torch.zeros(4, dtype=self.proj.weight.dtype)  # noqa: DTL002
"""

# dtypes.py's helpers made sound: the int8 storage no longer falls through to the weight's dtype.
SOUND = '''\
import torch


def plain_input_dtype(layer, use_fp8_prefill):
    weight = getattr(layer, "weight", None)
    if weight is None or weight.dtype in (torch.int32, torch.uint8, torch.int8):
        return layer.params_dtype
    return weight.dtype


def latent_input_dtype(layer, use_fp8_prefill):
    weight = getattr(layer, "weight", None)
    if weight is None or weight.dtype in (torch.int32, torch.uint8, torch.int8):
        return layer.params_dtype
    return weight.dtype


def unused_input_dtype(layer, use_fp8_prefill):
    weight = getattr(layer, "weight", None)
    if weight is None or weight.dtype in (torch.int32, torch.uint8, torch.int8):
        return layer.params_dtype
    return weight.dtype
'''


def _callers_tree(root: Path) -> Path:
    """fixtures/helper_callers plus UNRELATED, in a git repository (what `--series` runs on)."""
    src = root / "src"
    shutil.copytree(CALLERS, src, ignore=shutil.ignore_patterns("expected.txt", "__pycache__"))
    (src / "callerlm" / "probe.py").write_text(UNRELATED, encoding="utf-8")
    return series.checkout(src, root / "tree")


def _analysed(monkeypatch) -> list[str]:
    """The paths `analyze_path` is given from now on."""
    seen: list[str] = []
    original = pipeline.analyze_path

    def counting(path, *args, **kwargs):
        seen.append(path)
        return original(path, *args, **kwargs)

    monkeypatch.setattr(pipeline, "analyze_path", counting)
    return seen


def _series(tree: Path, out: Path, monkeypatch):
    # The executable proofs (torch, the reference kernels) are not what is tested here: without
    # them the commit messages say so, and the re-check is the same.
    monkeypatch.setattr(series.proofs, "available", lambda: False)
    os.chdir(tree)
    return migration_series(load_config(tree), ".", str(out), proof=False, author=AUTHOR)


def _rechecked(seen: list[str]) -> set[str]:
    """The files the re-check analysed (those of its scratch copy), relative to the copy's root."""
    marker = "dtype-lint-recheck-"
    return {Path(p).as_posix().split("/tree/", 1)[1] for p in seen if marker in p}


def test_the_recheck_analyses_only_what_the_fixes_can_change_and_sees_what_they_change(tmp_path: Path,
                                                                                        monkeypatch):
    """dtypes.py is rewritten (its helpers fixed in place); attention.py, not rewritten, imports
    and calls one; probe.py reads none of it (policy.py, calling them through the module, has no
    text a rule looks at): the fixing run analyses three files, the re-check two. attention.py's
    call of the unsound helper stops being a finding once the helper is fixed: the fixing run
    reported it, the re-check (and a cold check of the patched tree) do not."""
    tree = _callers_tree(tmp_path)
    monkeypatch.chdir(tree)
    seen = _analysed(monkeypatch)
    result, patches, _files = _series(tree, tmp_path / "out", monkeypatch)
    changed = {c.path for p in patches for c in p.changes if not c.test}
    assert changed == {"callerlm/dtypes.py"}
    fixing = {p for p in seen if "dtype-lint-recheck-" not in p}
    assert fixing == {"callerlm/attention.py", "callerlm/dtypes.py", "callerlm/probe.py"}
    assert _rechecked(seen) == {"callerlm/attention.py", "callerlm/dtypes.py"}
    assert result.findings == []
    # The fixing run's account of the tree reported the call; a cold check of the patched tree
    # agrees with the re-check.
    before = pipeline.run(load_config(tree), RunOptions(paths=["."], use_cache=False)).findings
    assert [(f.path, f.code) for f in before if f.kind == "call"] == [("callerlm/attention.py", "DTL005")]
    patched = tmp_path / "patched"
    shutil.copytree(tree, patched, ignore=shutil.ignore_patterns(".git"))
    for patch in patches:
        for change in patch.changes:
            (patched / change.path).parent.mkdir(parents=True, exist_ok=True)
            (patched / change.path).write_bytes(change.after)
    os.chdir(patched)
    cold = pipeline.run(load_config(patched), RunOptions(paths=["."], use_cache=False)).findings
    assert [f for f in cold if not f.path.startswith("tests/")] == []


@pytest.mark.full("CI: the test above (the call that the helper's fix cleans is gone from the re-check)")
def test_the_stale_finding_would_survive_without_the_dependency_check(tmp_path: Path, monkeypatch):
    """The control of the test above: an entry reused whatever its analysis read keeps
    attention.py's call as a finding. The tree tests the dependency check, not luck."""
    tree = _callers_tree(tmp_path)
    monkeypatch.chdir(tree)
    from dtype_lint.analysis.index.class_index import Reads

    # (Reads, not a bare object: the cache keeps what a reused entry read, and read nothing here.)
    monkeypatch.setattr(Cache, "unchanged_reads", lambda self, entry, stamp_of, table: Reads())
    result, _patches, _files = _series(tree, tmp_path / "out", monkeypatch)
    assert [(f.path, f.code) for f in result.findings] == [("callerlm/attention.py", "DTL005")]


def _check(root: Path, store) -> list:
    os.chdir(root)
    return pipeline.run(load_config(root), RunOptions(paths=["."], use_cache=False, store=store)).findings


def _shown(findings) -> list[tuple]:
    return [(f.path, f.span.line, f.code, f.message, [(e.path, e.line) for e in f.evidence]) for f in findings]


@pytest.mark.parametrize("change", ["dependency-edited", "module-added", "caller-added"])
def test_a_stale_result_is_never_reused(tmp_path: Path, monkeypatch, change: str):
    """A check of a copy with the store of a check of the original gives what a cold check of the
    copy gives, and analyses again the files whose analysis read what changed:
    - dtypes.py made sound: it and attention.py, which calls it, are analysed again (the call
      stops being a finding), probe.py is not;
    - a module added that calls the helper nobody called: dtypes.py, whose verdict on that helper
      came from a walk of every module of the project, is analysed again (the helper is now judged
      by that caller: a plain layer, no finding);
    - the same call added to policy.py, a file that never named that helper (the callers' census
      reads only the texts naming it; here dtypes.py's analysis also read policy.py otherwise, so
      this case does not isolate the memory cache's whole-tree stamp check, which is the safety
      net for the trees where nothing else did)."""
    from dtype_lint.run.memory_cache import RunStore  # here: the other tests run on a tree without it

    monkeypatch.chdir(tmp_path)
    original = tmp_path / "original"
    shutil.copytree(CALLERS, original, ignore=shutil.ignore_patterns("expected.txt", "__pycache__"))
    store = RunStore()
    first = _check(original, store)
    copy = tmp_path / "copy"
    shutil.copytree(original, copy)
    if change == "dependency-edited":
        (copy / "callerlm" / "dtypes.py").write_text(SOUND, encoding="utf-8")
    elif change == "caller-added":
        policy = copy / "callerlm" / "policy.py"
        policy.write_text(policy.read_text(encoding="utf-8").replace(
            "        x = x.to(dtypes.plain_input_dtype(self.in_proj, False))\n",
            "        x = x.to(dtypes.plain_input_dtype(self.in_proj, False))\n"
            "        x = x.to(dtypes.unused_input_dtype(self.in_proj, False))\n"), encoding="utf-8")
    else:
        (copy / "callerlm" / "user.py").write_text(
            "from torch import nn\n\nfrom callerlm.dtypes import unused_input_dtype\n\n\n"
            "class User(nn.Module):\n    def __init__(self):\n        super().__init__()\n"
            "        self.head = nn.Linear(4, 4)\n\n    def forward(self, x):\n"
            "        return x.to(unused_input_dtype(self.head, False))\n", encoding="utf-8")
    seen = _analysed(monkeypatch)
    warm = _check(copy, store)
    reanalysed = set(seen)
    seen.clear()
    cold = _check(copy, RunStore())
    assert _shown(warm) == _shown(cold)
    assert _shown(warm) != _shown(first)
    if change == "dependency-edited":
        assert reanalysed == {"callerlm/attention.py", "callerlm/dtypes.py"}
    else:
        assert "callerlm/dtypes.py" in reanalysed


def test_an_in_place_migration_rechecks_only_what_its_fixes_can_change(tmp_path: Path, monkeypatch):
    """`dtype-lint migrate PATH` (no series) re-checks the rewritten tree itself with the fixing
    run's per-file results: the same two files as the series' re-check above are analysed again
    (probe.py read nothing the fixes wrote), and the call that the helper's fix cleans is gone from
    the report, as from a cold check of the migrated tree."""
    from cli_runner import dtl

    from dtype_lint.migrate import migration

    tree = tmp_path / "tree"
    shutil.copytree(CALLERS, tree, ignore=shutil.ignore_patterns("expected.txt", "__pycache__"))
    (tree / "callerlm" / "probe.py").write_text(UNRELATED, encoding="utf-8")
    runs: list[list[str]] = []
    original_run, original_analyze = migration.run, pipeline.analyze_path

    def counted_run(*args, **kwargs):
        runs.append([])
        return original_run(*args, **kwargs)

    monkeypatch.setattr(migration, "run", counted_run)
    monkeypatch.setattr(pipeline, "analyze_path", lambda path, *a, **k: runs[-1].append(path) or
                        original_analyze(path, *a, **k))
    proc = dtl(tree, "migrate", ".", "--report", str(tmp_path / "report.md"), "-j", "1")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    fixing, recheck = (set(r) for r in runs)
    assert fixing == {"callerlm/attention.py", "callerlm/dtypes.py", "callerlm/probe.py"}
    assert recheck == {"callerlm/attention.py", "callerlm/dtypes.py"}
    report = (tmp_path / "report.md").read_text(encoding="utf-8")
    assert "- Sites left: 0" in report and "callerlm/dtypes.py" in report
    monkeypatch.chdir(tree)
    assert pipeline.run(load_config(tree), RunOptions(paths=["."], use_cache=False)).findings == []
