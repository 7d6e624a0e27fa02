"""Issue #40, user projects (round 5): a distribution that ships a namespace folder, and fixes that
keep the project's own ruff/isort settings.

- A namespace folder (PEP 420: no `__init__.py`) whose sub-packages import through its name
  (flash-linear-attention's wheel: `fla/layers/`, `fla/models/`, `fla/__init__.py` from fla-core)
  is the top of module names, so `from nsmodels.layers.attn import Attention` in a model file
  resolves and the layer a Hugging Face model builds there is judged as the model's own.
- The helper a fix creates goes into the first regular package (a file put in the namespace folder
  is not in the wheel), and its import sorts as the project's first-party ones.
- A weight written back through `nn.init` in its own dtype is a weight cast, not an activation's.
- For each family whose fixes create a helper (HF, peft's adapters, the quantizer family,
  megatron), `ruff check` with the project's isort rules and an 88-column line length reports
  nothing the fix added.

All fixtures are our own code (nothing copied from the trees the issue names).
"""

from __future__ import annotations

import ast
import json
import shutil
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest
from cli_runner import dtl
from tiny_project import fix_project, json_findings, write_tree

from dtype_lint.core.discovery import discover_files, module_name
from dtype_lint.ecosystems.hf.helper import HF_HELPER_SOURCE, NEW_HF_HELPER_TEXT
from dtype_lint.ecosystems.megatron.helper import HELPER_SOURCE, NEW_HELPER_TEXT
from dtype_lint.fix import formatting

ROOT = Path(__file__).resolve().parents[1]
JOURNEYS = ROOT / "fixtures" / "journeys"
RUFF = Path(sys.executable).with_name("ruff")
# A project that lints as many do: pycodestyle, pyflakes and isort, at Black's 88 columns.
RUFF_SETTINGS = '\n[tool.ruff]\nline-length = 88\n\n[tool.ruff.lint]\nselect = ["E", "F", "W", "I"]\n'

# ---- a namespace-package project, ruff-clean at 88 columns --------------------------------------

NAMESPACE_PROJECT = {
    "pyproject.toml": '[project]\nname = "nsmodels-layers"\nversion = "0.1.0"\n' + RUFF_SETTINGS,
    # `nsmodels/` has no `__init__.py`: another distribution ships it.
    "nsmodels/layers/__init__.py": "from .attn import Attention\n\n__all__ = [\"Attention\"]\n",
    "nsmodels/layers/attn.py": '''\
from torch import nn

from nsmodels.layers.utils import split_heads


class Attention(nn.Module):
    def __init__(self, hidden_size: int, heads: int):
        super().__init__()
        self.heads = heads
        self.output_projection = nn.Linear(hidden_size, hidden_size)

    def forward(self, hidden_states):
        heads = split_heads(hidden_states, self.heads)
        out = heads.flatten(-2)
        return self.output_projection(out.to(self.output_projection.weight.dtype))
''',
    "nsmodels/layers/utils.py": '''\
def split_heads(hidden_states, heads: int):
    return hidden_states.unflatten(-1, (heads, -1))
''',
    "nsmodels/models/__init__.py": "",
    "nsmodels/models/modeling_tiny.py": '''\
from torch import nn
from transformers import PreTrainedModel

from nsmodels.layers.attn import Attention


class TinyBlock(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.attn = Attention(config.hidden_size, config.num_heads)

    def forward(self, hidden_states):
        return self.attn(hidden_states)


class TinyPreTrainedModel(PreTrainedModel):
    def _initialize_weights(self, module: nn.Module):
        if isinstance(module, TinyBlock):
            dtype = module.attn.output_projection.weight.dtype
            weight = module.attn.output_projection.weight
            weight.data = nn.init.orthogonal_(weight.data.float()).to(dtype)


class TinyModel(TinyPreTrainedModel):
    def __init__(self, config):
        super().__init__(config)
        self.blocks = nn.ModuleList([TinyBlock(config) for _ in range(2)])

    def forward(self, hidden_states):
        for block in self.blocks:
            hidden_states = block(hidden_states)
        return hidden_states
''',
}
SITE = ("nsmodels/layers/attn.py", 15)


