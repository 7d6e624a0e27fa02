"""The regression tests of the transformers 5.23.0 series (dtype_lint/ecosystems/hf/regression.py):
every patch adds one (or the series README says which changed class has no case), each is valid
Python in transformers' layout, and each fails on the release and passes with its patch, run on
CPU against the release's own tree (transformers 5.23.0 and bitsandbytes are in the test extra).

The before/after run covers one patch per distinct shape in CI (the helper's unit test, a T5-style
guarded `wo`, an fp8-storage guard, a sparse-attention indexer, a pretrained model with several
sites); with `DTL_FULL=1` it covers every patch of the series.
"""

from __future__ import annotations

import ast
import re
import shutil
import subprocess
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
from conftest import FULL

from dtype_lint.ecosystems.hf import regression as hf_regression
from dtype_lint.migrate.series import FileChange

ROOT = Path(__file__).resolve().parents[1]
SERIES = ROOT / "tests" / "goldens" / "upstream" / "transformers-5.23.0"
# One patch per shape, by the test file it adds: what CI runs before and after.
CI_SHAPES = (
    "tests/utils/test_get_module_input_dtype.py",  # the helper: fails at import before
    "tests/models/t5/test_modeling_t5_quantized_input.py",  # T5's `!= torch.int8` guard, bitsandbytes 4-bit
    "tests/models/blip_2/test_modeling_blip_2_quantized_input.py",  # pretrained models, several sites
)
# DTL_FULL adds the other patches' tests, among them NLLB-MoE's int8/uint8 guard under fp8 storage and
# DeepSeek-V3.2's indexer: CI keeps three shapes (the budget, docs/testing.md).


def _patches() -> list[Path]:
    return sorted(SERIES.glob("*.patch"))


def _added_files(patch: Path) -> dict[str, str]:
    """The files a patch creates, with their text (the `+` lines of each new-file diff)."""
    text = patch.read_text(encoding="utf-8")
    out = {}
    for block in re.split(r"^diff --git ", text, flags=re.M)[1:]:
        if "\nnew file mode" not in block:
            continue
        path = re.search(r"^\+\+\+ b/(\S+)", block, re.M).group(1)
        body = block.split("\n@@", 1)[1].split("\n", 1)[1]
        lines = [line[1:] for line in body.splitlines() if line.startswith("+")]
        out[path] = "\n".join(lines) + "\n"
    return out


def test_every_patch_adds_a_test_and_the_readme_has_its_run():
    """Each patch adds one test file; the README's row: every test failed on the release (or the
    module failed at import) and passed with the series. A changed class the test leaves out is
    named in the row ("no case for")."""
    readme = (SERIES / "README.md").read_text(encoding="utf-8")
    section = readme.split("## Regression tests", 1)[1]
    for patch in _patches():
        tests = [p for p in _added_files(patch) if p.startswith("tests/")]
        row = next(line for line in section.splitlines() if line.startswith(f"| `{patch.name}`"))
        assert len(tests) == 1 and f"`{tests[0]}`" in row, (patch.name, tests, row)
        assert re.search(r"\| (\d+)/\1 failed \| (\d+)/\2 passed \||\| fails at import \| (\d+)/\3 passed \|", row), row


def test_added_tests_are_transformers_style_and_compile():
    for patch in _patches():
        for path, text in _added_files(patch).items():
            if not path.startswith("tests/"):
                continue
            tree = ast.parse(text, path)
            assert re.fullmatch(r"tests/(models/\w+/test_modeling_\w+_quantized_input|utils/test_\w+)\.py", path)
            assert "from transformers.testing_utils import" in text and "@require_torch" in text
            assert any(isinstance(n, ast.ClassDef) and any(ast.unparse(b) == "unittest.TestCase" for b in n.bases)
                       for n in tree.body), path
            assert "DTL0" not in text and "dtype-lint" not in text, path


