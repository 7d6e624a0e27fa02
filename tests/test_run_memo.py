"""The run memo (dtype_lint/run/run_memo.py): a pre-commit run on files that hold sites, with
nothing they depend on changed since the last full run on them, prints that run's answer again
without the engine; any change it depends on sends the run to the engine."""

from __future__ import annotations

import contextlib
import io
import os
from pathlib import Path

import pytest
from cli_runner import HEAVY_MODULES, dtl, heavy_imports_of
from tiny_project import ATTN, write_tree

from dtype_lint import fast_path
from dtype_lint.core.rule_registry import registry

PYPROJECT = '[tool.dtype-lint]\nquantizable = ["vllm.base.QuantBase"]\n'
HELPER = "vllm/model_executor/layers/quantization/utils/layer_input_dtype.py"

BASE = """\
import torch


class QuantBase(torch.nn.Module):
    pass
"""

# The layer class the site's attribute holds: quantizable only through its base, in another file.
LAYERS = """\
from vllm.base import QuantBase


class QLinear(QuantBase):
    def __init__(self, n):
        super().__init__()
"""

SITE = """\
import torch

from vllm.layers import QLinear


class Attn(torch.nn.Module):
    def __init__(self, proj: QLinear):
        super().__init__()
        self.proj = proj

    def forward(self, x):
        x = x.to(self.proj.weight.dtype)
        return self.proj(x)
"""

PLAIN = "def greet(name):\n    return name\n"


@pytest.fixture
def project(tmp_path: Path) -> Path:
    """A tree of package `vllm`, as the preset's helper needs (elsewhere its home is inferred from
    the sites, and the memo keeps nothing); `attn.py` imports one of the preset's layer classes."""
    root = write_tree(tmp_path / "p", {
        "pyproject.toml": PYPROJECT, "vllm/__init__.py": "", "vllm/base.py": BASE, "vllm/layers.py": LAYERS,
        "vllm/site.py": SITE, "vllm/plain.py": PLAIN, "vllm/attn.py": ATTN,
    })
    assert "DTL001" in dtl(root, "check", "--exit-zero", ".").stdout  # writes the fast path's record
    return root


def full(root: Path, *args: str) -> tuple[int, str, str]:
    """The full run of `args`, the fast path (and so the memo) skipped."""
    fast_path._already_tried = True
    try:
        proc = dtl(root, *args)
    finally:
        fast_path._already_tried = False
    return proc.returncode, proc.stdout, proc.stderr


def memo(root: Path, *args: str) -> tuple[int | None, str, str]:
    """What the fast path answers alone (None: the engine would run)."""
    saved = os.getcwd()
    out, err = io.StringIO(), io.StringIO()
    try:
        os.chdir(root)
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            code = fast_path.try_clean_exit(list(args))
    finally:
        os.chdir(saved)
    return code, out.getvalue(), err.getvalue()


@pytest.mark.parametrize("args", [
    ("check", "vllm/site.py"), ("check", "--exit-zero", "-q", "vllm/site.py"),
    ("check", "--output-format", "concise", "--no-progress", "vllm/site.py"),
    ("check", "--color=never", "--force-exclude", "vllm/site.py", "vllm/plain.py"),
    ("vllm/site.py", "./vllm/site.py"),
])
def test_an_unchanged_file_gets_the_full_runs_answer_again(project: Path, args):
    assert memo(project, *args)[0] is None  # nothing kept yet
    first = dtl(project, *args)  # the fast path falls back; the full run keeps its answer
    assert "DTL001" in first.stdout
    (project / "vllm" / "site.py").touch()
    assert memo(project, *args) == (first.returncode, first.stdout, first.stderr)
    assert full(project, *args) == (first.returncode, first.stdout, first.stderr)


def test_the_replay_imports_neither_the_engine_nor_the_rules(project: Path):
    dtl(project, "check", "vllm/site.py")
    # Nor the fast path or the report code: the replay index answers first (run/replay_index.py;
    # tests/test_precommit_replay.py holds it to built-in modules).
    printed, heavy = heavy_imports_of(project, "check", "--exit-zero", "vllm/site.py",
                                      modules=HEAVY_MODULES + ("dtype_lint.fast_path", "dtype_lint.cli_output",
                                                               "dtype_lint.core.findings", "json", "hashlib"))
    assert "DTL001" in printed and heavy == "[]"


RULE_MODULES = tuple(f"dtype_lint.rules.{m.stem}" for m in sorted((Path(__file__).parents[1] / "rules").glob("dtl*.py")))


def test_an_edited_file_imports_only_the_enabled_rules(project: Path):
    edit_site(project)  # the engine runs: the fast path's record holds, the memo does not
    printed, imported = heavy_imports_of(project, "check", "--exit-zero", "vllm/site.py", modules=RULE_MODULES)
    assert "DTL001" in printed
    # The default rules' modules (DTL001, DTL002), not the opt-in ones: the registry says which.
    defaults = tuple(f"dtype_lint.rules.{info.module}" for info in registry() if info.default_enabled)
    assert imported == repr([m for m in RULE_MODULES if m in defaults])
    assert len(defaults) < len(RULE_MODULES) and "dtl002_" in imported


