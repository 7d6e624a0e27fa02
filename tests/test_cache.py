"""The cache and the index on demand: what a run reads and writes, and that a cached result is
always the result a cold run would give.

Runs go through `pipeline.run` in-process on small projects of our own; `RunResult.writes` lists
every cache entry a run wrote.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from tiny_project import write_tree

from dtype_lint.core.config import load_config
from dtype_lint.core.discovery import discover_files, module_name
from dtype_lint.run import cache as cache_format
from dtype_lint.run import pipeline

LAYERS = """\
import torch


class QLinear(torch.nn.Module):
    def __init__(self, n, quant_config=None):
        super().__init__()
        self.quant_method = quant_config.get_quant_method(self, "") if quant_config else None


class ColLinear(QLinear):
    pass
"""

USER = """\
import torch

from proj.layers import ColLinear


class {name}(torch.nn.Module):
    def __init__(self, quant_config):
        super().__init__()
        self.up = ColLinear(8, quant_config=quant_config)

    def forward(self, x):
        return self.up(x.to(self.up.weight.dtype))
"""

UNRELATED = "class Unrelated:\n    def f(self):\n        return 1\n"


def make(root: Path, files: dict[str, str], pyproject: str = "[tool.dtype-lint]\n") -> Path:
    return write_tree(root, {"pyproject.toml": pyproject, "proj/__init__.py": "", **files})


def run(cwd: Path, *paths: str, cache: bool = True, jobs: int = 1) -> pipeline.RunResult:
    old = os.getcwd()
    os.chdir(cwd)
    try:
        config = load_config(Path(paths[0]) if paths else Path("."))
        return pipeline.run(config, pipeline.RunOptions(paths=list(paths) or ["."], use_cache=cache, jobs=jobs))
    finally:
        os.chdir(old)


def shown(result: pipeline.RunResult) -> list[dict]:
    """Findings as a report shows them, evidence paths included."""
    return [f.to_dict() for f in result.findings]


def cache_writes(result: pipeline.RunResult) -> list[str]:
    return sorted(w.path for w in result.writes if w.why == "cache" and not w.path.endswith("/"))


def sealed_for(path: Path) -> str:
    """What a cache file's seal covers besides its payload: the name of its cache folder (v2-...)."""
    return next(p.name for p in path.parents if p.name.startswith(f"{cache_format.FORMAT}-"))


def entries(root: Path, kind: str) -> set[str]:
    """The files (relative to the root) that have a cache entry of this kind ("h" or "f")."""
    return {cache_format.decode(p.read_bytes(), sealed_for(p))["k"]
            for p in (root / ".dtype_lint_cache").glob(f"v2-*/{kind}/*.json")}


@pytest.fixture
def project(tmp_path: Path) -> Path:
    return make(tmp_path / "p", {"proj/layers.py": LAYERS, "proj/a.py": USER.format(name="A"),
                                 "proj/b.py": USER.format(name="B"), "proj/unrelated.py": UNRELATED,
                                 "proj/sub/__init__.py": "", "proj/sub/leaf.py": UNRELATED})


def test_headers_only_for_modules_an_analysis_reaches(project: Path):
    result = run(project)
    assert {Path(f.path).name for f in result.findings} == {"a.py", "b.py"}
    # The analysed files' own headers come from the text in hand; only layers.py was looked up.
    assert entries(project, "h") == {"proj/layers.py"}
    assert entries(project, "f") == {"proj/a.py", "proj/b.py"}


def test_a_warm_run_reads_nothing_new_and_writes_nothing(project: Path):
    cold = run(project)
    warm = run(project)
    assert shown(warm) == shown(cold)
    assert cache_writes(warm) == []


