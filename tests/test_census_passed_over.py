"""A file a census passed over by its text stays passed over for a cached answer while it fails the
same test (class_index.Reads.passed, core/passed_over.py), and the compiled-code census is kept on
disk (run/facts_cache.py).

Before, a finding whose fix the compiled-code census cleared depended on the stamp of every file
of the project: saving any file made the next pre-commit run on the finding's file analyse it
again, census included (0.6 s on vLLM 0.34.0 against a 0.05 s target). Each test here compares
with what a run without the cache answers: the cache may only make the same answer cheaper.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from cli_runner import dtl
from tiny_project import STUB_MODEL, files_passed, stub_project, write_tree

from dtype_lint.core.passed_over import still_passed_over

MODEL = STUB_MODEL + "\n\n" + STUB_MODEL.split("\n\n\n", 1)[1].replace("class Attn(", "class Plain(")
# A file that compiles, but nothing of the model's: both sites keep their fixes.
EXPORT = ("import torch\n\n\nclass Scale(torch.nn.Module):\n    def forward(self, x):\n        return x * 2\n\n\n"
          "def export(model):\n    torch.jit.script(Scale())(torch.zeros(2))\n    return model\n")
CHECK = ("check", ".", "--output-format", "concise", "--exit-zero")


@pytest.fixture
def root(tmp_path: Path) -> Path:
    files = {"proj/export.py": EXPORT, **{f"proj/plain{i}.py": f"import torch\n\nSIZE = {i}\n" for i in range(3)}}
    root = stub_project(tmp_path, MODEL, files)
    assert "2 fixable" in dtl(root, *CHECK).stdout
    return root


def _analysed(monkeypatch) -> list[str]:
    """The names of the files the runs from now on analyse (pipeline.analyze_path)."""
    from dtype_lint.run import pipeline

    return files_passed(monkeypatch, pipeline, "analyze_path")


def _same_as_uncached(root: Path) -> str:
    out = dtl(root, *CHECK).stdout
    assert out == dtl(root, *CHECK, "--no-cache").stdout
    return out


@pytest.mark.parametrize("edit", [
    "import torch\n\nSIZE = 7  # edited\n",
    # names `jit` without compiling anything: the census's own test, not a word, decides
    "import torch\n\n\ndef scripting():\n    return torch.jit.is_scripting()\n",
])
def test_an_edit_that_compiles_nothing_keeps_the_cached_findings(root: Path, monkeypatch, edit: str):
    """The model's findings are the cached ones (nothing is analysed again), and they are what a
    run without the cache finds."""
    (root / "proj/plain0.py").write_text(edit)
    analysed = _analysed(monkeypatch)
    cached = dtl(root, *CHECK).stdout
    assert analysed == []
    assert "2 fixable" in cached and cached == dtl(root, *CHECK, "--no-cache").stdout


def test_a_passed_over_file_that_starts_to_compile_the_model_takes_the_fix_away(root: Path):
    write_tree(root, {"proj/plain2.py": "import torch\nfrom proj.model import Attn\n\n\n"
                                        "def export(model):\n    return torch.jit.script(Attn(model.o_proj))\n"})
    assert "1 fixable" in _same_as_uncached(root)
    (root / "proj/plain2.py").write_text("import torch\n\nSIZE = 2\n")
    assert "2 fixable" in _same_as_uncached(root)


def test_a_module_added_that_compiles_the_model_takes_the_fix_away(root: Path):
    """The census records which file each module is by one digest of every module's first file
    (class_index.ALL_MODULES), not a lookup per module: a new module makes the kept census stale."""
    write_tree(root, {"proj/exporter.py": "import torch\nfrom proj.model import Attn\n\n\n"
                             "def export(model):\n    return torch.jit.script(Attn(model.o_proj))\n"})
    assert "1 fixable" in _same_as_uncached(root)


def test_the_census_is_kept_on_disk(root: Path, monkeypatch):
    """An edit of the model's file (which the census did not read: export.py compiles its own
    class) analyses it again, and its fix is planned from the census the last run kept."""
    from dtype_lint.analysis import compiled_elsewhere

    made: list[int] = []
    real = compiled_elsewhere._Census.run

    def counted(self):
        made.append(1)
        return real(self)

    monkeypatch.setattr(compiled_elsewhere._Census, "run", counted)
    (root / "proj/model.py").write_text(MODEL + "\n# edited\n")
    analysed = _analysed(monkeypatch)
    assert "2 fixable" in dtl(root, *CHECK).stdout
    assert analysed == ["model.py"] and made == []
    # ... and made again where a file it read changed
    (root / "proj/export.py").write_text(EXPORT + "\n# edited\n")
    assert "2 fixable" in dtl(root, *CHECK).stdout
    assert made == [1]


def test_the_census_kept_on_disk_hands_its_reads_over_by_the_group_s_name(root: Path, monkeypatch):
    """The census's entry on disk names its reads as the group a findings entry names
    (facts_cache.BY_REFERENCE): the run on an edited model file names that group without writing
    the census's files out again to digest them (at ten times vLLM, 23,600 of them, in every such
    pre-commit run), and answers as a run without the cache does."""
    import shutil

    from dtype_lint.analysis.index import class_index
    from dtype_lint.run.cache import Cache

    monkeypatch.setattr(class_index, "GROUP_MIN_FILES", 1)  # this project's census is a group
    for folder in root.glob(".dtype*cache*"):
        shutil.rmtree(folder)  # made without groups
    assert "2 fixable" in _same_as_uncached(root)
    named: list[str | None] = []
    real = Cache._group

    def spied(self, group, census):
        named.append(group.token)
        return real(self, group, census)

    monkeypatch.setattr(Cache, "_group", spied)
    (root / "proj/model.py").write_text(MODEL + "\n# edited\n")
    analysed = _analysed(monkeypatch)
    assert "2 fixable" in dtl(root, *CHECK).stdout and analysed == ["model.py"]
    # the group as the cache checked it (`g-<name>`), not a copy made this run
    assert named and all(token is not None and token.startswith("g-") for token in named)
    assert "2 fixable" in _same_as_uncached(root)


def test_still_passed_over_by_words(tmp_path: Path):
    path = tmp_path / "a.py"
    groups = (("bitsandbytes", "Linear8bitLt"), ("quanto",))
    path.write_bytes(b"import bitsandbytes\n")
    assert still_passed_over(str(path), [groups])  # one word of the group only
    path.write_bytes(b"from bitsandbytes import Linear8bitLt\n")
    assert not still_passed_over(str(path), [groups])
    path.write_bytes(b"import quanto\n")
    assert not still_passed_over(str(path), [groups])
    path.write_bytes("x = 1\n".encode("utf-16"))  # NULs: ASCII words are not in these bytes
    assert not still_passed_over(str(path), [groups])
    assert not still_passed_over(str(tmp_path / "gone.py"), [groups])


def test_still_passed_over_by_the_compile_test(tmp_path: Path):
    path = tmp_path / "a.py"
    path.write_text("import torch\n\nok = torch.jit.is_scripting()\n")
    assert still_passed_over(str(path), ["might_compile"])
    path.write_text("import torch\n\nscripted = torch.jit.script(f)\n")
    assert not still_passed_over(str(path), ["might_compile"])
    # decoded as Python decodes it: a coding cookie, a BOM
    path.write_bytes("# -*- coding: latin-1 -*-\nname = 'café'\nscripted = torch.jit.script(f)\n".encode("latin-1"))
    assert not still_passed_over(str(path), ["might_compile"])
    path.write_bytes("# -*- coding: latin-1 -*-\nname = 'café'\n".encode("latin-1"))
    assert still_passed_over(str(path), ["might_compile"])
    path.write_bytes(b"\xef\xbb\xbfx = 1\n")
    assert still_passed_over(str(path), ["might_compile"])
    path.write_bytes(b"x = '\xff'\n")  # not UTF-8, no cookie: cannot be told
    assert not still_passed_over(str(path), ["might_compile"])
    path.write_text("x = 1\n")
    assert not still_passed_over(str(path), ["a test this version does not know"])


def test_a_file_two_censuses_passed_over_must_fail_both_tests_still(tmp_path: Path):
    """The quantizer census passes over a file by its words, the compiled-code census by its
    compile test: kept with both, it stays unchanged only while it fails both."""
    import json

    from dtype_lint.analysis.index.class_index import Reads
    from dtype_lint.core.file_stamp import file_stamp
    from dtype_lint.run.cache import Cache

    path = tmp_path / "x.py"
    path.write_text("x = 1\n")
    real = str(path)
    words = (("bitsandbytes", "Linear8bitLt"),)
    reads = Reads()
    reads.pass_over(real, file_stamp(real), frozenset((words,)))
    reads.pass_over(real, file_stamp(real), frozenset(("might_compile",)))
    assert reads.passed[real][1] == frozenset({words, "might_compile"})
    cache = Cache(tmp_path / "cache", key="k", root=tmp_path)
    entry = json.loads(json.dumps(cache.stored_reads(reads)))  # as the entry on disk holds it

    def unchanged() -> bool:
        return cache.unchanged_reads(entry, file_stamp, None) is not None

    assert unchanged()
    path.write_text("x = 2  # torch.jit named, nothing scripted\n")
    assert unchanged()
    path.write_text("from bitsandbytes.nn import Linear8bitLt\n")
    assert not unchanged()
    path.write_text("import torch\n\nscripted = torch.jit.script(f)\n")
    assert not unchanged()
