"""Import a release's own functions where the release itself cannot be imported.

A release may not be installable here (vLLM: CUDA extensions, a GPU stack), yet a series' regression
tests import its functions (the input-dtype helper a patch fixes, from the module that defines it)
and the proof runs its own code. :func:`installed` puts a finder for `<package>.*` on
`sys.meta_path` that serves a module of the release tree lazily: `from M import name`
cuts `name` (and the top-level definitions it uses) out of the tree's `M.py` with the same
extraction `dtype-lint verify` uses (kernels_ref/harness/upstream_source.py) and executes only
that, its own imports of other packages as written. The package's names it reads come from this
finder too, but for the modules an ecosystem serves stand-ins for (the registry's `stand_ins`
role: vLLM's in ecosystems/vllm/stand_ins.py). A module the tree
does not have is not found, as in the unpatched release: a test of a helper a patch adds fails
there with ModuleNotFoundError.

:func:`run_tests` runs test files written for the project against a tree this way, in a
subprocess (`python -m pytest`), so that our CI can show a series' tests failing before a patch
and passing after it.
"""

from __future__ import annotations
import __future__

import importlib
import importlib.abc
import importlib.machinery
import os
import subprocess
import sys
import tempfile
import types
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING

from dtype_lint.ecosystems.registry import plugins

if TYPE_CHECKING:
    import ast

    from dtype_lint.kernels_ref.harness.upstream_source import SourceModule

# The package served where none is named: the first ecosystem's that serves stand-ins.
PACKAGE: str = plugins("stand_ins")[0].PACKAGE
_FLAGS = __future__.annotations.compiler_flag


def _stand_ins(package: str) -> dict[str, dict[str, object]]:
    """The stand-in modules the ecosystems serve for `package` (none for a project's own)."""
    return {name: names for module in plugins("stand_ins") if module.PACKAGE == package
            for name, names in module.stand_ins().items()}


class _ReleaseModule(types.ModuleType):
    """A module of the release whose names are cut out of its source on first access."""

    def __init__(self, name: str, path: Path):
        super().__init__(name)
        self.__file__ = str(path)
        self._source: SourceModule | None = None  # parsed on first access

    def __getattr__(self, attr: str):
        if attr.startswith("__"):
            raise AttributeError(attr)
        from dtype_lint.kernels_ref.harness.upstream_source import SourceModule

        if self._source is None:
            assert self.__file__ is not None  # set in __init__ (ModuleType's is `str | None`)
            self._source = SourceModule.parse(self.__name__.replace(".", "/") + ".py", Path(self.__file__).read_text())
        if attr not in self._source.top:
            raise AttributeError(f"module {self.__name__!r} has no attribute {attr!r}")
        _define(self, self._source, attr)
        return self.__dict__[attr]


def _define(module: _ReleaseModule, source: SourceModule, name: str) -> None:
    """Execute `name`'s definition and every top-level definition it reads, in source order."""
    from dtype_lint.kernels_ref.harness.upstream_source import free_names, source_segment

    ns = module.__dict__
    needed: dict[str, ast.stmt] = {}
    queue = [name]
    while queue:
        current = queue.pop()
        if current in needed or current in ns:
            continue
        node = source.top[current]
        needed[current] = node
        for free in free_names(node):
            if free in source.top:
                queue.append(free)
            elif free in source.imports and free not in ns:
                imported_from, imported, stmt = source.imports[free]
                if imported_from.split(".")[0] == module.__name__.split(".")[0] and imported:
                    ns[free] = getattr(importlib.import_module(imported_from), imported)
                else:
                    exec(compile(stmt, f"<{module.__name__} imports>", "exec"), ns)  # noqa: S102
    for node_name, node in sorted(needed.items(), key=lambda item: item[1].lineno):
        text = source_segment(source.lines, node)
        exec(compile(text, f"{module.__file__}:{node.lineno} {node_name}", "exec", flags=_FLAGS,  # noqa: S102
                     dont_inherit=True), ns)


class _Finder(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    def __init__(self, tree: Path, package: str):
        self.tree = tree
        self.package = package
        self.stand_ins = _stand_ins(package)

    def find_spec(self, fullname, path=None, target=None):
        if fullname.split(".")[0] != self.package:
            return None
        rel = Path(*fullname.split("."))
        if fullname in self.stand_ins:
            return importlib.machinery.ModuleSpec(fullname, self)
        if (self.tree / rel).is_dir() or any(s.startswith(fullname + ".") for s in self.stand_ins):
            return importlib.machinery.ModuleSpec(fullname, self, is_package=True)
        if (self.tree / rel).with_suffix(".py").is_file():
            return importlib.machinery.ModuleSpec(fullname, self)
        return None

    def create_module(self, spec):
        name = spec.name
        if name in self.stand_ins:
            module = types.ModuleType(name)
            module.__dict__.update(self.stand_ins[name])
            return module
        file = (self.tree / Path(*name.split("."))).with_suffix(".py")
        if file.is_file():
            return _ReleaseModule(name, file)
        module = types.ModuleType(name)
        module.__path__ = []  # a package whose `__init__` is never run: it would import the world
        return module

    def exec_module(self, module):
        return None


@contextmanager
def installed(tree: str | Path, package: str = PACKAGE):
    """`import <package>...` serves the tree at `tree`, the directory holding the
    package (see the module docstring), inside the block."""
    finder = _Finder(Path(tree), package)
    saved = {k: v for k, v in sys.modules.items() if k.split(".")[0] == package}
    for k in saved:
        del sys.modules[k]
    sys.meta_path.insert(0, finder)
    try:
        yield finder
    finally:
        sys.meta_path.remove(finder)
        for k in [k for k in sys.modules if k.split(".")[0] == package]:
            del sys.modules[k]
        sys.modules.update(saved)


def install(tree: Path, package: str = PACKAGE) -> None:
    """:func:`installed` for the rest of the process (a test session's conftest)."""
    sys.meta_path.insert(0, _Finder(Path(tree), package))


_CONFTEST = '''"""Written by dtype-lint: serve the package from the tree in DTL_RELEASE_TREE."""
import os

from dtype_lint.migrate.release_stubs import install

install(os.environ["DTL_RELEASE_TREE"], os.environ["DTL_RELEASE_PACKAGE"])
'''


def run_tests(tree: Path, tests: list[str], timeout: float = 300,
              package: str = PACKAGE) -> subprocess.CompletedProcess:
    """Run the test files `tests` (paths relative to `tree`) with pytest against `tree`'s own
    code, `package` imported through :func:`installed`. Their return code is pytest's."""
    with tempfile.TemporaryDirectory(prefix="dtype-lint-release-tests-") as tmp:
        work = Path(tmp)
        from dtype_lint.core.writer import write_scratch_files

        write_scratch_files(work, {"conftest.py": _CONFTEST})
        copied = []
        for rel in tests:
            target = work / "t" / rel
            source = Path(tree) / rel
            if source.is_file():
                write_scratch_files(work / "t", {rel: source.read_bytes()})
                copied.append(str(target))
        if not copied:
            return subprocess.CompletedProcess([], 5, "", "no test file of " + ", ".join(tests) + " is in the tree")
        base = Path(tree) / "src" if (Path(tree) / "src" / package).is_dir() else Path(tree)
        env = dict(os.environ, DTL_RELEASE_TREE=str(base.resolve()), DTL_RELEASE_PACKAGE=package,
                   PYTHONDONTWRITEBYTECODE="1")
        cmd = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "--rootdir", str(work),
               "--import-mode=importlib", *copied]
        return subprocess.run(cmd, cwd=work, env=env, capture_output=True, text=True, timeout=timeout)
