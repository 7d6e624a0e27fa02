"""A rewritten file is parsed by libcst once, and the cheaper name check still refuses what it must (#37).

The name check's libcst analysis reads the top-level imports and the functions a new variable is
assigned in, with the lines of everything else left out (not left empty: libcst's nodes for the
empty lines were most of its work on vLLM's modules). Its verdict is remembered by the text it
read, so a run that fixes the same text again (`migrate --series --group-by rule` repeats the
fixing run's text for a file fixed by one rule; an editor asks for the same fix twice) does not
parse it again. These tests hold both: one libcst parse per rewritten file, and the reduced
check refusing a fix whose added name is shadowed, unbound or collides in the touched scope.
"""

from __future__ import annotations

import uuid
from pathlib import Path

import pytest

libcst = pytest.importorskip("libcst")

from dtype_lint.api import fix_source  # noqa: E402
from dtype_lint.core.findings import Finding, Fix, Span  # noqa: E402
from dtype_lint.fix.scope_check import FixCheckError, verify_names  # noqa: E402

AUTHOR = "Ann Maintainer <ann@example.org>"


def _count_parses(monkeypatch) -> list[str]:
    """The texts libcst.parse_module is given from now on."""
    seen: list[str] = []
    original = libcst.parse_module

    def counting(source, *args, **kwargs):
        seen.append(source)
        return original(source, *args, **kwargs)

    monkeypatch.setattr(libcst, "parse_module", counting)
    return seen


# --- one libcst parse per rewritten file ------------------------------------------------------------

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"

MODEL = """\
# {marker}
import torch

from minillm.layers.linear import ColumnParallelLinear


class Block(torch.nn.Module):
    def __init__(self, quant_config=None):
        super().__init__()
        self.proj = ColumnParallelLinear(8, 8, quant_config=quant_config, prefix="proj")

    def forward(self, x):
        return self.proj(x.to(self.proj.weight.dtype))
"""


def _tiny_tree(root: Path) -> Path:
    """Our fixture project's layers, quant methods and helper, with one model file holding one
    fixable site, in a git repository (what `--series` runs on). The model file carries a comment
    of its own, so no earlier test in this process checked the same text."""
    import shutil

    from dtype_lint.migrate import series

    src = root / "src"
    shutil.copytree(FIXTURES / "project", src, ignore=shutil.ignore_patterns("attention", "models", "expected.txt"))
    (src / "minillm" / "model.py").write_text(MODEL.format(marker=uuid.uuid4().hex))
    return series.checkout(src, root / "tree")


def test_a_series_by_rule_parses_each_rewritten_file_with_libcst_once(tmp_path: Path, monkeypatch):
    """The fixing run checks the file's fixed text; the by-rule split fixes it again for its one
    rule and gets the same text: libcst parses it once (twice on 9b82479)."""
    from dtype_lint.core.config import load_config
    from dtype_lint.migrate.migration import migration_series

    tree = _tiny_tree(tmp_path)
    seen = _count_parses(monkeypatch)
    monkeypatch.chdir(tree)
    _result, patches, files = migration_series(load_config(tree), ".", str(tmp_path / "series"), "rule",
                                               proof=False, author=AUTHOR)
    rewritten = [c.path for p in patches for c in p.changes if c.before is not None and not c.test]
    assert rewritten == ["minillm/model.py"]
    assert files and "get_layer_input_dtype(self.proj" in "".join(Path(f).read_text() for f in files)
    assert len(seen) == 1, f"libcst parsed {len(seen)} texts for one rewritten file"


def test_fixing_the_same_text_again_does_not_parse_it_again(monkeypatch):
    """An editor's second request for the same fix: the same verdict, no second libcst parse."""
    seen = _count_parses(monkeypatch)
    text = (f"# {uuid.uuid4().hex}\nimport torch\nfrom vllm.model_executor.layers.linear import ColumnParallelLinear\n"
            "\n\nclass Attn(torch.nn.Module):\n    def __init__(self, quant_config, prefix: str):\n"
            "        super().__init__()\n"
            "        self.kv_b_proj = ColumnParallelLinear(8, 8, quant_config=quant_config, prefix=prefix)\n\n"
            "    def forward(self, x):\n        return x.to(self.kv_b_proj.weight.dtype)\n")
    first = fix_source(text, filename="m.py")
    second = fix_source(text, filename="m.py")
    assert first == second != text
    assert len(seen) == 1


