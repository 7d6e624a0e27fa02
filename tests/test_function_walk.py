"""The one walk per function (analysis/function_walk.py) and the tests on text that spare walks
(core/text_facts.py): each must conclude exactly what the walk it replaces concluded."""

from __future__ import annotations

import ast
import re
import textwrap

from dtype_lint.analysis.function_walk import FunctionWalk, nodes_of, parent_map, walk
from dtype_lint.analysis.index.class_facts import walk_function
from dtype_lint.core.source import SourceFile
from dtype_lint.core.text_facts import (
    attribute_pattern,
    callee_pattern,
    could_be_helper_shaped,
    function_text,
    may_define_top_level,
)
from dtype_lint.dtypes.evaluator import helper_shape

CODE = textwrap.dedent('''\
    import torch


    @decorate(getattr(x, "weight"))
    def forward(self, x, *, scale: float = 1.0, **kw) -> torch.Tensor:
        """Docstring."""
        w = self.proj.weight
        if w.dtype == torch.int32 and (n := x.shape[0]) > 1:
            x = x.to(w.dtype)
        for i, (a, b) in enumerate(kw.items()):
            x += a * b
        with torch.no_grad() as ctx:
            y = [v.to(self.proj.weight.dtype) for v in x if v is not None]

        def inner(z):
            return z.to(self.other.weight.dtype)

        class Local:
            attr = self.proj.weight

        fn = lambda t: t.to(w.dtype)
        try:
            match x:
                case [first, *rest]:
                    pass
                case {"k": value}:
                    pass
        except (ValueError, TypeError) as e:
            raise RuntimeError(f"{e!r:>10}") from e
        finally:
            del y
        return inner(x) if x is not None else -x


    async def stream(layer, params):
        async for chunk in params:
            await chunk
        return getattr(layer, "wei" "ght")
    ''')


def _functions(code: str):
    return [n for n in ast.walk(ast.parse(code)) if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))]


# Shared singletons (`Load()`, `Add()`...) have no one parent: the maps agree on every other node.
_SINGLETONS = (ast.expr_context, ast.operator, ast.unaryop, ast.cmpop, ast.boolop)


def test_nodes_parents_and_events_are_those_of_the_walks_they_replace():
    for fn in _functions(CODE):
        walk = FunctionWalk(fn)
        old = list(walk_function(fn))
        assert len(walk.nodes) == len(old) and all(a is b for a, b in zip(walk.nodes, old))
        parents = parent_map(fn)
        assert set(walk.parents) == set(parents)
        for node in ast.walk(fn):
            if not isinstance(node, _SINGLETONS):
                assert walk.parents.get(id(node)) is parents.get(id(node))
        for kinds in [(ast.Call,), (ast.Attribute, ast.Call), (ast.Compare,), (ast.expr,), (ast.Global,)]:
            assert walk.of(*kinds) == [n for n in old if isinstance(n, kinds)]
        assert nodes_of(fn, ast.Call) == [n for n in ast.walk(fn) if isinstance(n, ast.Call)]


def test_walk_and_parent_map_are_ast_walk_and_its_child_nodes_in_order():
    # Order matters: the guard engine keeps assignments, stores and constructions in walk order
    # (evidence names the first sites), and a shared `Load()` keeps the last parent written.
    tree = ast.parse(CODE)
    for root in [tree, *_functions(CODE)]:
        old = list(ast.walk(root))
        assert len(walk(root)) == len(old) and all(a is b for a, b in zip(walk(root), old))
        parents: dict[int, ast.AST] = {}
        for node in ast.walk(root):
            for child in ast.iter_child_nodes(node):
                parents[id(child)] = node
        new = parent_map(root)
        assert new.keys() == parents.keys() and all(new[k] is parents[k] for k in parents)


