"""ModuleTable.naming: a census that needs only the files naming some words reads the others'
words, not their headers, and still counts them as read (a kept answer must go stale when one of
them starts naming the words)."""

from __future__ import annotations

from pathlib import Path

from tiny_project import module_table_inputs

from dtype_lint.analysis.index.class_index import ALL_MODULES, ModuleTable, Reads

GROUPS = (("bitsandbytes",), ("transformers", "integrations"))


def _table(tmp_path: Path, texts: dict[str, str], loaded: list[str], holds=True) -> ModuleTable:
    files, load = module_table_inputs(tmp_path, texts, loaded)

    def told(mf, groups):
        data = Path(mf.path).read_bytes()
        return any(all(w.encode() in data for w in group) for group in groups), f"stamp:{Path(mf.path).stem}"

    return ModuleTable(files, load, told if holds else None)


TEXTS = {"swap": "import bitsandbytes as bnb\n", "plain": "import torch\n",
         "hf": "from transformers.integrations import replace_with_bnb_linear\n",
         "half": "import transformers\n"}


def test_only_the_files_naming_a_group_have_their_headers_read(tmp_path: Path):
    loaded: list[str] = []
    table = _table(tmp_path, TEXTS, loaded)
    reads = Reads()
    table.frames.append(reads)
    named = [module for module, _ in table.naming(GROUPS)]
    assert named == ["swap", "hf"] and loaded == ["swap", "hf"]
    # every file counts as read, with the stamp of the one the test read; those passed over as
    # passed over by these words (a later edit that still names no group keeps them so)
    key = {m: table.first_key(m) for m in TEXTS}
    assert {m: reads.all_files()[k] for m, k in key.items()} == {m: f"stamp:{m}" for m in TEXTS}
    assert set(reads.files) == {key["swap"], key["hf"]}
    assert {k: tests for k, (_stamp, tests) in reads.passed.items()} == \
        {k: frozenset((GROUPS,)) for m, k in key.items() if m not in ("swap", "hf")}
    # which file each module is: the one digest of every module's first file, not a lookup each
    assert reads.enumerations[ALL_MODULES] == table.enumeration(ALL_MODULES)
    assert set(reads.modules) == {"swap", "hf"}  # the headers read


def test_without_a_test_of_words_every_header_is_read(tmp_path: Path):
    loaded: list[str] = []
    table = _table(tmp_path, TEXTS, loaded, holds=False)
    assert [module for module, _ in table.naming(GROUPS)] == list(TEXTS)
    assert loaded == list(TEXTS)


def test_the_packages_a_caller_ignores_are_neither_read_nor_yielded(tmp_path: Path):
    # transformers' own files name `transformers.integrations` by the hundred; the quantizer census
    # ignores a library's own modules whatever they hold (ecosystems/quantizers/applications.py).
    texts = {"transformers": "from transformers.integrations import replace_with_bnb_linear\n", **TEXTS}
    loaded: list[str] = []
    told: list[str] = []
    table = _table(tmp_path, texts, loaded)
    real_holds = table._holds
    table._holds = lambda mf, groups: told.append(Path(mf.path).stem) or real_holds(mf, groups)
    named = [module for module, _ in table.naming(GROUPS, skip_tops=frozenset({"transformers"}))]
    assert named == ["swap", "hf"] and loaded == ["swap", "hf"]
    assert "transformers" not in told and set(told) == set(TEXTS)


def test_whether_the_tree_is_on_a_preset_reads_only_the_files_naming_its_engine(tmp_path: Path):
    # The helper's wording and doctor ask whether some file imports from the engine's layers: only
    # a file naming the engine can, and the others' headers are not read for it.
    from dtype_lint.ecosystems.presets import tree_on_preset

    plain = {f"plain{i}": "import torch\n" for i in range(3)}
    driver = {"driver": "from vllm import LLM\n"}  # names the engine, not its layers
    for extra, expected in [({}, False), ({"layer_user": "from vllm.model_executor.layers.linear import X\n"}, True)]:
        loaded: list[str] = []
        (tmp_path / str(expected)).mkdir()
        table = _table(tmp_path / str(expected), {**plain, **driver, **extra}, loaded)
        assert tree_on_preset("vllm", table) is expected
        assert set(loaded) == {"driver", *extra}, loaded
    loaded = []
    (tmp_path / "engine").mkdir()
    engine = _table(tmp_path / "engine", {**plain, "vllm": ""}, loaded)  # a checkout of the engine
    assert tree_on_preset("vllm", engine) and not {m for m in loaded if m.startswith("plain")}
