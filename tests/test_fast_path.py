"""The pre-commit fast path (dtype_lint/fast_path.py): a named file that cannot give a
finding ends the run before the engine, with the full run's output; anything it cannot vouch
for goes to the full run."""

from __future__ import annotations

import contextlib
import io
import os
import subprocess
import sys
from pathlib import Path

import pytest
from cli_runner import dtl, heavy_imports_of
from tiny_project import ATTN

from dtype_lint import fast_path
from dtype_lint.core.prefilter import Prefilter, marker_words
from dtype_lint.rules import ALL_RULES
from dtype_lint.run.fast_record import RECORD_NAME

PYPROJECT = "[tool.dtype-lint]\n"

# vLLM's layer imported by name, as in a project built on vLLM: the preset knows it is quantizable.
SITE = ATTN

PLAIN = """\
import os

from proj.util import shout


def greet(name):
    return shout(f"hello {name} from {os.getcwd()}")
"""

UTIL = """\
def shout(text):
    return text.upper()
"""

HELPERS = """\
def input_dtype(layer):
    dtype = layer.weight.dtype
    return dtype
"""


def make(root: Path, extra: dict[str, str] | None = None) -> Path:
    files = {
        "pyproject.toml": PYPROJECT,
        "proj/__init__.py": "",
        "proj/site.py": SITE,
        "proj/plain.py": PLAIN,
        "proj/util.py": UTIL,
        "proj/helpers.py": HELPERS,
        **(extra or {}),
    }
    for rel, text in files.items():
        p = root / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(text, encoding="utf-8")
    return root


def fast(root: Path, *args: str) -> tuple[int | None, str]:
    """What the fast path alone answers in `root` (None: the full run would follow)."""
    saved = os.getcwd()
    out = io.StringIO()
    try:
        os.chdir(root)
        with contextlib.redirect_stdout(out):
            code = fast_path.try_clean_exit(list(args))
    finally:
        os.chdir(saved)
    return code, out.getvalue()


@pytest.fixture
def project(tmp_path: Path) -> Path:
    root = make(tmp_path / "p")
    proc = dtl(root, "check", "--exit-zero", ".")  # the full run that writes the record
    assert "DTL001" in proc.stdout
    assert (root / ".dtype_lint_cache" / RECORD_NAME).is_file()
    return root


def test_a_file_without_a_site_ends_with_the_full_runs_output(project: Path):
    code, out = fast(project, "check", "--no-progress", "proj/plain.py")
    assert (code, out) == (0, "All checks passed! (1 file checked)\n")
    # the full run of the same command, with the fast path skipped, says the same
    fast_path._already_tried = True
    try:
        slow = dtl(project, "check", "--no-progress", "proj/plain.py")
    finally:
        fast_path._already_tried = False
    assert (slow.returncode, slow.stdout, slow.stderr) == (0, out, "")
    assert fast(project, "check", "-q", "proj/plain.py", "proj/util.py", "./proj/util.py") == (0, "")
    assert fast(project, "proj/plain.py", "proj/util.py") == (0, "All checks passed! (2 files checked)\n")
    # what the pre-commit hook passes; a file the excludes match is left to the full run
    assert fast(project, "check", "--force-exclude", "--no-progress", "proj/plain.py")[0] == 0
    (project / "build").mkdir()
    (project / "build" / "gen.py").write_text("x = 1\n")
    assert fast(project, "check", "--force-exclude", "build/gen.py")[0] is None


@pytest.mark.parametrize("name, text", [
    ("site", None),  # the prefilter passes: the engine decides
    ("suppressed", "x = 1  # dtype-lint: ignore[DTL001]\n"),  # an unused suppression is DTL902
    ("caller", "from proj.helpers import input_dtype\n\n\ndef f(layer):\n    return input_dtype(layer)\n"),
    ("aliased", "from proj import helpers as h\nfrom proj.helpers import input_dtype as pick\n"),
    ("reexported", "from proj.reexport import chosen\n"),
    ("relative", "from .helpers import input_dtype\n"),
    ("star", "from proj.util import *\n"),
    ("latin1", "# -*- coding: latin-1 -*-\nx = 1\n"),
])
def test_what_the_fast_path_leaves_to_the_engine(project: Path, name: str, text: str | None):
    (project / "proj" / "reexport.py").write_text("from proj.helpers import input_dtype as chosen\n")
    dtl(project, "check", "--exit-zero", ".")  # a folder changed: the record is rewritten
    rel = "proj/site.py" if text is None else f"proj/{name}_mod.py"
    if text is not None:
        (project / rel).write_text(text, encoding="utf-8")
        dtl(project, "check", "--exit-zero", ".")
    assert fast(project, "check", rel) == (None, "")


@pytest.mark.parametrize("args", [
    ("check", "--fix", "proj/plain.py"), ("check", "--select", "DTL001", "proj/plain.py"),
    ("check", "--output-format", "json", "proj/plain.py"), ("check", "--no-cache", "proj/plain.py"),
    ("check", "--color", "always", "proj/plain.py"), ("check", "proj"), ("check", "proj/missing.py"),
    ("rule", "DTL001"), ("check",), ("check", "--statistics", "proj/plain.py"),
])
def test_only_a_plain_check_of_files_is_taken(project: Path, args):
    assert fast(project, *args) == (None, "")


