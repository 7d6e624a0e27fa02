"""git's other exclude files: `$GIT_DIR/info/exclude` and `core.excludesFile` (default
`$XDG_CONFIG_HOME/git/ignore`) prune the walk as a `.gitignore` does, inside a git work tree only,
relative to its top, below every `.gitignore` (core/git_excludes.py).

Each repository is made by hand (a `.git` folder, or a linked worktree's `.git` file and
`commondir`): dtype-lint reads them without git. Where git is installed, `git ls-files --others
--exclude-standard` must agree with each case.
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest
from cli_runner import dtl
from tiny_project import tiny_project

from dtype_lint.core import git_excludes
from dtype_lint.core.discovery import discover, path_excluded


@pytest.fixture(autouse=True)
def isolated_git_config(tmp_path: Path, monkeypatch):
    """No system or user git configuration of this machine: a HOME and XDG folder of the test's."""
    home = tmp_path / "home"
    home.mkdir()
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.setenv("XDG_CONFIG_HOME", str(home / ".config"))
    monkeypatch.setenv("GIT_CONFIG_NOSYSTEM", "1")
    for name in ("GIT_CONFIG_GLOBAL", "GIT_CONFIG_SYSTEM", "GIT_DIR", "GIT_WORK_TREE", "GIT_INDEX_FILE"):
        monkeypatch.delenv(name, raising=False)
    return home


def write(root: Path, files: dict[str, str]) -> Path:
    for rel, text in files.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
    return root


def make_repo(top: Path, exclude: str = "", config: str = "") -> Path:
    """A work tree at `top` whose git folder holds what `git init` would need to recognise it."""
    write(top, {".git/HEAD": "ref: refs/heads/main\n", ".git/config": "[core]\n\trepositoryformatversion = 0\n" + config,
                ".git/info/exclude": exclude})
    (top / ".git/objects").mkdir()
    (top / ".git/refs").mkdir()
    return top


def found(root: Path, top: Path | None = None) -> set[str]:
    """The files discovery keeps under `root`, relative to `top` (the root by default)."""
    return {Path(p).relative_to(top or root).as_posix() for p in discover([str(root)], (), root)}


def git_agrees(top: Path, expected: dict[str, bool]) -> None:
    if not shutil.which("git"):
        return
    listed = subprocess.run(["git", "-C", str(top), "ls-files", "--others", "--exclude-standard"],
                            capture_output=True, text=True, check=True).stdout.split()
    assert {p: p not in listed for p in expected} == expected, "git itself disagrees with the case"


def test_info_exclude_prunes_the_walk(tmp_path: Path):
    top = make_repo(tmp_path / "repo", exclude="# local\nscratch/\ngen_*.py\n")
    expected = {"scratch/a.py": True, "gen_x.py": True, "pkg/gen_y.py": True, "pkg/attn.py": False}
    write(top, dict.fromkeys(expected, "x = 1\n"))
    assert {p: p not in found(top) for p in expected} == expected
    git_agrees(top, expected)


def test_a_gitignore_decides_over_info_exclude_which_decides_over_core_excludes_file(tmp_path: Path,
                                                                                   isolated_git_config: Path):
    write(isolated_git_config, {".config/git/ignore": "*_local.py\nnotes_*.py\n"})
    top = make_repo(tmp_path / "repo", exclude="!keep_local.py\ngen_*.py\n")
    write(top, {".gitignore": "!gen_keep.py\n"})
    expected = {"a_local.py": True, "keep_local.py": False, "notes_1.py": True, "gen_x.py": True,
                "gen_keep.py": False, "main.py": False}
    write(top, dict.fromkeys(expected, "x = 1\n"))
    assert {p: p not in found(top) for p in expected} == expected
    git_agrees(top, expected)


@pytest.mark.parametrize("how", ["global-config", "repository-config", "relative-to-top"])
def test_core_excludes_file_is_read_from_gits_configuration(tmp_path: Path, isolated_git_config: Path,
                                                            monkeypatch, how: str):
    home = isolated_git_config
    # The default file holds another pattern: a configured core.excludesFile replaces it.
    write(home, {".config/git/ignore": "default_*.py\n", "my-ignore": "skipped_*.py\n"})
    config = ""
    if how == "global-config":
        write(home, {"global.ini": '[user]\n\tname = t\n[core] ; the user\'s own\n\texcludesFile = "~/my-ignore" # here\n'})
        monkeypatch.setenv("GIT_CONFIG_GLOBAL", str(home / "global.ini"))
    elif how == "repository-config":
        config = f"[core]\n\tExcludesFile = {home / 'my-ignore'}\n"
    top = make_repo(tmp_path / "repo", config=config)
    if how == "relative-to-top":
        write(top, {".git/config": "[core]\n\texcludesfile = .git/my-ignore\n", ".git/my-ignore": "skipped_*.py\n"})
    expected = {"skipped_1.py": True, "default_1.py": False, "main.py": False}
    write(top, dict.fromkeys(expected, "x = 1\n"))
    assert {p: p not in found(top) for p in expected} == expected
    git_agrees(top, expected)


