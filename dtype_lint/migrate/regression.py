"""The regression test a patch adds, in the target project's own test layout and style.

An input-dtype helper (the shared one a series adds, or a project's own one a patch makes sound)
gets the pure unit test vLLM's fix #38771 lost in review: every weight storage a backend can
leave on a layer (fp16, bf16, fp32, fp8, a repacked int32, a packed uint8, int8, no `.weight`)
times the fp8-input flag, each case asserting the dtype the helper must return. The
expected values are the patched helper's own decisions, read from its code by the dtype
evaluator and checked there never to be an integer dtype; on the unpatched code the rows the
patch changes fail (and a test of a helper the series adds fails at import). A call site's patch
gets no generated test: exercising a model's forward needs the model built, which needs the
project's distributed state and weights; its Test Plan names the helper's test instead.

The test's layer carries the model dtype under the helper template's attribute (the registry's
`layer_attributes`), and its words for the backends and the platform's fp8 dtype are those of the
ecosystem that speaks for the helper's patches (the `series_words` with `CONVENTIONS` None).
"""

from __future__ import annotations

from dtype_lint.core.records import record
from dtype_lint.dtypes.evaluator import FP8, PARAMS, Table, alternatives
from dtype_lint.ecosystems.registry import default_plugin, model_dtype_attributes
from dtype_lint.migrate.conventions import Convention

# The helper's words (the ecosystem that speaks for every convention); the layer's model dtype
# attribute, and the test's constant for its value.
_WORDS = default_plugin("series_words")
_ATTRIBUTE = model_dtype_attributes()[0]
_CONSTANT = _ATTRIBUTE.upper()

# (id in the test, evaluator storage name, the expression a test builds it with)
STORAGES = (("fp16", "float16", "torch.float16"), ("bf16", "bfloat16", "torch.bfloat16"),
            ("fp32", "float32", "torch.float32"), ("fp8", FP8, None), ("int32", "int32", "torch.int32"),
            ("uint8", "uint8", "torch.uint8"), ("int8", "int8", "torch.int8"), ("no_weight", None, "None"))


@record(frozen=True)
class HelperTest:
    path: str  # in the target tree, posix
    text: str
    function: str
    module: str
    cases: tuple[tuple[str, bool, str], ...]  # (storage id, flag, "weight" | "params" | "keep")


def expected_cases(table: Table) -> tuple[tuple[str, bool, str], ...]:
    """Each storage x flag the helper decides definitely, as the test states it: the weight's own
    dtype, the layer's model dtype, or None (keep the activation as it is)."""
    cases = []
    for sid, storage, _expr in STORAGES:
        for flag in (False, True):
            value = table.get(_case(storage, flag))
            # "None or unknown `quant_method.input_dtype`": the unknown branch needs a backend's
            # own quant method, which a plain layer does not have; the test builds plain layers.
            known = [v for v in alternatives(value) if not v.startswith("unknown")]
            if len(known) != 1:
                continue
            v = known[0]
            if v == "None":
                cases.append((sid, flag, "keep"))
            elif storage is not None and v == f"torch.{storage}":
                cases.append((sid, flag, "weight"))
            elif v == f"torch.{PARAMS}":
                cases.append((sid, flag, "params"))
            else:
                raise ValueError(f"the helper returns {v} for {sid} (fp8 input {flag}): no test asserts that")
    return tuple(cases)


def _case(storage, flag):
    from dtype_lint.dtypes.evaluator import Case

    return Case(storage, flag)


def helper_test(convention: Convention, module_path: str, module: str, function: str, flag_name: str,
                table: Table) -> HelperTest:
    cases = expected_cases(table)
    path = convention.test_path(module_path, function)
    render = _unittest if convention.test_style == "unittest" else _pytest
    return HelperTest(path, render(convention, module, function, flag_name, cases), function, module, cases)


def _fp8_expr(convention: Convention) -> tuple[str, str]:
    """(import line, expression) for the platform's fp8 dtype: the convention's platform, where its
    ecosystem names one, else torch's e4m3."""
    return _WORDS.TEST_FP8_DTYPE.get(convention.name, ("", "torch.float8_e4m3fn"))


def _storages(convention: Convention) -> str:
    fp8 = _fp8_expr(convention)[1]
    return "\n".join(f'    "{sid}": {expr or fp8},' for sid, _s, expr in STORAGES)


_LAYER = '''

{constant} = torch.bfloat16  # the model dtype


class _Layer(torch.nn.Module):
    """A linear layer after weight loading: `weight` in the backend's storage (none at all for
    {no_weight} layers), `{attribute}` the model dtype."""

    def __init__(self, storage: torch.dtype | None):
        super().__init__()
        self.{attribute} = {constant}
        if storage is not None:
            self.weight = torch.nn.Parameter(torch.empty(4, 4, dtype=storage), requires_grad=False)


# {storages_note}
STORAGES = {{
{storages}
}}
'''


def _layer(convention: Convention) -> str:
    """The test's layer and its storages, in the words of the helper's ecosystem."""
    return _LAYER.format(constant=_CONSTANT, attribute=_ATTRIBUTE, no_weight=_WORDS.TEST_NO_WEIGHT_LAYERS,
                         storages_note=_WORDS.TEST_STORAGES_NOTE, storages=_storages(convention))


def _docstring(function: str) -> str:
    return (f'"""`{function}` must return a dtype the layer computes in, whatever storage a\n'
            "quantization backend left on the layer: never an integer dtype (the activation would be\n"
            "truncated), and no fp8 dtype for a layer that quantizes fp16/bf16 input itself.\n"
            '"""\n')


def _pytest(convention: Convention, module: str, function: str, flag_name: str, cases) -> str:
    fp8_import, _ = _fp8_expr(convention)
    rows = "\n".join(f'        ("{sid}", {flag}, "{want}"),' for sid, flag, want in cases)
    return (
        _docstring(function) + "\n"
        "import pytest\nimport torch\n\n"
        f"from {module} import {function}\n" + fp8_import
        + _layer(convention)
        + f'''

@pytest.mark.parametrize(
    ("storage", "{flag_name}", "expected"),
    [
{rows}
    ],
)
def test_{function.lstrip("_")}(storage: str, {flag_name}: bool, expected: str):
    layer = _Layer(STORAGES[storage])
    want = {{"weight": STORAGES[storage], "params": {_CONSTANT}, "keep": None}}[expected]
    got = {function}(layer, {flag_name})
    assert got == want
    assert got is None or got.is_floating_point
''')


def _unittest(convention: Convention, module: str, function: str, flag_name: str, cases) -> str:
    fp8_import, _ = _fp8_expr(convention)
    rows = "\n".join(f'    ("{sid}", {flag}, "{want}"),' for sid, flag, want in cases)
    cls = "".join(p.capitalize() for p in function.strip("_").split("_")) + "Test"
    return (
        _docstring(function) + "\n"
        "import unittest\n\nimport torch\n\n"
        f"from {module} import {function}\n" + fp8_import
        + _layer(convention)
        + f'''
CASES = [
{rows}
]


class {cls}(unittest.TestCase):
    def test_every_storage(self):
        for storage, {flag_name}, expected in CASES:
            with self.subTest(storage=storage, {flag_name}={flag_name}):
                layer = _Layer(STORAGES[storage])
                want = {{"weight": STORAGES[storage], "params": {_CONSTANT}, "keep": None}}[expected]
                got = {function}(layer, {flag_name})
                self.assertEqual(got, want)
                self.assertTrue(got is None or got.is_floating_point)
''')
