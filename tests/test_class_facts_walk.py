"""A method's class facts read its statements from one walk (`statements_and_repeated`): the
statements in `iter_statements`' order, and those a loop may run more than once, as the three
walks it replaced (and one more per loop) found them. The facts of its calls (a walk of every
node) are read only when asked for: an attribute's origins need none."""

from __future__ import annotations

import ast
from pathlib import Path

from parsed_sources import parsed

from dtype_lint.analysis.function_walk import nodes_of
from dtype_lint.analysis.index import class_facts
from dtype_lint.analysis.index.class_facts import iter_statements, statements_and_repeated
from dtype_lint.analysis.index.class_index import QuantizableLayerIndex, extract_header

ROOT = Path(__file__).resolve().parent.parent

# Every compound statement, loops inside and around the others, a nested def and class in a loop.
SAMPLE = '''
def f(self, xs):
    a = 1
    for x in xs:
        if x:
            self.layers.append(A())
        else:
            b = 2
        while x:
            try:
                c = 3
            except E as e:
                d = 4
            except F:
                pass
            else:
                g = 5
            finally:
                h = 6
        def inner():
            for y in xs:
                self.k.append(B())
        class Inner:
            z = 1
    else:
        self.tail.append(C())
    with open(p) as fh:
        match fh:
            case 1:
                self.m["k"] = D()
            case _:
                async def agen():
                    pass
    while True:
        for q in xs:
            self.n.extend([E()])
        break
    else:
        r = 7
'''


def _three_walks(body: list[ast.stmt]) -> tuple[list[ast.stmt], set[int]]:
    """What a method's facts computed before: iter_statements, and each loop's body walked again."""
    repeated = {id(inner) for loop in iter_statements(body)
                if isinstance(loop, (ast.For, ast.AsyncFor, ast.While)) for inner in iter_statements(loop.body)}
    return list(iter_statements(body)), repeated


def _functions(tree: ast.AST):
    return [node for node in ast.walk(tree) if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef))]


def test_one_walk_finds_what_three_walks_found_on_every_compound_statement():
    fn = _functions(ast.parse(SAMPLE))[0]
    statements, repeated = statements_and_repeated(fn.body)
    assert (statements, repeated) == _three_walks(fn.body)
    lines = {s.lineno: id(s) in repeated for s in statements}
    # Everything under the loops' bodies, the nested def and class statements (not their bodies);
    # not the loops themselves (at the top), the `for`'s `else` nor the `while True` loop's `else`.
    assert [line for line, looped in lines.items() if looped] == [5, 8, 6, 9, 10, 15, 13, 19, 17, 11, 20, 23,
                                                                  35, 36, 37]
    assert 21 not in lines and 24 not in lines  # the bodies of the nested def and class


def test_one_walk_finds_what_three_walks_found_on_the_package_functions():
    files = sorted((ROOT / "dtype_lint").rglob("*.py")) + sorted((ROOT / "rules").rglob("*.py"))
    checked = 0
    for path in files:
        for fn in _functions(parsed(path)):
            assert statements_and_repeated(fn.body) == _three_walks(fn.body), f"{path}:{fn.lineno}"
            checked += 1
    assert checked > 1000


CLASSES = '''
from proj.layers import LinearBase, MoE


class Method:
    def create_weights(self, layer, size):
        self.weight = Linear(size)
        if isinstance(layer, (LinearBase, MoE)):
            helper(lambda: self.quant_method.create_weights(self, size))

    @staticmethod
    def pick(layer):
        return isinstance(layer, Other)


class Plain:
    def __init__(self, x):
        self.x = Linear(x)
'''


def test_an_attributes_origins_walk_no_call_and_the_calls_still_say_what_they_said(monkeypatch):
    walked = []
    monkeypatch.setattr(class_facts, "nodes_of", lambda root, kind: walked.append(root.name) or
                        nodes_of(root, kind))
    header = extract_header(CLASSES, "proj.m", "proj/m.py", False)
    facts = class_facts.build_file_facts(ast.parse(CLASSES), "proj.m", "proj/m.py", False,
                                         QuantizableLayerIndex([header], [], []))
    method, plain = facts.classes["proj.m.Method"], facts.classes["proj.m.Plain"]
    assert [o.type_name for o in method.attrs["weight"]] == ["Linear"] and "x" in plain.attrs
    assert walked == []  # the attributes' facts read statements only
    # A call in a lambda counts (ast.walk's calls); a static method's do not.
    assert method.quant_root is not None and method.quant_root.line == 9
    assert method.dispatch == {"proj.layers.LinearBase", "proj.layers.MoE"}
    assert plain.quant_root is None and plain.dispatch == set()
    assert walked == ["create_weights", "__init__"]


LOCAL_CONTAINERS = '''
class Net:
    def __init__(self, n):
        layers = [Linear(1)]
        for _ in range(n):
            layers.append(Conv(2))
        heads = {"a": Linear(3)}
        self.layers = nn.ModuleList(layers)
        self.plain = nn.ModuleList()

    def forward(self, x):
        parts = [Linear(4)]
        parts.append(Conv(5))
        return parts
'''


def test_local_containers_slots_are_found_only_for_a_method_that_hands_one_to_self(monkeypatch):
    found = []
    real = class_facts._local_items
    monkeypatch.setattr(class_facts, "_local_items", lambda locals_, *rest: found.append(sorted(locals_)) or
                        real(locals_, *rest))
    header = extract_header(LOCAL_CONTAINERS, "proj.m", "proj/m.py", False)
    facts = class_facts.build_file_facts(ast.parse(LOCAL_CONTAINERS), "proj.m", "proj/m.py", False,
                                         QuantizableLayerIndex([header], [], []))
    items = facts.classes["proj.m.Net"].items
    assert {attr: [([o.type_name for o in i.origins], i.counted) for i in slots] for attr, slots in items.items()} \
        == {"layers": [(["Linear"], True), (["Conv"], False)]}
    assert found == [["heads", "layers"]]  # `__init__`'s locals, once; `forward` hands none
