"""The quantizer census reads a file once: the scan, which reads every file of a whole-project run,
tests the census's words on the bytes in hand (run/pipeline.py `_scan_job`), and the census
(`ModuleTable.naming`, ecosystems/quantizers/applications.py) reads again only the files that hold
them. At e02ffc4 every file of the tree was read a second time for that test (3% of a cold check
of vLLM 0.34.0)."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

from tiny_project import write_tree

from dtype_lint.api import make_config
from dtype_lint.core.discovery import Found
from dtype_lint.ecosystems.quantizers.catalogue import QUANTIZER_WORDS
from dtype_lint.run import pipeline
from dtype_lint.run.cache import Cache

FILES = {
    "proj/__init__.py": "",
    "proj/swap.py": "import bitsandbytes as bnb\n",  # holds a group: its header is read
    "proj/hf.py": "from transformers.integrations import replace_with_bnb_linear\n",
    "proj/half.py": "import transformers\n",  # one word of a group only
    **{f"proj/plain{i}.py": f"import torch\n\nSIZE = {i}\n" for i in range(3)},
    "proj/wide.py": "import torch\n".encode("utf-16"),  # NULs: the scan does not tell
}


def _census(tmp_path: Path, monkeypatch, summary: bool) -> tuple[list[str], Counter]:
    root = write_tree(tmp_path / "p", FILES)
    found = [Found(str(root / p), str((root / p).resolve()), p[:-3].replace("/", ".").removesuffix(".__init__"))
             for p in sorted(FILES)]
    config = make_config(root=root)
    cache = Cache(root / ".cache", key="off", enabled=False, root=root)
    project = pipeline._Project(found, found, cache, stamped=False)
    reads: Counter = Counter()
    real_read = pipeline.read_bytes

    def counted(path, limit):
        reads[Path(path).name] += 1
        return real_read(path, limit)

    monkeypatch.setattr(pipeline, "read_bytes", counted)
    scan = pipeline._scan(found, config, cache, 1, None, [], summary=summary)
    project.take_scan_words(scan)
    named = [module for module, _ in project.table.naming(QUANTIZER_WORDS)]
    return named, reads


def test_the_census_reads_again_only_the_files_holding_its_words(tmp_path: Path, monkeypatch):
    named, reads = _census(tmp_path, monkeypatch, summary=True)
    assert named == ["proj.hf", "proj.swap"], named  # (wide.py read again: no header in it)
    assert {name: n for name, n in reads.items() if n > 1} == {"swap.py": 2, "hf.py": 2, "wide.py": 2}, reads
    assert set(reads) == {Path(p).name for p in FILES}, reads


def test_a_scan_that_tests_no_words_leaves_the_census_to_read(tmp_path: Path, monkeypatch):
    # A run on named files tests no words (summary=False): the census reads every file itself,
    # and names the same modules.
    named, reads = _census(tmp_path, monkeypatch, summary=False)
    assert named == ["proj.hf", "proj.swap"], named  # (wide.py read again: no header in it)
    assert all(n == 2 for n in reads.values()), reads


def test_the_scan_tests_no_words_in_a_library_the_census_passes_over(tmp_path: Path, monkeypatch):
    # The census passes over the modules of a quantizing library (LIBRARY_PACKAGES: Transformers'
    # own tree holds `transformers.integrations` by the hundred), so the scan does not test its
    # words there; a module of the library under another name asks for them, read again.
    library = {"transformers/__init__.py": "", "transformers/hf.py": FILES["proj/hf.py"],
               "other/swap.py": FILES["proj/swap.py"]}
    root = write_tree(tmp_path / "lib", library)
    found = [Found(str(root / p), str((root / p).resolve()), p[:-3].replace("/", ".").removesuffix(".__init__"))
             for p in sorted(library)]
    cache = Cache(root / ".cache", key="off", enabled=False, root=root)
    scan = pipeline._scan(found, make_config(root=root), cache, 1, None, [])
    quantizer = scan.word_tests[0]
    assert quantizer.read == {str((root / "other/swap.py").resolve())}, quantizer.read
    project = pipeline._Project(found, found, cache, stamped=False)
    project.take_scan_words(scan)
    from dtype_lint.ecosystems.quantizers.catalogue import LIBRARY_PACKAGES

    assert [m for m, _ in project.table.naming(QUANTIZER_WORDS, skip_tops=LIBRARY_PACKAGES)] == ["other.swap"]
    assert [m for m, _ in project.table.naming(QUANTIZER_WORDS)] == ["other.swap", "transformers.hf"]


def test_the_compiled_code_census_reads_again_only_what_may_compile(tmp_path: Path, monkeypatch):
    """The compiled-code census (analysis/compiled_elsewhere.py) asks `might_compile` of each file's
    text: the scan answers it on the text in hand, and `ModuleTable.holding` names only the files
    that pass, reading no header (vLLM 0.34.0: 687 files say `jit`, 4 may compile); a run on
    named files tests nothing in its scan, and the census reads each file once to ask."""
    from dtype_lint.core.compile_text import might_compile

    files = {**FILES, "proj/scripted.py": "import torch\n\nf = torch.jit.script(g)\n",
             "proj/asks.py": "import torch\n\nSCRIPTING = torch.jit.is_scripting()\n"}
    for summary, read_again in ((True, {"scripted.py": 2, "wide.py": 2}), (False, None)):
        root = write_tree(tmp_path / f"c{summary}", files)
        found = [Found(str(root / p), str((root / p).resolve()), p[:-3].replace("/", ".").removesuffix(".__init__"))
                 for p in sorted(files)]
        cache = Cache(root / ".cache", key="off", enabled=False, root=root)
        project = pipeline._Project(found, found, cache, stamped=False)
        reads: Counter = Counter()
        real_read = pipeline.read_bytes

        def counted(path, limit, reads=reads, real_read=real_read):
            reads[Path(path).name] += 1
            return real_read(path, limit)

        monkeypatch.setattr(pipeline, "read_bytes", counted)
        project.take_scan_words(pipeline._scan(found, make_config(root=root), cache, 1, None, [], summary=summary))
        # (wide.py, whose NULs the scan does not tell, is read again: no header in it)
        assert [m for m, _ in project.table.holding(might_compile, "might_compile")] == ["proj.scripted"]
        assert project.table.loaded() == []
        if read_again is not None:
            assert {name: n for name, n in reads.items() if n > 1} == read_again, reads
        else:
            assert all(n == 2 for n in reads.values()), reads