def test_the_walk_does_not_enter_nested_scopes_but_maps_their_parents():
    forward = _functions(CODE)[0]
    walk = FunctionWalk(forward)
    inner = next(n for n in ast.walk(forward) if isinstance(n, ast.FunctionDef) and n.name == "inner")
    lam = next(n for n in ast.walk(forward) if isinstance(n, ast.Lambda))
    local = next(n for n in ast.walk(forward) if isinstance(n, ast.ClassDef))
    # `def inner` is a statement of the body and the lambda a closure: walk_function enters both,
    # after the rest; not the methods of a class (none here: its body is a class attribute).
    assert inner in walk.nodes and inner.body[0] in walk.nodes
    assert lam in walk.nodes and lam.body in walk.nodes
    assert walk.nodes.index(lam) > walk.nodes.index(local)
    assert walk.parents[id(lam.body)] is lam
    assert walk.parents[id(forward.decorator_list[0])] is forward


def test_shape_test_on_text_never_refuses_a_helper_shaped_function():
    code = CODE + textwrap.dedent('''\

        def plain(layer, flag):
            return layer.params_dtype if flag else None


        def escaped(layer):
            return getattr(layer, "\\x77eight").dtype


        def nothing(layer):
            return layer.bias
        ''')
    source = SourceFile("m.py", code, "m")
    verdicts = {}
    for fn in _functions(code):
        text = function_text(source.lines, fn)
        if helper_shape(fn) is not None:
            assert could_be_helper_shaped(text), fn.name
        verdicts[fn.name] = could_be_helper_shaped(text)
    assert verdicts["plain"] and verdicts["escaped"] and verdicts["stream"]
    assert not verdicts["nothing"]
    assert could_be_helper_shaped("def f(ｌａｙｅｒ):\n    pass\n")  # not ASCII: the tree decides


def test_callee_pattern_finds_every_way_a_name_can_be_called():
    pattern = callee_pattern({"helper", "mod"})
    hits = [re.match(r"\w+", m.group(0)).group(0) for m in pattern.finditer(
        "helper(x)\n(helper)(x)\nhelper \\\n  (x)\nhelper  # why\n(x)\nmod.f(x)\nmod\n.f(x)\nhelpers(x)\n")]
    assert hits.count("helper") == 4 and hits.count("mod") == 2 and "helpers" not in hits
    assert callee_pattern(()) is None


def test_top_level_def_test():
    text = "import x\n\n@cache\ndef can_fuse(layer):\n    return True\n\nclass A:\n    def inner(self): ...\n"
    assert may_define_top_level(text, "can_fuse")
    assert not may_define_top_level(text, "inner")  # a method, not a top-level function
    assert may_define_top_level("async def go():\n    pass\n", "go")
    assert may_define_top_level("def \\\n  go():\n    pass\n", "go")  # continuation: not decided on text


def test_attribute_pattern_names_the_attribute_read():
    pattern = attribute_pattern({"ops", "m"})
    found = [(m.group(1), m.group(2)) for m in pattern.finditer(
        "ops.f(x)\n(ops) . \\\n g\nm  # c\n.h\nopsy.z\n")]
    assert found == [("ops", "f"), ("ops", "g"), ("m", "h")]


def test_child_fields_are_read_from_the_grammar_signature():
    from dtype_lint.core.ast_walk import child_fields as _child_fields

    assert _child_fields(ast.Name) == ("ctx",)  # `identifier id` holds no node
    assert _child_fields(ast.Attribute) == ("value", "ctx")
    assert _child_fields(ast.Constant) == ()

    class Unreadable(ast.expr):
        """Not a signature."""
        _fields = ("a", "b")

    assert _child_fields(Unreadable) == ("a", "b")  # every field, when it cannot be read