def test_one_touched_file_rewrites_one_entry(project: Path):
    """Pre-commit: the run names one changed file; it writes that file's entry and nothing that
    grows with the project (no summary of every file)."""
    run(project)
    a = project / "proj/a.py"
    a.write_text(a.read_text() + "\n# touched\n")
    result = run(project, "proj/a.py")
    assert [Path(f.path).as_posix() for f in result.findings] == ["proj/a.py"]
    (write,) = cache_writes(result)
    assert write.startswith(".dtype_lint_cache/v2-") and "/f/" in write
    assert entries(project, "f") == {"proj/a.py", "proj/b.py"}


@pytest.mark.parametrize("first_cwd", ["proj", "proj/sub"])
def test_results_do_not_depend_on_how_an_earlier_run_spelled_the_paths(project: Path, first_cwd: str):
    """A run from a subfolder names every file `../x.py`; a later run from the root must neither
    lose findings (a cached header once kept the path as typed, and the file could no longer be
    read from another folder) nor show evidence paths spelled for the other folder."""
    cold = shown(run(project, cache=False))
    up = os.path.relpath(project, project / first_cwd)
    run(project / first_cwd, up)
    warm = run(project)
    assert shown(warm) == cold
    assert cache_writes(warm) == []  # and it was a cache hit, not a recomputation
    assert shown(run(project, "./proj/a.py")) == shown(run(project, "./proj/a.py", cache=False))


def test_editing_a_base_class_invalidates_every_file_that_used_it(project: Path):
    """b.py reuses the verdict a.py computed in the same process: what computing it read is
    recorded for both."""
    assert len(run(project).findings) == 2
    layers = project / "proj/layers.py"
    layers.write_text(LAYERS.replace("get_quant_method(self", "get_quant_method(None"))
    assert run(project).findings == []
    assert shown(run(project)) == shown(run(project, cache=False))


def test_a_new_file_defining_a_missing_module_invalidates_what_looked_it_up(tmp_path: Path):
    """An unknown class built with a quantization config may be quantized; once the module
    defining it appears (a plain torch module), it is not: the cached finding must go."""
    user = USER.format(name="A").replace("from proj.layers import", "from proj.layers2 import")
    root = make(tmp_path / "p", {"proj/layers.py": LAYERS, "proj/a.py": user})
    assert [Path(f.path).name for f in run(root).findings] == ["a.py"]
    (root / "proj/layers2.py").write_text("import torch\n\n\nclass ColLinear(torch.nn.Module):\n"
                                          "    def __init__(self, n, quant_config=None):\n        super().__init__()\n")
    assert run(root).findings == []


@pytest.mark.parametrize("damage", ["garbage", "unsigned", "signed-wrong-shape", "fifo"])
def test_a_damaged_cache_entry_is_a_miss(project: Path, damage: str):
    cold = shown(run(project))
    entries_ = [*(project / ".dtype_lint_cache").glob("v2-*/*/*.json"), *(project / ".dtype_lint_cache").glob("v2-*/scan.json")]
    # a header, two findings, two storage-model answers (a search, the platforms' admissions), the
    # compiled-code census (planned fixes asked it), the scan summary
    assert len(entries_) == 7
    for p in entries_:
        if damage == "garbage":
            p.write_bytes(b"\x00not json")
        elif damage == "unsigned":  # valid JSON, but not written by dtype-lint (no seal)
            p.write_bytes(json.dumps(cache_format.decode(p.read_bytes(), sealed_for(p))).encode())
        elif damage == "signed-wrong-shape":  # our seal over values of the wrong types
            data = cache_format.decode(p.read_bytes(), sealed_for(p))
            if "f" in data:
                data["f"] = [{"code": "DTL001", "span": {"line": "one"}}, 5]
                data["files"] = {"proj/layers.py": 5}
            elif "h" in data:
                data["h"] = {"imports": [], "classes": {"X": 1}}
            elif "v" in data:  # a storage-model answer (run/facts_cache.py)
                data["v"] = {"set": [{"backend": 1, "evidence": "x"}]}
            else:
                data["files"] = {k: ["x", 1, None, "y"] for k in data["files"]}
            p.write_bytes(cache_format.encode(data, sealed_for(p)))
        elif hasattr(os, "mkfifo"):
            p.unlink()
            os.mkfifo(p)
    assert shown(run(project)) == cold


