"""`dtype-lint doctor`: why a tree came out as it did. The resolved settings and their sources, the
project root, the helper's location, and which quantizable roots match classes in the tree."""

from __future__ import annotations

import re
import shutil
from pathlib import Path

from cli_runner import dtl
from dtype_lint import __version__

ROOT = Path(__file__).resolve().parents[1]

ATTN = """\
import torch
from vllm.model_executor.layers.linear import ColumnParallelLinear


class Attn(torch.nn.Module):
    def __init__(self, kv_b_proj: ColumnParallelLinear):
        super().__init__()
        self.kv_b_proj = kv_b_proj

    def forward(self, x):
        x = x.to(self.kv_b_proj.weight.dtype)
        return self.kv_b_proj(x)
"""


def write(root: Path, files: dict[str, str]) -> Path:
    for rel, text in files.items():
        p = root / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(text, encoding="utf-8")
    return root


def tree(root: Path) -> dict[str, bytes]:
    return {p.relative_to(root).as_posix(): p.read_bytes() for p in root.rglob("*") if p.is_file()}


def test_doctor_on_the_example_project(tmp_path: Path):
    root = tmp_path / "project"
    shutil.copytree(ROOT / "fixtures" / "project", root)
    before = tree(root)
    proc = dtl(root, "doctor", "--no-cache")
    assert proc.returncode == 0, proc.stderr
    out = proc.stdout
    assert out.startswith(f"dtype-lint {__version__}\nproject root: {root}\n")
    assert f"configuration: {root / 'pyproject.toml'}\n" in out
    assert '  preset = "generic"  (pyproject.toml)\n' in out
    assert '  select = ["DTL"]  (default)\n' in out
    assert '  helper = "minillm.layers.input_dtype:get_layer_input_dtype"  (pyproject.toml)\n' in out
    assert ("helper: minillm.layers.input_dtype:get_layer_input_dtype (configured) at "
            "minillm/layers/input_dtype.py: exists\n") in out
    assert "quantizable roots: 1 of 1 match the tree\n" in out
    (line,) = [ln for ln in out.splitlines() if ln.startswith("  minillm.layers.linear.LinearBase (configured): ")]
    assert re.search(r"defined at minillm/layers/linear\.py:\d+; \d+ subclasses \(", line)
    assert "ColumnParallelLinear" in line and "RowParallelLinear" in line
    expected = len([ln for ln in (root / "expected.txt").read_text().splitlines() if ln.strip() and not ln.startswith("#")])
    assert f"findings: {expected} (" in out
    assert tree(root) == before  # --no-cache: nothing written


def test_doctor_says_why_a_tree_is_clean(tmp_path: Path):
    """Nothing quantizable: the vLLM preset's roots are neither defined, subclassed nor imported."""
    root = write(tmp_path / "p", {
        "pyproject.toml": '[project]\nname = "p"\n',
        "pkg/__init__.py": "",
        "pkg/model.py": "import torch\n\n\nclass Head(torch.nn.Module):\n    def forward(self, x):\n"
                        "        return x.to(self.proj.weight.dtype)\n",
    })
    assert dtl(root, "check").returncode == 0
    out = dtl(root, "doctor").stdout
    assert "quantizable roots: 0 of 10 match the tree\n" in out
    assert "  not in the tree (10):\n    vllm.model_executor.layers.linear.LinearBase (preset)\n" in out
    assert "no class in the tree is quantizable" in out and "`quantizable = [...]`" in out
    assert "findings: 0 (0 with a fix)" in out
    # A configured root shows as configured, and matching it is what changes the verdict.
    proc = dtl(root, "doctor", "--preset", "generic")
    assert '  preset = "generic"  (command line)\n' in proc.stdout
    assert "quantizable roots: 0 of 0 match the tree" in proc.stdout


def test_doctor_shows_an_inferred_helper_and_imported_roots(tmp_path: Path):
    root = write(tmp_path / "p", {"pyproject.toml": '[project]\nname = "p"\n', "src/pkg/__init__.py": "",
                                  "src/pkg/attn.py": ATTN})
    out = dtl(root, "doctor").stdout
    assert ("helper: pkg.layer_input_dtype:get_layer_input_dtype (inferred) at src/pkg/layer_input_dtype.py: "
            "would be created by --fix\n") in out
    why = next(ln for ln in out.splitlines() if ln.startswith("  why: "))
    assert "belongs to package `vllm`" in why and "src/ layout" in why
    assert "  vllm.model_executor.layers.linear.ColumnParallelLinear (preset): imported by 1 module\n" in out
    assert "findings: 1 (1 with a fix)" in out
    assert not (root / "src/pkg/layer_input_dtype.py").exists()


def test_doctor_reports_an_unusable_helper_without_failing(tmp_path: Path):
    root = write(tmp_path / "p", {"pyproject.toml": '[project]\nname = "p"\n', "one/a.py": ATTN, "two/b.py": ATTN})
    proc = dtl(root, "doctor")
    assert proc.returncode == 0
    assert "helper: none can be used: " in proc.stdout and "several folders" in proc.stdout
    assert "findings: 2 (0 with a fix)" in proc.stdout
