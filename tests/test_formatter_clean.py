"""Fixes pass the project's own import sorter and line length: `ruff check --select I,E501` (ruff is
in the test extra) reports nothing on a fixed file that it did not report on the original, on our
codemod fixtures placed in a vLLM-shaped project, on an out-of-tree plugin, and on the vLLM 0.33.0
migration.

The projects configure Ruff the way vLLM's own pyproject.toml does (`line-length = 88`,
`vllm` first-party): the cached release trees hold only `.py` files, so the configuration is
written here, and dtype-lint reads it like any project's.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest
from cli_runner import dtl

from dtype_lint.core.source import SourceText
from dtype_lint.fix.formatting import ProjectStyle, project_style, wrap_long_lines
from dtype_lint.fix.import_edit import import_edit

ROOT = Path(__file__).resolve().parents[1]
RUFF = Path(sys.executable).with_name("ruff")
VLLM_RUFF = '[tool.ruff]\nline-length = 88\n\n[tool.ruff.lint.isort]\nknown-first-party = ["vllm"]\n'


def ruff_findings(project: Path, files: list[Path]) -> Counter:
    """(code, the offending line's text) of `ruff check --select I,E501` on `files`, with the
    project's configuration (I001 is keyed by the file, since it names a whole import block)."""
    assert RUFF.exists(), "ruff is in the `test` extra"
    proc = subprocess.run([str(RUFF), "check", "--select", "I,E501", "--output-format", "json", "--no-cache",
                           *map(str, files)], cwd=project, capture_output=True, text=True)
    assert proc.returncode in (0, 1), proc.stderr
    found = Counter()
    for item in json.loads(proc.stdout):
        path = Path(item["filename"])
        if item["code"] == "I001":
            found[("I001", path.name)] += 1
        else:
            line = path.read_text(encoding="utf-8").splitlines()[item["location"]["row"] - 1]
            found[(item["code"], line.strip())] += 1
    return found


def assert_no_new_findings(before: Path, after: Path, files: list[str]) -> None:
    old = ruff_findings(before, [before / f for f in files])
    new = ruff_findings(after, [after / f for f in files])
    added = new - old
    assert not added, f"the fixes added ruff findings: {sorted(added)}"


# --- units ---------------------------------------------------------------------------------------


PLUGIN = '''\
import torch
from vllm.model_executor.layers.linear import ColumnParallelLinear

from myplugin.util import helper_fn
'''


def _placed(text: str, style: ProjectStyle, module: str = "myplugin.layer_input_dtype") -> str:
    import ast

    src = SourceText(text)
    edit = import_edit(src, ast.parse(text), module, "get_layer_input_dtype", style=style)
    return text[: edit.start] + edit.text + text[edit.end:]


def test_the_import_joins_the_first_party_block_in_module_order():
    style = ProjectStyle(first_party=frozenset({"myplugin"}))
    assert _placed(PLUGIN, style).splitlines()[3:5] == [
        "from myplugin.layer_input_dtype import get_layer_input_dtype", "from myplugin.util import helper_fn"]


def test_a_file_without_a_first_party_import_gets_a_block_of_its_own():
    style = ProjectStyle(first_party=frozenset({"myplugin"}))
    text = PLUGIN.split("\n\n")[0] + "\n\n\nclass A:\n    pass\n"
    assert _placed(text, style).startswith(
        "import torch\nfrom vllm.model_executor.layers.linear import ColumnParallelLinear\n\n"
        "from myplugin.layer_input_dtype import get_layer_input_dtype\n\n\nclass A:")
    # Before a local-folder (relative) block, a blank line on each side.
    relative = "import torch\n\nfrom .x import y\n"
    assert _placed(relative, style) == "import torch\n\nfrom myplugin.layer_input_dtype import get_layer_input_dtype\n\nfrom .x import y\n"


def test_the_style_is_read_from_the_projects_configuration(tmp_path: Path):
    (tmp_path / "pyproject.toml").write_text('[tool.black]\nline-length = 100\n[tool.isort]\nknown_first_party = ["extra"]\n')
    (tmp_path / "mypkg").mkdir()
    (tmp_path / "mypkg/__init__.py").write_text("")
    style = project_style(str(tmp_path))
    assert style.line_length == 100 and {"extra", "mypkg"} <= style.first_party
    ruff_toml = tmp_path / "sub"
    ruff_toml.mkdir()
    (ruff_toml / "ruff.toml").write_text("line-length = 79\n")
    assert project_style(str(ruff_toml)).line_length == 79
    assert project_style(str(tmp_path / "none")).line_length is None  # no formatter configured: no wrapping


def test_long_added_lines_wrap_as_ruff_format_does():
    original = "def f(self, hidden_states):\n    return hidden_states.to(self.model.fc.weight.dtype)\n"
    fixed = ("def f(self, hidden_states):\n"
             "    return hidden_states.to(get_layer_input_dtype(self.model.fc, True) or hidden_states.dtype)\n")
    assert wrap_long_lines(original, fixed, 88) == (
        "def f(self, hidden_states):\n"
        "    return hidden_states.to(\n"
        "        get_layer_input_dtype(self.model.fc, True) or hidden_states.dtype\n"
        "    )\n")
    assert wrap_long_lines(original, fixed, 120) == fixed  # fits: untouched
    # An original long line is the project's business, not ours.
    assert wrap_long_lines(fixed, fixed + "x = 1\n", 40) == fixed + "x = 1\n"


def test_line_length_option_wraps_where_the_tree_configures_no_formatter(tmp_path: Path):
    """A release tree ships without the project's pyproject (transformers' wheel): `--line-length`
    (or `line-length` in [tool.dtype-lint]) gives the fixer the project's real length; without it,
    nothing is wrapped (no formatter configured, no length to keep)."""
    long_cast = ("    def forward(self, hidden_states_of_the_model):\n"
                 "        return self.dense(hidden_states_of_the_model.to(self.model.decoder.fc.weight.dtype))\n")
    source = ("from vllm.model_executor.layers.linear import ColumnParallelLinear\n\n\n"
              "class Block:\n    def __init__(self, quant_config):\n"
              "        self.model = Model(quant_config)\n\n" + long_cast + "\n\n"
              "class Decoder:\n    def __init__(self, quant_config):\n"
              "        self.fc = ColumnParallelLinear(4, 4, quant_config=quant_config)\n\n\n"
              "class Model:\n    def __init__(self, quant_config):\n        self.decoder = Decoder(quant_config)\n")
    widths = {}
    for option in ((), ("--line-length", "79")):
        project = tmp_path / ("wrapped" if option else "plain")
        project.mkdir()
        (project / "block.py").write_text(source, encoding="utf-8")
        proc = dtl(project, "check", "--fix", "--no-cache", *option)
        assert proc.returncode in (0, 1), proc.stderr
        fixed = (project / "block.py").read_text(encoding="utf-8")
        assert "get_layer_input_dtype(" in fixed, proc.stdout
        widths[option] = max(len(line) for line in fixed.splitlines() if line not in source.splitlines())
    assert widths[()] > 79 >= widths[("--line-length", "79")]
    bad = dtl(tmp_path / "plain", "check", "--line-length", "-3", "--no-cache")
    assert bad.returncode == 2 and "line-length" in bad.stderr


def test_a_trailing_comment_moves_to_the_closing_bracket_as_ruff_format_leaves_it():
    original = ("def f(self, states):\n"
                "    out = self.embedding_proj_layer(states.to(self.embedding_proj_layer.weight.dtype))  # (b, s)\n")
    fixed = ("def f(self, states):\n    proj_dtype = get_module_input_dtype(self.embedding_proj_layer)\n"
             "    out = self.embedding_proj_layer(states.to(proj_dtype or states.dtype))  # (batch_size, sequence_length)\n")
    wrapped = wrap_long_lines(original, fixed, 79)
    assert wrapped.splitlines()[2:] == ["    out = self.embedding_proj_layer(",
                                        "        states.to(proj_dtype or states.dtype)",
                                        "    )  # (batch_size, sequence_length)"]
    proc = subprocess.run([str(RUFF), "format", "--isolated", "--line-length", "79", "--diff", "-"],
                          input=wrapped, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stdout  # ruff format would leave it as it is
    # A `#` inside a string is not a comment.
    assert wrap_long_lines("", "x = f('#', a_long_name_number_one, a_long_name_number_two)\n", 40).count("\n") == 5


def test_brackets_commas_and_words_inside_strings_never_split_a_line():
    from dtype_lint.fix.formatting import _bracket_pairs, _split_at_words

    code = 'f(a, "x, (y" if b else \'z\\\' or )\', g[0])'
    assert _bracket_pairs(code) == {1: len(code) - 1, code.index("[0]"): code.index("[0]") + 2}
    assert _bracket_pairs('f("(")') == {1: 5} and _bracket_pairs('f(")') is None  # a string left open
    assert _bracket_pairs("f(a))") is None and _bracket_pairs("f((a)") is None
    body = code[2:-1]
    assert _split_at_words(body, (",",)) == ["a", '"x, (y" if b else \'z\\\' or )\'', "g[0]"]
    assert _split_at_words(body, (" if ", " else ")) == ['a, "x, (y"', "if b", "else 'z\\' or )', g[0]"]
    assert _split_at_words(body, (" or ", " and ")) == [body]


# --- real runs -----------------------------------------------------------------------------------


@pytest.mark.slow
def test_codemod_fixtures_fixed_in_a_vllm_project_pass_ruff(tmp_path: Path):
    before, after = tmp_path / "before", tmp_path / "after"
    names = sorted(p.name for p in (ROOT / "fixtures/codemod").glob("*.in.py"))
    for tree in (before, after):
        folder = tree / "vllm/model_executor/models"
        folder.mkdir(parents=True)
        for marker in ("vllm", "vllm/model_executor", "vllm/model_executor/models"):
            (tree / marker / "__init__.py").write_text("")
        (tree / "pyproject.toml").write_text(VLLM_RUFF, encoding="utf-8")
        for name in names:
            shutil.copyfile(ROOT / "fixtures/codemod" / name, folder / name.replace(".in.py", ".py"))
    proc = dtl(after, "check", "--fix", "--no-cache")
    assert proc.returncode in (0, 1), proc.stderr
    assert "fixed" in proc.stdout
    files = [f"vllm/model_executor/models/{n.replace('.in.py', '.py')}" for n in names]
    changed = [f for f in files if (after / f).read_bytes() != (before / f).read_bytes()]
    assert len(changed) >= 8, changed
    assert_no_new_findings(before, after, changed)


@pytest.mark.slow
def test_an_isort_clean_plugin_stays_clean(tmp_path: Path):
    before, after = tmp_path / "before", tmp_path / "after"
    attn = PLUGIN + '''

class Attn(torch.nn.Module):
    def __init__(self, kv_b_proj: ColumnParallelLinear):
        super().__init__()
        self.kv_b_proj = kv_b_proj

    def forward(self, hidden_states_with_a_long_name):
        return self.kv_b_proj(hidden_states_with_a_long_name.to(self.kv_b_proj.weight.dtype))
'''
    for tree in (before, after):
        (tree / "myplugin").mkdir(parents=True)
        (tree / "pyproject.toml").write_text(
            '[tool.ruff]\nline-length = 88\n\n[tool.dtype-lint]\nhelper = "myplugin.layer_input_dtype:get_layer_input_dtype"\n')
        (tree / "myplugin/__init__.py").write_text("")
        (tree / "myplugin/util.py").write_text("def helper_fn():\n    pass\n")
        (tree / "myplugin/attn.py").write_text(attn)
    assert dtl(after, "check", "--fix").returncode == 0
    assert ruff_findings(before, [before / "myplugin/attn.py"]) == Counter({("E501", attn.splitlines()[-1].strip()): 1})
    assert ruff_findings(after, [after / "myplugin/attn.py"]) == Counter()  # the long line was ours to wrap
    fixed = (after / "myplugin/attn.py").read_text()
    assert "\nfrom myplugin.layer_input_dtype import get_layer_input_dtype\nfrom myplugin.util import helper_fn\n" in fixed


@pytest.mark.slow
@pytest.mark.network
@pytest.mark.full("CI: test_codemod_fixtures_fixed_in_a_vllm_project_pass_ruff, vLLM's settings on our fixtures")
def test_the_vllm_0330_migration_passes_vllms_ruff_settings(vllm_0330: Path, tmp_path: Path):
    before, after = tmp_path / "before", tmp_path / "after"
    for tree in (before, after):
        shutil.copytree(vllm_0330 / "vllm", tree / "vllm")
        (tree / "pyproject.toml").write_text(VLLM_RUFF, encoding="utf-8")
    proc = dtl(after, "migrate", ".", "--report", str(tmp_path / "report.md"), "--no-progress")
    assert proc.returncode in (0, 1), proc.stderr
    changed = sorted(str(p.relative_to(after)) for p in (after / "vllm").rglob("*.py")
                     if not (before / p.relative_to(after)).exists()
                     or p.read_bytes() != (before / p.relative_to(after)).read_bytes())
    assert len(changed) >= 5, changed
    existing = [f for f in changed if (before / f).exists()]
    assert_no_new_findings(before, after, existing)
    created = [f for f in changed if not (before / f).exists()]
    assert ruff_findings(after, [after / f for f in created]) == Counter()  # the helper itself
