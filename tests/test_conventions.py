"""Series in the target project's conventions, and generated files (migrate/conventions.py,
messages.py, regression.py, generated.py, release_stubs.py).

The Hugging Face tree is our own fixture shaped like transformers (src/ layout, a generated
`modeling_foo.py` with its `modular_foo.py`, `# Copied from` blocks); its findings come from the
vLLM-style rules, so the machinery is tested before the Hugging Face rules exist.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from cli_runner import dtl
from test_series import AUTHOR, checkout, git

from dtype_lint.migrate import conventions, generated

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"


def test_convention_is_detected_from_the_top_level_package(tmp_path: Path):
    for name, layout in (("vllm", "vllm"), ("transformers", "src/transformers"), ("diffusers", "src/diffusers")):
        root = tmp_path / name
        (root / layout).mkdir(parents=True)
        (root / layout / "__init__.py").write_text("")
        assert conventions.detect(root) == name
    assert conventions.detect(FIXTURES / "shapes") == "generic"
    assert conventions.get("vllm", FIXTURES / "shapes").name == "vllm"  # --convention overrides
    with pytest.raises(ValueError, match="--convention"):
        conventions.get("pytorch", tmp_path)


def test_vllm_titles_and_test_layout():
    vllm = conventions.CONVENTIONS["vllm"]
    assert vllm.title("fix-helper", "Fix x()", "vllm/a.py") == "[Bugfix] Fix x()"
    assert vllm.title("helper", "Add h()", "") == "[Quantization] Add h()"
    assert vllm.title("sites", "gemma: y", "vllm/model_executor/models/gemma.py").startswith("[Model] ")
    assert (vllm.test_path("vllm/model_executor/layers/attention/mla_attention.py", "_get_kv_b_proj_input_dtype")
            == "tests/model_executor/layers/attention/test_get_kv_b_proj_input_dtype.py")
    hf = conventions.CONVENTIONS["transformers"]
    assert hf.title("fix-helper", "fix x()", "") == "Fix x()"  # no tags in Hugging Face titles
    assert hf.test_path("src/transformers/models/foo/modeling_foo.py", "f") == "tests/models/foo/test_f.py"


def test_identity(tmp_path: Path):
    assert str(conventions.parse_identity("Ann Dev <ann@example.org>")) == "Ann Dev <ann@example.org>"
    with pytest.raises(conventions.IdentityError):
        conventions.parse_identity("ann@example.org")
    repo = tmp_path / "repo"
    repo.mkdir()
    git(repo, "init", "-q")
    git(repo, "config", "user.name", "Bo Reviewer")
    git(repo, "config", "user.email", "bo@example.org")
    assert str(conventions.resolve_identity(None, repo)) == "Bo Reviewer <bo@example.org>"


def test_scrub_takes_rule_codes_out():
    assert conventions.scrub("the guard (DTL004) is wrong; see DTL001") == "the guard is wrong; see this check"


@pytest.fixture(scope="module")
def hf_series(tmp_path_factory) -> Path:
    base = tmp_path_factory.mktemp("hf")
    root = checkout(FIXTURES / "hf_shaped", base / "tree")
    proc = dtl(root, "migrate", ".", "--series", "../series", "--author", AUTHOR, "--signoff")
    assert proc.returncode == 0, proc.stderr
    return base


def test_hf_series_follows_transformers_conventions(hf_series: Path):
    patches = sorted((hf_series / "series").glob("*.patch"))
    assert len(patches) == 4  # the helper, then bar, foo's generated file, foo's modular source
    for patch in patches:
        message = patch.read_text(encoding="utf-8").split("\n---\n", 1)[0]
        assert "What does this PR do?" in message and "Tests:" in message and "Results:" in message
        assert f"Signed-off-by: {AUTHOR}" in message  # --signoff: Hugging Face does not ask for it by default
        assert not re.search(r"DTL\d{3}", message)
        assert not re.search(r"Subject: \[PATCH \d+/\d+\] \[", message), "no [Tag] in Hugging Face titles"
    helper = patches[0].read_text(encoding="utf-8")
    # unittest style, the helper in the src/ layout
    assert "+++ b/src/transformers/layer_input_dtype.py" in helper and "class GetLayerInputDtypeTest(unittest.TestCase)" in helper
    # the series applies
    target = checkout(FIXTURES / "hf_shaped", hf_series / "target")
    for patch in patches:
        git(target, "am", "-q", str(patch))
        for rel in git(target, "show", "--name-only", "--format=", "HEAD").split():
            compile((target / rel).read_bytes(), rel, "exec")


def test_hf_series_says_what_to_regenerate(hf_series: Path):
    readme = (hf_series / "series" / "README.md").read_text(encoding="utf-8")
    pr = (hf_series / "series" / "PR.md").read_text(encoding="utf-8")
    flat = " ".join(readme.split())
    # The generated file and its modular source are both patched: regenerate and compare.
    assert ("src/transformers/models/foo/modeling_foo.py: generated from src/transformers/models/foo/modular_foo.py; "
            "regenerate it") in flat
    assert "utils/modular_model_converter.py --files_to_parse src/transformers/models/foo/modular_foo.py" in flat
    # The copy in bar follows its origin, patched too; the suppressed copy in baz is left: fix-copies.
    assert "src/transformers/models/bar/modeling_bar.py: a block copied from transformers.models.foo.modeling_foo.FooProjector; the origin is patched" in flat
    assert "src/transformers/models/baz/modeling_baz.py: a copy of" in flat and "make fix-copies" in flat
    assert "modular_model_converter" in " ".join(pr.split())
    # ... and the commit that patches the generated file says so itself.
    (generated_patch,) = [p for p in (hf_series / "series").glob("*.patch") if "b/src/transformers/models/foo/modeling_foo.py"
                          in p.read_text(encoding="utf-8")]
    message = " ".join(generated_patch.read_text(encoding="utf-8").split("\n---\n", 1)[0].split())
    assert "generated from src/transformers/models/foo/modular_foo.py; regenerate it" in message


def test_generated_file_whose_source_is_not_patched(tmp_path: Path):
    """A patch to a generated file alone is undone by regeneration: the note says to port it."""
    from dtype_lint.migrate.series import FileChange, Patch

    root = FIXTURES / "hf_shaped"
    rel = "src/transformers/models/foo/modeling_foo.py"
    data = (root / rel).read_bytes()
    notes = generated.analyze(root, [Patch("s", "b", [FileChange(rel, data, data + b"\n")])], scan_tree=False)
    assert [(n.kind, n.patched) for n in notes] == [("generated", False)]
    assert "must also go into src/transformers/models/foo/modular_foo.py" in notes[0].action


def test_generated_helper_test_runs_against_a_tree(tmp_path: Path):
    """The unit test a series adds, run through release_stubs against our own tree: passes with
    the helper, fails (cannot import) without it."""
    pytest.importorskip("torch")
    from dtype_lint.fix.helper_template import function_table, helper_source
    from dtype_lint.migrate import regression, release_stubs

    source = helper_source("get_layer_input_dtype", "torch")
    test = regression.helper_test(conventions.CONVENTIONS["generic"], "pkg/layer_input_dtype.py",
                                  "pkg.layer_input_dtype", "get_layer_input_dtype", "fp8_input",
                                  function_table(source, "get_layer_input_dtype"))
    tree = tmp_path / "tree"
    (tree / "tests").mkdir(parents=True)
    (tree / test.path).write_text(test.text)
    (tree / "pkg").mkdir()
    before = release_stubs.run_tests(tree, [test.path], package="pkg")
    assert before.returncode != 0 and "ModuleNotFoundError" in before.stdout + before.stderr
    (tree / "pkg" / "layer_input_dtype.py").write_text(source)
    after = release_stubs.run_tests(tree, [test.path], package="pkg")
    assert after.returncode == 0, after.stdout + after.stderr
    assert "16 passed" in after.stdout


def test_an_added_test_never_overwrites_a_file_of_the_tree(tmp_path: Path):
    from dtype_lint.migrate import series
    from dtype_lint.migrate.regression import HelperTest

    (tmp_path / "tests").mkdir()
    (tmp_path / "tests" / "test_h.py").write_text("# the project's own\n")
    style = series.Style(root=tmp_path)
    first = series._free_test_path(HelperTest("tests/test_h.py", "", "h", "m", ()), style, style.taken)
    second = series._free_test_path(HelperTest("tests/test_h.py", "", "h", "m", ()), style, style.taken)
    assert (first.path, second.path) == ("tests/test_h_2.py", "tests/test_h_3.py")
