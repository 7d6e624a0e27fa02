"""Facts parsed from a class's or a function's own text let their trees go once a file's analysis
has not asked for them (ClassFacts.compact, TextFunctions.compact, QuantizableLayerIndex
.compact_facts): a method is read back from its own lines when asked for, a lazy fact not read
yet parses the class again, and every answer is the one the facts that kept the tree give."""

from __future__ import annotations

import ast
import gc
import shutil
import types
from pathlib import Path

from dtype_lint.analysis.index import class_index
from dtype_lint.analysis.index.class_facts import LazyClasses, ProjectFacts
from dtype_lint.analysis.index.class_index import QuantizableLayerIndex, extract_header
from dtype_lint.api import check_paths
from dtype_lint.core import regions, trees
from dtype_lint.core.config import load_config

# A class whose method bodies are most of its tree (a config's `__post_init__` checking and
# setting its fields), a quant-method call, a dispatch on a parameter, a getter; a class that
# names no call CallFacts read; a module-level function another file's call is followed into.
_SETS = "".join(f"        if flag and self.size > {i}:\n            logger.warning('field %d: %s', {i}, flag)\n"
                f"            self.field_{i} = self.size * {i}\n" for i in range(40))
TEXT = f'''\
from proj.layers import Linear, LinearBase, MoE


class Config:
    size: int = 4

    def __init__(self, flag, quant_config: "QuantConfig"):
        super().__init__()
        self.quant_config = quant_config
        self.flag = flag

    def __post_init__(self, flag):
{_SETS}
    def dispatch(self, layer):
        if isinstance(layer, (LinearBase, MoE)):
            self.method = self.quant_config.get_quant_method(self, "p")
        return layer

    @property
    def width(self):
        return self.field_3


class Plain:
    def __init__(self, x):
        self.x = Linear(x, x)


def follow(layer, dtype):
    total = 0
    for i in range(4):
        total = total + i
    return layer.weight.to(dtype)
'''
PATH = "proj/config.py"


def _project() -> tuple[QuantizableLayerIndex, ProjectFacts]:
    header = extract_header(TEXT, "proj.config", PATH, False)
    index = QuantizableLayerIndex([header], [], [])
    return index, ProjectFacts(index, load_file={PATH: TEXT}.get, reduce=True)


def _nodes(root) -> int:
    """AST nodes reachable from `root` (through containers, objects' attributes and closures,
    not modules or classes)."""
    seen, todo, count = set(), [root], 0
    while todo:
        obj = todo.pop()
        if id(obj) in seen or isinstance(obj, (type, types.ModuleType, str, bytes, int, float)):
            continue
        seen.add(id(obj))
        count += isinstance(obj, ast.AST)
        if isinstance(obj, types.FunctionType):
            todo.extend(cell.cell_contents for cell in obj.__closure__ or ())
        elif not isinstance(obj, (QuantizableLayerIndex, ProjectFacts)):
            todo.extend(gc.get_referents(obj))
    return count


def _origins(facts) -> dict:
    return {attr: [(o.kind, o.type_name, o.how, o.line, o.method) for o in origins]
            for attr, origins in facts.attrs.items()}


def _dump(node) -> str:
    return ast.dump(node, include_attributes=True)


def _compact_after_an_analysis(index: QuantizableLayerIndex) -> None:
    index.compact_facts()  # the analysis that asked for them: kept through the next one
    index.compact_facts()  # ... which did not ask: let go


def test_a_class_lets_its_tree_go_and_answers_as_the_class_that_kept_it():
    _, kept_project = _project()
    kept = kept_project.class_facts("proj.config.Config")
    index, project = _project()
    facts = project.class_facts("proj.config.Config")
    assert _origins(facts) == _origins(kept)  # BodyFacts read before; CallFacts not
    held = _nodes(facts)
    _compact_after_an_analysis(index)
    # The method bodies went (the decorators, signatures and facts read stayed).
    assert _nodes(facts) * 3 < held, (_nodes(facts), held)
    stubs = dict.values(facts.methods)
    assert all(regions.is_blanked(fn) and isinstance(fn.body[0], ast.Pass) for fn in stubs)
    # CallFacts, read after: the class parsed again gives them, as the class kept gives them.
    parses = trees.parses
    assert facts.quant_root == kept.quant_root and facts.quant_root is not None
    assert facts.dispatch == kept.dispatch == {"proj.layers.LinearBase", "proj.layers.MoE"}
    assert trees.parses == parses + 1
    assert facts.init == kept.init and facts.class_values.keys() == kept.class_values.keys()
    assert [_dump(v) for v in facts.getters.values()] == [_dump(v) for v in kept.getters.values()]
    # A method asked for is its own lines parsed where they stand: the node the class held.
    for name in ("__init__", "__post_init__", "dispatch", "width"):
        assert _dump(facts.methods[name]) == _dump(kept.methods[name]), name
        assert facts.methods[name] is facts.methods[name]  # read back once
    # Nothing is read of it any more: the class is not parsed again.
    assert _origins(facts) == _origins(kept) and trees.parses == parses + 1 + 4


