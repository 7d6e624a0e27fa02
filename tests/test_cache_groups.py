"""A census about the whole tree (class_index.Reads.groups): every file whose analysis uses it
depends on every file it read, and at ten times vLLM that was 36,000 files copied into each of
hundreds of findings entries and checked again for each of them on every cached run (a warm check
took longer than half a cold one). The cache keeps a group's reads once (`g/`), names it in each
entry that used it, and checks it once a run; a file of the group changed makes every entry using
it a miss."""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest

from dtype_lint.analysis.index import class_index
from dtype_lint.analysis.index.class_index import Reads, as_group
from dtype_lint.core.file_stamp import file_stamp
from dtype_lint.core.writer import ProjectWriter
from dtype_lint.run.cache import GROUP_SUFFIX, GROUPS_KEPT, Cache


class _NoModules:
    """The module table an entry without module lookups is checked against: never asked."""

    def first_key(self, module):  # pragma: no cover - an entry of this test looks up no module
        raise AssertionError(module)


def _tree(root: Path) -> dict[str, str]:
    names = ("site_a.py", "site_b.py", "lib1.py", "lib2.py", "own.py")
    for name in names:
        (root / name).write_text(f"# {name}\n")
    return {name: str((root / name).resolve()) for name in names}


def _keep(root: Path, paths: dict[str, str]) -> Cache:
    """Two analysed files using one census of lib1 and lib2; site_b read own.py besides."""
    cache = Cache(root / ".cache", key="k", root=root)
    census = as_group(Reads())
    census.files = {paths[n]: file_stamp(paths[n]) for n in ("lib1.py", "lib2.py")}
    for name in ("site_a.py", "site_b.py"):
        reads = Reads()
        reads.groups["('census',)"] = census
        if name == "site_b.py":
            reads.files[paths["own.py"]] = file_stamp(paths["own.py"])
        cache.put_findings(paths[name], file_stamp(paths[name]), [], reads, lambda p: p)
    cache.save(ProjectWriter(root))
    return cache


def _hits(root: Path, paths: dict[str, str]) -> dict[str, bool]:
    cache = Cache(root / ".cache", key="k", root=root)
    return {name: cache.findings(paths[name], file_stamp(paths[name]), file_stamp, _NoModules(), str) is not None
            for name in ("site_a.py", "site_b.py")}


def test_a_group_is_kept_once_and_named_by_each_entry(tmp_path: Path):
    paths = _tree(tmp_path)
    cache = _keep(tmp_path, paths)
    (group_file,) = (cache.dir / "g").iterdir()
    for name in ("site_a.py", "site_b.py"):
        entry = cache._load("f", name)
        assert entry["files"] == ({"own.py": file_stamp(paths["own.py"])} if name == "site_b.py" else {})
        assert list(entry["groups"]) == ["('census',)"]
    assert group_file.suffix == GROUP_SUFFIX
    group = cache._unseal_group(group_file.read_bytes())
    assert sorted(group["files"]) == ["lib1.py", "lib2.py"]
    # What a kept answer of the run memo needs: every file read, the group's included.
    stamp, files = cache.findings_reads(paths["site_b.py"])
    assert set(files) == {paths["own.py"], paths["lib1.py"], paths["lib2.py"]}
    assert cache.findings_reads(paths["site_b.py"], limit=10) is None  # a group: no clean answer kept


def test_an_unchanged_group_is_a_hit_and_a_changed_one_a_miss_for_every_entry(tmp_path: Path):
    paths = _tree(tmp_path)
    _keep(tmp_path, paths)
    assert _hits(tmp_path, paths) == {"site_a.py": True, "site_b.py": True}
    Path(paths["lib2.py"]).write_text("# lib2, edited\n")
    assert _hits(tmp_path, paths) == {"site_a.py": False, "site_b.py": False}