def edit_site(root: Path) -> None:
    (root / "vllm" / "site.py").write_text(SITE + "# edited\n")


def layer_not_quantizable(root: Path) -> None:
    # only the site's analysis read this file (its findings entry lists it), no folder changes
    (root / "vllm" / "layers.py").write_text(LAYERS.replace("QLinear(QuantBase)", "QLinear(torch.nn.Module)")
                                             .replace("from vllm.base import QuantBase", "import torch"))


def new_module(root: Path) -> None:
    (root / "vllm" / "layers2.py").write_text("x = 1\n")


def settings(root: Path) -> None:
    (root / "pyproject.toml").write_text(PYPROJECT + 'ignore = ["DTL002"]\n')


def helper_created(root: Path) -> None:
    # the preset's helper appears where the site's fix imports it from
    write_tree(root, {HELPER: "def get_layer_input_dtype(layer, fp8_input):\n    return None\n"})


def helper_broken(root: Path) -> None:
    # the existing helper (the memo stamps it) no longer defines the function the fixes call
    helper_created(root)
    dtl(root, "check", "vllm/site.py")  # a folder changed: the fast path's record is written again
    dtl(root, "check", "vllm/site.py")  # with it found true, the answer is kept
    assert memo(root, "check", "vllm/site.py")[0] == 1
    (root / HELPER).write_text("def other():\n    return None\n")


@pytest.mark.parametrize("change", [edit_site, layer_not_quantizable, new_module, settings, helper_created,
                                    helper_broken])
def test_a_change_it_depends_on_sends_the_run_to_the_engine(project: Path, change):
    dtl(project, "check", "vllm/site.py")
    assert memo(project, "check", "vllm/site.py")[0] == 1
    change(project)
    assert memo(project, "check", "vllm/site.py")[0] is None
    fresh = dtl(project, "check", "vllm/site.py")  # what the engine says now
    if change is helper_broken:
        # The fixes now go through a helper inferred from the sites: never kept (run_memo.py).
        dtl(project, "check", "vllm/site.py")
        assert memo(project, "check", "vllm/site.py")[0] is None
        assert "vllm.layer_input_dtype" in dtl(project, "check", "--output-format", "json", "vllm/site.py").stdout
        return
    # Kept by a run that found the fast path's record true from its start (a changed folder or
    # setting has the first run write it again).
    assert dtl(project, "check", "vllm/site.py").stdout == fresh.stdout
    assert memo(project, "check", "vllm/site.py") == (fresh.returncode, fresh.stdout, fresh.stderr)
    if change is layer_not_quantizable:
        assert "DTL001" not in fresh.stdout


def test_other_flags_neither_keep_nor_read_it(project: Path):
    dtl(project, "check", "--select", "ALL", "vllm/site.py")
    assert memo(project, "check", "vllm/site.py")[0] is None
    dtl(project, "check", "vllm/site.py")
    for args in (("check", "--select", "DTL002", "vllm/site.py"), ("check", "--output-format", "json", "vllm/site.py"),
                 ("check", "--fix", "vllm/site.py"), ("check", "vllm/site.py", "vllm/plain.py")):
        assert memo(project, *args)[0] is None, args
    assert memo(project / "vllm", "check", "site.py")[0] is None  # another folder: another entry


def test_a_file_whose_analysis_depends_on_other_files_without_being_read_is_not_kept(project: Path):
    """With DTL005 on, a file that imports names is analysed when one is a helper elsewhere: what
    decides that is not in any findings entry, so no answer is kept for it."""
    (project / "pyproject.toml").write_text(PYPROJECT + 'extend-select = ["DTL005"]\n')
    (project / "vllm" / "caller.py").write_text("from vllm.plain import greet\n\n\ndef f(x):\n    return greet(x)\n")
    dtl(project, "check", "--exit-zero", ".")
    dtl(project, "check", "vllm/site.py", "vllm/caller.py")
    assert memo(project, "check", "vllm/site.py", "vllm/caller.py")[0] is None


def test_no_answer_is_kept_where_the_fast_paths_record_does_not_watch_a_folder(project: Path):
    """The memo trusts the fast path's record for the project's file list only where it lists
    every folder of that list (today's walks agree: a guard against their drifting apart)."""
    import json

    from dtype_lint.run.cache_seal import seal, unseal
    from dtype_lint.run.fast_record import RECORD_NAME

    path = project / ".dtype_lint_cache" / RECORD_NAME
    record = json.loads(unseal(path.read_bytes(), RECORD_NAME))
    del record["dirs"]["vllm"]  # still true: it checks only what it lists
    path.write_bytes(seal(json.dumps(record).encode(), RECORD_NAME))  # as dtype-lint would write it
    dtl(project, "check", "vllm/site.py")
    dtl(project, "check", "vllm/site.py")
    assert memo(project, "check", "vllm/site.py")[0] is None
    record["dirs"]["vllm"] = (project / "vllm").stat().st_mtime_ns
    path.write_bytes(seal(json.dumps(record).encode(), RECORD_NAME))
    dtl(project, "check", "vllm/site.py")
    assert memo(project, "check", "vllm/site.py")[0] == 1
