"""Trusted like a compiler, round three (#36): the cache serves only what the current code and
settings would compute.

- Every setting a fix reads is in the cache key: editing only `[tool.isort]`, Ruff's isort
  section or `ruff.toml` makes a warm `--fix` write what a cold one writes.
- Every cache file is sealed with a per-user key kept outside the cache folder
  (run/cache_seal.py): an entry whose fix was edited and whose SHA-256 line was recomputed (the
  attack of #36), a genuine entry moved from a folder computed under other settings, an edited
  fast-path record or run memo, are all misses; a cache sealed under another key (a CI cache
  restored on another machine) is a miss, never an error.
- The cache folder is never used through a link that leaves the project, nor inside a source
  package (run/cache_folder.py): exit 2 with one line saying why; `--no-cache` still runs.

Each test here failed on de0faa5.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import stat
from pathlib import Path

import pytest
from cli_runner import dtl
from tiny_project import ATTN, FIXED_CALL, tiny_project, tree_bytes, write_tree

from dtype_lint import fast_path
from dtype_lint.run import cache_seal
from dtype_lint.run.fast_record import RECORD_NAME

CACHE = ".dtype_lint_cache"
HELPER_IMPORT = "from proj.dtypes import get_layer_input_dtype"
# Where the helper's import lands: first party in a block of its own after vLLM's import (proj is
# first party), or third party sorted in with vLLM's.
FIRST_PARTY_PLACEMENT = ("import torch\nfrom vllm.model_executor.layers.linear import ColumnParallelLinear\n\n"
                         f"{HELPER_IMPORT}\n")
THIRD_PARTY_PLACEMENT = f"import torch\n{HELPER_IMPORT}\nfrom vllm.model_executor.layers.linear import ColumnParallelLinear\n"
EVIL = '__import__("os").system("echo pwned")'


@pytest.fixture(autouse=True)
def state_home(tmp_path: Path, monkeypatch) -> Path:
    """Each test keeps its cache key in a state folder of its own (never the user's)."""
    home = tmp_path / "state"
    monkeypatch.setenv("XDG_STATE_HOME", str(home))
    monkeypatch.delenv("DTYPE_LINT_CACHE_KEY", raising=False)
    cache_seal.forget()
    yield home
    cache_seal.forget()


def _pyproject(style: str) -> str:
    return f'[tool.dtype-lint]\nhelper = "proj.dtypes:get_layer_input_dtype"\n\n{style}'


def _fixed_head(root: Path) -> str:
    text = (root / "proj" / "attn.py").read_text(encoding="utf-8")
    return text[: text.index("\n\n\nclass")] + "\n"


def _cold_fix(root: Path, where: Path) -> dict[str, bytes]:
    """The tree a `--fix` without any cache leaves, from a copy of `root` as it is now."""
    shutil.copytree(root, where, ignore=shutil.ignore_patterns(CACHE))
    proc = dtl(where, "check", "--fix", "--no-cache", ".")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return tree_bytes(where)


# ---- every setting a fix reads is in the key -------------------------------------------------------


@pytest.mark.parametrize("before,after", [
    ('[tool.isort]\nknown_third_party = ["proj"]\n', '[tool.isort]\nknown_first_party = ["proj"]\n'),
    ('[tool.ruff.lint.isort]\nknown-third-party = ["proj"]\n', '[tool.ruff.lint.isort]\nknown-first-party = ["proj"]\n'),
    ('[tool.ruff.isort]\nknown-third-party = ["proj"]\n', "[tool.ruff]\n"),
], ids=["tool.isort", "tool.ruff.lint.isort", "tool.ruff.isort"])
def test_editing_only_the_isort_settings_refreshes_the_cached_fix(tmp_path: Path, before: str, after: str):
    """de0faa5: the fix cached under the old section was written (proj sorted in as third party)."""
    root = tiny_project(tmp_path / "p", pyproject=_pyproject(before))
    assert dtl(root, "check", ".").returncode == 1  # caches the fix with the old placement
    (root / "pyproject.toml").write_text(_pyproject(after), encoding="utf-8")
    cold = _cold_fix(root, tmp_path / "cold")
    proc = dtl(root, "check", "--fix", ".")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert _fixed_head(root) == FIRST_PARTY_PLACEMENT
    assert tree_bytes(root) == cold


def test_the_other_way_round_and_a_ruff_toml(tmp_path: Path):
    """A `ruff.toml` at the root (read before pyproject's [tool.ruff]) decides too."""
    root = tiny_project(tmp_path / "p", pyproject=_pyproject(""))
    assert dtl(root, "check", ".").returncode == 1  # proj found at the root: first party
    (root / "ruff.toml").write_text('[lint.isort]\nknown-third-party = ["proj"]\n', encoding="utf-8")
    cold = _cold_fix(root, tmp_path / "cold")
    assert dtl(root, "check", "--fix", ".").returncode == 0
    assert _fixed_head(root) == THIRD_PARTY_PLACEMENT
    assert tree_bytes(root) == cold


@pytest.mark.parametrize("edit", [
    ("pyproject.toml", '[tool.isort]\nknown_first_party = ["vllm"]\n'),
    ("pyproject.toml", '[tool.ruff.lint.isort]\nknown-third-party = ["proj"]\n'),
    ("pyproject.toml", "[tool.isort]\nforce_sort_within_sections = true\n"),
    ("pyproject.toml", "[tool.ruff.lint.isort]\nforce-sort-within-sections = true\n"),
    ("pyproject.toml", "[tool.ruff]\nline-length = 100\n"),
    ("pyproject.toml", "[tool.black]\nline-length = 100\n"),
    ("pyproject.toml", "[tool.isort]\nline_length = 100\n"),
    ("ruff.toml", "line-length = 100\n"),
    (".ruff.toml", "line-length = 100\n"),
], ids=lambda e: f"{e[0]}:{e[1].splitlines()[-1]}")
def test_the_fingerprint_holds_each_style_setting_the_fixer_reads(tmp_path: Path, edit):
    from dtype_lint.core.config import load_config

    root = tiny_project(tmp_path / "p", pyproject=_pyproject(""))
    before = load_config(root).fingerprint()
    name, text = edit
    path = root / name
    path.write_text((path.read_text() if path.exists() else "") + text, encoding="utf-8")
    assert load_config(root).fingerprint() != before


def test_a_new_first_party_package_at_the_root_changes_the_key(tmp_path: Path):
    """Ruff and isort find first-party names at the root themselves: so does the key."""
    from dtype_lint.core.config import load_config

    root = tiny_project(tmp_path / "p", pyproject=_pyproject(""))
    before = load_config(root).fingerprint()
    (root / "vllm").mkdir()
    (root / "vllm" / "__init__.py").write_text("")
    assert load_config(root).fingerprint() != before


# ---- the entries are authenticated -----------------------------------------------------------------


def _findings_entry(root: Path) -> Path:
    """The findings entry of proj/attn.py (the one with the fix)."""
    found = [p for p in (root / CACHE).glob("v2-*/f/*.json") if b'"k":"proj/attn.py"' in p.read_bytes()]
    assert len(found) == 1
    return found[0]


def test_a_tampered_fix_with_its_sha256_line_recomputed_is_not_written(tmp_path: Path):
    """de0faa5 (#36): `--fix` wrote `__import__("os").system(...)` into proj/attn.py, exit 0."""
    root = tiny_project(tmp_path / "p")
    cold = _cold_fix(root, tmp_path / "cold")
    assert dtl(root, "check", ".").returncode == 1
    entry = _findings_entry(root)
    payload = entry.read_bytes().partition(b"\n")[2]
    data = json.loads(payload)
    # The attacker's line rides on the helper's import edit (the rest of the fix kept, so the
    # fixed text parses and routes the cast through the helper as the fixer's checks expect).
    edits = [e for f in data["f"] if f["fix"] for e in f["fix"]["edits"] if e["text"].endswith(HELPER_IMPORT + "\n")]
    assert len(edits) == 1, data
    edits[0]["text"] += EVIL + "\n"
    # What the attacker can do with write access to the folder: recompute the checksum line.
    forged = json.dumps(data, separators=(",", ":")).encode()
    entry.write_bytes(hashlib.sha256(forged).hexdigest().encode() + b"\n" + forged)
    proc = dtl(root, "check", "--fix", ".")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert EVIL not in (root / "proj" / "attn.py").read_text()
    assert tree_bytes(root) == cold
    # The forged entry was a miss: the run computed and sealed its own again.
    assert b"pwned" not in _findings_entry(root).read_bytes()


def test_a_genuine_entry_from_a_folder_of_other_settings_is_not_served(tmp_path: Path):
    """A sealed entry is genuine only in the folder it was computed for: copied over the entry of
    the current settings' folder, it is a miss."""
    root = tiny_project(tmp_path / "p", pyproject=_pyproject('[tool.isort]\nknown_third_party = ["proj"]\n'))
    assert dtl(root, "check", ".").returncode == 1
    old = _findings_entry(root)
    (root / "pyproject.toml").write_text(_pyproject('[tool.isort]\nknown_first_party = ["proj"]\n'), encoding="utf-8")
    assert dtl(root, "check", ".").returncode == 1
    current = [p for p in (root / CACHE).glob("v2-*/f/*.json") if p != old and p.name == old.name]
    assert len(current) == 1
    shutil.copyfile(old, current[0])
    assert dtl(root, "check", "--fix", ".").returncode == 0
    assert _fixed_head(root) == FIRST_PARTY_PLACEMENT


def _vllm_tree(root: Path) -> Path:
    """The site inside package `vllm`, no helper configured: the preset's helper home is in the
    tree, so the fast path keeps its record and the run memo its answer (fast_record.py,
    run_memo.py)."""
    return write_tree(root, {"pyproject.toml": "[tool.dtype-lint]\n", "vllm/__init__.py": "", "vllm/attn.py": ATTN})


def test_an_edited_fast_path_record_is_no_record(tmp_path: Path):
    """de0faa5: a record whose rules' patterns were emptied made a file with a site pass the
    pre-commit fast path ("All checks passed!", exit 0)."""
    root = _vllm_tree(tmp_path / "p")
    assert dtl(root, "check", "--exit-zero", ".").returncode == 0  # writes the record
    path = root / CACHE / RECORD_NAME
    raw = path.read_bytes()
    head, newline, payload = raw.partition(b"\n")
    record = json.loads(payload if newline and len(head) == 64 else raw)
    record["rules"] = [[code, "never-in-any-file", ["never-in-any-file"]] for code, _, _ in record["rules"]]
    forged = json.dumps(record, separators=(",", ":")).encode()
    path.write_bytes(hashlib.sha256(forged).hexdigest().encode() + b"\n" + forged if newline else forged)
    proc = dtl(root, "check", "vllm/attn.py")
    assert proc.returncode == 1 and "DTL001" in proc.stdout


def test_an_edited_run_memo_is_not_replayed(tmp_path: Path):
    """de0faa5: a memo edited to hold no finding was replayed (exit 0, nothing said)."""
    root = _vllm_tree(tmp_path / "p")
    dtl(root, "check", "--exit-zero", ".")
    dtl(root, "check", "vllm/attn.py")  # keeps the answer for this file
    path = root / CACHE / "run-memo.json"
    assert path.is_file()
    data = json.loads(path.read_bytes().partition(b"\n")[2])
    for entry in data["entries"].values():
        entry["findings"] = []
    forged = json.dumps(data, separators=(",", ":")).encode()
    path.write_bytes(hashlib.sha256(forged).hexdigest().encode() + b"\n" + forged)
    proc = dtl(root, "check", "vllm/attn.py")
    assert proc.returncode == 1 and "DTL001" in proc.stdout


def test_the_key_is_the_users_own_and_outside_the_cache_folder(tmp_path: Path, state_home: Path):
    root = tiny_project(tmp_path / "p")
    assert dtl(root, "check", ".").returncode == 1
    key = state_home / "dtype-lint" / "cache-key"
    assert key.is_file() and len(key.read_bytes()) == 32
    if os.name == "posix":
        assert stat.S_IMODE(key.stat().st_mode) == 0o600
        assert stat.S_IMODE(key.parent.stat().st_mode) == 0o700
    assert key.read_bytes() not in b"".join(p.read_bytes() for p in (root / CACHE).rglob("*") if p.is_file())


def test_a_cache_sealed_under_another_key_is_a_miss(tmp_path: Path, monkeypatch):
    """A CI cache restored on another machine (another user's key): every entry is computed again,
    the answer is the cold one, and no error is said."""
    root = tiny_project(tmp_path / "p")
    cold = _cold_fix(root, tmp_path / "cold")
    first = dtl(root, "check", ".")
    entry = _findings_entry(root)
    sealed_before = entry.read_bytes()
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "another-machine"))
    cache_seal.forget()
    again = dtl(root, "check", ".")
    assert (again.returncode, again.stdout, again.stderr) == (first.returncode, first.stdout, first.stderr)
    assert entry.read_bytes() != sealed_before  # sealed again under this key
    assert dtl(root, "check", "--fix", ".").returncode == 0
    assert tree_bytes(root) == cold


