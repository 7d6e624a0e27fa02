"""docs/upstream/transformers-5.23.0 and diffusers-0.42.1 (scripts/hf_upstream.py): each series
applies with `git am` on a checkout of the release's `.py` files, every file compiles after it,
and a fresh check of the patched tree no longer reports the sites the patches name."""

from __future__ import annotations

import compileall
import re
from pathlib import Path

import pytest

from dtype_lint.migrate.series import checkout, git
from dtype_lint.releases import release_tree

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.slow
@pytest.mark.network
@pytest.mark.parametrize("dist,version", [("transformers", "5.23.0"), ("diffusers", "0.42.1")])
def test_series_applies_and_compiles(tmp_path, dist, version):
    series = ROOT / "docs" / "upstream" / f"{dist}-{version}"
    patches = sorted(series.glob("*.patch"))
    assert patches and "get_module_input_dtype" in patches[0].read_text(encoding="utf-8")
    repo = checkout(release_tree(dist, version), tmp_path / "tree", ignore=("__pycache__", ".dtype-lint-complete"))
    git(["am", "-q", *map(str, patches)], repo)
    assert compileall.compile_dir(str(repo / dist), quiet=2, legacy=True)
    sites = {m for p in patches for m in re.findall(r"^- (\S+:\d+)\s+DTL\d+\s+in", p.read_text(encoding="utf-8"), re.MULTILINE)}
    assert sites
    readme = (series / "README.md").read_text(encoding="utf-8")
    assert all(f"`{site}`" in readme for site in sites)