def test_a_stale_record_is_not_trusted(project: Path):
    assert fast(project, "proj/plain.py")[0] == 0
    (project / "proj" / "new.py").write_text("x = 1\n")  # a folder's stamp changes
    assert fast(project, "proj/plain.py")[0] is None
    dtl(project, "check", "--exit-zero", "proj/plain.py")  # a full run on named files renews it
    assert fast(project, "proj/plain.py")[0] == 0
    (project / "pyproject.toml").write_text('[tool.dtype-lint]\nselect = ["DTL001"]\n')
    assert fast(project, "proj/plain.py")[0] is None
    dtl(project, "check", "--exit-zero", "proj/plain.py")
    assert fast(project, "proj/plain.py")[0] == 0
    # the file that decided that the preset's layer classes are imported (no warning to print)
    (project / "proj" / "site.py").write_text(SITE.replace("vllm.model_executor.layers.linear", "vllm.model_executor.layers.elsewhere"))
    assert fast(project, "proj/plain.py")[0] is None
    proc = dtl(project, "check", "--exit-zero", "proj/plain.py")
    assert "warning" in proc.stderr  # the full run says what the fast path could not
    assert fast(project, "proj/plain.py")[0] is None  # and leaves no record while it must


def test_no_project_configuration_means_no_fast_path(tmp_path: Path):
    root = make(tmp_path / "p")
    (root / "pyproject.toml").unlink()
    dtl(root, "check", "--exit-zero", ".")
    assert fast(root, "proj/plain.py") == (None, "")


def test_the_record_holds_every_rules_own_prefilter(project: Path):
    import json

    from dtype_lint.run.cache_seal import unseal

    record = json.loads(unseal((project / ".dtype_lint_cache" / RECORD_NAME).read_bytes(), RECORD_NAME))
    assert record["rules"] == [[r.code, list(marker_words(r)), list(r.patterns)] for r in ALL_RULES]


def test_import_bindings_reads_every_form():
    text = ("from a.b import (c,  # note\n    d as e)\nimport x.y as z\nimport plain\n"
            "from . import sibling\nfrom ..up import thing as t\n    from lazy import later\n"
            "from long import one, \\\n    two\n")
    bindings, unsure = fast_path.import_bindings(text)
    assert not unsure
    assert bindings == {
        "c": [(0, "a.b", "c")], "e": [(0, "a.b", "d")], "z": [(0, "x", "y")], "sibling": [(1, "", "sibling")],
        "t": [(2, "up", "thing")], "later": [(0, "lazy", "later")], "one": [(0, "long", "one")],
        "two": [(0, "long", "two")],
    }
    assert fast_path.import_bindings("from m import *\n")[1]


def test_the_console_script_takes_the_fast_path(project: Path):
    """The installed entry point and `python -m dtype_lint` import neither the engine nor rich."""
    printed, heavy = heavy_imports_of(project, "check", "proj/plain.py")
    assert (printed, heavy) == ("All checks passed! (1 file checked)\n", "[]")


def test_an_edited_file_with_a_site_leaves_the_rare_paths_imports_to_them(project: Path):
    """The full run on one edited file (pre-commit's other case) writes no diff and suggests no
    setting, so it does not import difflib; and importing the engine, every rule and the command
    line imports neither difflib nor importlib.resources (only a shipped catalogue's reader needs
    it, for a layer the tree's own backends say nothing about)."""
    site = project / "proj" / "site.py"
    site.write_text(site.read_text(encoding="utf-8") + "# edited\n", encoding="utf-8")
    printed, rare = heavy_imports_of(project, "check", "--exit-zero", "proj/site.py", modules=("difflib",))
    assert "DTL001" in printed  # the engine ran: not the fast path's answer
    assert rare == "[]"
    code = ("import sys\nimport dtype_lint.cli, dtype_lint.run.pipeline, dtype_lint.reporters.text\n"
            "from dtype_lint.rules import ALL_RULES\n"
            "print([m for m in ('difflib', 'importlib.resources') if m in sys.modules])\n")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert (proc.returncode, proc.stdout) == (0, "[]\n"), proc.stderr


def test_the_prefilter_wants_one_rules_marker_and_pattern():
    """`dtype` (DTL005's marker) and `int32` (a DTL004 pattern, whose marker is `weight`): no rule
    can report anything there."""
    text = "x = torch.empty(3, dtype=torch.int32)\n"
    assert not Prefilter(ALL_RULES).might_match(text)
    assert Prefilter(ALL_RULES).might_match(text + "w = self.weight\n")


def test_on_python_3_10_the_fast_path_reads_the_configuration_with_tomli(tmp_path, monkeypatch):
    """Python 3.10 has no `tomllib`; the project depends on `tomli` there. The fast path imported
    `tomllib` alone, so every `dtype-lint check FILE` of a configured project raised
    ModuleNotFoundError on 3.10 (a pre-commit hook there never ran). Simulated here: the version
    reads 3.10, `tomllib` cannot be imported, and `tomli` is the standard reader under its name."""
    import types

    try:
        import tomllib as reader
    except ModuleNotFoundError:  # a real Python 3.10
        import tomli as reader  # type: ignore[no-redef]
    root = make(tmp_path)
    (root / "pyproject.toml").write_text('[tool.dtype-lint]\ncache-dir = ".lint-cache"\n', encoding="utf-8")
    tomli = types.ModuleType("tomli")
    tomli.loads, tomli.TOMLDecodeError = reader.loads, reader.TOMLDecodeError  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "tomllib", None)  # `import tomllib` raises ImportError
    monkeypatch.setitem(sys.modules, "tomli", tomli)
    monkeypatch.setattr(sys, "version_info", (3, 10, 13, "final", 0))
    found = fast_path._find_config(str(root / "proj" / "plain.py"))
    assert found is not None
    config_path, project_root, cache_dir, table = found
    assert (config_path, project_root, cache_dir) == (str(root / "pyproject.toml"), str(root), ".lint-cache")
    assert table == {"cache-dir": ".lint-cache"}
