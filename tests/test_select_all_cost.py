"""Every rule on (`--select ALL`) shares the default rules' parses, and the storage model's memo is bounded (#37).

With the opt-in rules on, a file is parsed whole (their reads of a tree are not limited to the
regions core/regions.py keeps). A file read only for its class facts used to be parsed whole too,
and again when it was analysed itself once the tree store had let it go: now its classes are
parsed from their own text, so the one whole parse of a file is its analysis. The guard engine's
test of an imported predicate reads the one `def` of the module that defines it even when that
module's facts are already loaded (it parsed the whole module before). The storage model's memo
keeps the answers last used, not every answer of the run.
"""

from __future__ import annotations

import ast
import shutil
from collections import Counter
from pathlib import Path

from dtype_lint.analysis.index import class_index
from dtype_lint.analysis.index.class_facts import ProjectFacts
from dtype_lint.analysis.storage import storage_model
from dtype_lint.api import check_paths
from dtype_lint.core.config import load_config

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"

# A model file in the fixture project's shape: a cast DTL001 reports and a `.weight` read DTL003
# reads, on a layer whose classes live in minillm/layers/linear.py (analysed after these files:
# paths are analysed in order, and `minillm/a_*.py` sorts before `minillm/layers/`).
MODEL = """\
import torch
from torch import nn

from minillm.layers.linear import ColumnParallelLinear


class Block{n}(nn.Module):
    def __init__(self, quant_config=None):
        super().__init__()
        self.proj = ColumnParallelLinear(8, 8, quant_config=quant_config)

    def forward(self, x):
        shape = self.proj.weight.shape
        return self.proj(x.to(self.proj.weight.dtype)).view(shape[0], -1)
"""
MODELS = 10  # more than the tree store keeps (core/trees.py MAX_KEPT_FILES)


def _project(root: Path, models: int = MODELS) -> Path:
    src = root / "src"
    shutil.copytree(FIXTURES / "project", src, ignore=shutil.ignore_patterns("attention", "models", "expected.txt"))
    for n in range(models):
        (src / "minillm" / f"a_{n:02d}.py").write_text(MODEL.format(n=n))
    return src


def _run_all(src: Path, monkeypatch):
    monkeypatch.chdir(src)
    config = load_config(src)
    config.select = ["ALL"]
    return check_paths(["."], config, use_cache=False, jobs=1)


def test_every_rule_on_parses_each_file_whole_at_most_once(tmp_path: Path, monkeypatch):
    """linear.py is read for its class facts by every model file, then analysed: one whole parse
    (two on e13b0c6: once for the class facts, once more for its own analysis)."""
    src = _project(tmp_path)
    texts = {str(p.relative_to(src)): p.read_text() for p in src.rglob("*.py")}
    whole: Counter[str] = Counter()
    original = ast.parse

    def counting(source, filename="<unknown>", *args, **kwargs):
        name = str(Path(filename).resolve().relative_to(src.resolve())) if Path(filename).is_absolute() \
            else str(filename).removeprefix("./")
        if texts.get(name) == source:
            whole[name] += 1
        return original(source, filename, *args, **kwargs)

    monkeypatch.setattr(ast, "parse", counting)
    result = _run_all(src, monkeypatch)
    codes = Counter(f.code for f in result.findings)
    assert codes["DTL001"] == MODELS, codes  # every model file was analysed, on the whole tree
    assert whole["minillm/layers/linear.py"] >= 1, whole  # analysed itself (it reads `.weight`)
    assert max(whole.values()) == 1, f"files parsed whole more than once: {dict(whole)}"


def test_the_storage_memo_stays_under_its_bound_and_finds_the_same(tmp_path: Path, monkeypatch):
    """With a bound of 3 answers the run asks more questions than that, keeps at most 3, and
    reports exactly what the run with the shipped bound reports."""
    src = _project(tmp_path, models=2)
    indexes: list = []
    original_init = class_index.QuantizableLayerIndex.__init__

    def recording(self, *args, **kwargs):
        original_init(self, *args, **kwargs)
        indexes.append(self)

    monkeypatch.setattr(class_index.QuantizableLayerIndex, "__init__", recording)
    unbounded = _run_all(src, monkeypatch).findings
    asked = max(len(getattr(ix, "_storage_memo", {})) for ix in indexes)
    assert asked > 3, f"the run asked the storage model only {asked} questions: the bound would not be reached"
    indexes.clear()
    monkeypatch.setattr(storage_model, "STORAGE_MEMO_ENTRIES", 3, raising=False)
    bounded = _run_all(src, monkeypatch).findings
    kept = [len(getattr(ix, "_storage_memo", {})) for ix in indexes]
    assert kept and max(kept) <= 3, f"the storage memo kept {kept} answers under a bound of 3"
    assert bounded == unbounded


def test_a_loaded_module_still_gives_its_text_but_the_analysed_one_does_not(tmp_path: Path):
    """module_text after the module's facts were read from its file: its text (None on e13b0c6,
    which sent the imported-predicate test to a whole parse); the analysed module: None (its
    analysed text may not be the file's)."""
    from dtype_lint.analysis.index.class_index import QuantizableLayerIndex, extract_header
    from dtype_lint.run.file_analysis import safe_read

    src = _project(tmp_path, models=1)
    base = src / "minillm" / "quant" / "base.py"
    index = QuantizableLayerIndex([extract_header(base.read_text(), "minillm.quant.base", str(base), False)], [], [])
    project = ProjectFacts(index, load_file=safe_read)
    assert project.file_facts("minillm.quant.base") is not None
    text = project.module_text("minillm.quant.base")
    assert text == base.read_text()
    project.register(ast.parse("x = 1\n"), "minillm.a_00", str(src / "minillm" / "a_00.py"), False, {})
    assert project.file_facts("minillm.a_00") is not None
    assert project.module_text("minillm.a_00") is None
