"""Another module's helpers (analysis/helper_functions._file_helpers, read for a call DTL005
judges) come from a whole parse only where one of its candidate functions, parsed from its own
text with its decorators, has the helper's shape: with every rule on, vLLM 0.34.0 parsed 122
modules whole for their helpers and 118 defined none (2.78 M of 36.0 M characters parsed)."""

from __future__ import annotations

import ast
import json
from pathlib import Path

import pytest
from cli_runner import dtl
from hypothesis import given, settings
from hypothesis import strategies as st
from tiny_project import json_findings, write_tree

from dtype_lint.analysis import helper_functions
from dtype_lint.analysis.index.class_index import extract_header
from dtype_lint.api import make_config
from dtype_lint.core.text_facts import _TOP_DEF, top_defs
from dtype_lint.rules import dtl005_unsound_input_dtype_helper
from dtype_lint.run.file_analysis import reads_helpers

ROOT = Path(__file__).resolve().parents[1]

# `scale` is a candidate (its text reads a weight's dtype and returns) without the shape: its
# first parameter is not what it reads `.weight` of.
UTIL = """\
import torch


def scale(x, weight):
    return x * weight.dtype.itemsize
"""
MODEL = """\
import torch
from vllm.model_executor.layers.linear import ColumnParallelLinear
from proj.util import scale


class Block(torch.nn.Module):
    def __init__(self, quant_config):
        super().__init__()
        self.proj = ColumnParallelLinear(8, 8, quant_config=quant_config)

    def forward(self, x):
        return x.to(scale(x, self.proj.weight))
"""


def _record_lookups(monkeypatch) -> list[str]:
    """The modules whose helpers are looked up from here on (helper_functions._file_helpers), in order."""
    looked_up: list[str] = []
    real_lookup = helper_functions._file_helpers

    def lookup(header, load_file):
        looked_up.append(header.module)
        return real_lookup(header, load_file)

    monkeypatch.setattr(helper_functions, "_file_helpers", lookup)
    return looked_up


def test_a_module_whose_candidates_are_not_helpers_is_not_parsed(tmp_path, monkeypatch, parsed_files):
    root = write_tree(tmp_path / "p", {"pyproject.toml": "[tool.dtype-lint]\n", "proj/__init__.py": "",
                                       "proj/util.py": UTIL, "proj/model.py": MODEL})
    parsed = parsed_files
    helper_functions._REMOTE.clear()
    looked_up = _record_lookups(monkeypatch)
    findings = json_findings(root, "--select", "DTL005")
    assert findings == []
    assert looked_up == ["proj.util"]  # DTL005 asked about `scale`...
    assert "util.py" not in parsed, parsed  # ... and the answer took no parse of its module


# A helper of the shape, in the places a cut of the text could lose it.
HELPER = "def {name}(layer, fp8):\n    if layer.weight.dtype == torch.int8:\n        return torch.int8\n" \
         "    return layer.weight.dtype\n"
DECORATED = """\
import torch


def before(x):
    \"\"\"A docstring with a line at column 0:
def lookalike(layer, fp8):
\"\"\"
    return x @ x


@register(lambda layer: layer.weight)

# a comment between the decorator and its `def`
def reads_it_in_its_decorator(layer, fp8):
    weight_dtype = torch.bfloat16  # its text names a weight's dtype; its body reads none
    return weight_dtype


def plain(x, weight):
    return weight.dtype
"""
TEXTS = {
    "plain": "import torch\n\n\n" + HELPER.format(name="helper"),
    "decorated": DECORATED,
    "after a docstring": 'import torch\n\nX = """\n@decorator\n"""\n\n\n' + HELPER.format(name="helper"),
    "two definitions": "import torch\n\n\ndef helper(x, weight):\n    return weight.dtype\n\n\n" + HELPER.format(name="helper"),
    "cut in a string": 'import torch\n\n\ndef helper(layer, fp8):\n    s = """\nx\n"""\n    return layer.weight.dtype\n',
    "form feed": "import torch\n\x0c\n" + HELPER.format(name="helper"),
    # The second `def` is `helper` too, as the parser reads it, and only it has the shape; its text
    # spells `weight` otherwise, so that the header lists only the first.
    "another spelling": "import torch\n\n\ndef helper(x, weight):\n    return weight.dtype\n\n\n"
                        + HELPER.format(name="\uff48elper").replace("weight", "\uff57eight"),
}


def _remote(text: str, whole: bool, monkeypatch) -> dict:
    header = extract_header(text, "pkg.mod", "pkg/mod.py", False)
    helper_functions._REMOTE.clear()
    if whole:
        monkeypatch.setattr(helper_functions, "_may_define_helpers", lambda text, header: True)
    try:
        return helper_functions._file_helpers(header, lambda path: text)
    finally:
        monkeypatch.undo()
        helper_functions._REMOTE.clear()


@pytest.mark.parametrize("case", sorted(TEXTS))
def test_the_helpers_are_those_of_the_whole_parse(case, monkeypatch):
    text = TEXTS[case]
    assert _remote(text, False, monkeypatch) == _remote(text, True, monkeypatch)


def test_a_decorator_that_reads_the_weight_makes_a_helper(monkeypatch):
    found = _remote(DECORATED, False, monkeypatch)
    assert sorted(found) == ["pkg.mod.reads_it_in_its_decorator"]


