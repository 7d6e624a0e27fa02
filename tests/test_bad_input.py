"""Bad input is a finding (DTL900) or exit 2 with a message, never a traceback or a hang (#8).

Every case an adversarial user tried is here: malformed configuration, baselines and caches;
report files named into folders that do not exist; files that are FIFOs, devices, huge, deeply
nested, one enormous line, or named in bytes that are not UTF-8; and one-line files that made a
text scan quadratic, run under a time budget that only a runaway scan would exceed.
`cli_runner.dtl` fails any test whose output holds a traceback.
"""

from __future__ import annotations

import ast
import json
import os
import sys
from pathlib import Path

import pytest
from cli_runner import dtl
from tiny_project import ATTN, FIXED_CALL, time_limit, tiny_project

from dtype_lint.run import cache as cache_format

posix_only = pytest.mark.skipif(sys.platform == "win32", reason="FIFOs, devices and SIGALRM are POSIX")


def check_json(root: Path, *args: str) -> tuple[int, list[dict], str]:
    proc = dtl(root, "check", "--no-cache", "--output-format", "json", *args)
    assert proc.returncode in (0, 1), proc.stderr
    return proc.returncode, json.loads(proc.stdout)["findings"], proc.stderr


def codes_by_file(findings: list[dict]) -> dict[str, list[str]]:
    out: dict[str, list[str]] = {}
    for f in findings:
        out.setdefault(Path(f["path"]).name, []).append(f["code"])
    return out


def assert_error(proc, *needles: str) -> None:
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert proc.stderr.startswith("dtype-lint: error: "), proc.stderr
    for needle in needles:
        assert needle in proc.stderr


# --- configuration -------------------------------------------------------------------------------


@pytest.mark.parametrize("pyproject, message", [
    (b'[tool.dtype-lint]\nhelper = "\xff"\n', "not UTF-8"),
    ("tool = 5\n", "`tool` must be a table, got a int"),
    ("[tool]\ndtype-lint = 5\n", "[tool.dtype-lint] must be a table, got a int"),
    ("[[tool.dtype-lint]]\nselect = []\n", "[tool.dtype-lint] must be a table, got an array of tables"),
    ('[tool]\ndtype-lint = "x"\n', "[tool.dtype-lint] must be a table, got a str"),
    ("[tool.dtype-lint]\nper-file-ignores = 5\n", "`per-file-ignores` must be a dict"),
    ('[tool.dtype-lint]\nexclude = ["a", 1]\n', "`exclude` must be a list of strings"),
], ids=["invalid-utf8", "tool-int", "table-int", "array-of-tables", "table-str", "pfi-int", "exclude-mixed"])
def test_a_pyproject_of_any_shape_is_exit_2(tmp_path: Path, pyproject, message):
    root = tiny_project(tmp_path, pyproject=pyproject)
    for args in (["check"], ["check", "--fix"], ["check", "proj/attn.py"]):
        assert_error(dtl(root, *args), "pyproject.toml", message)
    assert (root / "proj/attn.py").read_text() == ATTN


@posix_only
@pytest.mark.parametrize("special", ["/dev/zero", "/dev/null-fifo", "folder"])
def test_config_that_is_not_a_regular_file_is_refused_unread(tmp_path: Path, special: str):
    root = tiny_project(tmp_path / "p")
    if special == "/dev/null-fifo":
        special = str(tmp_path / "lint.toml")
        os.mkfifo(special)  # opening it for reading would block forever
    elif special == "folder":
        special = str(tmp_path)
    elif not os.path.exists(special):
        pytest.skip(f"{special} does not exist here")
    with time_limit(20):
        proc = dtl(root, "check", "--config", special)
    assert_error(proc, "cannot read configuration", "not a regular file")


def test_huge_config_is_refused(tmp_path: Path):
    root = tiny_project(tmp_path / "p")
    big = tmp_path / "lint.toml"
    big.write_text("# padding\n" * 200_000)  # 2 MB of comments: valid TOML, not a config
    assert_error(dtl(root, "check", "--config", str(big)), "larger than")


@pytest.mark.parametrize("cache_dir", [".", "", "./", "/abs/cache", "../outside", "a/../../x", "x/.."])
def test_cache_dir_outside_or_at_the_root_is_exit_2(tmp_path: Path, cache_dir: str):
    root = tiny_project(tmp_path / "p", pyproject=f'[tool.dtype-lint]\ncache-dir = "{cache_dir}"\n')
    before = sorted(p.name for p in tmp_path.rglob("*"))
    assert_error(dtl(root, "check"), "`cache-dir` must be a folder inside the project")
    assert sorted(p.name for p in tmp_path.rglob("*")) == before  # not a .gitignore, not a cache


