"""`dtype-lint doctor`: why a tree came out as it did. The resolved settings and their sources, the
project root, the helper's location, and which quantizable roots match classes in the tree."""

from __future__ import annotations

import re
import shutil
from pathlib import Path

from cli_runner import dtl
from tiny_project import ATTN, tree_bytes, write_tree

from dtype_lint import __version__

ROOT = Path(__file__).resolve().parents[1]


write = write_tree


def tree(root: Path) -> dict[str, bytes]:
    return tree_bytes(root, cache=True)  # doctor writes nothing, not even a cache


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
    assert '  select = ["DTL", "DTL004"]  (pyproject.toml)\n' in out  # extend-select: DTL004 is opt-in
    assert '  helper = "minillm.layers.input_dtype:get_layer_input_dtype"  (pyproject.toml)\n' in out
    assert ("helper: minillm.layers.input_dtype:get_layer_input_dtype (configured) at "
            "minillm/layers/input_dtype.py: exists\n") in out
    # LinearBase is configured, and its own code also says so: it obtains a quant method.
    assert "quantizable roots: 1 of 1 match the tree (1 found in the code: " in out
    lines = out.splitlines()
    i = lines.index("  minillm.layers.linear.LinearBase [code]")
    assert lines[i + 1].startswith("      why: `self.quant_method.create_weights(self, ...)`")
    assert re.match(r"      defined at minillm/layers/linear\.py:\d+; \d+ subclasses \(", lines[i + 2])
    assert "ColumnParallelLinear" in lines[i + 2] and "RowParallelLinear" in lines[i + 2]
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
    from dtype_lint.core.config import Config

    n = len(Config().all_quantizable)
    assert f"quantizable roots: 0 of {n} match the tree (0 found in the code: " in out
    # the project imports no vLLM: the preset's classes are one line, not a list of what it lacks
    assert (f"  the `vllm` preset's {n} layer classes: not used here (the tree is not vllm, and no file imports "
            "from vllm.model_executor.layers)\n") in out
    assert "not in the tree" not in out
    assert "no class in the tree is quantizable" in out and "`quantizable = [...]`" in out
    assert "findings: 0 (0 with a fix)" in out
    # A configured root shows as configured, and matching it is what changes the verdict.
    proc = dtl(root, "doctor", "--preset", "generic")
    assert '  preset = "generic"  (command line)\n' in proc.stdout
    assert "quantizable roots: 0 of 0 match the tree" in proc.stdout


def test_doctor_finds_roots_in_the_code(tmp_path: Path):
    """A class whose own code obtains a quant method is a root, with no configuration at all."""
    root = write(tmp_path / "p", {
        "pyproject.toml": '[tool.dtype-lint]\npreset = "generic"\n',
        "pkg/__init__.py": "",
        "pkg/layers.py": ("import torch\n\n\nclass QLinear(torch.nn.Module):\n"
                          "    def __init__(self, quant_config=None):\n        super().__init__()\n"
                          "        self.quant_method = quant_config.get_quant_method(self, prefix='')\n\n\n"
                          "class RowLinear(QLinear):\n    pass\n"),
        "pkg/model.py": "from pkg.layers import RowLinear\n",
    })
    out = dtl(root, "doctor").stdout
    assert "quantizable roots: 1 of 1 match the tree (1 found in the code: " in out
    lines = out.splitlines()
    i = lines.index("  pkg.layers.QLinear [code]")
    assert "get_quant_method" in lines[i + 1]
    assert lines[i + 2] == "      defined at pkg/layers.py:4; 1 subclass (RowLinear)"


def test_doctor_shows_an_inferred_helper_and_imported_roots(tmp_path: Path):
    root = write(tmp_path / "p", {"pyproject.toml": '[project]\nname = "p"\n', "src/pkg/__init__.py": "",
                                  "src/pkg/attn.py": ATTN})
    out = dtl(root, "doctor").stdout
    assert ("helper: pkg.layer_input_dtype:get_layer_input_dtype (inferred) at src/pkg/layer_input_dtype.py: "
            "would be created by --fix from the `torch` template\n") in out
    why = next(ln for ln in out.splitlines() if ln.startswith("  why: "))
    assert "belongs to package `vllm`" in why and "src/ layout" in why
    assert "  vllm.model_executor.layers.linear.ColumnParallelLinear [preset]\n      imported by 1 module\n" in out
    assert "findings: 1 (1 with a fix)" in out
    assert not (root / "src/pkg/layer_input_dtype.py").exists()


def test_doctor_reports_an_unusable_helper_without_failing(tmp_path: Path):
    root = write(tmp_path / "p", {"pyproject.toml": '[project]\nname = "p"\n', "one/a.py": ATTN, "two/b.py": ATTN})
    proc = dtl(root, "doctor")
    assert proc.returncode == 0
    assert "helper: none can be used: " in proc.stdout and "several folders" in proc.stdout
    assert "findings: 2 (0 with a fix)" in proc.stdout