def test_a_namespace_folder_that_imports_itself_is_the_top_of_module_names(tmp_path):
    root = write_tree(tmp_path / "proj", NAMESPACE_PROJECT)
    assert module_name(str(root / "nsmodels/layers/attn.py"), root) == "nsmodels.layers.attn"
    assert module_name(str(root / "nsmodels/models/modeling_tiny.py"), root) == "nsmodels.models.modeling_tiny"
    found = {f.path: f.module for f in discover_files([str(root)], (), root)}
    assert found[str(root / "nsmodels/layers/__init__.py")] == "nsmodels.layers"
    assert found[str(root / "nsmodels/models/modeling_tiny.py")] == "nsmodels.models.modeling_tiny"
    # A folder of packages that never imports through its own name keeps them top-level, as they
    # are imported (a test folder run from inside it).
    loose = write_tree(tmp_path / "loose", {"suite/models/__init__.py": "from .a import X\n",
                                            "suite/models/a.py": "X = 1\n"})
    assert module_name(str(loose / "suite/models/a.py"), loose) == "models.a"
    assert {f.module for f in discover_files([str(loose)], (), loose)} == {"models", "models.a"}
    # A distribution folder named as its package (a monorepo's `packages/alpha/alpha/`): its files
    # import `alpha.layers`, the package's own name, not the folder's `alpha.alpha`.
    repo = write_tree(tmp_path / "repo", {"packages/alpha/alpha/__init__.py": "",
                                          "packages/alpha/alpha/layers.py": "X = 1\n",
                                          "packages/alpha/alpha/model.py": "from alpha.layers import X\n"})
    assert module_name(str(repo / "packages/alpha/alpha/model.py"), repo) == "alpha.model"


def test_a_layer_in_a_namespace_package_is_reported_and_fixed_inside_its_package(tmp_path):
    root = write_tree(tmp_path / "proj", NAMESPACE_PROJECT)
    findings = json_findings(root)
    # The cast in the layer the model builds (reached through `from nsmodels.layers.attn import`);
    # not the weight written back through `nn.init` in the model's own initialiser.
    assert [(f["path"], f["line"]) for f in findings] == [SITE], findings
    assert any("built by `TinyModel`" in e["message"] for e in findings[0]["evidence"]), findings[0]["evidence"]

    fix_project(root)
    helper = root / "nsmodels/layers/module_input_dtype.py"
    assert helper.is_file() and not (root / "nsmodels/module_input_dtype.py").exists()
    fixed = (root / "nsmodels/layers/attn.py").read_text()
    assert "from nsmodels.layers.module_input_dtype import get_module_input_dtype\n" in fixed
    # The fixed project passes its own ruff settings: the helper's docstring at 88 columns, its
    # import in the first-party block (the namespace folder is first-party, as Ruff finds it), the
    # lengthened cast wrapped.
    assert ruff_findings(root) == Counter(), fixed


# ---- a weight cast, not an activation cast ------------------------------------------------------

INIT_MODEL = '''\
import torch
from torch import nn
from transformers import PreTrainedModel


class Mixer(nn.Module):
    def __init__(self, size: int):
        super().__init__()
        self.key = nn.Linear(size, size)

    def forward(self, x, attn_weights):
        return self.key(attn_weights.float().to(self.key.weight.dtype) * x)


class MixerModel(PreTrainedModel):
    def __init__(self, config):
        super().__init__(config)
        self.mixer = Mixer(config.hidden_size)

    def _initialize_weights(self, module: nn.Module):
        if isinstance(module, Mixer):
            original_dtype = module.key.weight.dtype
            module.key.weight.data = nn.init.orthogonal_(
                module.key.weight.data.to(torch.float32)
            ).to(original_dtype)
'''


def test_a_weight_written_back_through_nn_init_is_not_an_activation_cast(tmp_path):
    root = write_tree(tmp_path / "proj", {"pyproject.toml": '[project]\nname = "mixer"\nversion = "0"\n',
                                          "mixer/__init__.py": "", "mixer/modeling_mixer.py": INIT_MODEL})
    rows = [f["line"] for f in json_findings(root)]
    # `attn_weights.float()` is an activation (a name that mentions weights is not a parameter read
    # through conversions): still reported. The initialiser's cast of the key's own weight is not.
    assert rows == [12]


# ---- ruff on the fixed project, per family ------------------------------------------------------


def ruff_findings(project: Path) -> Counter:
    """(file, code, the offending line's text) of `ruff check` with the project's settings (I001
    keyed by the file: it names a whole import block)."""
    assert RUFF.exists(), "ruff is in the `test` extra"
    proc = subprocess.run([str(RUFF), "check", "--no-cache", "--output-format", "json", "."], cwd=project,
                          capture_output=True, text=True)
    assert proc.returncode in (0, 1), proc.stderr
    found: Counter = Counter()
    for item in json.loads(proc.stdout):
        path = Path(item["filename"])
        text = "" if item["code"] == "I001" else \
            path.read_text(encoding="utf-8").splitlines()[item["location"]["row"] - 1].strip()
        found[(path.relative_to(project).as_posix(), item["code"], text)] += 1
    return found


