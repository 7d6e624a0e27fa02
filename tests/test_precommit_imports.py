"""What the full run on one edited file imports (issue #37): pre-commit's run after an edit that
reports no finding plans no fix, sets no helper and computes no storage its kept answers hold,
so the fix stage's modules (the fixer, the helper's home and template, the planner, the dtype
evaluator under them), the storage catalogue, the storage model (the rules and the layer
resolver read a verdict's words from analysis/storage/verdicts.py), the installed-engine reader
and the suppressions are left to the runs that use them. Each is an import and its `@dataclass`
classes built for nothing: Python 3.11 compiles every method a dataclass generates, at import.

Structural, not timed: benchmarks/results/precommit/README.md has the instruction counts."""

from __future__ import annotations

from pathlib import Path

from cli_runner import dtl, heavy_imports_of

# A cast to the storage dtype of a layer no backend can quantize (torch's own Linear): the file
# passes every rule's prefilter and the engine analyses it, but it reports nothing.
SITE = """\
import torch


class Attn(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.proj = torch.nn.Linear(4, 4)

    def forward(self, x):
        x = x.to(self.proj.weight.dtype)
        return self.proj(x)
"""

LEFT_TO_THEIR_RUNS = (
    "dtype_lint.fix.fixer",
    "dtype_lint.fix.helper_home",
    "dtype_lint.fix.helper_template",
    "dtype_lint.fix.planner",
    "dtype_lint.fix.distributions",
    "dtype_lint.dtypes.evaluator",
    "dtype_lint.dtypes.truth_table",
    "dtype_lint.analysis.storage.catalogue",
    "dtype_lint.analysis.storage.storage_model",
    "dtype_lint.core.engine_source",
    "dtype_lint.run.installed_engine",
    "dtype_lint.core.suppressions",
)


def test_an_edited_file_without_a_finding_leaves_the_fix_stage_unimported(tmp_path: Path):
    root = tmp_path / "p"
    (root / "proj").mkdir(parents=True)
    (root / "pyproject.toml").write_text("[tool.dtype-lint]\n", encoding="utf-8")
    (root / "proj" / "__init__.py").write_text("", encoding="utf-8")
    site = root / "proj" / "site.py"
    site.write_text(SITE, encoding="utf-8")
    assert dtl(root, "check", "--exit-zero", ".").returncode == 0  # the warm cache and record
    site.write_text(SITE + "# edited\n", encoding="utf-8")
    printed, imported = heavy_imports_of(root, "check", "--exit-zero", "proj/site.py",
                                         modules=(*LEFT_TO_THEIR_RUNS, "dtype_lint.run.pipeline"))
    assert printed == "All checks passed! (1 file checked)\n"
    assert imported == "['dtype_lint.run.pipeline']"  # the engine ran, and imported none of them