def test_parallel_and_serial_runs_agree(project: Path, monkeypatch):
    monkeypatch.setattr(pipeline, "ANALYZE_PARALLEL_BYTES", 0)
    serial = shown(run(project, cache=False, jobs=1))
    assert shown(run(project, jobs=2)) == serial
    # The headers the workers extracted came back and were cached.
    assert "proj/layers.py" in entries(project, "h")
    assert shown(run(project, jobs=2)) == serial


ENGINE_MODEL = """\
import torch


class Block{i}(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.up = torch.nn.Linear(8, 8)

    def forward(self, x):
        return self.up(x.to(self.up.weight.dtype))
"""


def test_a_parallel_run_builds_the_quantizer_census_once_before_its_workers_fork(tmp_path: Path, monkeypatch):
    """An engine's tree (the quantizers' family asks for the census at its first `nn.Linear`):
    built in this process before the fork, never again in a worker that inherited it."""
    from dtype_lint.ecosystems.quantizers import applications
    from dtype_lint.run import workers

    monkeypatch.setattr(pipeline, "ANALYZE_PARALLEL_BYTES", 0)
    monkeypatch.setattr(workers, "cpu_count", lambda: 2)
    builds = tmp_path / "builds"
    scan = applications._scan

    def counted(index):
        with builds.open("a") as out:  # a worker's build too: the file outlives the fork
            out.write(f"{os.getpid()}\n")
        return scan(index)

    monkeypatch.setattr(applications, "_scan", counted)
    root = write_tree(tmp_path / "p", {"pyproject.toml": "[tool.dtype-lint]\n", "vllm/__init__.py": "",
                                       **{f"vllm/m{i}.py": ENGINE_MODEL.format(i=i) for i in range(8)}})
    serial = shown(run(root, cache=False, jobs=1))
    assert builds.read_text().split() == [str(os.getpid())]
    builds.unlink()
    assert shown(run(root, cache=False, jobs=2)) == serial
    assert builds.read_text().split() == [str(os.getpid())]


LAYOUT = {
    "top.py": "",
    "pkg/__init__.py": "",
    "pkg/mod.py": "",
    "pkg/ns/deep.py": "",  # a namespace folder inside a package
    "pkg/ns/inner/__init__.py": "",
    "scripts/tool.py": "",  # no package above: a top-level module
    "scripts/sub/pkg2/__init__.py": "",  # a package below a plain folder
    "scripts/sub/pkg2/m.py": "",
    "src/lib/a.py": "",  # src layout, namespace package
    "src/lib2/__init__.py": "",
    "src/lib2/b.pyi": "",
}


@pytest.mark.parametrize("start", [".", "pkg", "scripts/sub", "src"])
def test_module_names_from_the_walk_are_module_name(tmp_path: Path, start: str):
    root = make(tmp_path / "p", LAYOUT)
    found = discover_files([str(root / start)], (), root)
    assert found, start
    for f in found:
        assert f.module == module_name(f.path, root), f.path
        assert f.real == os.path.realpath(f.path)
    assert [f.path for f in found] == sorted_walk(root / start)


def sorted_walk(top: Path) -> list[str]:
    out = []
    for dirpath, dirnames, filenames in os.walk(top):
        dirnames[:] = sorted(d for d in dirnames if d != "__pycache__")
        out += [os.path.join(dirpath, n) for n in sorted(filenames) if n.endswith((".py", ".pyi"))]
    return out


