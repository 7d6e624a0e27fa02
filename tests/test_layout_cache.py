"""The project's file list kept against folder stamps (run/layout_cache.py): trusted only
while every folder's listing and every .gitignore is what the walk saw."""

import os
from pathlib import Path

import pytest

from dtype_lint.core.discovery import discover_files
from dtype_lint.run import layout_cache
from dtype_lint.run.project_files import ProjectFiles


class _Writer:
    def write_cache(self, path, data):
        Path(path).write_bytes(data)


def _project(tmp_path: Path) -> Path:
    tmp_path.mkdir(exist_ok=True)
    (tmp_path / "pkg" / "sub").mkdir(parents=True)
    (tmp_path / "pkg" / "__init__.py").write_text("")
    (tmp_path / "pkg" / "a.py").write_text("x = 1\n")
    (tmp_path / "pkg" / "sub" / "__init__.py").write_text("")
    (tmp_path / "pkg" / "sub" / "b.pyi").write_text("")
    (tmp_path / "tool.py").write_text("")
    (tmp_path / "pkg" / ".gitignore").write_text("ignored.py\n")
    (tmp_path / "pkg" / "ignored.py").write_text("")
    (tmp_path / ".dtype_lint_cache").mkdir()
    return tmp_path


def _saved(root: Path, monkeypatch) -> tuple[list, str]:
    monkeypatch.chdir(root)
    files, record = layout_cache.walk(".", str(root), (), [], [])
    assert record is not None
    path = str(root / ".dtype_lint_cache" / layout_cache.RECORD_NAME)
    layout_cache.save(path, record, _Writer())
    return files, path


def test_kept_list_is_the_walk(tmp_path, monkeypatch):
    root = _project(tmp_path)
    files, path = _saved(root, monkeypatch)
    assert files == discover_files(["."], (), root)
    assert {f.module for f in files} == {"pkg", "pkg.a", "pkg.sub", "pkg.sub.b", "tool"}
    assert layout_cache.load(path, ".", str(root), ()) == files


def test_the_record_serves_a_walk_from_another_folder(tmp_path, monkeypatch):
    root = _project(tmp_path)
    _, path = _saved(root, monkeypatch)
    monkeypatch.chdir(root / "pkg" / "sub")
    assert layout_cache.load(path, "../..", str(root), ()) == discover_files(["../.."], (), root)
    monkeypatch.chdir(tmp_path.parent)
    assert layout_cache.load(path, str(root), str(root), ()) == discover_files([str(root)], (), root)


def test_a_rename_that_keeps_the_listing_keeps_the_record(tmp_path, monkeypatch):
    root = _project(tmp_path)
    files, path = _saved(root, monkeypatch)
    # An editor's save: a temp file renamed over the original changes the folder's mtime only.
    (root / "pkg" / "a.tmp").write_text("x = 2\n")
    os.replace(root / "pkg" / "a.tmp", root / "pkg" / "a.py")
    assert layout_cache.load(path, ".", str(root), ()) == files


def test_a_new_file_a_gitignore_edit_or_other_excludes_invalidate(tmp_path, monkeypatch):
    root = _project(tmp_path)
    _, path = _saved(root, monkeypatch)
    assert layout_cache.load(path, ".", str(root), ("tool.py",)) is None  # other excludes
    (root / "pkg" / "sub" / "c.py").write_text("")
    assert layout_cache.load(path, ".", str(root), ()) is None
    _, path = _saved(root, monkeypatch)
    (root / "pkg" / ".gitignore").write_text("")
    assert layout_cache.load(path, ".", str(root), ()) is None
    _, path = _saved(root, monkeypatch)
    (root / ".gitignore").write_text("tool.py\n")  # the root's ignore state, read as parsed
    assert layout_cache.load(path, ".", str(root), ()) is None


def test_a_file_reached_through_a_link_is_not_kept_and_a_repointed_link_invalidates(tmp_path, monkeypatch):
    outside = tmp_path / "outside.py"
    outside.write_text("")
    root = _project(tmp_path / "proj")
    (root / "pkg" / "link.py").symlink_to(outside)
    monkeypatch.chdir(root)
    _, record = layout_cache.walk(".", str(root), (), [], [])
    assert record is None  # its target can change without any folder of the project
    (root / "pkg" / "link.py").unlink()
    (root / "pkg" / "link.py").symlink_to(root / "tool.py")  # listed once, as tool.py
    _, path = _saved(root, monkeypatch)
    assert layout_cache.load(path, ".", str(root), ()) is not None
    (root / "pkg" / "link.py").unlink()
    (root / "pkg" / "link.py").symlink_to(outside)
    assert layout_cache.load(path, ".", str(root), ()) is None


