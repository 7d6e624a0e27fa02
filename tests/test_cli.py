"""The `dtype-lint` command line, run as a user runs it (in-process, see cli_runner.py) on a small
project of our own.

The project (written into tmp_path by `make_project`) has both kinds of quantizable layer the
linter resolves: vLLM's `ColumnParallelLinear` imported by name (the vllm preset knows it), and a
local hierarchy `QLinear <- ColLinear` declared with `quantizable = [...]`. Every run also checks
that nothing printed a traceback: a linter reports problems, it does not crash on them.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from cli_runner import dtl
from tiny_project import ATTN

from dtype_lint.fix.helper_template import helper_source
from dtype_lint.run import cache as cache_format

PYPROJECT = """\
[tool.dtype-lint]
quantizable = ["proj.layers.QLinear"]
helper = "proj.dtypes:get_layer_input_dtype"
"""

LAYERS = """\
import torch


class QLinear(torch.nn.Module):
    pass


class ColLinear(QLinear):
    pass
"""

# Statement form: fixed safely to helper + guard + cast.

# Expression form, through the local hierarchy resolved across files.
MLP = """\
import torch

from proj.layers import ColLinear


class MLP(torch.nn.Module):
    def __init__(self, quant_config):
        super().__init__()
        self.up_proj = ColLinear(quant_config=quant_config)

    def forward(self, x):
        return self.up_proj(x.to(dtype=self.up_proj.weight.dtype))
"""

# Never quantized: plain torch layers. Must not be reported.
CLEAN = """\
import torch