def test_a_group_is_checked_once_a_run(tmp_path: Path, monkeypatch):
    paths = _tree(tmp_path)
    _keep(tmp_path, paths)
    checked: list[str] = []
    stamp = file_stamp
    cache = Cache(tmp_path / ".cache", key="k", root=tmp_path)

    def counted(path: str) -> str:
        checked.append(Path(path).name)
        return stamp(path)

    for name in ("site_a.py", "site_b.py"):
        assert cache.findings(paths[name], stamp(paths[name]), counted, _NoModules(), str) is not None
    assert sorted(checked) == ["lib1.py", "lib2.py", "own.py"]


@pytest.mark.parametrize("threshold", [0, class_index.GROUP_MIN_FILES])
def test_a_census_becomes_a_group_from_its_size(threshold: int, monkeypatch):
    """`cached_facts(..., census=True)`: replayed by reference from GROUP_MIN_FILES files read."""
    monkeypatch.setattr(class_index, "GROUP_MIN_FILES", threshold)
    table = class_index.ModuleTable([])
    index = class_index.QuantizableLayerIndex.__new__(class_index.QuantizableLayerIndex)
    index.modules, index.census_cache = table, {}

    def build():
        for frame in table.frames:
            frame.files["/x/lib.py"] = "1:ab"
        return "answer"

    with index.reading() as outer:
        assert index.cached_facts(("census",), build, census=True) == "answer"
    with index.reading() as later:  # a later user: replayed, by reference or by copy
        assert index.cached_facts(("census",), build, census=True) == "answer"
    assert later.all_files() == {"/x/lib.py": "1:ab"} == outer.all_files()
    assert bool(later.groups) == (threshold <= 1) and bool(later.files) == (threshold > 1)



CENSUS = "('census',)"


def _put_census_user(cache: Cache, paths: dict[str, str]) -> Reads:
    """site_a.py's entry, with the census built again (a new token, the same reads)."""
    census = as_group(Reads())
    census.files = {paths[n]: file_stamp(paths[n]) for n in ("lib1.py", "lib2.py")}
    reads = Reads()
    reads.groups["('census',)"] = census
    cache.put_findings(paths["site_a.py"], file_stamp(paths["site_a.py"]), [], reads, lambda p: p)
    return census