# --- baselines and caches ------------------------------------------------------------------------


@pytest.mark.parametrize("text, message", [
    ('{"version": 1, "entries": 5}', "`entries` must be a list"),
    ('{"version": 1, "entries": [{"path": "a.py", "code": "DTL001", "count": Infinity}]}', "Infinity"),
    ('{"version": 1, "entries": [{"path": "a.py", "code": "DTL001", "count": NaN}]}', "NaN"),
    ('{"version": 1, "entries": [{"path": "a.py", "code": "DTL001", "count": 1.5}]}', "entry 0 is malformed"),
    ('{"version": 1, "entries": [{"path": "a.py", "code": "DTL001", "count": true}]}', "entry 0 is malformed"),
    ('{"version": 1, "entries": [5]}', "entry 0 is malformed"),
    ('{"version": 1, "entries": [{"path": 5, "code": "DTL001"}]}', "entry 0 is malformed"),
    ('[1, 2]', "not a dtype-lint baseline"),
    ('{"version": 1, "entries": ' + "[" * 100_000 + "]" * 100_000 + "}", "cannot be read"),
    ("\udcff", "cannot be read"),
], ids=["entries-int", "count-infinity", "count-nan", "count-float", "count-bool", "entry-int", "path-int",
        "list", "deep", "not-utf8"])
def test_a_baseline_of_any_shape_is_exit_2(tmp_path: Path, text: str, message: str):
    root = tiny_project(tmp_path)
    (root / "b.json").write_bytes(text.encode("utf-8", "surrogateescape"))
    for flag in ("--baseline", "--write-baseline"):
        assert_error(dtl(root, "check", "--no-cache", flag, "b.json"), "b.json", message)


@posix_only
def test_a_baseline_that_is_a_device_or_folder_is_exit_2(tmp_path: Path):
    root = tiny_project(tmp_path)
    with time_limit(20):
        assert_error(dtl(root, "check", "--baseline", "/dev/zero"), "not a regular file")
        assert_error(dtl(root, "check", "--baseline", "proj"), "not a regular file")


def _cache_files(root: Path) -> list[Path]:
    """Every file of the cache: the scan summary and each header and findings entry."""
    folder = root / ".dtype_lint_cache"
    paths = [*folder.glob("v2-*/scan.json"), *folder.glob("v2-*/h/*.json"), *folder.glob("v2-*/f/*.json")]
    assert paths
    return paths


@pytest.mark.parametrize("content", [
    b'{"headers": [], "findings": 5}',
    b'{"headers": {"x": Infinity}, "findings": {}}',
    b"[]",
    b"\xff\xfe",
    b"",
    "signed-wrong-shape",
], ids=["lists", "infinity", "array", "binary", "empty", "signed-wrong-shape"])
def test_a_cache_file_of_any_shape_is_ignored(tmp_path: Path, content):
    root = tiny_project(tmp_path)
    first = dtl(root, "check", "--output-format", "json")
    for path in _cache_files(root):
        data = content
        if content == "signed-wrong-shape":
            # Our own seal over entries of the wrong types: each entry is a miss, not a crash.
            sealed_for = next(p.name for p in path.parents if p.name.startswith(f"{cache_format.FORMAT}-"))
            data = cache_format.decode(path.read_bytes(), sealed_for)
            if "h" in data:
                data["h"] = {"module": 5}
            elif "f" in data:
                data["f"] = [{"code": "DTL001", "span": {"line": "one"}}, 5]
            else:
                data["files"] = {key: [1, "x"] for key in data["files"]}
            data = cache_format.encode(data, sealed_for)
        path.write_bytes(data)
    again = dtl(root, "check", "--output-format", "json")
    assert again.returncode == first.returncode == 1
    assert json.loads(again.stdout)["findings"] == json.loads(first.stdout)["findings"]


@posix_only
def test_a_cache_file_that_is_a_fifo_is_ignored(tmp_path: Path):
    root = tiny_project(tmp_path)
    dtl(root, "check")
    for path in _cache_files(root):
        path.unlink()
        os.mkfifo(path)
    with time_limit(20):
        assert dtl(root, "check").returncode == 1


# --- report and baseline files named into folders that do not exist -----------------------------