# (journey project, the helper its fix creates): the families whose fixes create a helper module.
FAMILY_PROJECTS = [
    ("adapter_lib", "src/tinyadapt/module_input_dtype.py"),  # peft-style adapters: the HF helper
    ("quant_replace", "src/tinyq/module_input_dtype.py"),  # a quantizer applied to own modules
    ("megatron_spec", "minimeg/layer_compute_dtype.py"),  # megatron module specs
]


@pytest.mark.parametrize("journey,helper", [
    pytest.param(*case, id=case[0], marks=pytest.mark.full(
        "the namespace project's HF fix is checked with ruff, and each template's fit, in CI"))
    for case in FAMILY_PROJECTS])
def test_a_family_fix_adds_no_ruff_finding_at_the_projects_settings(tmp_path, journey, helper):
    original = tmp_path / "original"
    shutil.copytree(JOURNEYS / journey, original)
    with open(original / "pyproject.toml", "a", encoding="utf-8") as handle:
        handle.write(RUFF_SETTINGS)
    fixed = tmp_path / "fixed"
    shutil.copytree(original, fixed)
    # megatron's journey keeps one site a person must fix (a buffer's dtype): exit 1 there.
    proc = dtl(fixed, "check", ".", "--fix", "--no-cache")
    assert proc.returncode in (0, 1) and (fixed / helper).is_file(), proc.stdout + proc.stderr
    # The journeys' own code is not written to 88 columns: what the fix added is what counts.
    added = ruff_findings(fixed) - ruff_findings(original)
    assert added == Counter(), sorted(added)


# ---- the CI share of the family check: each template fitted, a lengthened cast wrapped ----------


@pytest.mark.parametrize("template", [NEW_HF_HELPER_TEXT, HF_HELPER_SOURCE, NEW_HELPER_TEXT, HELPER_SOURCE],
                         ids=["hf-new", "hf-appended", "megatron-new", "megatron-appended"])
@pytest.mark.parametrize("length", [88, 79])
def test_each_helper_template_fits_the_projects_line_length(template, length):
    fitted = formatting.fit_docstrings(template, length)
    # Only the docstrings are re-filled (the code is the template's); every docstring row fits.
    assert ast.dump(_code_only(ast.parse(fitted))) == ast.dump(_code_only(ast.parse(template)))
    tree = ast.parse(fitted)
    docstring_rows = {row for node in ast.walk(tree) if isinstance(node, ast.FunctionDef)
                      for row in range(node.body[0].lineno, node.body[0].end_lineno + 1)}
    rows = fitted.split("\n")
    assert all(len(rows[row - 1]) <= length for row in docstring_rows), fitted
    assert ast.get_docstring(tree.body[-1]).split() == ast.get_docstring(ast.parse(template).body[-1]).split()
    # A project at a longer line length (transformers' 119) gets the template unchanged.
    assert formatting.fit_docstrings(template, 119) == template and formatting.fit_docstrings(template, None) == template


def _code_only(tree: ast.Module) -> ast.Module:
    for node in ast.walk(tree):
        if isinstance(node, ast.FunctionDef):
            node.body = node.body[1:]
    return tree


@pytest.mark.parametrize("statement", [
    "return torch.sigmoid(self.proj(x.to(get_module_input_dtype(self.proj) or x.dtype))) * x",
    "gated = torch.sigmoid(self.proj(x.to(get_module_input_dtype(self.proj) or x.dtype))) * x",
])
def test_a_lengthened_statement_ending_in_no_bracket_is_wrapped_in_parentheses(statement):
    original = "def forward(self, x):\n    if x is not None:\n        " + "return x\n"
    text = "def forward(self, x):\n    if x is not None:\n        " + statement + "\n"
    wrapped = formatting.wrap_long_lines(original, text, 88)
    assert wrapped != text and all(len(row) <= 88 for row in wrapped.splitlines()), wrapped
    assert ast.dump(ast.parse(wrapped)) == ast.dump(ast.parse(text))
    assert wrapped.splitlines()[2].endswith(" (") and wrapped.splitlines()[-1] == "        )"
