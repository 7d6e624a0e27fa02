"""The pre-commit replay (dtype_lint/run/replay_index.py): a run on named files whose kept answer
still holds prints it again with only built-in modules imported; any change the answer depends on
(a named file's or a dependency's content, even at the same size and mtime, a .gitignore, a
folder's listing, the index itself) sends the run on to the fast path and the engine."""

from __future__ import annotations

import contextlib
import io
import marshal
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from cli_runner import dtl
from conftest import full_only

# The project test_run_memo.py's runs use: a site whose layer is quantizable only through a base
# class in another file (a dependency of the site's answer), and a file without a site.
from test_run_memo import BASE, LAYERS, PLAIN, PYPROJECT, SITE
from tiny_project import ATTN, write_tree

from dtype_lint import fast_path
from dtype_lint.run import replay_index
from dtype_lint.run.cache_seal import quick_seal

SITE_ARGS = ("check", "--exit-zero", "vllm/site.py")
# A file that compiles its own code: the compiled-code census reads it, and passes over the others.
EXPORT = ("import torch\n\n\nclass Scale(torch.nn.Module):\n    def forward(self, x):\n        return x * 2\n\n\n"
          "def export():\n    return torch.jit.script(Scale())\n")


@pytest.fixture
def project(tmp_path: Path, monkeypatch) -> Path:
    """A tree of package `vllm` with one site whose layer is quantizable through another file (and
    one of the preset's layer classes imported: a run with a project-level warning keeps nothing).
    Files this young would never have their stat data trusted (replay_index.RACY_NS); the tests
    that need it lift the guard for the run that keeps the answer."""
    root = write_tree(tmp_path / "p", {
        "pyproject.toml": PYPROJECT, "vllm/__init__.py": "", "vllm/base.py": BASE, "vllm/layers.py": LAYERS,
        "vllm/site.py": SITE, "vllm/plain.py": PLAIN, "vllm/attn.py": ATTN,  # a preset layer: no warning
    })
    assert "DTL001" in dtl(root, "check", "--exit-zero", ".").stdout  # writes the fast path's record
    # ... and its answers for the first run on named files (the tests at the end): these tests
    # are about the answers runs on named files keep.
    (root / ".dtype_lint_cache" / replay_index.ANSWERS_NAME).unlink()
    return root


def replayed(root: Path, *args: str) -> tuple[int | None, str, str]:
    """What the replay alone answers (None: it declines, the fast path and the engine go on)."""
    saved = os.getcwd()
    out, err = io.StringIO(), io.StringIO()
    try:
        os.chdir(root)
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            code = replay_index.replay(list(args))
    finally:
        os.chdir(saved)
    return code, out.getvalue(), err.getvalue()


def keep(root: Path, *args: str, trust_stat_data: bool = False) -> subprocess.CompletedProcess:
    """A named-file run that falls back to the engine, which keeps its answer in the index.
    `trust_stat_data`: keep the stat data of files changed just now (as of files older than
    RACY_NS), so that a replay checks them by stat first."""
    racy = replay_index.RACY_NS
    if trust_stat_data:
        replay_index.RACY_NS = -(10 ** 12)
    try:
        return dtl(root, *args)
    finally:
        replay_index.RACY_NS = racy


def test_a_touched_file_replays_exactly_what_the_full_run_printed(project: Path):
    assert replayed(project, *SITE_ARGS)[0] is None  # nothing kept yet
    variants = [SITE_ARGS, ("check", "-q", "vllm/site.py"), ("check", "--output-format", "concise", "vllm/site.py"),
                ("check", "--color=never", "--exit-zero", "vllm/site.py", "vllm/plain.py")]
    for args in variants:
        first = keep(project, *args)
        assert "DTL001" in first.stdout
        (project / "vllm" / "site.py").touch()  # same bytes, new mtime: one hash, then the replay
        assert replayed(project, *args) == (first.returncode, first.stdout, first.stderr), args
    assert replayed(project, "check", "vllm/site.py")[0] == 1  # findings: exit 1 without --exit-zero
    # The answer is the run's: another set of named files or another folder has none.
    assert replayed(project, "check", "vllm/site.py", "vllm/base.py")[0] is None
    assert replayed(project / "vllm", "check", "site.py")[0] is None