def test_a_run_on_named_files_takes_the_project_from_the_record(tmp_path, monkeypatch):
    from dtype_lint.core.config import load_config
    from dtype_lint.run import pipeline

    root = _project(tmp_path)
    (root / "pyproject.toml").write_text("[tool.dtype-lint]\n")
    monkeypatch.chdir(root)
    config = load_config(Path("."))
    fresh = pipeline._discover(config, ["pkg/a.py"])
    layout = pipeline._Layout(reuse=True)
    assert pipeline._discover(config, ["pkg/a.py"], layout=layout) == fresh
    layout.save(_Writer())
    walks = []
    real_walk = layout_cache.discover_files
    monkeypatch.setattr(layout_cache, "discover_files", lambda *a, **k: walks.append(a) or real_walk(*a, **k))
    named, project = pipeline._discover(config, ["pkg/a.py"], layout=pipeline._Layout(reuse=True))
    # From the record, the project's files are looked up without a list (run/project_files.py).
    assert isinstance(project, ProjectFiles) and (named, list(project)) == fresh
    assert pipeline._discover(config, ["."], layout=pipeline._Layout(reuse=True)) == pipeline._discover(config, ["."])
    assert walks == []  # both from the record
    assert pipeline._discover(config, ["pkg/a.py"], layout=pipeline._Layout(reuse=False))[1] == fresh[1]
    assert len(walks) == 1  # --fix and --no-cache walk


def test_a_change_to_info_exclude_invalidates(tmp_path, monkeypatch):
    """git's own exclude files (read with the root's .gitignore) are part of the record's key."""
    home = tmp_path / "home"
    home.mkdir()
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.setenv("XDG_CONFIG_HOME", str(home / ".config"))
    monkeypatch.setenv("GIT_CONFIG_NOSYSTEM", "1")
    for name in ("GIT_CONFIG_GLOBAL", "GIT_CONFIG_SYSTEM", "GIT_DIR", "GIT_WORK_TREE", "GIT_INDEX_FILE"):
        monkeypatch.delenv(name, raising=False)
    root = _project(tmp_path / "repo")
    (root / ".git" / "info").mkdir(parents=True)
    (root / ".git" / "objects").mkdir()
    (root / ".git" / "refs").mkdir()
    (root / ".git" / "HEAD").write_text("ref: refs/heads/main\n")
    (root / ".git" / "config").write_text("[core]\n\trepositoryformatversion = 0\n")
    (root / ".git" / "info" / "exclude").write_text("")
    files, path = _saved(root, monkeypatch)
    assert layout_cache.load(path, ".", str(root), ()) == files
    (root / ".git" / "info" / "exclude").write_text("tool.py\n")
    assert layout_cache.load(path, ".", str(root), ()) is None
    assert "tool.py" not in {f.path for f in discover_files(["."], (), root)}


@pytest.mark.parametrize("root_arg", [".", "./", "..", "../p", "a/b", "a/", "/abs/root", "/"])
def test_the_loads_leads_are_the_walks(root_arg):
    """`load` joins each folder's lead by hand; it must be what `walk` recorded with `_lead`."""
    lead = layout_cache._leads(root_arg)
    for rel in ("", "x", "x/y", ".hidden", "x/.y"):
        assert lead(rel) == layout_cache._lead(root_arg, rel), (root_arg, rel)


def test_a_file_whose_shown_path_is_its_real_one_holds_one_string(tmp_path: Path):
    """Walked from an absolute path without links, a file's shown and real paths are one object:
    both live as long as the run, for every file of the project."""
    root = Path(os.path.realpath(tmp_path))
    (root / "pkg").mkdir()
    (root / "pkg" / "a.py").write_text("x = 1\n")
    found = {os.path.basename(f.path): f for f in discover_files([str(root)], (), root)}
    assert found["a.py"].real is found["a.py"].path == str(root / "pkg" / "a.py")
