"""Which modules import a name (the storage model's constructions, DTL003): a census per run that
reads each file's import words, not its header, and reads the headers of only the modules whose
import statements hold the name. It must answer exactly what reading every header answers."""

from __future__ import annotations

from pathlib import Path

from tiny_project import module_table_inputs

from dtype_lint.analysis.index.class_index import (
    ModuleTable,
    QuantizableLayerIndex,
    Reads,
    extract_header,
    import_words,
)
from dtype_lint.analysis.storage.constructions import _importers

TEXTS = {
    "pkg.layers": "class Linear:\n    pass\n",
    "pkg.a": "from pkg.layers import Linear\n",
    "pkg.b": "import torch\nfrom pkg.layers import (\n    Other,  # a comment\n    Linear as L,\n)\n",
    "pkg.c": "from pkg import layers\nx = layers.Linear\n",  # imports the module, names the class otherwise
    "pkg.d": "x = Linear  # no import of it\n",
    "pkg.e": "class Linear(Base):\n    pass\n",  # the word in a class statement: a candidate, no import
    "pkg.f": "import numpy as np\n",
}


def _index(folder: Path, texts: dict[str, str], loaded: list[str]) -> QuantizableLayerIndex:
    files, load = module_table_inputs(folder, texts, loaded)

    def holds(mf, test):  # as run/pipeline._Project._holds answers a predicate of the text
        text = Path(mf.path).read_text(encoding="utf-8")
        return test(text), f"stamp:{Path(mf.path).stem}"

    return QuantizableLayerIndex(ModuleTable(files, load, holds), [], [])


def _every_header(texts: dict[str, str], name: str) -> set[tuple[str, str]]:
    """What the census must answer: the pairs of every module's header."""
    return {(module, target) for module, text in texts.items()
            for target in extract_header(text, module, f"{module}.py", False).imports.values()
            if target.rpartition(".")[2] == name}


def test_the_importers_of_a_name_are_those_every_header_says(tmp_path: Path):
    loaded: list[str] = []
    index = _index(tmp_path, TEXTS, loaded)
    index.modules.get("pkg.f")  # a header read before the census is read from the header
    for name in ("Linear", "layers", "torch", "np", "numpy", "Other", "absent"):
        assert set(_importers(index, name)) == _every_header(TEXTS, name), name
    assert set(_importers(index, "Linear")) == {("pkg.a", "pkg.layers.Linear"), ("pkg.b", "pkg.layers.Linear")}


def test_only_the_modules_whose_imports_say_the_name_have_their_headers_read(tmp_path: Path):
    loaded: list[str] = []
    index = _index(tmp_path, TEXTS, loaded)
    _importers(index, "Linear")
    # pkg.e's class statement says the word (a candidate, read to learn it imports nothing of it);
    # pkg.c and pkg.d say it only in code the header does not read.
    assert sorted(loaded) == ["pkg.a", "pkg.b", "pkg.e", "pkg.layers"]
    loaded.clear()
    _importers(index, "Linear")  # the census is built once per index: no text read again, no header
    assert loaded == []


def test_the_census_counts_every_file_as_read(tmp_path: Path):
    """A kept answer must go stale when any file starts importing the name: every module counts as
    read by whoever uses the census, its words read or its header."""
    loaded: list[str] = []
    index = _index(tmp_path, TEXTS, loaded)
    with index.reading() as first:
        _importers(index, "Linear")
    with index.reading() as second:  # a later user of the same census
        _importers(index, "np")
    for reads in (first, second):
        assert isinstance(reads, Reads)
        assert set(reads.all_files().values()) >= {f"stamp:{m}" for m in TEXTS}, reads.all_files()


def test_two_projects_in_one_process_do_not_share_a_census(tmp_path: Path):
    loaded: list[str] = []
    one = _index(tmp_path / "one", TEXTS, loaded)
    other_texts = {**TEXTS, "pkg.d": "from pkg.layers import Linear\n", "pkg.a": "import torch\n"}
    other = _index(tmp_path / "other", other_texts, loaded)
    assert {m for m, _ in _importers(one, "Linear")} == {"pkg.a", "pkg.b"}
    assert {m for m, _ in _importers(other, "Linear")} == {"pkg.b", "pkg.d"}
    # a file edited between two runs: the next run's index (a census lives with its index) reads it again
    edited = {**TEXTS, "pkg.a": "import torch\n"}
    assert {m for m, _ in _importers(_index(tmp_path / "one", edited, loaded), "Linear")} == {"pkg.b"}


def test_a_table_without_a_text_test_reads_every_header():
    headers = [extract_header("from pkg.layers import Linear\n", "pkg.a", "pkg/a.py", False),
               extract_header("from pkg.layers import Linear as L\nimport torch\n", "pkg.b", "pkg/b.py", False)]
    index = QuantizableLayerIndex(headers, [], [])
    assert _importers(index, "Linear") == [("pkg.a", "pkg.layers.Linear"), ("pkg.b", "pkg.layers.Linear")]
    assert _importers(index, "torch") == [("pkg.b", "torch")]


SOURCES = [
    "import a.b.c\nimport a.b.d as e\nfrom . import f\nfrom ..g import h as i, j\n",
    "from .m import (\n    k,  # c\n    l as n,\n)\nfrom m import o; import p\n",
    "try:\n    from q.r import s\nexcept ImportError:\n    import t.u as v\n",
    "from w import \\\n    x, y\nclass Z(x.Base): pass\n",
    "from m import ｆｏｏ\nimport ｂａｒ.ｂａｚ as q\n",  # identifiers the parser normalises (NFKC)
    'def f():\n    """\nfrom docs import nothing\n"""\n    import inner.mod\n',
    "from .import_utils import y\nfrom .import z\nfrom importer.imports import (w)\n",
]


def test_import_words_hold_the_last_part_of_every_target_a_header_records():
    for text in SOURCES:
        for is_package in (False, True):
            header = extract_header(text, "pkg.sub.mod", "pkg/sub/mod.py", is_package)
            words = import_words(text)
            missing = {t for t in header.imports.values() if t.rpartition(".")[2] not in words}
            assert not missing, (text, missing)
    assert {"foo", "baz", "ｆｏｏ", "ｂａｚ"} <= import_words(SOURCES[4])
