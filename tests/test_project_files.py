"""The project's files answered from the file-list record (run/project_files.py) without a
record per file: every answer is the one the list it replaces gives (the named files, then the
record's files of other real paths), through class_index.ModuleFiles and pipeline._Project."""

import os
from pathlib import Path

import pytest

from dtype_lint.analysis.index.class_index import ALL_MODULES, ModuleFiles, ModuleTable, all_modules_digest
from dtype_lint.core.discovery import discover_files
from dtype_lint.run import layout_cache
from dtype_lint.run.pipeline import _Project
from dtype_lint.run.project_files import ProjectFiles

FILES = [
    "pkg/__init__.py", "pkg/a.py", "pkg/a.pyi",  # one module, two files
    "pkg/sub/__init__.py", "pkg/sub/b.pyi",
    "pkg/platforms/__init__.py", "pkg/platforms/cuda.py", "pkg/platform.py", "pkg/platformish.py",
    "pkg/x.y.py", "pkg/x/__init__.py", "pkg/x/y.py",  # `pkg.x.y` twice, once through a dotted stem
    "scripts/utils.py", "tools/utils.py", "tools/platform.py",  # top-level modules of two folders
    "tool.py",
]


class _Writer:
    def write_cache(self, path, data):
        Path(path).write_bytes(data)


@pytest.fixture
def root(tmp_path: Path) -> Path:
    root = tmp_path / "p"
    for rel in FILES:
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text("")
    (root / ".dtype_lint_cache").mkdir()
    return root


# (folder to run in, how the walk names the root, the named files)
CASES = [
    ("", ".", ["pkg/a.py", "tools/utils.py", "pkg/x/y.py"]),
    ("", ".", ["./pkg/platform.py"]),
    ("pkg/sub", "../..", ["../a.py", "b.pyi"]),
    ("..", "{root}", ["{root}/scripts/utils.py"]),
]


def _both(root: Path, monkeypatch, where: str, root_arg: str, named: list[str]):
    """(the eager list of the run's project files, the same as ProjectFiles, the named files)."""
    monkeypatch.chdir(root)
    _, record = layout_cache.walk(".", str(root), (), [], [])
    path = str(root / ".dtype_lint_cache" / layout_cache.RECORD_NAME)
    layout_cache.save(path, record, _Writer())
    monkeypatch.chdir(root / where)
    root_arg = root_arg.format(root=root)
    found = discover_files([n.format(root=root) for n in named], (), root)
    rest = layout_cache.load(path, root_arg, str(root), ())
    assert isinstance(rest, list) and len(rest) == len(FILES)
    names = {f.real for f in found}
    eager = found + [f for f in rest if f.real not in names]
    lazy = layout_cache.load(path, root_arg, str(root), (), front=found)
    assert isinstance(lazy, ProjectFiles)
    return eager, lazy, found


@pytest.mark.parametrize("case", CASES)
def test_the_lazy_list_answers_as_the_list(root: Path, monkeypatch, case):
    eager, lazy, found = _both(root, monkeypatch, *case)
    assert list(lazy) == eager and len(lazy) == len(eager) and bool(lazy)
    names = ModuleFiles(eager)
    modules = {f.module for f in eager} | {"", "missing", "pkg.__init__", "pkg.missing", "x.y", "platform"}
    for m in sorted(modules):
        assert lazy.files_of(m) == names.files_of(m), m
        assert lazy.first(m) == names.first(m), m
    assert list(lazy.firsts()) == list(names.firsts())
    assert list(lazy.first_keys().items()) == list(names.first_keys().items()) == \
        [(m, f.real) for m, f in names.firsts()]
    assert len(names.files_of("pkg.x.y")) == 2 and len(names.files_of("utils")) == 2
    folders = sorted({os.path.dirname(f.real) for f in eager} | {str(root / "pk"), str(root / "nowhere")})
    for real in folders:
        prefix = os.path.join(real, "")
        assert sorted(lazy.firsts_under_key(prefix)) == sorted(names.firsts_under_key(prefix)), real
    shown = sorted({os.path.dirname(f.path) for f in eager} | {"pk", "nowhere"})
    for folder in shown:
        prefix = os.path.join(folder, "") if folder else ""
        assert lazy.firsts_under_path(prefix) == names.firsts_under_path(prefix), folder
    for parts in ({"platform", "platforms"}, {"x"}, {"utils"}, {"sub", "y"}, {"nothing"}):
        assert lazy.firsts_with_part(frozenset(parts)) == names.firsts_with_part(frozenset(parts)), parts
    # The module table over either gives the same names, paths and listings.
    lazy_table, eager_table = ModuleTable(lazy), ModuleTable(eager)
    assert lazy_table.module_paths() == eager_table.module_paths()
    assert lazy_table.winners() == eager_table.winners()
    for real in folders:
        assert lazy_table.listing(real) == eager_table.listing(real)