def test_a_ci_key_from_the_environment_makes_a_restored_cache_hit(tmp_path: Path, monkeypatch):
    """`DTYPE_LINT_CACHE_KEY` (a CI secret): the cache restored on a fresh runner (another home) is
    served as it was sealed, and no key file is written anywhere."""
    monkeypatch.setenv("DTYPE_LINT_CACHE_KEY", "ab" * 32)
    cache_seal.forget()
    root = tiny_project(tmp_path / "p")
    first = dtl(root, "check", ".")
    entry = _findings_entry(root)
    sealed = entry.read_bytes()
    fresh_home = tmp_path / "fresh-runner"
    monkeypatch.setenv("XDG_STATE_HOME", str(fresh_home))
    cache_seal.forget()
    again = dtl(root, "check", ".")
    assert (again.returncode, again.stdout, again.stderr) == (first.returncode, first.stdout, first.stderr)
    assert entry.read_bytes() == sealed  # served, not recomputed and sealed again
    assert not fresh_home.exists()


@pytest.mark.parametrize("given", ["not hex at all", "ab" * 8])
def test_a_bad_ci_key_runs_uncached_and_says_why(tmp_path: Path, monkeypatch, given: str):
    monkeypatch.setenv("DTYPE_LINT_CACHE_KEY", given)
    cache_seal.forget()
    root = tiny_project(tmp_path / "p")
    proc = dtl(root, "check", ".")
    assert proc.returncode == 1 and "DTL001" in proc.stdout
    assert "running without a cache" in proc.stderr and "DTYPE_LINT_CACHE_KEY" in proc.stderr
    assert not list(root.glob(f"{CACHE}/v2-*/f/*.json"))