def test_every_case_renders_a_valid_test():
    for module, cases in hf_regression.LAYER_CASES.items():
        test = hf_regression.site_test(list(cases), style=False)  # ruff's formatting: the series test checks it
        ast.parse(test.text, test.path)
        assert test.path.startswith("tests/models/" + module.split(".")[2] + "/")
        for case in cases:
            assert case.storage in hf_regression.MAX_ERROR and case.compare in ("layer", "output")
            assert f"class {case.cls}QuantizedInputTest(unittest.TestCase)" in test.text


def test_plan_maps_modular_sources_to_their_modeling_module():
    """A class changed in modular_x.py and in modeling_x.py is one test, of the modeling module;
    a changed class without a case is reported, not guessed."""
    from types import SimpleNamespace

    source = b"class T5DenseActDense:\n    def forward(self, x):\n        return x.to(self.wo.weight.dtype)\n" \
             b"class Unknown:\n    def forward(self, x):\n        return x.to(self.proj.weight.dtype)\n"
    finding = lambda line: SimpleNamespace(span=SimpleNamespace(line=line))  # noqa: E731
    changes = [FileChange("transformers/models/t5/modular_t5.py", source, source, [finding(3), finding(6)]),
               FileChange("transformers/models/t5/modeling_t5.py", source, source, [finding(3)])]
    cases, missing = hf_regression.plan_tests(changes)
    assert [c.cls for c in cases] == ["T5DenseActDense"]
    assert missing == ["transformers.models.t5.modeling_t5.Unknown"]


def _tree(release: Path, dest: Path, patches: list[Path], tests_only: bool) -> Path:
    shutil.copytree(release / "transformers", dest / "transformers",
                    ignore=shutil.ignore_patterns("__pycache__"))
    cmd = ["git", "apply", "--whitespace=nowarn"] + (["--include=tests/*"] if tests_only else [])
    subprocess.run(cmd + [str(p) for p in patches], cwd=dest, check=True, capture_output=True, text=True)
    return dest


@pytest.mark.network
def test_each_patch_test_fails_on_the_release_and_passes_with_it(tmp_path):
    pytest.importorskip("bitsandbytes", reason="the `test` extra installs bitsandbytes")
    pytest.importorskip("transformers", reason="the `test` extra installs transformers")
    from dtype_lint.releases import release_tree

    release = release_tree("transformers", "5.23.0")
    chosen = []
    for patch in _patches():
        tests = [p for p in _added_files(patch) if p.startswith("tests/")]
        if tests and (FULL or tests[0] in CI_SHAPES):  # the CI budget: one patch per shape
            chosen.append((patch, tests[0]))
    if not FULL:
        assert sorted(t for _p, t in chosen) == sorted(CI_SHAPES), "each CI shape names a patch of the series"
    patches = [_patches()[0]] + [p for p, _t in chosen if p != _patches()[0]]
    before = _tree(release, tmp_path / "before", [p for p, _t in chosen], tests_only=True)
    after = _tree(release, tmp_path / "after", patches, tests_only=False)
    paths = sorted(t for _p, t in chosen)
    with ThreadPoolExecutor(2) as pool:  # two trees, two processes: the CI share stays near one run
        runs = list(pool.map(lambda tree: hf_regression.run_tests(tree, paths), (before, after)))
    for path in paths:
        was, now = runs[0][path], runs[1][path]
        assert now and all(o.passed for o in now.values()), (path, now)
        assert was and not any(o.passed for o in was.values()), (path, was)
        assert set(was) == {hf_regression.IMPORT} or set(was) == set(now), (path, was, now)


@pytest.mark.network
@pytest.mark.full("regenerating the transformers series takes minutes; CI runs its patches' tests instead")
def test_committed_series_is_fresh(capsys):
    """`scripts/hf_upstream.py transformers 5.23.0 --check`: the committed series, its tests and
    their recorded runs are what the generator writes now."""
    import sys

    sys.path.insert(0, str(ROOT / "scripts"))
    import hf_upstream

    assert hf_upstream.main(["transformers", "5.23.0", "--check"]) == 0, capsys.readouterr().err