def test_an_empty_core_excludes_file_turns_the_default_off(tmp_path: Path, isolated_git_config: Path):
    write(isolated_git_config, {".config/git/ignore": "*.py\n"})
    top = make_repo(tmp_path / "repo", config="[core]\n\texcludesFile =\n")
    write(top, {"main.py": "x = 1\n"})
    assert found(top) == {"main.py"}
    git_agrees(top, {"main.py": False})


def test_outside_a_work_tree_only_gitignore_files_apply(tmp_path: Path, isolated_git_config: Path):
    write(isolated_git_config, {".config/git/ignore": "*.py\n"})
    root = write(tmp_path / "plain", {"main.py": "x = 1\n", ".gitignore": "gen.py\n", "gen.py": "x = 1\n"})
    assert git_excludes.find_repository(str(root)) is None
    assert found(root) == {"main.py"}


def test_a_project_below_the_work_trees_top_matches_from_the_top(tmp_path: Path):
    """A pyproject in a monorepo's subfolder: `/svc/skip.py` anchors at the work tree's top, and a
    bare name matches at any depth of it."""
    top = make_repo(tmp_path / "mono", exclude="/svc/skip.py\n/keep.py\nscratch.py\n")
    expected = {"svc/skip.py": True, "svc/keep.py": False, "svc/pkg/scratch.py": True, "svc/pkg/skip.py": False}
    write(top, dict.fromkeys(expected, "x = 1\n"))
    project = top / "svc"
    assert {p: p not in found(project, top) for p in expected} == expected
    git_agrees(top, expected)
    # A file named on the command line with --force-exclude (pre-commit), judged the same way.
    assert path_excluded(project / "skip.py", (), project)
    assert not path_excluded(project / "keep.py", (), project)


def test_a_linked_worktree_reads_the_main_repositorys_info_exclude(tmp_path: Path):
    main = make_repo(tmp_path / "main", exclude="scratch.py\n")
    linked = tmp_path / "linked"
    write(main, {".git/worktrees/linked/HEAD": "ref: refs/heads/other\n", ".git/worktrees/linked/commondir": "../..\n"})
    write(linked, {".git": f"gitdir: {main / '.git/worktrees/linked'}\n", "scratch.py": "x = 1\n", "main.py": "x = 1\n"})
    repo = git_excludes.find_repository(str(linked))
    assert repo is not None and Path(repo.common_dir) == main / ".git" and Path(repo.top) == linked
    assert found(linked) == {"main.py"}


def test_the_command_line_reports_what_info_exclude_leaves_out(tmp_path: Path):
    root = tiny_project(tmp_path / "repo")
    make_repo(root, exclude="proj/\n")
    proc = dtl(root, "check", "--no-cache", "--output-format", "concise")
    assert proc.returncode == 0 and proc.stdout == "No Python files checked.\n", proc.stdout + proc.stderr
    (root / ".git/info/exclude").write_text("")
    proc = dtl(root, "check", "--no-cache", "--output-format", "concise")
    assert proc.returncode == 1 and "proj/attn.py" in proc.stdout


def test_an_exclude_file_that_is_a_fifo_is_a_message_not_a_hang(tmp_path: Path):
    import os

    top = make_repo(tmp_path / "repo")
    (top / ".git/info/exclude").unlink()
    os.mkfifo(top / ".git/info/exclude")
    write(top, {"main.py": "x = 1\n"})
    messages: list[str] = []
    from dtype_lint.core.discovery import discover_files

    assert [f.path for f in discover_files([str(top)], (), top, messages=messages)] == [str(top / "main.py")]
    assert len(messages) == 1 and "info/exclude" in messages[0] and "not read" in messages[0]


def test_the_fast_path_record_watches_the_exclude_files(tmp_path: Path, isolated_git_config: Path):
    top = make_repo(tmp_path / "repo")
    watched = git_excludes.watched_files(str(top))
    assert str(top / ".git/info/exclude") in watched and str(top / ".git/config") in watched
    assert str(isolated_git_config / ".config/git/ignore") in watched  # absent: its creation counts
    assert git_excludes.watched_files(str(tmp_path)) == []


@pytest.mark.parametrize("text, expected", [
    ("[core]\n\texcludesFile = a b  \n", [("core", "excludesfile", "a b")]),
    ('[core]\n excludesfile = " spaced "  ; comment\n', [("core", "excludesfile", " spaced ")]),
    ("[core] excludesfile = x#y\n", [("core", "excludesfile", "x")]),
    ('[core]\n\tpath = "a#b" \\\n  c\n', [("core", "path", "a#b   c")]),  # as `git config` reads it
    ("[core]\n\ty = p\t q  \n", [("core", "y", "p  q")]),
    ('[core]\n\tx = a\\tb\\\\c\\"\n', [("core", "x", 'a\tb\\c"')]),
    ("# top\n[Core]\n\tbare\n[remote \"Origin\"]\n\turl = u\n[branch.Main]\n\tk=v\n",
     [("core", "bare", "true"), ("remote.Origin", "url", "u"), ("branch.main", "k", "v")]),
    ("[core]\r\n\texcludesfile = w\r\n", [("core", "excludesfile", "w")]),
])
def test_git_config_syntax(text: str, expected: list):
    assert git_excludes.parse_config(text) == expected
