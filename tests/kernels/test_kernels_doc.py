"""docs/kernels.md stays true: its links resolve inside the repo, it names every matrix row, and
its tolerance table is what harness/precision.py computes."""

from __future__ import annotations

import re
from pathlib import Path

from dtype_lint.kernels_ref.harness.backends import BACKENDS

ROOT = Path(__file__).resolve().parents[2]
DOC = ROOT / "docs" / "kernels.md"


def test_links_resolve_inside_the_repo():
    text = DOC.read_text()
    links = re.findall(r"\]\(([^)#]+)(?:#[^)]*)?\)", text)
    assert links
    for link in links:
        assert "://" not in link, link
        assert (DOC.parent / link).resolve().exists(), link
        assert ROOT in (DOC.parent / link).resolve().parents or (DOC.parent / link).resolve() == ROOT


def test_every_row_is_described():
    text = DOC.read_text()
    for b in BACKENDS:
        assert f"| {b} |" in text, b


def test_the_tolerance_table_is_the_computed_one():
    text = DOC.read_text()
    table = text[text.index("| row | weight error |"):]
    for line in table.splitlines()[2:]:
        if not line.startswith("|"):
            break
        cells = [c.strip() for c in line.strip("|").split("|")]
        for row in (r.strip() for r in cells[0].split(",")):
            b = BACKENDS[row]
            assert f"{b.rel_bound:.2g}" == f"{float(cells[4]):.2g}", row
            assert f"{b.lse_bound:.2g}" == f"{float(cells[5]):.2g}", row