@pytest.mark.skipif(not hasattr(os, "symlink"), reason="needs symlinks")
def test_symlinks_are_resolved_only_where_they_are(tmp_path: Path):
    root = tmp_path / "p"
    (root / "pkg/deep").mkdir(parents=True)
    for rel in ("pkg/__init__.py", "pkg/real.py", "pkg/deep/__init__.py"):
        (root / rel).write_text("")
    (root / "pkg/link.py").symlink_to(root / "pkg/real.py")
    (root / "pkg/linkdir").symlink_to(root / "pkg/deep", target_is_directory=True)
    found = discover_files([str(root)], (), root)
    names = [Path(f.path).relative_to(root).as_posix() for f in found]
    # One file under two names is listed once, under its own name; a linked folder is not walked.
    assert names == ["pkg/__init__.py", "pkg/real.py", "pkg/deep/__init__.py"]
    assert found[1].real == str((root / "pkg/real.py").resolve()) and found[1].module == "pkg.real"
    # Named explicitly as well as walked: still once.
    again = discover_files([str(root / "pkg/link.py"), str(root)], (), root)
    assert [Path(f.path).name for f in again] == ["real.py", "__init__.py", "__init__.py"]


REEXPORTED = {
    "proj/pkg/__init__.py": "from .impl import Inner\n",
    "proj/pkg/impl.py": LAYERS.replace("class ColLinear(QLinear):", "class Inner(QLinear):"),
    "proj/pkg/plain.py": "import torch\n\n\nclass Inner(torch.nn.Module):\n"
                         "    def __init__(self, n, quant_config=None):\n        super().__init__()\n",
    "proj/holder.py": "import torch\n\nfrom proj.pkg import Inner\n\n\nclass Holder(torch.nn.Module):\n"
                      "    def __init__(self, quant_config):\n        super().__init__()\n"
                      "        self.inner = Inner(8, quant_config=quant_config)\n",
}
HOLDER_USER = """\
import torch

from proj.holder import Holder


class {name}(torch.nn.Module):
    def __init__(self, quant_config):
        super().__init__()
        self.h = Holder(quant_config)

    def forward(self, x):
        return x.to(self.h.inner.weight.dtype)
"""


def test_what_shared_class_facts_read_counts_for_every_file_using_them(tmp_path: Path):
    """Holder's facts are built once, while a.py is analysed; resolving `Inner` there reads the
    re-export in proj/pkg/__init__.py. b.py reuses those facts, so that read is b.py's too: when
    the re-export changes, both cached results must go."""
    root = make(tmp_path / "p", {**REEXPORTED, "proj/a.py": HOLDER_USER.format(name="A"),
                                 "proj/b.py": HOLDER_USER.format(name="B")})
    assert sorted(Path(f.path).name for f in run(root).findings) == ["a.py", "b.py"]
    (root / "proj/pkg/__init__.py").write_text("from .plain import Inner\n")
    assert run(root).findings == [] == run(root, cache=False).findings


def test_memoised_results_replay_what_computing_them_read():
    """A verdict or a file's facts computed once are reused by later analyses; each reuse must
    report the reads the computation made, or a cached result would miss a dependency."""
    from dtype_lint.analysis.index.class_index import ModuleTable, QuantizableLayerIndex, extract_header

    texts = {"a.py": "from m.b import B\n\nclass A(B):\n    pass\n", "b.py": "class B:\n    pass\n"}

    def load(mf, module):
        mf.stamp = f"stamp-{mf.path}"
        return extract_header(texts[mf.path], module, mf.path, False)

    table = ModuleTable([("a.py", "/r/a.py", "m.a"), ("b.py", "/r/b.py", "m.b")], load)
    index = QuantizableLayerIndex(table, ["m.b.B"], [])
    with index.reading() as first:
        assert index.quantizable_verdict("m.a.A").yes
    with index.reading() as again:
        assert index.quantizable_verdict("m.a.A").yes
    assert again.files == first.files == {"/r/a.py": "stamp-a.py", "/r/b.py": "stamp-b.py"}
    assert again.modules == first.modules

    with index.reading() as built:
        index.cached_facts("k", lambda: index.modules.get("m.b"))
    with index.reading() as reused:
        assert index.cached_facts("k", lambda: None).module == "m.b"
    assert reused.modules == built.modules == {"m.b": "/r/b.py"}
    with index.reading() as missing:
        assert index.modules.get("m.nothing") is None
    assert missing.modules == {"m.nothing": None}