# --- the reduced check refuses what the whole one did ----------------------------------------------


def _finding(*, scope="Block.forward", binds=("v",), local="h") -> Finding:
    return Finding("DTL001", "m", "t.py", Span(1, 1, 1, 2), scope=scope,
                   fix=Fix("d", True, (), (("m", "h"),), aliases=(local,), binds=binds))


# A module with much code the check leaves out around the touched method.
BEFORE = '''\
from m import h


def untouched(total):
    """A docstring.

    With an empty line."""
    result = total + 1
    return result


class Block:
    X = 1

    def other(self):
        return 3

    def forward(self, x):
        note = """keep

these lines"""
{body}        return x, note


def after(y):
    return y
'''

GOOD = '''        v = h(self.p, True)
        if v is not None:
            x = x.to(v)
'''


def _fixed(body: str) -> str:
    return BEFORE.format(body=body)


def test_the_normal_case_is_accepted_and_libcst_reads_only_the_touched_lines(monkeypatch):
    seen = _count_parses(monkeypatch)
    marker = f"# {uuid.uuid4().hex}\n"
    verify_names(marker + _fixed(""), marker + _fixed(GOOD), [_finding()])
    (read,) = seen
    assert "def forward(self, x):" in read and "x = x.to(v)" in read
    assert "keep\n\nthese lines" in read  # an empty line inside the touched function is the function's
    for left_out in ("def untouched", "With an empty line", "X = 1", "return 3", "def after"):
        assert left_out not in read, left_out
    assert read.count("\n\n") == 1  # the string's empty line only: the left-out lines are gone, not empty


@pytest.mark.parametrize("body, why", [
    # the new variable collides with one the fix did not add
    (GOOD + "        v = 2\n", "not assigned exactly once"),
    # the helper shadowed in the touched scope by a local
    ("        h = None\n" + GOOD, "binds `h` 2 times"),
    # ... by a parameter of a closure in it
    (GOOD + "        def inner(h):\n            return h\n", "binds `h` 2 times"),
    # the variable read outside the guard it was made for
    (GOOD + "        w = v\n", "outside the guard"),
    # the variable captured by a closure defined before it is assigned
    ("        k = lambda: v\n" + GOOD, "outside the guard"),
])
def test_a_fix_whose_name_is_shadowed_or_collides_in_the_touched_scope_is_refused(body: str, why: str):
    with pytest.raises(FixCheckError, match=why):
        verify_names(_fixed(""), _fixed(body), [_finding()])


def test_a_fix_whose_helper_is_unbound_is_refused():
    """The fix reads the helper, but its import is not there: bound 0 times."""
    fixed = _fixed(GOOD).replace("from m import h\n", "")
    with pytest.raises(FixCheckError, match="binds `h` 0 times"):
        verify_names(_fixed("").replace("from m import h\n", ""), fixed, [_finding()])


def test_a_remembered_libcst_verdict_is_the_verdict(monkeypatch):
    """The verdict libcst gave on a text is given again for that text without a parse: a refusal
    stays a refusal, an acceptance an acceptance."""
    from dtype_lint.fix import scope_check

    seen = _count_parses(monkeypatch)
    marker = f"# {uuid.uuid4().hex}\n"
    twice = marker + "from m import h\nfrom n import h\n"  # the helper's name bound by two imports
    helpers = frozenset({("m", "h", "h")})
    for _ in range(2):
        assert "binds `h` 2 times" in scope_check._libcst_problem(twice, helpers, frozenset(), False)
    once = marker + "from m import h\n"
    for _ in range(2):
        assert scope_check._libcst_problem(once, helpers, frozenset(), False) is None
    assert seen == [twice, once]


def test_a_remembered_verdict_does_not_hide_a_missing_libcst(monkeypatch):
    """Without libcst a fix cannot be checked, even one whose text this process checked before:
    the answer does not depend on what ran earlier (verify's harness hides libcst on the GPU
    machine and expects LibcstUnavailable; tests/test_verify.py)."""
    import sys

    from dtype_lint.fix.scope_check import LibcstUnavailable

    marker = f"# {uuid.uuid4().hex}\n"
    original, fixed = marker + _fixed(""), marker + _fixed(GOOD)
    verify_names(original, fixed, [_finding()])  # checked, and remembered
    monkeypatch.setitem(sys.modules, "libcst", None)
    with pytest.raises(LibcstUnavailable):
        verify_names(original, fixed, [_finding()])