def test_lazy_facts_first_read_after_the_tree_went_are_the_same():
    _, kept_project = _project()
    index, project = _project()
    facts = project.class_facts("proj.config.Config")  # neither BodyFacts nor CallFacts read
    _compact_after_an_analysis(index)
    kept = kept_project.class_facts("proj.config.Config")
    assert _origins(facts) == _origins(kept)
    assert {k: [_dump(v) for v in vs] for k, vs in facts.assigned.items()} == \
        {k: [_dump(v) for v in vs] for k, vs in kept.assigned.items()}
    assert _dump(facts.super_init) == _dump(kept.super_init)
    assert facts.quant_root == kept.quant_root and facts.dispatch == kept.dispatch


def test_a_class_asked_for_during_the_last_analysis_keeps_its_tree():
    index, project = _project()
    facts = project.class_facts("proj.config.Config")
    held = _nodes(facts)
    index.compact_facts()
    project.class_facts("proj.config.Config")  # asked for again in the next analysis
    index.compact_facts()
    assert _nodes(facts) == held
    index.compact_facts()
    assert _nodes(facts) * 3 < held


def test_a_class_that_names_no_call_has_no_call_facts_and_is_not_parsed_for_them():
    _, kept_project = _project()
    index, project = _project()
    plain = project.class_facts("proj.config.Plain")
    _compact_after_an_analysis(index)
    parses = trees.parses
    assert plain.quant_root is None and plain.dispatch == set()
    assert trees.parses == parses
    kept = kept_project.class_facts("proj.config.Plain")
    assert _origins(plain) == _origins(kept)


def test_a_function_followed_into_lets_its_tree_go_and_is_read_again_the_same():
    index, project = _project()
    facts, node = project.function("proj.config", "follow")
    before = _dump(node)
    functions = index.kept_facts(("functions", PATH))
    held = _nodes(functions)
    del node
    _compact_after_an_analysis(index)
    assert _nodes(functions) < held
    again = project.function("proj.config", "follow")
    assert again is not None and again[0] is facts and _dump(again[1]) == before
    assert project.function("proj.config", "missing") is None


def _sets_self(fn) -> bool:
    return any(isinstance(target, ast.Attribute) and isinstance(target.value, ast.Name) and target.value.id == "self"
               for node in ast.walk(fn) if isinstance(node, ast.Assign) for target in node.targets)


FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"
MODEL = """\
import torch
from torch import nn

from minillm.layers.linear import ColumnParallelLinear


class Block{n}(nn.Module):
    def __init__(self, quant_config=None):
        super().__init__()
        self.proj = ColumnParallelLinear(8, 8, quant_config=quant_config)

    def forward(self, x):
        return self.proj(x.to(self.proj.weight.dtype))
"""


def test_a_run_compacts_the_facts_it_keeps_and_finds_what_it_found_without(tmp_path: Path, monkeypatch):
    src = tmp_path / "src"
    shutil.copytree(FIXTURES / "project", src, ignore=shutil.ignore_patterns("expected.txt"))
    for n in range(4):
        (src / "minillm" / f"a_{n:02d}.py").write_text(MODEL.format(n=n))
    monkeypatch.chdir(src)
    indexes: list = []
    original_init = QuantizableLayerIndex.__init__

    def recording(self, *args, **kwargs):
        original_init(self, *args, **kwargs)
        indexes.append(self)

    monkeypatch.setattr(class_index.QuantizableLayerIndex, "__init__", recording)
    compacted = check_paths(["."], load_config(src), use_cache=False, jobs=1).findings
    # The classes of the files read for their facts (linear.py's), as the index keeps them: an
    # `__init__` their parse kept whole (it sets an attribute: core/regions.py) stands blanked.
    kept = [entry[0].classes[qualname] for index in indexes
            for entry in [*index.facts_cache.values(), *index.facts_kept.values()]
            if isinstance(getattr(entry[0], "classes", None), LazyClasses) for qualname in entry[0].classes
            if entry[0].classes.unparsed_text(qualname) is None]
    assert any(regions.is_blanked(dict.get(facts.methods, "__init__")) and _sets_self(facts.methods["__init__"])
               for facts in kept), kept
    monkeypatch.setattr(class_index.QuantizableLayerIndex, "compact_facts", lambda self: None)
    assert check_paths(["."], load_config(src), use_cache=False, jobs=1).findings == compacted
    assert any(f.code == "DTL001" for f in compacted)