def test_facts_built_again_after_being_dropped_are_kept_apart(monkeypatch):
    """A file's facts that the recently-used list dropped and a later analysis needed again (a
    base file shared by folders far apart) go to a second list: the files analysed in between
    do not push them out again, and each rebuild still reports what building read."""
    from dtype_lint.analysis.index import class_index as index_module
    from dtype_lint.analysis.index.class_index import ModuleTable, QuantizableLayerIndex

    monkeypatch.setattr(index_module, "FACTS_CACHE_ENTRIES", 3)
    monkeypatch.setattr(index_module, "KEPT_FACTS_ENTRIES", 2)
    index = QuantizableLayerIndex(ModuleTable([], lambda mf, module: None), [], [])
    built: list[str] = []

    def ask(key: str) -> str:
        return index.cached_facts(key, lambda: built.append(key) or key.upper())

    def folder(n: int) -> None:  # files that one folder's analyses use once
        for i in range(4):
            ask(f"{n}-{i}")

    for n in range(3):
        assert ask("linear") == "LINEAR"
        folder(n)
    assert built.count("linear") == 2  # built, dropped, built again and then kept
    for n in range(3, 6):  # two rebuilt files fill the second list; a third pushes the oldest out
        ask("linear")
        ask(f"shared{n % 3}")
        folder(n)
        ask(f"shared{n % 3}")
        folder(n + 10)
    assert built.count("linear") == 2, built
    assert built.count("shared0") == 2 and built.count("shared1") == 2, built


# ---- warnings about configured classes that match nothing: the project-wide part, kept lazy ----

PLAIN = "def f(x):\n    return x\n"


def warnings_of(root: Path, *paths: str) -> list[str]:
    return run(root, *paths).warnings


@pytest.mark.parametrize("paths", [(), ("proj/plain.py",)], ids=["directory", "named file"])
def test_a_configured_class_imported_elsewhere_is_not_reported(tmp_path: Path, paths):
    """Named files (pre-commit) are judged like the whole project: another file imports the
    class, so the configuration is not wrong."""
    pyproject = '[tool.dtype-lint]\nquantizable = ["ext.layers.QLinear", "ext.layers.Missing"]\n'
    root = make(tmp_path / "p", {"proj/plain.py": PLAIN, "proj/user.py": "from ext.layers import QLinear\n",
                                 "proj/other.py": "# Missing is named here, but never imported\nMissing = 1\n"},
                pyproject)
    (warning,) = [w for w in warnings_of(root, *paths) if w.startswith("`quantizable`")]
    assert "ext.layers.Missing" in warning and "QLinear" not in warning


@pytest.mark.parametrize("paths", [(), ("proj/plain.py",)], ids=["directory", "named file"])
def test_the_preset_warning_needs_the_whole_project(tmp_path: Path, paths):
    root = make(tmp_path / "p", {"proj/plain.py": PLAIN})
    # A project that never imports vLLM is not told that vLLM's classes are missing (#40) ...
    assert not any("preset" in w for w in warnings_of(root, *paths))
    # ... nor one that only drives it (tests/test_engine_drivers.py) ...
    (root / "proj/engine.py").write_text("from vllm import LLM\n")
    assert not any("preset" in w for w in warnings_of(root, *paths))
    # ... one that imports from its layers' package (another file than the one named) is.
    (root / "proj/engine.py").write_text("from vllm.model_executor.layers.layernorm import RMSNorm\n")
    assert any("preset" in w for w in warnings_of(root, *paths))
    # A relative import inside a package of that name counts as importing the class.
    (root / "vllm/model_executor/layers").mkdir(parents=True)
    for rel in ("vllm/__init__.py", "vllm/model_executor/__init__.py", "vllm/model_executor/layers/__init__.py"):
        (root / rel).write_text("")
    (root / "vllm/model_executor/layers/user.py").write_text("from .linear import ColumnParallelLinear\n")
    assert not any("preset" in w for w in warnings_of(root, *paths))