def test_a_key_others_may_read_is_not_trusted(tmp_path: Path, state_home: Path):
    if os.name != "posix":
        pytest.skip("POSIX file modes")
    root = tiny_project(tmp_path / "p")
    dtl(root, "check", ".")
    key = state_home / "dtype-lint" / "cache-key"
    key.chmod(0o644)
    cache_seal.forget()
    proc = dtl(root, "check", ".")
    assert proc.returncode == 1 and "DTL001" in proc.stdout  # the findings, uncached
    assert "running without a cache" in proc.stderr and "644" in proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1


def test_no_place_for_a_key_runs_uncached_and_says_so(tmp_path: Path, monkeypatch):
    root = tiny_project(tmp_path / "p")
    monkeypatch.setenv("XDG_STATE_HOME", "/dev/null/state")
    cache_seal.forget()
    proc = dtl(root, "check", ".")
    assert proc.returncode == 1 and "DTL001" in proc.stdout
    assert "running without a cache" in proc.stderr
    assert not list(root.glob(f"{CACHE}/v2-*/f/*.json"))


# ---- where the cache folder may be -----------------------------------------------------------------


def test_a_cache_folder_linked_outside_the_project_is_refused(tmp_path: Path):
    """de0faa5: code-stamp.json and project-files.json were written through the link."""
    root = tiny_project(tmp_path / "p")
    outside = tmp_path / "outside"
    outside.mkdir()
    (root / CACHE).symlink_to(outside, target_is_directory=True)
    for args in (("check", "."), ("check", "--fix", "."), ("check", "proj/attn.py")):
        proc = dtl(root, *args)
        assert proc.returncode == 2, proc.stdout + proc.stderr
        assert "outside the project" in proc.stderr and len(proc.stderr.strip().splitlines()) == 1
    assert list(outside.iterdir()) == []
    assert "get_layer_input_dtype" not in (root / "proj" / "attn.py").read_text()
    proc = dtl(root, "check", "--no-cache", "--fix", ".")  # without the cache, the run is the user's to make
    assert proc.returncode == 0 and FIXED_CALL in (root / "proj" / "attn.py").read_text()
    assert list(outside.iterdir()) == []