@pytest.mark.parametrize("args", [
    ["check", "--fix", "-o", "missing/report.txt"],
    ["check", "--fix", "--write-baseline", "missing/baseline.json"],
    ["migrate", ".", "--report", "missing/report.md"],
    ["check", "--fix", "-o", "proj"],
], ids=["output-file", "write-baseline", "migrate-report", "output-is-a-folder"])
def test_a_named_output_that_cannot_be_written_is_exit_2_before_anything_is_fixed(tmp_path: Path, args):
    root = tiny_project(tmp_path)
    assert_error(dtl(root, *args), "not written")
    assert (root / "proj/attn.py").read_text() == ATTN
    assert not (root / "proj/dtypes.py").exists()
    assert not (root / "missing").exists()


def test_migrate_prints_its_report_when_it_cannot_write_it_after_rewriting(tmp_path: Path, monkeypatch):
    from dtype_lint import cli

    root = tiny_project(tmp_path)

    def refuse(result, path, text, why):
        from dtype_lint.run.pipeline import UserError

        raise UserError(f"{path}: disk full")

    monkeypatch.setattr(cli, "_write_named_file", refuse)
    proc = dtl(root, "migrate", ".", "--report", "report.md")
    assert proc.returncode == 2
    assert FIXED_CALL in (root / "proj/attn.py").read_text()  # the tree was rewritten...
    assert "# Route activation casts through one input-dtype helper" in proc.stdout  # ...and the report kept
    assert "proj/attn.py" in proc.stdout and "report is printed above" in proc.stderr


# --- files that are not source code ---------------------------------------------------------------


def test_deep_expressions_are_dtl900_for_that_file_and_the_run_goes_on(tmp_path: Path):
    deep_sum = "def f(self, x):\n    return x.to(self.kv_b_proj.weight.dtype) + " + " + ".join(["x"] * 3000) + "\n"
    deep_header = "class A(" + "-" * 3900 + "x): pass\n"  # cut out of the text by the index, parsed alone
    root = tiny_project(tmp_path, {"proj/deep.py": deep_sum, "proj/deep_header.py": deep_header})
    rc, found, _ = check_json(root)
    assert rc == 1
    by_file = codes_by_file(found)
    # Python 3.11 and 3.12's parser refuses the sum (DTL900); 3.10's and 3.13's parse it, and then
    # the file is analysed as any other (its `f` is no method: no layer, no finding).
    try:
        ast.parse(deep_sum)
        refused = False
    except (RecursionError, SyntaxError, MemoryError):
        refused = True
    assert by_file.get("deep.py") == (["DTL900"] if refused else None)
    assert by_file["attn.py"] == ["DTL001"]
    fixed = dtl(root, "check", "--fix", "--no-cache")
    assert fixed.returncode == (1 if refused else 0) and FIXED_CALL in (root / "proj/attn.py").read_text()
    assert (root / "proj/deep.py").read_text() == deep_sum


@pytest.mark.skipif(sys.platform in ("darwin", "win32"), reason="this file system refuses file names that are not UTF-8")
def test_a_file_name_that_is_not_utf8_is_dtl900_and_the_run_goes_on(tmp_path: Path):
    root = tiny_project(tmp_path)
    name = os.fsencode(root / "proj") + b"/b\xff\x1b[31m.py"
    with open(name, "wb") as f:
        f.write(ATTN.encode())
    rc, found, _ = check_json(root)
    assert rc == 1
    (bad,) = [f for f in found if f["code"] == "DTL900"]
    assert "not valid UTF-8" in bad["message"] and "\\xff" in bad["path"]
    text = dtl(root, "check", "--no-cache", "--fix")
    assert text.returncode == 1 and "\\xff" in text.stdout
    assert FIXED_CALL in (root / "proj/attn.py").read_text()
    assert open(name, "rb").read() == ATTN.encode()


@posix_only
def test_fifos_and_devices_are_dtl900_without_being_opened(tmp_path: Path):
    root = tiny_project(tmp_path)
    os.mkfifo(root / "proj/fifo.py")
    if os.path.exists("/dev/zero"):
        os.symlink("/dev/zero", root / "proj/zero.py")
    with time_limit(30):
        rc, found, _ = check_json(root)
        named = dtl(root, "check", "--no-cache", "--output-format", "concise", "proj/fifo.py")
        fixed = dtl(root, "check", "--no-cache", "--fix")
    by_file = codes_by_file(found)
    assert by_file["fifo.py"] == ["DTL900"] and by_file["attn.py"] == ["DTL001"]
    assert "not a regular file (a FIFO)" in " ".join(f["message"] for f in found)
    if (root / "proj/zero.py").is_symlink():
        assert by_file["zero.py"] == ["DTL900"]
        assert "a character device" in " ".join(f["message"] for f in found)
    assert named.returncode == 1 and "DTL900" in named.stdout
    assert fixed.returncode == 1 and FIXED_CALL in (root / "proj/attn.py").read_text()