def test_the_preset_is_defined_by_the_project_without_reading_other_files(tmp_path: Path):
    """vLLM defines the preset's classes: the warnings read those modules' headers, nothing else."""
    root = make(tmp_path / "p", {"vllm/__init__.py": "", "vllm/model_executor/__init__.py": "",
                                 "vllm/model_executor/layers/__init__.py": "",
                                 "vllm/model_executor/layers/linear.py": "class LinearBase:\n    pass\n",
                                 "proj/plain.py": PLAIN, "proj/user.py": "from ext import LinearBase\n"})
    result = run(root, "proj/plain.py")
    assert result.warnings == []
    assert entries(root, "h") <= {"vllm/model_executor/layers/linear.py"}


FAMILY = {
    "proj/layers.py": LAYERS,
    "proj/models/__init__.py": "",
    "proj/models/fam/__init__.py": "",
    "proj/models/fam/head.py": "from proj.layers import QLinear\n\n\ndef logits(head: QLinear, x):\n"
                               "    return x.to(head.weight.dtype)\n",
    "proj/models/fam/model.py": "from proj.layers import QLinear\n\n\nclass Model:\n"
                                "    def __init__(self, quant_config):\n"
                                "        self.head = QLinear(8, quant_config=None)\n",
}


def test_a_file_added_to_a_model_family_invalidates_what_enumerated_it(tmp_path: Path):
    """A layer known only from an annotation is judged by every construction in its model
    family's folder: the analysis enumerated that folder, so a new file there is a change."""
    root = make(tmp_path / "p", FAMILY)
    assert run(root).findings == []
    (root / "proj/models/fam/other.py").write_text(FAMILY["proj/models/fam/model.py"].replace(
        "quant_config=None", "quant_config=quant_config"))
    assert [Path(f.path).name for f in run(root).findings] == ["head.py"]
    assert shown(run(root)) == shown(run(root, cache=False))


def test_results_do_not_depend_on_how_many_parsed_files_are_kept(tmp_path: Path, monkeypatch):
    from dtype_lint.analysis.index import class_index as index_module

    root = make(tmp_path / "p", {**REEXPORTED, **FAMILY, "proj/a.py": HOLDER_USER.format(name="A"),
                                 "proj/b.py": USER.format(name="B"), "proj/c.py": USER.format(name="C")})
    expected = shown(run(root, cache=False))
    assert len(expected) == 3
    monkeypatch.setattr(index_module, "FACTS_CACHE_ENTRIES", 1)
    monkeypatch.setattr(index_module, "KEPT_FACTS_ENTRIES", 1)  # rebuilt entries dropped too
    assert shown(run(root, cache=False)) == expected
    assert shown(run(root)) == expected
    # What an evicted and rebuilt entry read still counts: a change there invalidates.
    (root / "proj/pkg/__init__.py").write_text("from .plain import Inner\n")
    assert [Path(f["path"]).name for f in shown(run(root))] == ["b.py", "c.py"]


