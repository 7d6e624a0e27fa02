"""Every rule on (`--select ALL`) shares the default rules' parses, and the storage model's memo is bounded (#37).

With the opt-in rules on, a file is parsed whole (their reads of a tree are not limited to the
regions core/regions.py keeps). A file read only for its class facts used to be parsed whole too,
and again when it was analysed itself once the tree store had let it go: now its classes are
parsed from their own text, so the one whole parse of a file is its analysis. The guard engine's
test of an imported predicate reads the one `def` of the module that defines it even when that
module's facts are already loaded (it parsed the whole module before). The storage model's memo
keeps the answers last used, not every answer of the run.

DTL004 reads reduced trees first (`regions = "on-demand"`): a file only it could report in is
parsed whole only where its reduced tree may hide or hold a comparison it reports; the guard
engine judges only the predicates a guard calls (structure asserted, no timings).
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
    whole = _whole_parses(src, monkeypatch)
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


def test_the_kept_scan_for_quant_configs_keeps_no_analysis_alive(tmp_path: Path):
    """The storage model's scan for a config type's subclasses is kept for the run, left where its
    last user stopped: it holds the index, not the model that started it, whose project (that
    analysis's tree and the facts of every file it read) it kept alive to the end."""
    import gc
    import weakref

    from dtype_lint.analysis.index.class_index import QuantizableLayerIndex, extract_header
    from dtype_lint.run.file_analysis import safe_read

    src = _project(tmp_path, models=0)
    headers = []
    for path in sorted((src / "minillm").rglob("*.py")):
        module = ".".join(path.relative_to(src).with_suffix("").parts).removesuffix(".__init__")
        headers.append(extract_header(path.read_text(), module, str(path), path.name == "__init__.py"))
    index = QuantizableLayerIndex(headers, ["minillm.layers.linear.LinearBase"], [])
    project = ProjectFacts(index, load_file=safe_read)
    model = storage_model.CodeBackends(project)
    assert next(model._iter_configs("minillm.layers.linear.LinearBase"), None) == "minillm.quant.fp8.Fp8Config"
    assert index._storage_configs  # the scan is kept, suspended
    gone = weakref.ref(project)
    del model, project
    gc.collect()
    assert gone() is None, "the kept scan holds the project facts of the analysis that started it"


def test_the_assignments_memo_keeps_no_function_alive():
    """A function's assignments are memoised while the function lives, not longer: the memo
    held the trees of the sources and facts the run had dropped."""
    import gc
    import weakref

    fn = ast.parse("def f(x):\n    y = x.dtype\n    return y\n").body[0]
    assigned = storage_model._assignments(fn)
    assert list(assigned) == ["y"] and storage_model._assignments(fn) is assigned
    gone = weakref.ref(fn)
    del fn
    gc.collect()
    assert gone() is None


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


# A file DTL004's prefilter passes (a sentinel dtype, the word `weight`) but where it can report
# nothing: no comparison of a storage dtype with a sentinel, in the functions kept whole or in the
# long function the reduced tree blanks (DTL003 and DTL005 find no `.weight` read or dtype site).
PLAIN = """\
import torch

PACKED = torch.int8


def pack(weight_data):
    return weight_data.view(PACKED)


class Packer:
    def describe(self, rows):
        total = 0
        for row in rows:
            total += len(row)
        label = "rows"
        label = label.upper()
        return f"{total} {label}"
"""

# A read guarded by a predicate imported from a project module that also defines functions the
# file imports but never tests (the guard engine needs only `ready` to judge the read).
GUARDED = """\
import torch
from torch import nn

from minillm.layers.linear import ColumnParallelLinear
from minillm.readiness import ready, scale_rows, shift_rows, clamp_rows


class Gated(nn.Module):
    def __init__(self, quant_config=None):
        super().__init__()
        self.proj = ColumnParallelLinear(8, 8, quant_config=quant_config)

    def forward(self, x):
        if ready(self.proj):
            x = x @ self.proj.weight.t()
        return clamp_rows(shift_rows(scale_rows(x)))

    def width(self):
        return self.proj.weight.shape[0]
"""
READINESS = """\
import torch


def ready(layer):
    weight = getattr(layer, "weight", None)
    if weight is None or weight.dtype != torch.bfloat16:
        return False
    return True


def scale_rows(x):
    return x * 2


def shift_rows(x):
    return x + 1


def clamp_rows(x):
    return x.clamp(-1, 1)
"""


# A backend that registers no `weight` (the fixture's Fp8 keeps one): DTL003's reads are reported.
INT4 = """\
import torch
from torch import nn

from .base import QuantConfig, QuantizeMethodBase


class Int4Config(QuantConfig):
    def get_quant_method(self, layer: nn.Module, prefix: str) -> QuantizeMethodBase:
        return Int4LinearMethod()


class Int4LinearMethod(QuantizeMethodBase):
    def create_weights(self, layer, input_size, output_size, params_dtype):
        layer.qweight = nn.Parameter(torch.empty(output_size, input_size // 8, dtype=torch.int32))

    def apply(self, layer, x, bias=None):
        return x @ layer.qweight.float().t()
"""


def _with_int4(src: Path) -> Path:
    (src / "minillm" / "quant" / "int4.py").write_text(INT4)
    return src


def _whole_parses(src: Path, monkeypatch) -> Counter:
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
    return whole


def test_a_file_no_opt_in_rule_can_report_in_is_not_parsed_whole(tmp_path: Path, monkeypatch):
    """Every rule on: a file whose reduced tree tells DTL004 (`regions = "on-demand"`) it can
    report nothing there is parsed reduced only (whole on 22e8ac5, where the opt-in rules read
    only whole trees), while a file where DTL003 reports is parsed whole, once; and the findings
    are those of a run in which DTL004 is given every file's whole tree."""
    from dtype_lint.core import trees
    from dtype_lint.rule import Rule

    src = _with_int4(_project(tmp_path, models=1))
    (src / "minillm" / "a_plain.py").write_text(PLAIN)
    whole = _whole_parses(src, monkeypatch)
    reduced_before = trees.reduced_parses
    findings = _run_all(src, monkeypatch).findings
    codes = Counter(f.code for f in findings)
    assert codes["DTL001"] == 1 and codes["DTL003"] == 1, codes
    assert not any(f.path.endswith("a_plain.py") for f in findings)
    assert whole["minillm/a_plain.py"] == 0, dict(whole)
    assert trees.reduced_parses > reduced_before
    assert whole["minillm/a_00.py"] == 1, dict(whole)
    monkeypatch.setattr(Rule, "needs_whole_tree", lambda self, ctx: True, raising=False)
    assert _run_all(src, monkeypatch).findings == findings


def test_the_guard_engine_judges_only_the_imported_names_a_guard_calls(tmp_path: Path, monkeypatch):
    """DTL003 judges the read under `if ready(self.proj):` and the unguarded one in `width`: the
    guard engine reads `ready` from its module, and none of the three other functions the file
    imports from there (22e8ac5 judged every imported function before answering)."""
    from dtype_lint.analysis.guard_engine import guard_flags

    src = _with_int4(_project(tmp_path, models=0))
    (src / "minillm" / "readiness.py").write_text(READINESS)
    (src / "minillm" / "a_gated.py").write_text(GUARDED)
    judged: list[str] = []
    original = guard_flags._named_predicates

    def recording(text, name, config_params):
        judged.append(name)
        return original(text, name, config_params)

    monkeypatch.setattr(guard_flags, "_named_predicates", recording)
    findings = [f for f in _run_all(src, monkeypatch).findings if f.path.endswith("a_gated.py")]
    assert [(f.code, f.span.line) for f in findings] == [("DTL003", 19)], findings  # `width`'s read
    assert sorted(set(judged)) == ["ready"], judged