def test_a_census_built_again_does_not_write_its_group_again(tmp_path: Path):
    """A pre-commit run builds the census again: the group entry on disk, named by its content,
    is that one (at ten times vLLM, 6.8 MB); it is written again only when found untrue."""
    paths = _tree(tmp_path)
    _keep(tmp_path, paths)
    later = Cache(tmp_path / ".cache", key="k", root=tmp_path)
    _put_census_user(later, paths)
    assert later.take_entries("g") == [] and later.take_entries("f")
    (group_file,) = (later.dir / "g").iterdir()
    data = bytearray(group_file.read_bytes())
    data[len(data) // 2] ^= 1  # edited: its seal no longer holds
    group_file.write_bytes(bytes(data))
    assert _hits(tmp_path, paths) == {"site_a.py": False, "site_b.py": False}
    again = Cache(tmp_path / ".cache", key="k", root=tmp_path)
    assert again.findings(paths["site_a.py"], file_stamp(paths["site_a.py"]), file_stamp, _NoModules(), str) is None
    census = _put_census_user(again, paths)  # the analysis ran again: its group is written again
    assert [name for name, _ in again.take_entries("g")] == [f"g/{again._group(census, CENSUS)}"]


def _save_group(root: Path, paths: dict[str, str], files: tuple[str, ...], census: str = CENSUS,
                age: float | None = None) -> str:
    """Save site_a.py's entry using `census` over `files` as they are now; the group's name. `age`:
    seconds ago its entry was last used (its mtime)."""
    cache = Cache(root / ".cache", key="k", root=root)
    group = as_group(Reads())
    group.files = {paths[n]: file_stamp(paths[n]) for n in files}
    reads = Reads()
    reads.groups[census] = group
    cache.put_findings(paths["site_a.py"], file_stamp(paths["site_a.py"]), [], reads, lambda p: p)
    cache.save(ProjectWriter(root))
    name = cache._group_names[group.token]
    if age is not None:
        when = time.time() - age
        os.utime(cache._entry("g", name), (when, when))
    return name


def _groups(root: Path) -> set[str]:
    return {p.name[:-len(GROUP_SUFFIX)] for p in (root / ".cache" / "v2-k" / "g").iterdir()}


def test_a_census_made_again_leaves_at_most_GROUPS_KEPT_groups_behind(tmp_path: Path):
    """Each edit of a file a census read makes it a new group; the old ones are removed, the most
    recently used GROUPS_KEPT of the census kept, another census's left alone."""
    paths = _tree(tmp_path)
    other = _save_group(tmp_path, paths, ("own.py",), census="('other',)", age=1000)
    made = []
    for round_ in range(GROUPS_KEPT + 3):
        Path(paths["lib2.py"]).write_text(f"# lib2, edit {round_}\n")
        made.append(_save_group(tmp_path, paths, ("lib1.py", "lib2.py"), age=100 - round_))
    assert len(set(made)) == len(made)
    assert _groups(tmp_path) == {other, *made[-GROUPS_KEPT:]}
    # the newest is the one the entry names, and a hit
    assert _hits(tmp_path, paths)["site_a.py"]


def test_a_group_a_run_found_unchanged_is_kept_as_recently_used(tmp_path: Path):
    """An older group still true (an entry names it and its files are unchanged) is marked used
    by the run that checks it, and outlives newer groups of the census that nothing used since."""
    paths = _tree(tmp_path)
    used = _save_group(tmp_path, paths, ("lib1.py", "lib2.py"), age=1000)
    (tmp_path / "site_b.py").write_text("# site_b\n")
    newer = [_save_group(tmp_path, paths, files, age=age)
             for files, age in ((("lib1.py",), 500), (("lib2.py",), 400))]
    # site_b.py's entry names the first group: checked (and marked used) by this run
    cache = Cache(tmp_path / ".cache", key="k", root=tmp_path)
    group = as_group(Reads())
    group.files = {paths[n]: file_stamp(paths[n]) for n in ("lib1.py", "lib2.py")}
    reads = Reads()
    reads.groups[CENSUS] = group
    cache.put_findings(paths["site_b.py"], file_stamp(paths["site_b.py"]), [], reads, lambda p: p)
    cache.save(ProjectWriter(tmp_path))
    assert cache._load("f", "site_b.py")["groups"] == {CENSUS: used}
    assert _hits(tmp_path, paths)["site_b.py"]  # checked: marked used now
    newest = _save_group(tmp_path, paths, ("own.py",))
    assert _groups(tmp_path) == {used, newer[1], newest}


def test_a_group_name_not_of_our_making_is_never_read(tmp_path: Path):
    """An entry names its group's file; a name `_group` does not make (a path) is a miss."""
    paths = _tree(tmp_path)
    cache = _keep(tmp_path, paths)
    assert cache._group_entry("../../../etc/passwd") is None
    assert cache._group_entry("0" * 41) is None


@pytest.mark.parametrize("kept, ok", [
    (["1:ab", [0]], True), (["1:ab", [0, 1]], True),
    (["1:ab", [2]], False), (["1:ab", []], False), (["1:ab", [-1]], False), (["1:ab", [True]], False),
    (["1:ab", ["0"]], False), (["1:ab"], False), ([1, [0]], False), ("1:ab", False), (["1:ab", (0,)], False),
])
def test_an_ill_shaped_passed_over_file_makes_the_entry_unreadable(tmp_path: Path, kept, ok: bool):
    """A stored passed-over file is [stamp, [numbers of the tests it failed]]; anything else (a
    number that names no test, none at all, another shape) makes the whole entry a miss, however
    many well-shaped files sit beside it (each list of numbers is checked once, not once a file)."""
    cache = Cache(tmp_path / ".cache", key="k", root=tmp_path)
    entry = {"tests": ["might_compile", "might_compile"],
             "passed": {"a.py": ["1:aa", [0]], "b.py": kept, "c.py": ["1:cc", [0]]}}
    got = cache._passed_of(entry)
    assert (got is not None) == ok
    if ok:
        assert got[str(tmp_path / "b.py")][0] == "1:ab" and set(got) == {str(tmp_path / n) for n in ("a.py", "b.py", "c.py")}