# What the replay needs of dtype-lint: the entry point, the index and the standard-library-only
# helpers it reads with; no analysis, fast path, report code or rule.
REPLAY_MODULES = {"dtype_lint", "dtype_lint.__main__", "dtype_lint.entry", "dtype_lint.stdout_guard",
                  "dtype_lint.run", "dtype_lint.run.replay_index", "dtype_lint.core", "dtype_lint.core.safe_read",
                  "dtype_lint.core.file_stamp", "dtype_lint.run.cache_folder", "dtype_lint.run.cache_seal"}


def imports_of_run(root: Path, args: tuple[str, ...]) -> tuple[str, set[str], list[str]]:
    """(what `dtype-lint ARGS` printed in a fresh interpreter, the modules of dtype-lint it
    imported, the other modules it imported that are not built into the interpreter)."""
    code = ("import sys, runpy\nbefore = set(sys.modules)\n"
            f"sys.argv = ['dtype-lint', *{list(args)!r}]\n"
            "try:\n    runpy.run_module('dtype_lint', run_name='__main__')\nexcept SystemExit as e:\n"
            "    assert e.code == 0, e.code\n"
            "print('imported:', sorted(set(sys.modules) - before))\n")
    proc = subprocess.run([sys.executable, "-c", code], cwd=root, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    printed, _, imported = proc.stdout.rpartition("imported: ")
    modules = eval(imported)  # noqa: S307 - our own subprocess's list of names
    ours = {m for m in modules if m.split(".")[0] == "dtype_lint"}
    return printed, ours, sorted(m for m in modules if m not in ours and m not in sys.builtin_module_names)


def test_the_replay_imports_only_built_in_modules(project: Path):
    keep(project, *SITE_ARGS)
    printed, ours, others = imports_of_run(project, SITE_ARGS)
    assert "DTL001" in printed
    assert ours <= REPLAY_MODULES, ours
    # Everything else is built into the interpreter, or BLAKE2's C module (hashlib.blake2b, an
    # extension module in some builds): no third-party module, and none of the standard library's
    # costly ones (re, json, hashlib's OpenSSL, typing, tomllib, dataclasses).
    assert set(others) <= {"_blake2"}, others


def test_a_dependency_changed_at_the_same_size_and_mtime_is_not_replayed(project: Path):
    layers = project / "vllm" / "layers.py"
    first = keep(project, *SITE_ARGS, trust_stat_data=True)
    assert replayed(project, *SITE_ARGS) == (0, first.stdout, first.stderr)
    index = replay_index.load(str(project / ".dtype_lint_cache" / replay_index.INDEX_NAME))
    (entry,) = [e for k, e in index["entries"].items() if k[1] == ("vllm/site.py",)]
    assert entry["files"][str(layers.resolve())][0] is not None  # checked by its stat data first
    # Touched, its stat data differs: hashed again, the same bytes: still replayed.
    os.utime(layers, ns=(layers.stat().st_atime_ns, layers.stat().st_mtime_ns + 10 ** 9))
    assert replayed(project, *SITE_ARGS)[0] == 0
    # Edited at the same size with its mtime put back (`touch -r`, `cp -p`): the ctime moved.
    before = layers.stat()
    layers.write_text(LAYERS.replace("QuantBase", "QuantBasf", 1).replace("QuantBase)", "QuantBasf)"))
    assert layers.stat().st_size == before.st_size
    os.utime(layers, ns=(before.st_atime_ns, before.st_mtime_ns))
    assert replayed(project, *SITE_ARGS)[0] is None
    assert "DTL001" not in dtl(project, *SITE_ARGS).stdout  # the engine: the layer is no longer quantizable


def test_a_file_stamped_in_the_same_clock_tick_is_always_hashed(project: Path):
    fresh = project / "vllm" / "plain.py"
    assert replay_index.settled_stat_key(str(fresh), replay_index.stat_key(str(fresh))[2]) is None
    assert replay_index.settled_stat_key(str(fresh), replay_index.stat_key(str(fresh))[2] + 3 * replay_index.RACY_NS)


@pytest.mark.parametrize("change", ["gitignore", "new_module", "tampered", "other_format",
                                    full_only("settings", "test_run_memo.py checks a settings change")])
def test_a_change_the_answer_depends_on_is_not_replayed(project: Path, change: str):
    keep(project, *SITE_ARGS)
    assert replayed(project, *SITE_ARGS)[0] == 0
    index_path = project / ".dtype_lint_cache" / replay_index.INDEX_NAME
    if change == "gitignore":
        (project / ".gitignore").write_text("vllm/site.py\n")
    elif change == "new_module":
        (project / "vllm" / "models").mkdir()  # the project's file list changed
    elif change == "settings":
        (project / "pyproject.toml").write_text(PYPROJECT + "ignore = [\"DTL001\"]\n")
    elif change == "tampered":
        data = bytearray(index_path.read_bytes())
        data[-2] ^= 1
        index_path.write_bytes(bytes(data))
    else:  # an index of another format (an older dtype-lint's), sealed by us: ignored, never misread
        index = replay_index.load(str(index_path))
        sealed = quick_seal(marshal.dumps({**index, "format": replay_index.FORMAT - 1}), replay_index._context())
        index_path.write_bytes(sealed)
    assert replayed(project, *SITE_ARGS)[0] is None


def test_a_clean_verdict_and_the_first_named_run_after_a_full_check_replay(project: Path):
    first = dtl(project, "check", "vllm/plain.py")  # the fast path: no site; its verdict is kept
    assert first.stdout == "All checks passed! (1 file checked)\n"
    (project / "vllm" / "plain.py").touch()
    assert replayed(project, "check", "vllm/plain.py") == (0, first.stdout, "")
    assert replayed(project, "check", "-q", "vllm/plain.py") == (0, "", "")
    site = keep(project, *SITE_ARGS)
    assert dtl(project, "check", "--exit-zero", ".").returncode == 0  # a full run in between
    (project / "vllm" / "site.py").touch()
    assert replayed(project, *SITE_ARGS) == (0, site.stdout, site.stderr)
    assert replayed(project, "check", "vllm/plain.py")[0] == 0


def kept_outputs(root: Path, paths: tuple[str, ...]) -> set[tuple[str, bool, str]]:
    """The outputs the index holds for a run on `paths` in `root`."""
    index = replay_index.load(str(root / ".dtype_lint_cache" / replay_index.INDEX_NAME))
    (entry,) = [e for key, e in index["entries"].items() if key[1] == paths]
    return set(entry["out"])


QUIET_ARGS = ("check", "-q", "--exit-zero", "vllm/site.py")
CONCISE_ARGS = ("check", "--output-format=concise", "--exit-zero", "vllm/site.py")


def test_a_run_that_keeps_an_answer_renders_only_the_output_it_prints(project: Path):
    # What the engine prints for each output, with no cache, memo or replay involved.
    real = {args: dtl(project, *args, "--no-cache") for args in (SITE_ARGS, QUIET_ARGS, CONCISE_ARGS)}
    first = keep(project, *SITE_ARGS)
    assert (first.returncode, first.stdout, first.stderr) == (0, real[SITE_ARGS].stdout, real[SITE_ARGS].stderr)
    assert kept_outputs(project, ("vllm/site.py",)) == {("text", False, "never"), ("text", False, "auto")}
    for args in (QUIET_ARGS, CONCISE_ARGS):
        assert replayed(project, *args)[0] is None  # never rendered: declined, never another output
        ran = dtl(project, *args)  # the run memo's replay prints it and adds it to the index
        assert (ran.returncode, ran.stdout, ran.stderr) == (0, real[args].stdout, real[args].stderr), args
        assert replayed(project, *args) == (0, ran.stdout, ran.stderr), args
    assert replayed(project, *SITE_ARGS) == (0, first.stdout, first.stderr)  # kept beside them
    assert kept_outputs(project, ("vllm/site.py",)) == {
        (fmt, quiet, color) for fmt, quiet in (("text", False), ("text", True), ("concise", False))
        for color in ("never", "auto")}


def test_an_output_rendered_for_an_older_answer_is_never_replayed(project: Path):
    keep(project, *SITE_ARGS)
    layers = project / "vllm" / "layers.py"  # the layer is no longer quantizable: the answer changes
    layers.write_text(LAYERS.replace("QuantBase", "QuantBasf", 1).replace("QuantBase)", "QuantBasf)"))
    quiet = keep(project, *QUIET_ARGS)  # the engine: a new answer, kept with its own output only
    assert quiet.stdout == dtl(project, *QUIET_ARGS, "--no-cache").stdout
    assert kept_outputs(project, ("vllm/site.py",)) == {("text", True, "never"), ("text", True, "auto")}
    assert replayed(project, *SITE_ARGS)[0] is None  # the older answer's output went with it
    assert "DTL001" not in dtl(project, *SITE_ARGS).stdout


def test_an_answer_the_index_cannot_keep_is_not_rendered(tmp_path: Path):
    """A project with a cache folder of its own has no replay (the replay does not parse the
    configuration to find it): the run that keeps an answer renders nothing for the index."""
    rendered = []
    record = {"root": str(tmp_path), "files": {}, "dirs": {}}
    handoff = {"fast_record": record, "config": (str(tmp_path / "pyproject.toml"), "12:ab"),
               "memo": str(tmp_path / "own-cache" / "run-memo.json"), "key": [str(tmp_path), ["a.py"], False],
               "record": [str(tmp_path / "own-cache" / "fast-path.json"), 1, 1],
               "render": lambda *answer: rendered.append(answer)}
    replay_index.keep(handoff, {}, [], 1, 1, [], writer=None, started_ns=0)
    assert rendered == []
    # In the default cache folder the same answer is rendered (and then kept, were it stamped).
    handoff["memo"] = str(tmp_path / replay_index.DEFAULT_CACHE_DIR / "run-memo.json")
    replay_index.keep(handoff, {}, [], 1, 1, [], writer=None, started_ns=0)
    assert rendered == [([], 1, 1, [])]


# ---- the first run on named files after a run on the whole project (replay_index.ANSWERS_NAME) --

# A cast to the weight dtype of a layer class another file defines, not quantizable: the file is
# analysed (it passes the rules' prefilter) and clean, and its answer depends on that other file.
PLAIN_LAYERS = """\
import torch


class PlainLinear(torch.nn.Module):
    def __init__(self, n):
        super().__init__()
"""

CLEAN_SITE = """\
import torch

from vllm.plain_layers import PlainLinear


class Head(torch.nn.Module):
    def __init__(self, proj: PlainLinear):
        super().__init__()
        self.proj = proj

    def forward(self, x):
        return self.proj(x.to(self.proj.weight.dtype))
"""

CLEAN_ARGS = ("check", "--exit-zero", "vllm/clean_site.py")


@pytest.fixture
def checked(project: Path) -> Path:
    """The project with a clean analysed file, after a run on the whole project: no run on named
    files kept anything."""
    write_tree(project, {"vllm/plain_layers.py": PLAIN_LAYERS, "vllm/clean_site.py": CLEAN_SITE,
                         "vllm/clean_head.py": CLEAN_SITE.replace("Head", "OtherHead")})
    assert dtl(project, "check", "--exit-zero", ".").returncode == 0
    cache = project / ".dtype_lint_cache"
    for kept in ("run-memo.json", replay_index.INDEX_NAME):
        (cache / kept).unlink(missing_ok=True)
    assert (cache / replay_index.ANSWERS_NAME).is_file()
    return project


def test_the_first_run_on_a_clean_file_after_a_whole_project_run_replays(checked: Path):
    engine = dtl(checked, *CLEAN_ARGS, "--no-cache")
    assert engine.stdout == "All checks passed! (1 file checked)\n"
    (checked / "vllm" / "clean_site.py").touch()  # as pre-commit finds it: touched, same bytes
    assert replayed(checked, *CLEAN_ARGS) == (0, engine.stdout, "")
    assert replayed(checked, "check", "-q", "vllm/clean_site.py") == (0, "", "")
    assert replayed(checked, "check", "--output-format=concise", "./vllm/clean_site.py") == (0, engine.stdout, "")
    two = ("check", "vllm/clean_site.py", "vllm/clean_head.py")
    assert dtl(checked, *two, "--no-cache").stdout == "All checks passed! (2 files checked)\n"
    assert replayed(checked, *two) == (0, "All checks passed! (2 files checked)\n", "")
    # Only files the whole-project run analysed: a file no rule's prefilter passes is the fast
    # path's, and a file with findings is replayed alone (next test), not among others.
    assert replayed(checked, "check", "vllm/clean_site.py", "vllm/site.py")[0] is None
    assert replayed(checked, "check", "vllm/plain.py")[0] is None
    assert replayed(checked, "check", "--force-exclude", "--no-progress", "vllm/clean_site.py")[0] == 0
    imported = imports_of_run(checked, CLEAN_ARGS)
    assert imported[0] == engine.stdout
    assert imported[1] <= REPLAY_MODULES and set(imported[2]) <= {"_blake2"}, imported


def test_a_clean_answer_beside_a_file_no_rule_can_match_is_the_fast_paths(checked: Path):
    mixed = ("check", "vllm/clean_site.py", "vllm/plain.py")
    assert replayed(checked, *mixed)[0] is None  # plain.py: its verdict is the fast path's
    saved = os.getcwd()
    out = io.StringIO()
    try:
        os.chdir(checked)
        with contextlib.redirect_stdout(out):
            assert fast_path.try_clean_exit(list(mixed)) == 0  # no engine
    finally:
        os.chdir(saved)
    assert out.getvalue() == dtl(checked, *mixed, "--no-cache").stdout == "All checks passed! (2 files checked)\n"
    # The verdict is kept with what the answer read: the next run replays it, an edit of those
    # files is not.
    assert replayed(checked, *mixed) == (0, out.getvalue(), "")
    (checked / "vllm" / "plain_layers.py").write_text("from vllm.base import QuantBase\n\n\nclass PlainLinear(QuantBase):\n    pass\n")
    assert replayed(checked, *mixed)[0] is None
    assert "DTL001" in dtl(checked, *mixed).stdout


@pytest.mark.parametrize("args", [SITE_ARGS, ("check", "vllm/site.py"), ("check", "-q", "vllm/site.py"),
                                  ("check", "--output-format=concise", "--force-exclude", "vllm/site.py")])
def test_the_first_run_on_a_file_with_findings_after_a_whole_project_run_replays(checked: Path, args):
    engine = dtl(checked, *args, "--no-cache")
    assert "DTL001" in engine.stdout
    (checked / "vllm" / "site.py").touch()
    assert replayed(checked, *args) == (engine.returncode, engine.stdout, engine.stderr)
    # The report shows the file as named, from the folder it was run in: spelled or run otherwise,
    # the engine's.
    assert replayed(checked, "check", "./vllm/site.py")[0] is None
    assert replayed(checked / "vllm", "check", "site.py")[0] is None
    # What its analysis read changed: the layer is no longer quantizable.
    layers = checked / "vllm" / "layers.py"
    layers.write_text(LAYERS.replace("QuantBase", "QuantBasf", 1).replace("QuantBase)", "QuantBasf)"))
    assert replayed(checked, *args)[0] is None
    assert "DTL001" not in dtl(checked, *args).stdout


def test_a_clean_answer_whose_reads_changed_is_not_replayed(checked: Path):
    layers = checked / "vllm" / "plain_layers.py"
    layers.touch()  # new stat data, same bytes: hashed again, still the answer
    assert replayed(checked, *CLEAN_ARGS)[0] == 0
    # The layer class now derives from the configured quantizable base: the site is a finding.
    layers.write_text("from vllm.base import QuantBase\n\n\nclass PlainLinear(QuantBase):\n    pass\n")
    assert replayed(checked, *CLEAN_ARGS)[0] is None
    assert "DTL001" in dtl(checked, *CLEAN_ARGS).stdout


def test_a_clean_answer_under_another_project_layout_is_not_replayed(checked: Path):
    (checked / "vllm" / "models").mkdir()  # the project's file list changed: module lookups may differ
    assert replayed(checked, *CLEAN_ARGS)[0] is None
    assert dtl(checked, *CLEAN_ARGS).stdout == "All checks passed! (1 file checked)\n"


def test_the_first_run_on_a_project_keeps_answers(checked: Path):
    """The run that makes the cache folder (which changes the root folder's mtime, not its
    listing) keeps them too: pre-commit's first run after installing replays."""
    import shutil

    shutil.rmtree(checked / ".dtype_lint_cache")
    assert dtl(checked, "check", "--exit-zero", ".").returncode == 0
    assert (checked / ".dtype_lint_cache" / replay_index.ANSWERS_NAME).is_file()
    assert replayed(checked, *CLEAN_ARGS) == (0, "All checks passed! (1 file checked)\n", "")


def test_only_a_cached_run_on_the_whole_project_keeps_answers(checked: Path):
    answers = checked / ".dtype_lint_cache" / replay_index.ANSWERS_NAME
    before = answers.stat().st_mtime_ns
    dtl(checked, "check", "--exit-zero", ".")
    assert answers.stat().st_mtime_ns == before  # a warm run over the same project: nothing rewritten
    for args in (("check", "--exit-zero", "--no-cache", "."), ("check", "--exit-zero", "vllm"),
                 ("check", "--exit-zero", "--fix", "."), ("check", "--exit-zero", "--select", "DTL002", "."),
                 ("check", "--exit-zero", "--unsafe-fixes", ".")):
        answers.unlink(missing_ok=True)
        dtl(checked, *args)
        assert not answers.exists(), args


def test_a_whole_project_run_with_its_own_settings_keeps_no_answer(checked: Path):
    """`check . --ignore DTL001` finds the site's file clean; a plain run on it does not."""
    (checked / ".dtype_lint_cache" / replay_index.ANSWERS_NAME).unlink()
    # (the plain run's answer for it, a report with its finding, is gone with the file)
    assert "DTL001" not in dtl(checked, "check", "--exit-zero", "--ignore", "DTL001", ".").stdout
    (checked / "vllm" / "site.py").touch()
    assert replayed(checked, *SITE_ARGS)[0] is None
    assert "DTL001" in dtl(checked, *SITE_ARGS).stdout


@pytest.mark.parametrize("grouped", [False, True])
def test_a_file_the_answer_only_passed_over_may_change_while_it_compiles_nothing(project: Path, monkeypatch,
                                                                                 grouped: bool):
    """The site's fix is planned, so its answer read the compiled-code census, which passed over
    every other file by its text (core/passed_over.py). An edit of one that still compiles nothing
    keeps the answer: the replay tests the file as the census would. One that starts to script the
    site's class is declined, and the run after it takes the fix away. `grouped`: the census's
    reads are a group (a project of GROUP_MIN_FILES files or more), which the index keeps once,
    apart (`g-<name>.bin`), for the entries that name it."""
    if grouped:
        from dtype_lint.analysis.index import class_index

        monkeypatch.setattr(class_index, "GROUP_MIN_FILES", 1)
        shutil.rmtree(project / ".dtype_lint_cache")  # its entries were made without groups
        dtl(project, "check", "--exit-zero", ".")  # the fast path's record, as the fixture's run
        (project / ".dtype_lint_cache" / replay_index.ANSWERS_NAME).unlink()
    first = keep(project, *SITE_ARGS)
    assert "[safe]" in first.stdout
    index = replay_index.load(str(project / ".dtype_lint_cache" / replay_index.INDEX_NAME))
    (entry,) = [e for k, e in index["entries"].items() if k[1] == ("vllm/site.py",)]
    assert bool(entry["groups"]) == grouped
    for name in entry["groups"]:
        assert (project / ".dtype_lint_cache" / replay_index.ANSWERS_DIR / f"g-{name}.bin").is_file()
    plain = project / "vllm" / "plain.py"
    plain.write_text(PLAIN + "\n# mentions torch.jit, scripts nothing\n")
    assert replayed(project, *SITE_ARGS) == (0, first.stdout, first.stderr)
    plain.write_text(PLAIN + "\nimport torch\nfrom vllm.site import Attn\n\n\n"
                             "def export(proj):\n    return torch.jit.script(Attn(proj))\n")
    assert replayed(project, *SITE_ARGS)[0] is None
    after = dtl(project, *SITE_ARGS)
    assert "DTL001" in after.stdout and "[safe]" not in after.stdout and "may compile `Attn`" in after.stdout


def test_a_file_read_for_the_answer_is_never_taken_as_passed_over(project: Path):
    """layers.py is read for the site's answer (its class's base): an edit that leaves it
    compiling nothing still declines the replay."""
    keep(project, *SITE_ARGS)
    index = replay_index.load(str(project / ".dtype_lint_cache" / replay_index.INDEX_NAME))
    (entry,) = [e for k, e in index["entries"].items() if k[1] == ("vllm/site.py",)]
    layers, plain = (str((project / "vllm" / name).resolve()) for name in ("layers.py", "plain.py"))
    assert plain in entry["passed"] and layers in entry["files"] and layers not in entry["passed"]
    (project / "vllm" / "layers.py").write_text(LAYERS + "\n# edited\n")
    assert replayed(project, *SITE_ARGS)[0] is None


def test_the_first_named_run_replays_an_answer_that_used_a_census_of_the_tree(project: Path, monkeypatch):
    """A fix planned asks the compiled-code census, which reads every file: in a project of
    GROUP_MIN_FILES files or more its reads are a group (here every project is one), which the
    answers of a run on the whole project keep once beside the shards (`g-<name>.bin`) for every
    answer that names it. Before, no answer was kept for such a file, and the first run on it
    after `check .` analysed it again."""
    from dtype_lint.analysis.index import class_index

    monkeypatch.setattr(class_index, "GROUP_MIN_FILES", 1)
    shutil.rmtree(project / ".dtype_lint_cache")  # its entries were made without groups
    assert dtl(project, "check", "--exit-zero", ".").returncode == 0
    folder = project / ".dtype_lint_cache" / replay_index.ANSWERS_DIR
    assert [p.name for p in folder.glob("g-*.bin")]
    plain = project / "vllm" / "plain.py"
    plain.write_text(PLAIN + "\n# mentions torch.jit, scripts nothing\n")  # passed over still
    code, out, err = replayed(project, *SITE_ARGS)
    assert code == 0 and "[safe]" in out
    assert (out, err) == (dtl(project, *SITE_ARGS).stdout, "")
    # a run on named files keeps its own answer: the run on the whole project's is what is tested
    for kept in ("run-memo.json", replay_index.INDEX_NAME):
        (project / ".dtype_lint_cache" / kept).unlink(missing_ok=True)
    plain.write_text(PLAIN + "\nimport torch\nfrom vllm.site import Attn\n\n\n"
                             "def export(proj):\n    return torch.jit.script(Attn(proj))\n")
    assert replayed(project, *SITE_ARGS)[0] is None


def test_an_edit_of_a_file_the_census_passed_over_keeps_its_group(project: Path, monkeypatch):
    """The edited file with a fixable finding is itself one the compiled-code census passed over:
    its answer names the group the census had (no new group of every file is written: 6.8 MB at
    ten times vLLM, on every such pre-commit run), the group file is not written again for the
    one file edited (3.3 MB at ten times vLLM), and the answer is replayed: the replay takes the
    edited file by its census's test, as it takes any file changed since the group was kept."""
    from dtype_lint.analysis.index import class_index

    monkeypatch.setattr(class_index, "GROUP_MIN_FILES", 1)
    shutil.rmtree(project / ".dtype_lint_cache")
    dtl(project, "check", "--exit-zero", ".")
    folder = project / ".dtype_lint_cache" / replay_index.ANSWERS_DIR
    answers = set(folder.glob("g-*.bin"))
    (kept,) = answers
    before = kept.read_bytes()
    site = project / "vllm" / "site.py"
    site.write_text(SITE + "# edited\n")
    first = keep(project, *SITE_ARGS, trust_stat_data=True)
    assert "[safe]" in first.stdout
    assert set(folder.glob("g-*.bin")) == answers and kept.read_bytes() == before  # the same group, as it was
    site.touch()
    assert replayed(project, *SITE_ARGS) == (0, first.stdout, first.stderr)
    # A run on the whole project brings the group up to date: the file's stamp of now.
    dtl(project, "check", "--exit-zero", ".")
    group = replay_index.load(str(kept), replay_index._answers_context())
    stamps = dict(zip(group["paths"], group["stamps"]))
    from dtype_lint.core.file_stamp import file_stamp

    assert stamps[os.path.relpath(site.resolve(), project.resolve())] == file_stamp(str(site.resolve()))


def test_a_group_file_the_replay_cannot_read_is_removed_and_kept_again(project: Path, monkeypatch):
    """A run on named files writes a group only where none is kept: one that cannot be read
    (edited, foreign) would otherwise decline every replay naming it until a run on the whole
    project. The replay removes it, and the next run on the file keeps it again (an answer that
    read as many files as a census does is kept by the index only, as at ten times vLLM)."""
    from dtype_lint.analysis.index import class_index
    from dtype_lint.run import run_memo

    monkeypatch.setattr(class_index, "GROUP_MIN_FILES", 1)
    monkeypatch.setattr(run_memo, "MAX_MEMO_FILES", 1)
    shutil.rmtree(project / ".dtype_lint_cache")
    dtl(project, "check", "--exit-zero", ".")
    first = keep(project, *SITE_ARGS)
    folder = project / ".dtype_lint_cache" / replay_index.ANSWERS_DIR
    (kept,) = folder.glob("g-*.bin")
    data = bytearray(kept.read_bytes())
    data[len(data) // 2] ^= 1  # its seal no longer holds
    kept.write_bytes(bytes(data))
    (project / "vllm" / "site.py").touch()
    assert replayed(project, *SITE_ARGS)[0] is None and not kept.exists()
    assert dtl(project, *SITE_ARGS).stdout == first.stdout  # the full run, which keeps it again
    assert kept.exists()
    (project / "vllm" / "site.py").touch()
    assert replayed(project, *SITE_ARGS) == (0, first.stdout, first.stderr)


def test_an_answer_that_read_many_files_is_kept_by_the_index_only(project: Path, monkeypatch):
    """The run memo (which the fast path checks by hashing every file it holds) keeps no answer
    that read more than MAX_MEMO_FILES files; the replay index keeps it, and replays it."""
    from dtype_lint.run import run_memo

    monkeypatch.setattr(run_memo, "MAX_MEMO_FILES", 1)
    first = keep(project, *SITE_ARGS)
    memo = run_memo._entries(str(project / ".dtype_lint_cache" / run_memo.MEMO_NAME))
    assert not any(entry["key"][1] == ["vllm/site.py"] for entry in memo.values())
    (project / "vllm" / "site.py").touch()
    assert replayed(project, *SITE_ARGS) == (0, first.stdout, first.stderr)


def test_a_group_no_answer_names_any_more_is_removed(project: Path, monkeypatch):
    """A group is named by its content: an edit of a file its census read names a new one. The
    old file goes (at ten times vLLM each is 5 MB), and one the answers of `check .` name stays."""
    from dtype_lint.analysis.index import class_index

    monkeypatch.setattr(class_index, "GROUP_MIN_FILES", 1)
    shutil.rmtree(project / ".dtype_lint_cache")
    export = project / "vllm" / "export.py"  # the census reads it: it compiles (its own code)
    export.write_text(EXPORT)
    dtl(project, "check", "--exit-zero", ".")  # its answers name a group
    folder = project / ".dtype_lint_cache" / replay_index.ANSWERS_DIR
    answers = set(folder.glob("g-*.bin"))
    assert answers and (folder / replay_index.ANSWERS_GROUPS).is_file()

    def groups() -> set[Path]:
        return set(folder.glob("g-*.bin"))

    for edit in ("# one\n", "# two\n"):
        export.write_text(EXPORT + edit)
        keep(project, *SITE_ARGS)
        index = replay_index.load(str(project / ".dtype_lint_cache" / replay_index.INDEX_NAME))
        (entry,) = [e for k, e in index["entries"].items() if k[1] == ("vllm/site.py",)]
        named = {folder / f"g-{name}.bin" for name in entry["groups"]}
        assert named and not named & answers  # the census read export.py: a group of its own
        assert groups() == answers | named
