"""The fixtures as the specification (TorchFix style).

`fixtures/project/`: a small package whose `expected.txt` lists every finding
`dtype-lint check fixtures/project` must report (`relpath:line:col CODE`, sorted), run as users
run it: a subprocess, JSON output, the project's own `[tool.dtype-lint]`.

`fixtures/codemod/<case>.in.py` → `<case>.out.py`: `api.fix_source` must produce the `.out.py`
bytes exactly (line endings included), be idempotent, and produce code that compiles. A case
whose `.out.py` equals its `.in.py` is a site reported without a fix, and says why.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from pathlib import Path

import pytest
from cli_runner import dtl
from golden import assert_golden, lines_text

from dtype_lint.api import check_source, fix_source
from dtype_lint.core.config import load_config
from dtype_lint.run.pipeline import RunOptions, run

REPO = Path(__file__).resolve().parents[1]
PROJECT = REPO / "fixtures" / "project"
CODEMOD = REPO / "fixtures" / "codemod"


def _key(entry: str):
    location, code = entry.split(" ")
    path, line, col = location.rsplit(":", 2)
    return path, int(line), int(col), code


def _entry(path: str, line: int, col: int, code: str) -> str:
    return f"{path}:{line}:{col} {code}"


def _expected() -> list[str]:
    return [line for line in (PROJECT / "expected.txt").read_text(encoding="utf-8").splitlines() if line.strip()]


def _dtl(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    return dtl(cwd, *args)


def _report(proc: subprocess.CompletedProcess, root: Path, cwd: Path) -> list[str]:
    """The findings of a JSON run as expected.txt entries, paths relative to root."""
    data = json.loads(proc.stdout)
    return sorted((_entry((cwd / f["path"]).resolve().relative_to(root.resolve()).as_posix(), f["line"], f["col"],
                          f["code"]) for f in data["findings"]), key=_key)


# ---- fixtures/project --------------------------------------------------------------------------
@pytest.fixture(scope="module")
def project_check() -> subprocess.CompletedProcess:
    # --no-cache: a test must not leave a cache directory in the source tree.
    return _dtl("check", "fixtures/project", "--output-format", "json", "--no-cache", cwd=REPO)


def test_expected_txt_is_sorted_and_well_formed():
    entries = _expected()
    assert entries, "expected.txt is empty"
    assert entries == sorted(entries, key=_key)
    assert len(entries) == len(set(entries))
    for entry in entries:
        path, line, _col, code = _key(entry)
        assert code.startswith("DTL")
        # Each entry points at a real cast, or for DTL004 at the branch testing the storage dtype
        # (catches an expected.txt gone stale after an edit).
        text = (PROJECT / path).read_text(encoding="utf-8").splitlines()[line - 1]
        if code == "DTL004":
            assert text.strip().startswith(("if", "elif", "while")), entry
        else:
            assert ".to(" in text or ".type(" in text, entry


def test_project_findings_match_expected_txt(project_check):
    assert project_check.returncode == 1, project_check.stderr
    assert _report(project_check, PROJECT, REPO) == _expected()
    assert_golden(PROJECT / "expected.txt", lines_text(_report(project_check, PROJECT, REPO)))


def test_project_suppressed_sites_are_found_then_suppressed(tmp_path: Path):
    """Without their suppression comments the two suppressed casts are found; with them they are
    dropped (and no suppression is reported unused: expected.txt has no DTL902)."""
    root = tmp_path / "project"
    shutil.copytree(PROJECT, root, ignore=shutil.ignore_patterns(".dtype_lint_cache", "__pycache__"))
    for path in root.rglob("*.py"):
        text = path.read_text(encoding="utf-8")
        path.write_text(re.sub(r"  # (dtype-lint: ignore\[DTL001\]|noqa: DTL001).*", "", text), encoding="utf-8")
    cfg = load_config(root)
    raw = run(cfg, RunOptions(paths=[str(root)], jobs=1, use_cache=False)).findings
    found = {_entry(Path(f.path).relative_to(root).as_posix(), f.span.line, f.span.col, f.code) for f in raw}
    suppressed = found - set(_expected())
    lines = {(_key(e)[0], _key(e)[1]) for e in suppressed}
    assert len(suppressed) == 2
    for path, line in lines:
        text = (PROJECT / path).read_text(encoding="utf-8").splitlines()[line - 1]
        assert "# dtype-lint: ignore[DTL001]" in text or "# noqa: DTL001" in text


def test_project_precision_controls_are_load_bearing(tmp_path: Path):
    """Without the exemptions, the quant methods' own reads of `layer.weight.dtype` are reported:
    so their absence from expected.txt is the exemption working, not a blind spot. Two things
    exempt them: configuration (`exempt-classes`, `exempt-functions`) and structure (storage
    methods that are handed the layer they own: `apply(self, layer: LinearBase, ...)`); both are
    removed here, the second by renaming those methods in a copy. The vision tower stays clean either way (plain
    torch layers, `quant_config=None`)."""
    root = tmp_path / "project"
    shutil.copytree(PROJECT, root, ignore=shutil.ignore_patterns(".dtype_lint_cache", "__pycache__"))
    cfg = load_config(root)
    cfg.exempt_classes = []
    cfg.exempt_functions = []
    raw = run(cfg, RunOptions(paths=[str(root)], jobs=1, use_cache=False)).findings
    assert not {f.path for f in raw if "/quant/" in f.path}, "structure alone exempts the quant methods"
    for path in (root / "minillm/quant").glob("*.py"):
        text = path.read_text(encoding="utf-8")
        path.write_text(re.sub(r"\bdef (apply|create_weights|process_weights_after_loading|get_quant_method)\b",
                               r"def run_\1", text), encoding="utf-8")
    raw = run(cfg, RunOptions(paths=[str(root)], jobs=1, use_cache=False)).findings
    paths = {Path(f.path).relative_to(root).as_posix() for f in raw}
    assert {"minillm/quant/base.py", "minillm/quant/fp8.py"} <= paths
    assert "minillm/models/vision.py" not in paths
    assert "minillm/layers/input_dtype.py" not in paths


def test_project_fix_in_a_copy(tmp_path: Path):
    """`--fix` on a copy: every fixable site is rewritten, the two unfixable ones remain at their
    new lines, the suppressions still apply (no DTL902), and a second run agrees."""
    root = tmp_path / "project"
    shutil.copytree(PROJECT, root, ignore=shutil.ignore_patterns(".dtype_lint_cache", "__pycache__"))
    fixed = _dtl("check", ".", "--fix", "--output-format", "json", "--no-cache", cwd=root)
    assert fixed.returncode == 1, fixed.stderr
    remaining = _report(fixed, root, root)
    assert [_key(e)[0] for e in remaining] == ["minillm/attention/simple.py"] * 2
    for entry in remaining:
        path, line, _col, _code = _key(entry)
        text = (root / path).read_text(encoding="utf-8").splitlines()[line - 1]
        assert ".to(self.o_proj.weight)" in text or "self.norm(hidden).to(" in text
    assert _report(_dtl("check", ".", "--output-format", "json", "--no-cache", cwd=root), root, root) == remaining
    for path in root.rglob("*.py"):
        compile(path.read_text(encoding="utf-8"), str(path), "exec")
    # The helper already existed: it is used, not recreated.
    assert (root / "minillm/layers/input_dtype.py").read_bytes() == (PROJECT / "minillm/layers/input_dtype.py").read_bytes()


# ---- fixtures/codemod --------------------------------------------------------------------------
CASES = sorted(p.name[: -len(".in.py")] for p in CODEMOD.glob("*.in.py"))


def test_every_codemod_case_has_both_halves():
    outs = sorted(p.name[: -len(".out.py")] for p in CODEMOD.glob("*.out.py"))
    assert CASES and outs == CASES


@pytest.mark.parametrize("case", CASES)
def test_codemod(case: str):
    src_path = CODEMOD / f"{case}.in.py"
    # Bytes, not read_text: universal newlines would hide a CR LF regression.
    source = src_path.read_bytes().decode("utf-8")
    expected = (CODEMOD / f"{case}.out.py").read_bytes().decode("utf-8")
    out = fix_source(source, filename=str(src_path))
    assert_golden(CODEMOD / f"{case}.out.py", out)
    assert fix_source(out, filename=str(src_path)) == out, "fixing twice changed the output"
    compile(out, f"{case}.out.py", "exec")
    after = check_source(out, filename=str(src_path))
    assert not [f for f in after if f.fix is not None and f.fix.safe]
    if expected == source:
        findings = check_source(source, filename=str(src_path))
        assert findings, f"{case}: unchanged but nothing reported"
        assert all(f.fix is None and f.no_fix_reason for f in findings)


def test_codemod_crlf_case_is_crlf_throughout():
    for half in ("in", "out"):
        data = (CODEMOD / f"crlf_line_endings.{half}.py").read_bytes()
        assert data.count(b"\r\n") == data.count(b"\n") > 10, half


def test_codemod_unprovable_guard_says_why():
    src_path = CODEMOD / "unprovable_guard.in.py"
    [finding] = check_source(src_path.read_text(encoding="utf-8"), filename=str(src_path))
    assert finding.fix is None
    assert "guard disagrees with the helper" in finding.no_fix_reason
    assert "float16" in finding.no_fix_reason


def test_codemod_already_imported_helper_is_not_imported_twice():
    out = (CODEMOD / "helper_already_imported.out.py").read_text(encoding="utf-8")
    assert out.count("import get_layer_input_dtype") == 1


def test_the_projects_helper_is_the_template():
    """The example project already holds the helper `migrate` would create from its
    `helper-template`: editing the template without it leaves the example stale."""
    from dtype_lint.fix.helper_template import helper_source

    assert (PROJECT / "minillm/layers/input_dtype.py").read_text(encoding="utf-8") == \
        helper_source("get_layer_input_dtype", "torch")
