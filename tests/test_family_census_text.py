"""A layer known only from an annotation in a model family's folder is judged by every
construction of its class in that folder (LayerResolver._family_never_quantizes). The census
skips a class whose text names nothing that can be such a class, unparsed; a construction
written through an import alias or a module attribute, of an engine class outside the project,
is still counted."""

from __future__ import annotations

from pathlib import Path

import pytest
from tiny_project import json_findings, record_class_parses, write_tree

USER = """\
from vllm.model_executor.layers.linear import ColumnParallelLinear


def project(head: ColumnParallelLinear, x):
    return head(x.to(head.weight.dtype))
"""

UNQUANTIZED = """\
from vllm.model_executor.layers.linear import ColumnParallelLinear as Head


class ModelA:
    def __init__(self):
        self.head = Head(8, 8, quant_config=None)
"""

# The same class through a module attribute, with the model's quant config.
QUANTIZED = """\
import vllm.model_executor.layers.linear as L


class ModelB:
    def __init__(self, quant_config):
        self.head = L.ColumnParallelLinear(8, 8, quant_config=quant_config)
"""

# Nothing here names the layer class: the census need not parse it.
UNRELATED = """\
import torch


class Norm(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.eps = 1e-6

    def forward(self, x):
        y = x * 2
        y = y + self.eps
        return y
"""


def _project(tmp_path: Path, quantized: bool) -> Path:
    files = {"pyproject.toml": '[tool.dtype-lint]\nhelper = "proj.dtypes:get_layer_input_dtype"\n',
             "proj/__init__.py": "", "proj/models/__init__.py": "", "proj/models/fam/__init__.py": "",
             "proj/models/fam/user.py": USER, "proj/models/fam/a.py": UNQUANTIZED,
             "proj/models/fam/norm.py": UNRELATED}
    if quantized:
        files["proj/models/fam/b.py"] = QUANTIZED
    return write_tree(tmp_path / "p", files)


@pytest.mark.parametrize("quantized", [False, True])
def test_every_construction_in_the_family_counts_and_unrelated_classes_are_not_parsed(tmp_path, monkeypatch,
                                                                                      quantized):
    parsed = record_class_parses(monkeypatch)
    findings = json_findings(_project(tmp_path, quantized))
    # Built with quant_config=None everywhere: never quantized. One construction through a module
    # attribute passes the model's config: the annotated layer may be quantized.
    assert [(Path(f["path"]).name, f["code"]) for f in findings] == ([("user.py", "DTL001")] if quantized else [])
    assert "ModelA" in parsed and "Norm" not in parsed


def test_the_census_asks_only_the_words_that_may_name_a_class(tmp_path, monkeypatch):
    # `may_name` answers no for any word but a class the module defines, a name it imports or a
    # top-level package: the census asks it of those only (a class's other words, `self`, `eps`,
    # `forward`..., are not each a call).
    from dtype_lint.analysis.storage.layers import LayerResolver

    asked: dict[str, set[str]] = {}
    real = LayerResolver._may_name

    def counted(self, module, header, imports, qualname):
        may_name, naming = real(self, module, header, imports, qualname)

        def ask(word):
            asked.setdefault(module.rsplit(".", 1)[-1], set()).add(word)
            return may_name(word)
        return ask, naming

    monkeypatch.setattr(LayerResolver, "_may_name", counted)
    assert json_findings(_project(tmp_path, quantized=True))
    assert asked.get("norm", set()) <= {"torch"}, asked  # not `self`, `eps`, `x`, `y`...
    assert asked["b"] <= {"L", "proj", "ModelB"}, asked
