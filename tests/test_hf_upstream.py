"""tests/goldens/upstream/transformers-5.23.0 and diffusers-0.42.1 (scripts/hf_upstream.py): each series
applies with `git am` on a checkout of the release's `.py` files, every file compiles after it,
and a fresh check of the patched tree no longer reports the sites the patches name. The CI budget
(tests/conftest.py) applies the diffusers series; DTL_FULL=1 adds transformers'."""

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
@pytest.mark.parametrize("dist,version", [
    pytest.param("transformers", "5.23.0", marks=pytest.mark.full("CI applies the diffusers series")),
    ("diffusers", "0.42.1")])
def test_series_applies_and_compiles(tmp_path, dist, version):
    series = ROOT / "tests" / "goldens" / "upstream" / f"{dist}-{version}"
    patches = sorted(series.glob("*.patch"))
    assert patches and "get_module_input_dtype" in patches[0].read_text(encoding="utf-8")
    repo = checkout(release_tree(dist, version), tmp_path / "tree", ignore=("__pycache__", ".dtype-lint-complete"))
    git(["am", "-q", *map(str, patches)], repo)
    assert compileall.compile_dir(str(repo / dist), quiet=2, legacy=True)
    readme = (series / "README.md").read_text(encoding="utf-8")
    assert all(f"[`{p.name}`]({p.name})" in readme for p in patches)
    assert re.search(r"`\S+:\d+` DTL\d{3}", readme), "the README carries the sites and their codes"


SERIES = [ROOT / "tests" / "goldens" / "upstream" / name for name in ("transformers-5.23.0", "diffusers-0.42.1")]


@pytest.mark.parametrize("series", SERIES, ids=lambda p: p.name)
def test_commit_messages_follow_the_project(series):
    """Every HF commit message: a conventional title (not a path, no rule code), a sign-off, and
    no rule code anywhere before the `---` line."""
    patches = sorted(series.glob("*.patch"))
    assert patches
    for patch in patches:
        message = patch.read_text(encoding="utf-8").split("\n---\n", 1)[0]
        subject = " ".join(re.search(r"^Subject: \[PATCH \d+/\d+\] (.*(?:\n .*)*)", message, re.M).group(1).split())
        assert not re.match(r"\S+/\S+\.py:", subject), (patch.name, subject)
        assert not re.search(r"DTL\d{3}", subject) and subject[:1].isupper(), (patch.name, subject)
        assert re.search(r"^Signed-off-by: [^<>]+ <[^<>@]+@[^<>]+>$", message, re.M), patch.name
        assert "DTL00" not in message, patch.name


def test_transformers_patches_add_their_test():
    """Each transformers patch adds its regression test (tests/test_hf_regression.py runs them
    before and after), names it in its Tests section and quotes the run in its Results."""
    series = ROOT / "tests" / "goldens" / "upstream" / "transformers-5.23.0"
    with_test = 0
    patches = sorted(series.glob("*.patch"))
    for patch in patches:
        text = patch.read_text(encoding="utf-8")
        message, diff = text.split("\n---\n", 1)
        added = re.findall(r"^diff --git a/(tests/\S+\.py) b/\1\nnew file mode", diff, re.M)
        if not added:
            continue
        with_test += 1
        assert len(added) == 1, (patch.name, added)
        assert f"    python -m pytest {added[0]} -v" in message, patch.name
        results = message.split("\nResults:\n", 1)[1]
        assert "release:" in results and re.search(r"patched: (\S+ )?passed", results), patch.name
        assert "patched: FAILED" not in results, patch.name
    assert with_test == len(patches), "every patch adds its test"


def test_each_patch_hf_verify_runs_names_its_proof_by_the_command_as_it_is():
    """A patch changing a file whose model ecosystems/hf/verify.py runs under bitsandbytes says so,
    by the command a maintainer can run. The paragraph was kept after the regression test's run by
    the command's old name (`hf_verify`), so once the module moved every regenerated patch lost it."""
    from dtype_lint.ecosystems.hf.series import PROOF_COMMAND, VERIFIED

    series = ROOT / "tests" / "goldens" / "upstream" / "transformers-5.23.0"
    proved = 0
    for patch in sorted(series.glob("0*.patch")):
        text = patch.read_text(encoding="utf-8")
        changed = set(re.findall(r"^\+\+\+ b/(\S+)$", text, re.M))
        if changed & set(VERIFIED):
            assert f"(`{PROOF_COMMAND}`)" in text, patch.name
            proved += 1
    assert proved >= 6
