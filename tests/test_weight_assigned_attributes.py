"""text_facts.weight_assigned_attributes: the attribute names a file may assign a value naming a
weight, by text. The storage model skips parsing a class whose file assigns no such name
(LayerResolver._may_store_weight), so the set must hold every name the code really assigns so:
checked against the parse, on generated statements and on every Python file of this repository."""

from __future__ import annotations

import ast
from pathlib import Path

from hypothesis import given, settings
from hypothesis import strategies as st

from dtype_lint.core.text_facts import may_weight_assign, weight_assigned_attributes

REPO = Path(__file__).resolve().parents[1]


def assigned_from_weight(text: str) -> set[str]:
    """What the parse says: attribute targets of assignments whose value's source names a weight
    word (the class facts' `assigned`, with the value as written). The value's text is cut from
    the UTF-8 lines by the node's offsets (`ast.get_source_segment` splits the whole text again
    for every node: minutes on a release tree)."""
    lines = text.encode("utf-8", "surrogatepass").splitlines(keepends=True)
    out = set()
    for node in ast.walk(ast.parse(text)):
        if not isinstance(node, (ast.Assign, ast.AnnAssign)) or node.value is None:
            continue
        targets = [t.attr for t in (node.targets if isinstance(node, ast.Assign) else [node.target])
                   if isinstance(t, ast.Attribute)]
        if not targets:
            continue
        v = node.value
        assert v.end_lineno is not None and v.end_col_offset is not None
        if v.lineno == v.end_lineno:
            value = lines[v.lineno - 1][v.col_offset:v.end_col_offset]
        else:
            value = b"".join([lines[v.lineno - 1][v.col_offset:], *lines[v.lineno:v.end_lineno - 1],
                              lines[v.end_lineno - 1][:v.end_col_offset]])
        if b"weight" in value or b"parameters" in value:
            out.update(targets)
    return out


def test_the_examples():
    text = (
        "class A:\n"
        "    def __init__(self, layer):\n"
        "        self.dtype = self.proj.weight.dtype\n"
        "        self.w: torch.Tensor = getattr(\n"
        "            layer,\n"
        "            'weight',\n"
        "        )\n"
        "        self.first = next(iter(layer.parameters())).dtype\n"
        "        self.scale = 1.0\n"
        "        self.count += weight_count\n"
        "        if self.flag == weight:\n"
        "            pass\n"
    )
    assert weight_assigned_attributes(text) == {"dtype", "w", "first"}
    assert weight_assigned_attributes("self.dtype = torch.float16\n") == frozenset()


def test_an_f_string_field_is_not_an_assignment():
    # `{x.dtype=}` prints the expression and its value: nothing is assigned (vLLM's assertion
    # messages about a weight's dtype made their whole files classes that may store one)
    for field in ("{w.dtype=}", "{w.dtype = }", "{w.dtype=!r}", "{w.dtype=:>8}"):
        assert weight_assigned_attributes(f'assert w.dtype == x, f"bad weight {field}"\n') == frozenset(), field
    assert weight_assigned_attributes('self.dtype = w.dtype; print(f"{weight.dtype=}")\n') == {"dtype"}


def test_a_statement_it_cannot_follow_counts():
    # a bracket inside a simple string is read past; a triple-quoted string is not followed
    followed = "self.x = f(\n    \"it's (\",\n    other,\n)\nself.y = layer.weight\n"
    assert weight_assigned_attributes(followed) == {"y"}
    unfollowed = "self.x = f(" + "'" * 3 + "\n(\n" + "'" * 3 + ", other)\nself.y = layer.weight\n"
    assert weight_assigned_attributes(unfollowed) == {"x", "y"}


STATEMENTS = st.sampled_from([
    "self.{n} = {v}\n", "self.{n}: T = {v}\n", "self.{n} = (\n    {v}\n)\n", "self.{n} = other.{n} = {v}\n",
    "self.{n} = f(\n    a,\n    {v},\n)\n", "self.{n} = [\n    1,  # ) note\n    {v},\n]\n",
    "self.{n} = {v} \\\n    + 1\n", "self.{n} += {v}\n", "if self.{n} == {v}:\n    pass\n",
    "x = self.{n}\n", "self.{n} = g('(', {v})\n",
])
VALUES = st.sampled_from(["self.proj.weight.dtype", "layer.weight", "getattr(m, 'weight')", "1",
                          "next(iter(m.parameters())).dtype", "torch.float16", "self.w[0]"])
NAMES = st.sampled_from(["dtype", "w", "proj_dtype", "scale"])


@settings(max_examples=300, deadline=None)
@given(st.lists(st.tuples(STATEMENTS, NAMES, VALUES), min_size=1, max_size=6))
def test_every_name_the_parse_finds_is_in_the_set(statements):
    text = "".join(template.format(n=name, v=value) for template, name, value in statements)
    assert assigned_from_weight(text) <= weight_assigned_attributes(text), text


PREFIXES = st.sampled_from(["", "x = 1\n", "def f(a: torch.dtype = w.dtype) -> None: ...\n", "self. dtype = layer.weight\n",
                            "a.b: c.dtype = layer.weight\n", "self.dtypes = layer.weight\n", "self.my_dtype = 1\n"])


@settings(max_examples=300, deadline=None)
@given(PREFIXES, st.lists(st.tuples(STATEMENTS, NAMES, VALUES), min_size=1, max_size=6), NAMES)
def test_the_one_name_search_answers_for_every_name_of_the_set(prefix, statements, asked):
    """may_weight_assign(text, name) holds for every name of weight_assigned_attributes(text)
    (the storage model and the gate ask it instead; it may hold for more names, never fewer)."""
    text = prefix + "".join(template.format(n=name, v=value) for template, name, value in statements)
    names = weight_assigned_attributes(text)
    for name in {*names, asked, "dtype"}:
        if name in names:
            assert may_weight_assign(text, name), (text, name)


def test_the_one_name_search_on_real_code(vllm_0271: Path):
    """Every name the full scan gives, in every file of vLLM 0.27.1 and this repository, and a
    few names it does not: the one-name search gives the same answers there (no name more)."""
    files = [*REPO.joinpath("dtype_lint").rglob("*.py"), *REPO.joinpath("fixtures").rglob("*.py"),
             *vllm_0271.rglob("*.py")]
    asked = 0
    for path in sorted(files):
        text = path.read_text(encoding="utf-8", errors="replace")
        names = weight_assigned_attributes(text)
        for name in {*names, "dtype", "weight", "w", "head_dtype"}:
            assert may_weight_assign(text, name) == (name in names), (path, name)
            asked += 1
    assert asked > 5000


def test_on_real_code(vllm_0271: Path):
    """Every file of this repository and of vLLM 0.27.1 (which assigns hundreds of attributes
    from weights, over continuation lines, in annotated and chained assignments)."""
    checked = 0
    files = [*REPO.joinpath("dtype_lint").rglob("*.py"), *REPO.joinpath("fixtures").rglob("*.py"),
             *vllm_0271.rglob("*.py")]
    for path in sorted(files):
        text = path.read_text(encoding="utf-8", errors="replace")
        if "weight" not in text and "parameters" not in text:
            continue  # nothing to assign from
        try:
            truth = assigned_from_weight(text)
        except (SyntaxError, ValueError):
            continue
        assert truth <= weight_assigned_attributes(text), path
        checked += bool(truth)
    assert checked > 100