@pytest.mark.parametrize("case, kept", list(zip(CASES, [False, True, True, True])))
def test_the_digest_of_every_module_is_the_record_s_where_the_named_files_leave_it(root: Path, monkeypatch,
                                                                                   case, kept: bool):
    """The record keeps the ALL_MODULES digest of its own files; a run on named files takes it
    where each named file is its module's first file in the record, and makes it otherwise (the
    first case names `tools/utils.py`, the second file of module `utils`: named, it comes first)."""
    eager, lazy, _found = _both(root, monkeypatch, *case)
    want = all_modules_digest(ModuleFiles(eager).first_keys())
    assert lazy.all_modules_digest() == (want if kept else None)
    assert ModuleTable(lazy).enumeration(ALL_MODULES) == ModuleTable(eager).enumeration(ALL_MODULES) == want


def test_a_named_file_the_record_does_not_hold_makes_the_digest_anew(root: Path, monkeypatch):
    eager, lazy, _found = _both(root, monkeypatch, "", ".", ["pkg/a.py"])
    assert lazy.all_modules_digest() is not None
    (root / "pkg" / "new.py").write_text("")  # after the record was made
    front = discover_files(["pkg/new.py", "pkg/a.py"], (), root)
    stale = ProjectFiles(front, lazy._dirs, lazy._odd_at, lazy._lead_of, lazy._firsts_digest)
    assert "pkg.new" not in ModuleFiles(eager).first_keys() and "pkg.new" in stale.first_keys()
    assert stale.all_modules_digest() is None
    assert ModuleTable(stale).enumeration(ALL_MODULES) == all_modules_digest(stale.first_keys())


@pytest.mark.parametrize("case", CASES)
def test_the_projects_maps_answer_as_over_the_list(root: Path, monkeypatch, case):
    eager, lazy, found = _both(root, monkeypatch, *case)
    over_list, over_record = _Project(eager, found, None), _Project(lazy, found, None)
    paths = [f.path for f in eager] + ["pkg/missing.py", "nowhere/a.py", "", os.path.join("pkg", ""), "a.py"]
    for p in paths:
        assert over_record.module_of(p) == over_list.module_of(p), p
        assert over_record.real_of(p) == over_list.real_of(p), p
    reals = [f.real for f in eager] + [str(root / "pkg" / "missing.py"), str(root / "nowhere.py"), str(root)]
    for real in reals:
        assert over_record.display_of(real) == over_list.display_of(real), real


def test_a_named_run_keeps_the_record_lazy_and_a_bad_spelled_out_row_is_a_miss(root: Path, monkeypatch):
    eager, lazy, found = _both(root, monkeypatch, *CASES[0])
    path = str(root / ".dtype_lint_cache" / layout_cache.RECORD_NAME)
    import json

    from dtype_lint.run.cache_seal import seal, unseal

    record = json.loads(unseal(Path(path).read_bytes(), layout_cache.RECORD_NAME))
    assert record["odd"], "the dotted stem is spelled out"
    d, r = record["odd"][0]
    record["dirs"][d][3][r] = [record["dirs"][d][3][r][0], 7]
    # Sealed as dtype-lint seals it: the row itself is what makes it a miss.
    Path(path).write_bytes(seal(json.dumps(record).encode(), layout_cache.RECORD_NAME))
    assert layout_cache.load(path, ".", str(root), (), front=found) is None


def test_module_files_prefix_answers_are_a_scan_of_every_module():
    """The sorted lookup of `firsts_under_path`/`firsts_under_key` answers what a scan of every
    module in discovery order answers: neighbours that share a prefix without the separator
    (`pkg/a` and `pkg/ab`), a prefix between sorted values, non-ASCII and surrogate-escaped
    names, and a later file of a module name that is not its first."""
    files = [("z/m.py", "/r/z/m.py", "z.m"), ("pkg/ab/c.py", "/r/pkg/ab/c.py", "pkg.ab.c"),
             ("pkg/a/b.py", "/r/pkg/a/b.py", "pkg.a.b"), ("pkg/a/é.py", "/r/pkg/a/é.py", "pkg.a.é"),
             ("pkg/a/\udcff.py", "/r/pkg/a/\udcff.py", "pkg.a.\udcff"), ("pkg/a.py", "/r/pkg/a.py", "pkg.a"),
             ("other/pkg/a/b.py", "/r/pkg/a/b.py", "pkg.a.b"), ("pkg/a/0.py", "/s/0.py", "pkg.a.0")]
    names = ModuleFiles(files)
    firsts = list(names.firsts())
    for prefix in ["pkg/a/", "pkg/", "pkg/ab/", "pkg/a", "pkg/aa/", "other/", "", "zz/", "z/m.py"]:
        assert names.firsts_under_path(prefix) == [(m, f) for m, f in firsts if f[0].startswith(prefix)], prefix
        key = "/r/" + prefix
        assert sorted(names.firsts_under_key(key)) == sorted((m, f) for m, f in firsts if f[1].startswith(key)), key
    assert [m for m, _ in names.firsts_under_path("pkg/a/")] == ["pkg.a.b", "pkg.a.é", "pkg.a.\udcff", "pkg.a.0"]