def test_the_package_s_own_modules_give_the_helpers_of_their_whole_parse(monkeypatch):
    compared = 0
    for path in sorted([*(ROOT / "dtype_lint").rglob("*.py"), *(ROOT / "fixtures").rglob("*.py")]):
        text = path.read_text(encoding="utf-8")
        try:
            ast.parse(text)
        except SyntaxError:
            continue
        if not extract_header(text, "pkg.mod", "pkg/mod.py", False).functions:
            continue
        assert _remote(text, False, monkeypatch) == _remote(text, True, monkeypatch), path
        compared += 1
    assert compared >= 10


def test_respelled_defs_are_the_names_the_parser_reads_otherwise_spelled():
    from dtype_lint.core.text_facts import respelled_defs

    text = ("def \uff48elper(layer):\n    pass\ndef plain(x):  # 2 \u00d7 4\n    pass\n"
            "def f\uff3fx():\n    pass\nasync def \uff41():\n    pass\n")
    assert respelled_defs(text) == {"helper", "f_x", "a"}
    assert {n.name for n in ast.parse(text).body} - {"plain"} == respelled_defs(text)


# Pieces of lines that start a `def` or not: `async`, tabs, a `def` in a word or indented, line
# breaks of other kinds, the text's first line.
DEF_PIECES = st.sampled_from(["def f(", "def  g (", "async def h(", "async\tdef k(", "def", "async", "\n", "\n\n",
                              "  ", "\t", "x", "define(", "undef f(", "\r", "é", "(", ")", ":"])


@settings(max_examples=500, deadline=None)
@given(st.lists(DEF_PIECES, max_size=30).map("".join))
def test_top_defs_are_the_line_starts_the_regex_finds(text):
    # Found from where `str.find` finds a line starting `def` or `async`, not by trying the
    # regex at every line start: the same (line start, end, name) in the same order.
    assert [(start, m.end(), m.group(1)) for start, m in top_defs(text)] == \
        [(start, m.end(), m.group(1)) for start, m in _TOP_DEF.finditer(text)]


# A helper of the upstream shape (DTL005's own example, read from the rule) in one module, a
# caller in another: the caller's finding needs the helper's module header to list its
# helper-shaped functions.
REMOTE_HELPER = dtl005_unsound_input_dtype_helper._UPSTREAM_SHAPE
REMOTE_CALLER = "from proj.dtypes import kv_b_proj_input_dtype\n" + dtl005_unsound_input_dtype_helper._CALLER


def test_headers_list_helper_shaped_functions_only_for_the_rules_reading_helpers(tmp_path):
    # Finding them searched the text of every module a run reads; the default rules never read
    # them. Headers are cached under the configuration's fingerprint: a DTL005 run after a default
    # run that cached its headers without them still finds the remote caller.
    assert not reads_helpers(make_config())
    assert reads_helpers(make_config({"select": ["DTL005"]})) and reads_helpers(make_config({"select": ["ALL"]}))
    whole = extract_header(REMOTE_HELPER, "proj.dtypes", "proj/dtypes.py", False)
    bare = extract_header(REMOTE_HELPER, "proj.dtypes", "proj/dtypes.py", False, functions=False)
    assert list(whole.functions) == ["kv_b_proj_input_dtype"] and bare.functions == {}
    assert (bare.imports, bare.classes, bare.nested) == (whole.imports, whole.classes, whole.nested)
    root = write_tree(tmp_path / "p", {"pyproject.toml": "[tool.dtype-lint]\n", "proj/__init__.py": "",
                                       "proj/dtypes.py": REMOTE_HELPER, "proj/attn.py": REMOTE_CALLER})
    expected = json_findings(root, "--select", "DTL005")
    assert sorted(f["path"] for f in expected) == ["proj/attn.py", "proj/dtypes.py"]
    assert dtl(root, "check", ".").returncode in (0, 1)  # the default rules, their headers cached
    cached = dtl(root, "check", ".", "--select", "DTL005", "--output-format", "json")
    assert json.loads(cached.stdout)["findings"] == expected


# The caller with a second call of the helper, feeding a second cast.
CALLS_TWICE = REMOTE_CALLER + """
    def decode(self, kv_c, use_fp8_prefill):
        kv_dtype = kv_b_proj_input_dtype(self.kv_b_proj, use_fp8_prefill)
        if kv_dtype is not None:
            kv_c = kv_c.to(kv_dtype)
        return self.kv_b_proj(kv_c)
"""


def test_an_imported_helper_is_looked_up_once_per_analysis_and_read_again_after_an_edit(tmp_path, monkeypatch):
    # A file's calls of one imported helper share one lookup (each reads and hashes the helper's
    # file); the next run, in the same process, reads the edited helper.
    root = write_tree(tmp_path / "p", {"pyproject.toml": "[tool.dtype-lint]\n", "proj/__init__.py": "",
                                       "proj/dtypes.py": REMOTE_HELPER, "proj/attn.py": CALLS_TWICE})
    looked_up = _record_lookups(monkeypatch)
    calls = [f for f in json_findings(root, "--select", "DTL005") if f["path"].endswith("attn.py")]
    assert [f["line"] for f in calls] == [6, 12], calls
    # once by each file's analysis (attn.py's two calls share one); a lookup per call made four
    assert looked_up == ["proj.dtypes", "proj.dtypes"]
    sound = dtl005_unsound_input_dtype_helper._SOUND
    assert sound != REMOTE_HELPER
    (root / "proj" / "dtypes.py").write_text(sound, encoding="utf-8")
    assert [f for f in json_findings(root, "--select", "DTL005") if f["path"].endswith("attn.py")] == []