@pytest.mark.parametrize("cache_dir,extra", [
    ("proj", {}),
    ("proj/cache", {}),
    ("src", {"src/lib/__init__.py": ""}),
    ("tools", {"tools/gen.py": "x = 1\n"}),
    ("ns/cache", {"ns/mod.py": "x = 1\n"}),
], ids=["a package", "inside a package", "a folder of packages", "a folder of modules", "inside a namespace package"])
def test_a_cache_folder_in_the_source_is_refused(tmp_path: Path, cache_dir: str, extra: dict[str, str]):
    """de0faa5: the package filled with v2-*/, code-stamp.json, project-files.json..."""
    pyproject = f'[tool.dtype-lint]\nhelper = "proj.dtypes:get_layer_input_dtype"\ncache-dir = "{cache_dir}"\n'
    root = tiny_project(tmp_path / "p", {**extra}, pyproject=pyproject)
    before = tree_bytes(root, cache=True)
    folders_before = sorted(p.relative_to(root).as_posix() for p in root.rglob("*") if p.is_dir())
    for args in (("check", "."), ("check", "--fix", "."), ("check", "proj/attn.py")):
        proc = dtl(root, *args)
        assert proc.returncode == 2, proc.stdout + proc.stderr
        assert f"cache folder `{cache_dir}`" in proc.stderr and len(proc.stderr.strip().splitlines()) == 1
    assert tree_bytes(root, cache=True) == before
    assert sorted(p.relative_to(root).as_posix() for p in root.rglob("*") if p.is_dir()) == folders_before
    proc = dtl(root, "check", "--no-cache", ".")
    assert proc.returncode == 1 and "DTL001" in proc.stdout
    assert tree_bytes(root, cache=True) == before


def test_a_cache_folder_linked_inside_the_project_is_fine(tmp_path: Path):
    root = tiny_project(tmp_path / "p")
    (root / "build" / "dtl").mkdir(parents=True)
    (root / CACHE).symlink_to(root / "build" / "dtl", target_is_directory=True)
    assert dtl(root, "check", ".").returncode == 1
    assert list((root / "build" / "dtl").glob("v2-*/f/*.json"))


def test_the_fast_path_leaves_a_refused_folder_to_the_full_run(tmp_path: Path):
    """A record left in a folder later linked elsewhere is not read: the full run says why."""
    root = tiny_project(tmp_path / "p")
    dtl(root, "check", "--exit-zero", ".")
    (root / "proj" / "plain.py").write_text("x = 1\n")
    dtl(root, "check", "--exit-zero", ".")
    moved = tmp_path / "moved"
    shutil.move(str(root / CACHE), moved)
    (root / CACHE).symlink_to(moved, target_is_directory=True)
    saved = os.getcwd()
    try:
        os.chdir(root)
        assert fast_path.try_clean_exit(["check", "proj/plain.py"]) is None
    finally:
        os.chdir(saved)
    assert dtl(root, "check", "proj/plain.py").returncode == 2