def test_own_and_all_nodes_are_the_walks_they_replace():
    from dtype_lint.analysis.function_walk import all_nodes, own_nodes

    def walk_function_as_it_was(fn):  # iter_child_nodes, statements popped from the end
        todo = list(fn.body)
        while todo:
            node = todo.pop()
            yield node
            todo.extend(c for c in ast.iter_child_nodes(node)
                        if not isinstance(c, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda, ast.ClassDef)))

    def closures_as_they_are(met):  # then the lambdas met, walked the same way (the last first), in rounds
        out = []
        while met:
            todo, met = list(met), []
            while todo:
                node = todo.pop()
                out.append(node)
                for c in ast.iter_child_nodes(node):
                    if isinstance(c, ast.Lambda):
                        met.append(c)
                    elif not isinstance(c, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                        todo.append(c)
        return out

    tree = ast.parse(CODE)
    for fn in _functions(CODE):
        old = list(walk_function_as_it_was(fn))
        old += closures_as_they_are([c for n in old for c in ast.iter_child_nodes(n) if isinstance(c, ast.Lambda)])
        assert [id(n) for n in walk_function(fn)] == [id(n) for n in old]
        assert len(own_nodes(fn)) == len(old) and all(a is b for a, b in zip(own_nodes(fn), old))
    for root in [tree, *_functions(CODE)]:
        walked = list(ast.walk(root))
        assert sorted(map(id, all_nodes(root))) == sorted(map(id, walked))


def test_the_walk_asks_isinstance_once_per_class():
    # `_depth_first` keeps, per set of kinds it does not enter, whether it enters each class met:
    # asked once per class, the same answer for every instance (vLLM 0.34.0: 23.82 -> 23.52 G).
    from dtype_lint.analysis import function_walk
    from dtype_lint.analysis.function_walk import own_nodes

    class Marked(ast.Name):  # a subclass answers as `isinstance` does
        pass

    fn = next(iter(_functions(CODE)))
    fn.body.append(ast.Expr(Marked(id="m", ctx=ast.Load())))
    fn.body.extend(ast.parse("f = lambda: z\nwith a:\n    def inner(y):\n        return y\n").body)
    nodes = own_nodes(fn)
    assert any(type(n) is Marked for n in nodes)
    assert any(isinstance(n, ast.Lambda) for n in nodes)  # a closure: entered after the walk
    entered = function_walk._ENTERED[function_walk._OTHER_SCOPES]
    assert entered[ast.Name] and entered[Marked] and entered[ast.Load]
    assert not entered[ast.Lambda] and not entered[ast.FunctionDef]


def _visit_as_it_was(body, class_q, prefix, module, lines, qual):
    """function_walk._visit before it kept each statement class's kind (an `isinstance` chain a statement)."""
    from dtype_lint.analysis.function_walk import _COMPOUND, _spans

    for node in body:
        if lines is not None and isinstance(node, (ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef, *_COMPOUND)) \
                and not _spans(node, lines):
            continue
        if isinstance(node, ast.ClassDef):
            q = f"{prefix}.{node.name}" if prefix else node.name
            inner = f"{qual}.{node.name}" if qual else node.name
            yield from _visit_as_it_was(node.body, f"{module}.{inner}" if module else inner, q, module, lines, inner)
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            q = f"{prefix}.{node.name}" if prefix else node.name
            yield node, class_q, q
            function_qual = f"{qual}.{node.name}" if qual else node.name
            yield from _visit_as_it_was(node.body, None, q, module, lines, f"{function_qual}.<locals>")
        elif isinstance(node, _COMPOUND):
            blocks = [getattr(node, f, None) or [] for f in ("body", "orelse", "finalbody")]
            blocks += [h.body for h in getattr(node, "handlers", None) or []]
            blocks += [c.body for c in getattr(node, "cases", None) or []]
            for block in blocks:
                yield from _visit_as_it_was(block, class_q, prefix, module, lines, qual)


def test_iter_functions_lists_what_it_listed_asking_each_statement_class_once():
    from pathlib import Path

    from dtype_lint.analysis import function_walk
    from dtype_lint.analysis.function_walk import iter_functions

    root = Path(__file__).resolve().parents[1]
    for path in sorted([*root.joinpath("dtype_lint").rglob("*.py"), *root.joinpath("fixtures").rglob("*.py")]):
        try:
            tree = ast.parse(path.read_text(encoding="utf-8"))
        except (SyntaxError, UnicodeError):
            continue
        marked = sorted({node.lineno for node in ast.walk(tree) if isinstance(node, ast.Attribute)
                         and node.attr in ("dtype", "weight")})
        for lines in (None, marked):
            got = [(id(fn), c, q) for fn, c, q in iter_functions(tree, "m", lines)]
            assert got == [(id(fn), c, q) for fn, c, q in _visit_as_it_was(tree.body, None, "", "m", lines, "")], path
    kinds = function_walk._STATEMENT_KINDS
    assert kinds[ast.Assign] == "other" and kinds[ast.ClassDef] == "class" and kinds[ast.If] == "blocks"
