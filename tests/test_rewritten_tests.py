"""The test modules' assertion-rewritten bytecode is written once and read by every worker
(tests/rewritten_tests.py): what is written is pytest's rewritten module, it is written again when
the module changes, and every module this session collects has it (where it could be written)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from rewritten_tests import modules_to_collect, write_rewritten


def _cached_code(config: pytest.Config, module: Path):
    from _pytest.assertion.rewrite import PYC_TAIL, _read_pyc, assertstate_key, get_cache_dir

    pyc = get_cache_dir(module) / (module.name[:-3] + PYC_TAIL)
    return _read_pyc(module, pyc, config.stash[assertstate_key].trace)


@pytest.fixture
def rewriting(pytestconfig: pytest.Config) -> pytest.Config:
    if pytestconfig.getoption("assertmode") != "rewrite":
        pytest.skip("--assert=plain: pytest rewrites nothing, so there is nothing to cache")
    return pytestconfig


def test_the_cache_holds_pytests_rewritten_module_and_follows_edits(rewriting: pytest.Config, tmp_path: Path):
    module = tmp_path / "test_sample.py"
    module.write_text("def check(seen):\n    expected = 2\n    assert seen == expected\n", encoding="utf-8")
    assert write_rewritten(rewriting, [module]) == [module]
    namespace: dict = {}
    exec(_cached_code(rewriting, module), namespace)
    with pytest.raises(AssertionError) as failure:
        namespace["check"](1)
    assert "assert 1 == 2" in str(failure.value)  # pytest's explanation: the rewritten assert, not Python's
    assert write_rewritten(rewriting, [module]) == []  # fresh: nothing to do
    module.write_text(module.read_text(encoding="utf-8").replace("2", "3"), encoding="utf-8")
    assert write_rewritten(rewriting, [module]) == [module]  # the source hash changed


def test_every_module_this_session_collects_has_its_rewritten_bytecode(rewriting: pytest.Config):
    modules = modules_to_collect(rewriting)
    assert Path(__file__) in modules
    if not os.access(Path(__file__).parent, os.W_OK):
        pytest.skip("a read-only checkout: pytest rewrites in memory, and writes no cache")
    assert [module for module in modules if _cached_code(rewriting, module) is None] == []
