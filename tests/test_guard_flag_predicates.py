"""A flag set from a module function's result proves a layer unquantized where the function's one
returned test does (`self.fused = full_table(self.proj)`, `full_table(layer)` returning
`... and isinstance(getattr(layer, "quant_method", None), UnquantizedLinearMethod)`), whether the
function is the module's own or imported from another module of the project; and
`getattr(L, "quant_method", None)` is read as `L.quant_method` in such a test.

The shape is vLLM 0.34.0's DeepSeek-V3.2 NVIDIA model (`self.replicated_embed =
has_full_vocab_on_rank(self.embed_tokens)`, then `fused_embed_norm(..., self.embed_tokens.weight,
...)` only under that flag), written here in our own words. Before, the flag's values were read
with no module function known, and an imported function's body came from the reduced parse of its
module, where it is blanked."""

from __future__ import annotations

import json
import textwrap
from pathlib import Path

import pytest
from cli_runner import dtl
from tiny_project import PYPROJECT, write_tree

PREDICATE = """\
def full_table(layer):
    \"\"\"Whether the layer's weight is one plain table.\"\"\"
    return getattr(layer, "tp_size", 0) == 1 and {test}
"""
UNQUANTIZED = 'isinstance(getattr(layer, "quant_method", None), UnquantizedLinearMethod)'

MODEL = """\
import torch
from vllm.model_executor.layers.linear import ColumnParallelLinear, UnquantizedLinearMethod
{import_line}


class Block(torch.nn.Module):
    def __init__(self, hidden, quant_config=None):
        super().__init__()
        self.proj = ColumnParallelLinear(hidden, hidden, quant_config=quant_config)
        self.fused = full_table(self.proj)

    def scratch(self, n):
        if self.fused:
            return torch.empty(n, dtype=self.proj.weight.dtype)
        return torch.empty(n)
{own}"""


def _findings(root: Path) -> list[tuple[str, str, int]]:
    run = dtl(root, "check", ".", "--no-cache", "--output-format", "json", "--exit-zero")
    assert run.returncode == 0, run.stderr
    return sorted((f["code"], f["path"], f["line"]) for f in json.loads(run.stdout)["findings"])


def _project(root: Path, where: str, test: str) -> Path:
    predicate = PREDICATE.format(test=test)
    if where == "own":
        model = MODEL.format(import_line="", own="\n\n" + predicate)
        files = {"proj/model.py": model}
    else:
        model = MODEL.format(import_line="from proj.tables import full_table", own="")
        tables = "from vllm.model_executor.layers.linear import UnquantizedLinearMethod\n\n\n" + predicate
        files = {"proj/model.py": model, "proj/tables.py": tables}
    return write_tree(root, {"pyproject.toml": PYPROJECT, "proj/__init__.py": "",
                             **{k: textwrap.dedent(v) for k, v in files.items()}})


@pytest.mark.parametrize("where", ["own", "imported"])
@pytest.mark.parametrize("test", [UNQUANTIZED, UNQUANTIZED.replace('getattr(layer, "quant_method", None)',
                                                                    "layer.quant_method")],
                         ids=["getattr", "attribute"])
def test_a_flag_from_an_unquantized_predicate_guards_the_site(tmp_path, where, test):
    assert _findings(_project(tmp_path, where, test)) == []


@pytest.mark.parametrize("where", ["own", "imported"])
def test_a_flag_from_a_predicate_that_proves_nothing_does_not(tmp_path, where):
    """Control: the same flag, its function testing only the layer's shards, guards nothing."""
    assert _findings(_project(tmp_path, where, 'getattr(layer, "bias", None) is None')) == [
        ("DTL002", "proj/model.py", 14)]


def test_a_getattr_with_another_name_is_not_the_quant_method(tmp_path):
    test = UNQUANTIZED.replace('"quant_method"', '"quant_config"')
    assert _findings(_project(tmp_path, "own", test)) == [("DTL002", "proj/model.py", 14)]


def test_a_cached_answer_follows_an_edit_of_the_imported_predicate(tmp_path):
    """The predicate's module is one of the reads of the guarded file's analysis: a warm run after
    the predicate stops proving anything reports the site, and so does a run on the file alone."""
    root = _project(tmp_path, "imported", UNQUANTIZED)

    def cached(*paths: str) -> list[tuple[str, str, int]]:
        run = dtl(root, "check", *paths, "--output-format", "json", "--exit-zero")
        assert run.returncode == 0, run.stderr
        return sorted((f["code"], f["path"], f["line"]) for f in json.loads(run.stdout)["findings"])

    assert cached(".") == []
    tables = root / "proj" / "tables.py"
    tables.write_text(tables.read_text().replace(UNQUANTIZED, 'getattr(layer, "bias", None) is None'))
    assert cached(".") == [("DTL002", "proj/model.py", 14)]
    assert cached("proj/model.py") == [("DTL002", "proj/model.py", 14)]