class Vision(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.proj = torch.nn.Conv2d(3, 8, 2)

    def forward(self, x):
        return self.proj(x.to(self.proj.weight.dtype))
"""

HELPER = "proj/dtypes.py"


def make_project(root: Path, files: dict[str, str] | None = None, pyproject: str = PYPROJECT) -> Path:
    base = {
        "pyproject.toml": pyproject,
        "proj/__init__.py": "",
        "proj/layers.py": LAYERS,
        "proj/attn.py": ATTN,
        "proj/mlp.py": MLP,
        "proj/vision.py": CLEAN,
    }
    base.update(files or {})
    for rel, text in base.items():
        if text is None:
            continue
        p = root / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(text, encoding="utf-8")
    return root


def findings_json(cwd: Path, *args: str) -> tuple[int, list[dict]]:
    proc = dtl(cwd, "check", "--output-format", "json", *args)
    assert proc.returncode in (0, 1), proc.stderr
    return proc.returncode, json.loads(proc.stdout)["findings"]


def where(findings: list[dict]) -> list[tuple[str, int, str]]:
    """(posix path relative to the project, line, code) of each finding."""
    out = []
    for f in findings:
        p = Path(f["path"]).as_posix()
        p = p[2:] if p.startswith("./") else p
        out.append((p, f["line"], f["code"]))
    return sorted(out)


EXPECTED = [("proj/attn.py", 11, "DTL001"), ("proj/mlp.py", 12, "DTL001")]


@pytest.fixture
def project(tmp_path: Path) -> Path:
    return make_project(tmp_path / "p")


# --- exit codes ------------------------------------------------------------------------------------


def test_clean_project_exits_0(tmp_path: Path):
    root = make_project(tmp_path / "p", {"proj/attn.py": None, "proj/mlp.py": None})
    proc = dtl(root, "check")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "All checks passed" in proc.stdout


def test_findings_exit_1_and_both_layer_kinds_resolve(project: Path):
    proc = dtl(project, "check")
    assert proc.returncode == 1
    assert "proj/attn.py:11:" in proc.stdout and "proj/mlp.py:12:" in proc.stdout
    assert "vision.py" not in proc.stdout  # nn.Conv2d is never quantized
    rc, found = findings_json(project)
    assert rc == 1 and where(found) == EXPECTED


def test_a_check_parses_with_the_check_parser_alone():
    """`check` builds no other command's parser (most of what building them all costs); any other
    command still gets every one."""
    from dtype_lint.cli import parse

    args = parse(["check", "a.py", "--exit-zero"])
    assert (args.command, args.paths, args.exit_zero) == ("check", ["a.py"], True)
    assert set(args._commands) == {"check"}
    assert set(parse(["rule", "DTL001"])._commands) == {"check", "rule", "migrate", "doctor", "clean", "explain",
                                                        "verify"}


def test_default_command_is_check(project: Path):
    assert dtl(project, ".").returncode == 1
    assert dtl(project).returncode == 1


@pytest.mark.parametrize(
    "pyproject, args, message",
    [
        (PYPROJECT, ["check", "no/such/dir"], "no/such/dir: no such file or directory"),
        (PYPROJECT + 'selct = ["DTL"]\n', ["check"], "unknown [tool.dtype-lint] key `selct` (did you mean `select`?)"),
        ("[tool.dtype-lint\n", ["check"], "cannot read configuration"),
        ('[tool.dtype-lint]\nhelper = "no_colon_here"\n', ["check"], "`helper` must look like `package.module:function`"),
        (PYPROJECT, ["rule", "DTL999"], "unknown rule `DTL999`"),
        (PYPROJECT, ["check", "--select", "E501"], "not a rule code or prefix"),
        (PYPROJECT, ["check", "--preset", "nope"], "unknown preset `nope`"),
    ],
    ids=["missing-path", "bad-key", "bad-toml", "bad-helper", "unknown-rule", "bad-select", "bad-preset"],
)
def test_errors_exit_2_with_a_message(tmp_path: Path, pyproject: str, args: list[str], message: str):
    root = make_project(tmp_path / "p", pyproject=pyproject)
    proc = dtl(root, *args)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert proc.stderr.startswith("dtype-lint: error: ")
    assert message in proc.stderr
    assert proc.stdout == ""


def test_exit_zero_still_reports(project: Path):
    proc = dtl(project, "check", "--exit-zero", "--output-format", "concise")
    assert proc.returncode == 0
    assert proc.stdout.count("DTL001") == 2


# --- selecting rules and files ---------------------------------------------------------------------


def test_select_and_ignore(project: Path):
    assert where(findings_json(project, "--select", "DTL001")[1]) == EXPECTED
    assert where(findings_json(project, "--select", "DTL0")[1]) == EXPECTED
    rc, found = findings_json(project, "--ignore", "DTL001")
    assert (rc, found) == (0, [])
    # Engine codes alone (DTL9xx) select no rule: that run would check nothing, so it is refused.
    for args in (["--select", "DTL9"], ["--select", "DTL", "--ignore", "DTL0"]):
        proc = dtl(project, "check", *args)
        assert proc.returncode == 2 and "no rule is enabled" in proc.stderr, proc.stderr
        assert "All checks passed" not in proc.stdout


def test_per_file_ignores(tmp_path: Path):
    root = make_project(tmp_path / "p", pyproject=PYPROJECT + '\n[tool.dtype-lint.per-file-ignores]\n"proj/mlp.py" = ["DTL001"]\n')
    rc, found = findings_json(root)
    assert rc == 1 and where(found) == [EXPECTED[0]]
    root2 = make_project(tmp_path / "q", pyproject=PYPROJECT + '\n[tool.dtype-lint.per-file-ignores]\n"proj/*" = ["DTL"]\n')
    assert findings_json(root2) == (0, [])


def test_exclude_flag_and_config(tmp_path: Path):
    root = make_project(tmp_path / "p")
    rc, found = findings_json(root, "--exclude", "mlp.py")
    assert where(found) == [EXPECTED[0]]
    rc, found = findings_json(root, "--exclude", "proj/attn.py,mlp.py")
    assert (rc, found) == (0, [])
    root2 = make_project(tmp_path / "q", pyproject=PYPROJECT + 'exclude = ["attn.py"]\n')
    assert where(findings_json(root2)[1]) == [EXPECTED[1]]


# --- output formats ------------------------------------------------------------------------------


def test_output_format_json(project: Path):
    proc = dtl(project, "check", "--output-format", "json")
    doc = json.loads(proc.stdout)
    assert doc["summary"]["findings"] == 2 and doc["summary"]["fixable"] == 2
    f = {x["path"].lstrip("./"): x for x in doc["findings"]}["proj/attn.py"]
    assert f["scope"] == "Attn.forward"
    assert f["expression"] == "x.to(self.kv_b_proj.weight.dtype)"
    assert f["fix"]["applicability"] == "safe" and f["fix"]["edits"]
    assert any("ColumnParallelLinear" in e["message"] for e in f["evidence"])


def test_output_format_github(project: Path):
    proc = dtl(project, "check", "--output-format", "github")
    assert proc.returncode == 1
    lines = proc.stdout.strip().splitlines()
    assert len(lines) == 2
    assert all(re.match(r"^::error file=[^,]+,line=\d+,col=\d+,endLine=\d+,endColumn=\d+,title=dtype-lint \(DTL001\)::", ln)
               for ln in lines), lines
    assert any("attn.py,line=11," in ln for ln in lines)


def test_output_format_concise(project: Path):
    proc = dtl(project, "check", "--output-format", "concise")
    lines = [ln for ln in proc.stdout.splitlines() if "DTL001" in ln]
    assert len(lines) == 2
    assert re.match(r"^\.?/?proj/attn\.py:11:13: DTL001 ", lines[0]), lines
    assert "|" not in proc.stdout  # no code frames


def test_output_format_sarif(project: Path):
    proc = dtl(project, "check", "--output-format", "sarif")
    assert proc.returncode == 1
    log = json.loads(proc.stdout)
    assert log["version"] == "2.1.0"
    (run,) = log["runs"]
    assert any(r["id"] == "DTL001" for r in run["tool"]["driver"]["rules"])
    results = run["results"]
    assert {r["ruleId"] for r in results} == {"DTL001"} and len(results) == 2
    lines = sorted(r["locations"][0]["physicalLocation"]["region"]["startLine"] for r in results)
    assert lines == [11, 12]
    assert all(r.get("fixes") for r in results)


def test_output_file(project: Path):
    proc = dtl(project, "check", "--output-format", "json", "-o", "report.json")
    assert proc.returncode == 1 and proc.stdout == ""
    assert len(json.loads((project / "report.json").read_text())["findings"]) == 2


def test_statistics(project: Path):
    proc = dtl(project, "check", "--statistics")
    assert proc.returncode == 1
    assert proc.stdout.splitlines()[0] == "2\tDTL001\t[*] weight-dtype-cast"  # Ruff's line format
    assert "attn.py" not in proc.stdout  # counts, not findings
    table = dtl(project, "check", "--statistics-table")
    (row,) = [ln for ln in table.stdout.splitlines() if ln.startswith("DTL001")]
    assert row.split()[1:] == ["weight-dtype-cast", "2", "2"]


# --- fixing --------------------------------------------------------------------------------------


def test_fix_writes_fixes_and_creates_the_helper(project: Path):
    proc = dtl(project, "check", "--fix")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "2 fixed, 0 remaining" in proc.stdout
    helper = project / HELPER
    assert helper.read_text(encoding="utf-8") == helper_source("get_layer_input_dtype", "vllm", vllm_first_party=False)
    attn = (project / "proj/attn.py").read_text()
    assert "from proj.dtypes import get_layer_input_dtype\n" in attn
    assert ("        kv_b_proj_input_dtype = get_layer_input_dtype(self.kv_b_proj, True)\n"
            "        if kv_b_proj_input_dtype is not None:\n"
            "            x = x.to(kv_b_proj_input_dtype)\n") in attn
    mlp = (project / "proj/mlp.py").read_text()
    assert "x.to(dtype=get_layer_input_dtype(self.up_proj, True) or x.dtype)" in mlp
    for p in ("proj/attn.py", "proj/mlp.py", HELPER):
        compile((project / p).read_text(), p, "exec")
    assert (project / "proj/vision.py").read_text() == CLEAN
    again = dtl(project, "check")
    assert again.returncode == 0 and "All checks passed" in again.stdout


def test_fix_with_an_unfixable_site_exits_1(tmp_path: Path):
    root = make_project(tmp_path / "p", {"proj/mlp.py": MLP.replace("x.to(dtype=self.up_proj.weight.dtype)",
                                                                   "x.to(self.up_proj.weight)")})
    proc = dtl(root, "check", "--fix", "--output-format", "concise")
    assert proc.returncode == 1
    assert "mlp.py:12:" in proc.stdout and "attn.py" not in proc.stdout
    assert "get_layer_input_dtype" in (root / "proj/attn.py").read_text()


def test_fix_never_creates_the_vllm_preset_helper_outside_vllm(tmp_path: Path):
    """Without `helper`, the vLLM preset's helper lives in vLLM. A project that only imports vLLM must
    not get a `vllm/__init__.py` created in it (it would shadow the installed vLLM): the helper goes
    into the project's own package instead, and the run says so (tests/test_helper_home.py)."""
    root = make_project(tmp_path / "p", {"proj/mlp.py": None}, pyproject="[tool.dtype-lint]\n")
    proc = dtl(root, "check", "--fix", "--verbose")  # the warning's detail says why not the preset's
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert not (root / "vllm").exists()
    assert (root / "proj/layer_input_dtype.py").read_text() == helper_source("get_layer_input_dtype", "torch")
    assert "from proj.layer_input_dtype import get_layer_input_dtype" in (root / "proj/attn.py").read_text()
    assert "belongs to package `vllm`" in proc.stderr and "proj/layer_input_dtype.py" in proc.stderr
    # Inside a vLLM checkout the same default is created next to the package.
    vllm = make_project(tmp_path / "v", {"proj/mlp.py": None, "vllm/__init__.py": "", "vllm/x.py": ATTN},
                        pyproject="[tool.dtype-lint]\n")
    assert dtl(vllm, "check", "--fix").returncode == 0
    helper = vllm / "vllm/model_executor/layers/quantization/utils/layer_input_dtype.py"
    assert helper.read_text() == helper_source("get_layer_input_dtype", "vllm")
    for d in ("vllm/model_executor", "vllm/model_executor/layers/quantization/utils"):
        assert (vllm / d / "__init__.py").exists()
    assert ("from vllm.model_executor.layers.quantization.utils.layer_input_dtype import get_layer_input_dtype"
            in (vllm / "proj/attn.py").read_text())


def test_diff_prints_and_writes_nothing(project: Path):
    before = {p: p.read_bytes() for p in project.rglob("*.py")}
    proc = dtl(project, "check", "--diff")
    assert proc.returncode == 1, proc.stderr
    out = proc.stdout
    assert "--- /dev/null\n+++ b/proj/dtypes.py\n" in out  # the helper it would create
    assert re.search(r"^--- a/(\./)?proj/attn\.py$", out, re.M) and re.search(r"^\+\+\+ b/(\./)?proj/attn\.py$", out, re.M)
    assert "-        x = x.to(self.kv_b_proj.weight.dtype)\n" in out
    assert "+        kv_b_proj_input_dtype = get_layer_input_dtype(self.kv_b_proj, True)\n" in out
    assert "+from proj.dtypes import get_layer_input_dtype\n" in out
    assert re.search(r"^@@ -\d+(,\d+)? \+\d+(,\d+)? @@", out, re.M)
    assert {p: p.read_bytes() for p in project.rglob("*.py")} == before
    assert not (project / HELPER).exists()


def test_diff_without_changes_exits_0(tmp_path: Path):
    root = make_project(tmp_path / "p", {"proj/attn.py": None, "proj/mlp.py": None})
    proc = dtl(root, "check", "--diff")
    assert proc.returncode == 0 and "---" not in proc.stdout


def test_unsafe_fixes_with_fp8_input_default_false(tmp_path: Path):
    root = make_project(tmp_path / "p", pyproject=PYPROJECT + "fp8-input-default = false\n")
    before = (root / "proj/attn.py").read_bytes()
    rc, found = findings_json(root)
    assert {f["fix"]["applicability"] for f in found} == {"unsafe"}
    assert all("fp8" in f["fix"]["unsafe_reason"] for f in found)
    # --fix alone leaves unsafe fixes alone.
    proc = dtl(root, "check", "--fix")
    assert proc.returncode == 1
    assert (root / "proj/attn.py").read_bytes() == before and not (root / HELPER).exists()
    # --diff --unsafe-fixes shows them with fp8_input=False.
    proc = dtl(root, "check", "--diff", "--unsafe-fixes")
    assert proc.returncode == 1 and "get_layer_input_dtype(self.kv_b_proj, False)" in proc.stdout
    assert (root / "proj/attn.py").read_bytes() == before
    # --fix --unsafe-fixes applies them.
    proc = dtl(root, "check", "--fix", "--unsafe-fixes")
    assert proc.returncode == 0, proc.stdout
    assert "get_layer_input_dtype(self.kv_b_proj, False)" in (root / "proj/attn.py").read_text()
    assert "get_layer_input_dtype(self.up_proj, False) or x.dtype" in (root / "proj/mlp.py").read_text()
    assert (root / HELPER).exists()


# --- robustness ----------------------------------------------------------------------------------


def test_syntax_error_is_dtl900_and_other_files_are_checked(tmp_path: Path):
    # The prefilter only parses files that could hold a site, so the broken file mentions one.
    broken = "def broken(layer, x):\n    return x.to(layer.weight.dtype\n"
    root = make_project(tmp_path / "p", {"proj/broken.py": broken})
    rc, found = findings_json(root)
    assert rc == 1
    assert where(found) == sorted(EXPECTED + [("proj/broken.py", 2, "DTL900")])
    (err,) = [f for f in found if f["code"] == "DTL900"]
    # Parsed by the running Python, which the message names (code for a newer one fails on an older).
    assert err["message"].startswith(f"cannot parse with Python {sys.version_info[0]}.{sys.version_info[1]}: ")
    # --fix fixes the others and leaves the broken file alone.
    proc = dtl(root, "check", "--fix", "--output-format", "concise")
    assert proc.returncode == 1 and "DTL900" in proc.stdout
    assert (root / "proj/broken.py").read_text() == broken
    assert "get_layer_input_dtype" in (root / "proj/attn.py").read_text()


def test_undecodable_file_is_dtl900(tmp_path: Path):
    root = make_project(tmp_path / "p")
    (root / "proj/binary.py").write_bytes(b"x = '\xff\xfe'  # .weight.dtype\n")
    rc, found = findings_json(root)
    assert rc == 1 and ("proj/binary.py", 1, "DTL900") in where(found)
    assert where([f for f in found if f["code"] == "DTL001"]) == EXPECTED


def _git(root: Path, *args: str) -> None:
    subprocess.run(["git", *args], cwd=root, check=True, capture_output=True,
                   env={**os.environ, "GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@e", "GIT_COMMITTER_NAME": "t",
                        "GIT_COMMITTER_EMAIL": "t@e", "GIT_CONFIG_GLOBAL": os.devnull})


@pytest.mark.skipif(shutil.which("git") is None, reason="needs git")
def test_changed_since(project: Path):
    _git(project, "init", "-q")
    _git(project, "add", ".")
    _git(project, "commit", "-q", "-m", "init")
    assert findings_json(project, "--changed-since", "HEAD") == (0, [])
    with open(project / "proj/mlp.py", "a", encoding="utf-8") as f:
        f.write("\n# touched\n")
    rc, found = findings_json(project, "--changed-since", "HEAD")
    assert rc == 1 and where(found) == [EXPECTED[1]]
    # An untracked file counts as changed.
    (project / "proj/attn2.py").write_text(ATTN, encoding="utf-8")
    rc, found = findings_json(project, "--changed-since", "HEAD")
    assert where(found) == [("proj/attn2.py", 11, "DTL001"), EXPECTED[1]]
    proc = dtl(project, "check", "--changed-since", "no-such-ref")
    assert proc.returncode == 2 and "dtype-lint: error:" in proc.stderr


# --- the cache -----------------------------------------------------------------------------------


def _findings_entries(root: Path) -> dict[str, Path]:
    """The cache's findings entries, by the file (relative to the root) they belong to."""
    return {cache_format.decode(p.read_bytes(), p.parents[1].name)["k"]: p
            for p in (root / ".dtype_lint_cache").glob("v2-*/f/*.json")}


def test_cache_hit_and_invalidation(project: Path):
    rc1, first = findings_json(project)
    entry = _findings_entries(project)["proj/mlp.py"]
    rc2, second = findings_json(project)
    assert (rc1, first) == (rc2, second)
    # The second run really reads the cache: plant a marker in mlp.py's cached findings (sealed
    # for its folder as dtype-lint seals it, run/cache_seal.py).
    data = cache_format.decode(entry.read_bytes(), entry.parents[1].name)
    data["f"][0]["message"] = "FROM-THE-CACHE"
    entry.write_bytes(cache_format.encode(data, entry.parents[1].name))
    _, third = findings_json(project)
    assert [f["message"] for f in third if f["path"].endswith("mlp.py")] == ["FROM-THE-CACHE"]
    assert [f for f in third if f["path"].endswith("attn.py")] == [f for f in first if f["path"].endswith("attn.py")]
    # Editing the file invalidates its entry (and only the result for that file changes).
    mlp = project / "proj/mlp.py"
    mlp.write_text(MLP.replace("        return", "        # a comment that moves the site\n        return"))
    _, fourth = findings_json(project)
    m = [f for f in fourth if f["path"].endswith("mlp.py")]
    assert len(m) == 1 and m[0]["line"] == 13 and m[0]["message"] != "FROM-THE-CACHE"
    mlp.write_text(MLP.replace("x.to(dtype=self.up_proj.weight.dtype)", "x"))
    assert where(findings_json(project)[1]) == [EXPECTED[0]]


def test_cache_follows_other_files_and_the_config(project: Path):
    assert where(findings_json(project)[1]) == EXPECTED
    # mlp.py is unchanged, but its layer class stops being quantizable in another file.
    layers = project / "proj/layers.py"
    layers.write_text(LAYERS.replace("class ColLinear(QLinear):", "class ColLinear(torch.nn.Module):"))
    assert where(findings_json(project)[1]) == [EXPECTED[0]]
    layers.write_text(LAYERS)
    assert where(findings_json(project)[1]) == EXPECTED
    # A config change that changes findings is seen too.
    (project / "pyproject.toml").write_text(PYPROJECT.replace('quantizable = ["proj.layers.QLinear"]\n', ""))
    assert where(findings_json(project)[1]) == [EXPECTED[0]]


def test_cache_follows_a_construction_in_another_files_body(project: Path):
    """The layer is built in one file, cast in another: changing the construction (a body, not a
    class header) must invalidate the cached findings of the file with the cast."""
    files = {
        "proj/blocks.py": "from proj.layers import ColLinear\n\n\nclass Block:\n"
                          "    def __init__(self, quant_config):\n"
                          "        self.up = ColLinear(quant_config=quant_config)\n",
        "proj/user.py": "from proj.blocks import Block\n\n\nclass User:\n"
                        "    def __init__(self, quant_config):\n        self.block = Block(quant_config)\n\n"
                        "    def forward(self, x):\n        return x.to(self.block.up.weight.dtype)\n",
    }
    for rel, text in files.items():
        (project / rel).write_text(text)
    assert [f["path"] for f in findings_json(project)[1] if f["path"].endswith("user.py")]
    (project / "proj/blocks.py").write_text(files["proj/blocks.py"].replace(
        "ColLinear(quant_config=quant_config)", "ColLinear(quant_config=None)"))
    assert not [f for f in findings_json(project)[1] if f["path"].endswith("user.py")]


def test_no_cache_writes_no_cache(project: Path):
    rc, found = findings_json(project, "--no-cache")
    assert rc == 1 and where(found) == EXPECTED
    assert not (project / ".dtype_lint_cache").exists()


def test_cached_run_equals_uncached_run_in_every_format(project: Path):
    for fmt in ("concise", "github", "json"):
        cold = dtl(project, "check", "--no-cache", "--output-format", fmt).stdout
        dtl(project, "check", "--output-format", fmt)
        warm = dtl(project, "check", "--output-format", fmt).stdout
        if fmt == "json":
            cold, warm = (json.loads(x)["findings"] for x in (cold, warm))
        assert cold == warm, fmt


# --- suppressions and baselines ------------------------------------------------------------------

SUPPRESSED = """\
from proj.layers import ColLinear


def run(layer: ColLinear, x):
    a = x.to(layer.weight.dtype)  # dtype-lint: ignore[DTL001] this layer is never packed
    b = x.to(layer.weight.dtype)  # dtype-lint: ignore[DTL001]
    c = x.to(layer.weight.dtype)  # noqa: DTL001
    d = x.to(layer.weight.dtype)  # noqa: E501
    return layer(a) + layer(b) + layer(c) + layer(d)
"""


def test_suppressions(tmp_path: Path):
    root = make_project(tmp_path / "p", {"proj/attn.py": None, "proj/mlp.py": None, "proj/s.py": SUPPRESSED})
    rc, found = findings_json(root)
    assert rc == 1
    assert where(found) == [("proj/s.py", 6, "DTL001"), ("proj/s.py", 6, "DTL902"), ("proj/s.py", 8, "DTL001")]
    (dtl902,) = [f for f in found if f["code"] == "DTL902"]
    assert "reason" in dtl902["message"]


def test_fix_leaves_suppressed_sites_alone(tmp_path: Path):
    root = make_project(tmp_path / "p", {"proj/attn.py": None, "proj/mlp.py": None, "proj/s.py": SUPPRESSED})
    proc = dtl(root, "check", "--fix", "--output-format", "concise")
    text = (root / "proj/s.py").read_text()
    lines = {ln.strip()[0]: ln for ln in text.splitlines() if ln.strip()[:1] in "abcd" and " = x.to(" in ln}
    original = SUPPRESSED.splitlines()
    assert lines["a"] == original[4]  # reasoned ignore: untouched
    assert lines["c"] == original[6]  # the `noqa: DTL001` line: untouched
    assert "get_layer_input_dtype(layer, True) or x.dtype" in lines["b"]  # no reason: not a suppression
    assert "get_layer_input_dtype(layer, True) or x.dtype" in lines["d"]  # noqa for another tool
    assert text.count("import get_layer_input_dtype") == 1
    # The suppressions that were honoured are not reported unused; the reason-less one still is.
    assert proc.returncode == 1
    assert [ln.split(": ")[1].split()[0] for ln in proc.stdout.splitlines() if "s.py:" in ln] == ["DTL902"]


def test_diff_with_only_suppressed_sites_exits_0(tmp_path: Path):
    only = SUPPRESSED.replace("    b = x.to(layer.weight.dtype)  # dtype-lint: ignore[DTL001]\n", "").replace(
        "    d = x.to(layer.weight.dtype)  # noqa: E501\n", "").replace(" + layer(b)", "").replace(" + layer(d)", "")
    root = make_project(tmp_path / "p", {"proj/attn.py": None, "proj/mlp.py": None, "proj/s.py": only})
    assert dtl(root, "check").returncode == 0
    proc = dtl(root, "check", "--diff")
    assert proc.returncode == 0 and "+++" not in proc.stdout, proc.stdout
    assert not (root / HELPER).exists()


def test_migrate_small_project(tmp_path: Path):
    only_noqa = ("from proj.layers import ColLinear\n\n\ndef run(layer: ColLinear, x):\n"
                 "    return layer(x.to(layer.weight.dtype))  # noqa: DTL001\n")
    root = make_project(tmp_path / "p", {"proj/s.py": only_noqa})
    proc = dtl(root, "migrate", ".", "--report", "PR.md")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    report = (root / "PR.md").read_text()
    assert "- Sites fixed: 2 in 2 files" in report and "- Sites left: 0" in report
    assert "`proj/attn.py`" in report and "`Attn.forward` (line 11)" in report and "`proj/mlp.py`" in report
    assert "`proj.dtypes:get_layer_input_dtype` in `proj/dtypes.py` (created by this migration)" in report
    assert (root / HELPER).exists() and (root / "proj/s.py").read_text() == only_noqa
    assert dtl(root, "check").returncode == 0
    # What cannot be fixed is left for a human, with the reason, and migrate exits 1.
    root2 = make_project(tmp_path / "q", {"proj/mlp.py": MLP.replace("x.to(dtype=self.up_proj.weight.dtype)",
                                                                     "x.to(self.up_proj.weight)")})
    proc = dtl(root2, "migrate", ".", "--report", "PR.md")
    assert proc.returncode == 1
    report = (root2 / "PR.md").read_text()
    assert "- Sites left: 1" in report and "| `proj/mlp.py:12` | DTL001 | `MLP.forward` |" in report
    assert "also moves to the weight's device" in report


def test_baseline(project: Path):
    proc = dtl(project, "check", "--write-baseline", "baseline.json")
    assert proc.returncode == 0, proc.stderr
    assert "wrote baseline" in proc.stderr
    entries = json.loads((project / "baseline.json").read_text())["entries"]
    assert {(e["path"], e["scope"]) for e in entries} == {("proj/attn.py", "Attn.forward"), ("proj/mlp.py", "MLP.forward")}
    assert findings_json(project, "--baseline", "baseline.json") == (0, [])
    # Moving a recorded site keeps it hidden (keyed by scope and expression, not line).
    attn = project / "proj/attn.py"
    attn.write_text(ATTN.replace("    def forward", "    # moved down\n\n    def forward"))
    assert findings_json(project, "--baseline", "baseline.json") == (0, [])
    # A new site shows.
    attn.write_text(attn.read_text() + "\n    def extra(self, y):\n        return y.to(self.kv_b_proj.weight.dtype)\n")
    rc, found = findings_json(project, "--baseline", "baseline.json")
    assert rc == 1 and [(f["scope"], f["code"]) for f in found] == [("Attn.extra", "DTL001")]
    proc = dtl(project, "check", "--baseline", "missing.json")
    assert proc.returncode == 2 and "cannot read baseline" in proc.stderr


# --- rule docs, help, jobs -----------------------------------------------------------------------


def test_rule_doc(project: Path):
    proc = dtl(project, "rule", "DTL001")
    assert proc.returncode == 0
    out = proc.stdout
    assert out.startswith("# DTL001 weight-dtype-cast")
    for section in ("## What it does", "## Why is this bad?", "## Example", "## Fix safety"):
        assert section in out, section
    assert out.index("## What it does") < out.index("## Why is this bad?") < out.index("## Example") < out.index("## Fix safety")
    assert "#38658" in out
    assert dtl(project, "rule", "dtl001").stdout == out  # case-insensitive code
    listing = dtl(project, "rule", "--all")
    assert listing.returncode == 0 and listing.stdout.startswith("DTL001  weight-dtype-cast")


def test_help_lists_the_flags(project: Path):
    top = dtl(project, "--help")
    assert top.returncode == 0
    for cmd in ("check", "rule", "migrate", "verify"):
        assert cmd in top.stdout
    check = dtl(project, "check", "--help").stdout
    for flag in ("--fix", "--unsafe-fixes", "--diff", "--select", "--ignore", "--output-format", "--jobs",
                 "--no-cache", "--exit-zero", "--statistics", "--baseline", "--write-baseline",
                 "--changed-since", "--config", "--exclude", "--preset"):
        assert flag in check, flag
    for fmt in ("json", "github", "concise", "sarif"):
        assert fmt in check
    migrate = dtl(project, "migrate", "--help").stdout
    assert "--report" in migrate
    assert re.match(r"^dtype-lint \d", dtl(project, "--version").stdout)


def test_jobs_1_and_2_agree(tmp_path: Path):
    # Enough files with sites for the analysis to go to worker processes with -j 2.
    extra = {f"proj/attn{i}.py": ATTN.replace("class Attn", f"class Attn{i}") for i in range(6)}
    root = make_project(tmp_path / "p", extra)
    rc1, one = findings_json(root, "--no-cache", "-j", "1")
    rc2, two = findings_json(root, "--no-cache", "-j", "2")
    assert rc1 == rc2 == 1
    assert len(one) == 8 and one == two
    d1 = dtl(root, "check", "--diff", "-j", "1", "--no-cache").stdout
    d2 = dtl(root, "check", "--diff", "-j", "2", "--no-cache").stdout
    assert d1 == d2 and d1.count("+++ b/") == 9