def test_huge_files_and_lines_are_skipped_early(tmp_path: Path):
    huge = "x = [" + "1, " * 3_500_000 + "]\n"  # 10 MB on one line
    long_line = ATTN + "TABLE = [" + "1, " * 40_000 + "]  # x.to(self.kv_b_proj.weight.dtype)\n"
    root = tiny_project(tmp_path, {"proj/huge.py": huge, "proj/long_line.py": long_line})
    with time_limit(60):
        rc, found, _ = check_json(root)
    messages = {Path(f["path"]).name: f["message"] for f in found if f["code"] == "DTL900"}
    assert "larger than 4 MiB" in messages["huge.py"]
    assert "line 13 is longer than 100000 characters" in messages["long_line.py"]
    assert codes_by_file(found)["attn.py"] == ["DTL001"]


# One-line files that made a scan quadratic (minutes each before): a linear scan takes well
# under a second; the budget only catches a runaway.
ONE_LINERS = {
    "from-spaces": "from a import b" + " " * 200_000 + ";",
    "import-spaces": "import b" + " " * 200_000 + ";",
    "from-dots": "from " + "." * 200_000 + " ;",
    "class-spaces": "class A" + " " * 200_000 + ";",
    "noqa-words": "# " + "noqa " * 200_000,
    "noqa-dtl": "x = 1  # DTL001 " + "noqa " * 200_000,
    "noqa-codes": "# noqa: " + "DTL1 " * 200_000 + ";",
    "ignore-unclosed": "x = 1 " + "# dtype-lint: ignore[DTL001" * 20_000,
    "ignore-no-space": "x = 1 " + "#dtype-lint:ignore[DTL001]why" * 10_000,
    "hash-no-space": "x = 1  # dtype-lint: ignore[DTL001] " + "a#" * 200_000,
}


@posix_only
@pytest.mark.parametrize("name", list(ONE_LINERS))
def test_one_line_files_are_scanned_in_linear_time(tmp_path: Path, name: str):
    root = tiny_project(tmp_path, {"proj/one.py": ONE_LINERS[name]})
    with time_limit(30):
        proc = dtl(root, "check", "--no-cache", "--output-format", "concise")
    assert proc.returncode == 1 and "attn.py" in proc.stdout


def test_a_cr_only_file_gets_cr_in_inserted_lines(tmp_path: Path):
    root = tiny_project(tmp_path, {"proj/attn.py": ATTN.replace("\n", "\r")})
    assert dtl(root, "check", "--no-cache", "--fix").returncode == 0
    data = (root / "proj/attn.py").read_bytes()
    assert FIXED_CALL.encode() in data and b"\n" not in data


@pytest.mark.parametrize("ref", ["a\x00b", "a\nb", "-x", ""], ids=["nul", "newline", "dash", "empty"])
def test_changed_since_with_a_malformed_revision_is_exit_2(tmp_path: Path, ref: str):
    root = tiny_project(tmp_path)
    assert_error(dtl(root, "check", f"--changed-since={ref}"), "not a git revision")


@pytest.mark.skipif(sys.platform == "win32", reason="this file system refuses control characters in names")
def test_control_characters_in_file_names_never_reach_the_output_raw(tmp_path: Path):
    root = tiny_project(tmp_path)
    (root / "proj/a\x1b[2Jb\tc.py").write_text(ATTN)
    for fmt in ("text", "concise", "github", "json", "sarif", "junit", "gitlab"):
        proc = dtl(root, "check", "--no-cache", "--output-format", fmt)
        assert proc.returncode == 1
        assert "\x1b" not in proc.stdout + proc.stderr
    text = dtl(root, "check", "--no-cache", "--output-format", "text").stdout
    assert "proj/a\\x1b[2Jb\\tc.py:11:13: DTL001" in text
    assert "x = x.to(self.kv_b_proj.weight.dtype)" in text  # the frame is read from the real name
    fixed = dtl(root, "check", "--no-cache", "--fix")
    assert fixed.returncode == 0 and "\x1b" not in fixed.stdout + fixed.stderr
    assert FIXED_CALL in (root / "proj/a\x1b[2Jb\tc.py").read_text()