def test_the_code_stamp_follows_the_tools_code_and_shipped_catalogues(tmp_path: Path, monkeypatch):
    """The cache key's code stamp must change with any engine or rule module and with a shipped
    catalogue (the storage model's answers read them), and must not with what never changes a
    finding (kernels, fixtures, other data files)."""
    import dtype_lint
    import dtype_lint.rules
    from dtype_lint.run.pipeline import code_stamp

    pkg, rules = tmp_path / "dtype_lint", tmp_path / "rules"
    for folder in (pkg / "data", pkg / "kernels_ref", rules):
        folder.mkdir(parents=True)
    (pkg / "__init__.py").write_text("", encoding="utf-8")
    (pkg / "data" / "catalogue-vllm-0.33.0.json").write_text("{}", encoding="utf-8")
    (pkg / "kernels_ref" / "k.py").write_text("x = 1\n", encoding="utf-8")
    (pkg / "notes.md").write_text("a\n", encoding="utf-8")
    (rules / "__init__.py").write_text("", encoding="utf-8")
    (rules / "dtl001.py").write_text("CODE = 1\n", encoding="utf-8")
    monkeypatch.setattr(dtype_lint, "__file__", str(pkg / "__init__.py"))
    monkeypatch.setattr(dtype_lint.rules, "__file__", str(rules / "__init__.py"))

    first = code_stamp()
    for ignored, text in ((pkg / "kernels_ref" / "k.py", "x = 2\n"), (pkg / "notes.md", "b\n")):
        ignored.write_text(text, encoding="utf-8")
        assert code_stamp() == first, ignored
    seen = {first}
    for changed, text in ((pkg / "data" / "catalogue-vllm-0.33.0.json", '{"a": 1}'),
                          (rules / "dtl001.py", "CODE = 2\n"), (pkg / "__init__.py", "# x\n")):
        changed.write_text(text, encoding="utf-8")
        now = code_stamp()
        assert now not in seen, changed
        seen.add(now)


def test_the_code_stamp_memo_never_outlives_an_edit(tmp_path: Path, monkeypatch):
    """The memo keeps the stamp under the files' stat: an edit (even of the same size, with its
    mtime put back) changes the stamp, and files written within `_SETTLED_NS` are not kept."""
    import json
    import os
    import time

    import dtype_lint
    import dtype_lint.rules
    from dtype_lint.run import pipeline
    from dtype_lint.run.pipeline import code_stamp

    pkg, rules = tmp_path / "dtype_lint", tmp_path / "rules"
    pkg.mkdir()
    rules.mkdir()
    (pkg / "__init__.py").write_text("A = 1\n", encoding="utf-8")
    (rules / "__init__.py").write_text("", encoding="utf-8")
    monkeypatch.setattr(dtype_lint, "__file__", str(pkg / "__init__.py"))
    monkeypatch.setattr(dtype_lint.rules, "__file__", str(rules / "__init__.py"))
    memo = tmp_path / "code-stamp.json"

    first = code_stamp(memo)
    assert not memo.exists()  # just written: its stat proves nothing yet
    monkeypatch.setattr(pipeline, "_SETTLED_NS", 0)
    from dtype_lint.run.cache_seal import seal, unseal

    def kept() -> dict:
        return json.loads(unseal(memo.read_bytes(), "code-stamp.json"))

    assert code_stamp(memo) == first and kept()["stamp"] == first
    # The memo is sealed (run/cache_seal.py): a stamp written over it by anyone else is not read...
    memo.write_text(json.dumps({**kept(), "stamp": "forged"}))
    assert code_stamp(memo) == first
    # ...one sealed by dtype-lint is: an unchanged stat, the memo answers.
    memo.write_bytes(seal(json.dumps({**kept(), "stamp": "kept"}).encode(), "code-stamp.json"))
    assert code_stamp(memo) == "kept"
    st = os.stat(pkg / "__init__.py")
    time.sleep(0.05)  # past the clock tick of the stat kept (the memo's own rule covers real runs)
    (pkg / "__init__.py").write_text("A = 2\n", encoding="utf-8")  # same size, same mtime
    os.utime(pkg / "__init__.py", ns=(st.st_atime_ns, st.st_mtime_ns))
    second = code_stamp(memo)
    assert second not in (first, "kept") and second == code_stamp()
