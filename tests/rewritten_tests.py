"""Each test module's assertion-rewritten bytecode, made once per run and shared by the workers.

pytest rewrites the `assert` statements of every test module it imports and caches the result
beside it (`__pycache__/NAME.cpython-3XY-pytest-V.pyc`), but writes that cache only where
PYTHONDONTWRITEBYTECODE is unset. Where it is set, as on the machines CI runs on, every
pytest-xdist worker rewrote every module it collects, at every run: about 11 s of CPU per worker
for the fast tier's hundred-odd modules, almost half of its collection. pytest reads the cache
whatever that variable says (and checks each module's source hash, so an edited module is
rewritten again), so each process that collects now writes its share of the cache before it
collects: worker i of n every n-th module, the one process of `-n 0` all of them; the other
workers read what it wrote. A module whose cache another worker has not yet written when this one
imports it is rewritten by pytest as before: the cost of a race is the old cost, never a wrong
module.

This uses pytest's own rewriter (`_pytest.assertion.rewrite`, a private module): where its names
or signatures change, nothing is written and pytest rewrites every module itself, as it did before.
tests/test_rewritten_tests.py checks that the cache is written.
"""

from __future__ import annotations

import fnmatch
import os
from pathlib import Path

import pytest


def write_share_of_the_rewritten_modules(config: pytest.Config) -> list[Path]:
    """Write the rewritten bytecode of this process's share of the test modules it will collect;
    returns the modules whose cache it wrote (none where it is fresh, or this process collects nothing)."""
    if config.getoption("assertmode", "rewrite") != "rewrite":
        return []
    worker = getattr(config, "workerinput", None)
    if worker is None and starts_workers(config):
        return []  # pytest-xdist's controller collects nothing: its workers write the cache
    index, count = (0, 1) if worker is None else (int(worker["workerid"].removeprefix("gw")),
                                                  int(worker["workercount"]))
    return write_rewritten(config, modules_to_collect(config)[index::count])


def write_rewritten(config: pytest.Config, modules: list[Path]) -> list[Path]:
    """Write each of `modules`' rewritten bytecode where pytest reads it, unless what is there is
    fresh; returns the modules written."""
    try:
        from _pytest.assertion.rewrite import (
            PYC_TAIL,
            _read_pyc,
            _rewrite_test,
            _write_pyc,
            assertstate_key,
            get_cache_dir,
        )

        state = config.stash[assertstate_key]
    except (ImportError, KeyError):  # another pytest: it rewrites each module itself
        return []
    written = []
    for module in modules:
        cache_dir = get_cache_dir(module)
        if not os.access(module.parent, os.W_OK):
            continue  # a read-only checkout: pytest rewrites in memory, as before
        pyc = cache_dir / (module.name[:-3] + PYC_TAIL)
        try:
            if _read_pyc(module, pyc, state.trace) is not None:
                continue
            cache_dir.mkdir(exist_ok=True)
            source_hash, code = _rewrite_test(module, config)
            if _write_pyc(state, code, source_hash, pyc):
                written.append(module)
        except (OSError, SyntaxError, TypeError, ValueError):
            # A module that does not parse fails its collection with pytest's own message; a
            # changed private signature leaves the rewriting to pytest.
            continue
    return written


def starts_workers(config: pytest.Config) -> bool:
    """Whether this process is pytest-xdist's controller (it starts workers and collects nothing
    itself), as xdist decides it: a distribution mode and workers to start, and not `--collect-only`."""
    return (config.getoption("dist", "no") != "no" and bool(config.getoption("tx", None))
            and not config.getoption("collectonly", False))


def modules_to_collect(config: pytest.Config) -> list[Path]:
    """The test modules this run's paths hold and collection will import, in collection order:
    files matching `python_files` under each path, less those a `pytest_ignore_collect` hook
    ignores (the slow tier's modules under `-m "not slow"`, tests/conftest.py)."""
    patterns = config.getini("python_files")
    found: list[Path] = []
    for arg in config.args:
        path = Path(arg.split("::", 1)[0])
        if not path.is_absolute():
            path = config.invocation_params.dir / path
        candidates = [path] if path.is_file() else sorted(path.rglob("*.py")) if path.is_dir() else []
        for module in candidates:
            if (module.suffix == ".py" and any(fnmatch.fnmatch(module.name, pattern) for pattern in patterns)
                    and "__pycache__" not in module.parts and module not in found
                    and not config.hook.pytest_ignore_collect(collection_path=module, config=config)):
                found.append(module)
    return found
