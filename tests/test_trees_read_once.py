"""What a census reads once is not kept for the rest of the run (#37, peak RSS).

A file's facts and trees are kept (the index's recently-used list, the store of shared trees in
core/trees.py) because the next analysed file often reads the same base classes. Two censuses
read files nothing else asks for: the compiled-code census (analysis/compiled_elsewhere.py) parses
the files that compile, and the family census (storage/layers.py) reads every file of a model
family's folder. Kept, their trees stayed through the analyses after them: on vLLM 0.34.0 1.6 MiB
and 6 MiB of a worker's peak."""

from __future__ import annotations

from pathlib import Path

import pytest
from tiny_project import STUB_MODEL, stub_project

from dtype_lint.analysis.index.class_facts import ProjectFacts
from dtype_lint.analysis.index.class_index import QuantizableLayerIndex, extract_header
from dtype_lint.core import trees
from dtype_lint.core.config import load_config
from dtype_lint.run.pipeline import RunOptions, run

# Nested classes: the file's facts come from its parse (regions.class_regions cannot tell).
NESTED = """\
import torch


class Block(torch.nn.Module):
    class Options:
        size = 4

    def __init__(self):
        super().__init__()
        self.proj = torch.nn.Linear(4, 4)
"""


def _index(tmp_path: Path) -> QuantizableLayerIndex:
    (tmp_path / "pkg").mkdir()
    (tmp_path / "pkg" / "__init__.py").write_text("")
    (tmp_path / "pkg" / "block.py").write_text(NESTED)
    headers = [extract_header(path.read_text(), module, str(path), path.name == "__init__.py")
               for path, module in ((tmp_path / "pkg" / "__init__.py", "pkg"), (tmp_path / "pkg" / "block.py", "pkg.block"))]
    return QuantizableLayerIndex(headers, [], [])


def test_facts_read_once_are_built_but_not_kept(tmp_path: Path):
    trees.clear()
    index = _index(tmp_path)
    read = ProjectFacts(index, load_file=lambda p: Path(p).read_text(), reduce=True)
    parses = trees.parses
    first = read.file_facts("pkg.block", keep=False)
    second = read.file_facts("pkg.block", keep=False)
    assert first is not None and "pkg.block.Block" in first.classes and second is not first
    assert trees.parses == parses + 2  # built each time: nothing kept them
    assert not trees._kept and index.kept_facts(("reduced", str(tmp_path / "pkg" / "block.py"))) is None
    kept = ProjectFacts(index, load_file=lambda p: Path(p).read_text(), reduce=True).file_facts("pkg.block")
    parses = trees.parses
    # Facts kept already serve a caller that reads once, without a parse.
    assert ProjectFacts(index, load_file=lambda p: Path(p).read_text(), reduce=True).file_facts(
        "pkg.block", keep=False) is kept and trees.parses == parses
    trees.clear()


def test_the_compiled_code_census_keeps_no_tree(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    """export.py scripts the model: the census parses it (the site gets no fix), and keeps no tree."""
    root = stub_project(tmp_path, STUB_MODEL, {"proj/export.py": "import torch\nfrom proj.model import Attn\n\n\n"
                                                                   "def export(layer):\n"
                                                                   "    return torch.jit.script(Attn(layer))\n"})
    parsed: list[str] = []
    kept: list[str] = []
    real_parse, real_keep = trees._parse, trees._keep
    monkeypatch.setattr(trees, "_parse", lambda text, path, chars: parsed.append(Path(path).name)
                        or real_parse(text, path, chars))
    monkeypatch.setattr(trees, "_keep", lambda path, *rest: kept.append(Path(path).name) or real_keep(path, *rest))
    result = run(load_config(root), RunOptions(paths=[str(root)], jobs=1, use_cache=False))
    assert [(f.code, f.fix) for f in result.findings] == [("DTL001", None)]  # TorchScript: no fix
    assert "export.py" in parsed and "export.py" not in kept, (parsed, kept)
    trees.clear()
