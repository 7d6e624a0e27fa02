"""Trusted like a compiler, round three (#36): edits that cannot change a string, a helper that
cannot shadow or be shadowed, and a `--fix` whose work grows linearly with a file's sites.

Behaviour is judged by running the code: the module is imported before and after the fix and
called with a layer of every storage (packed int32, uint8, int8, fp8, no `.weight`, float16,
bfloat16, float32, complex). After the fix each site must do what the helper decides (the
input's own dtype when it says None), and on the float storages, where the old cast was right,
exactly what the original did. Every case here failed on 0.3's de0faa5.
"""

from __future__ import annotations

import importlib
import sys
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")

from cli_runner import dtl  # noqa: E402
from tiny_project import fresh_import, stub_project  # noqa: E402

MODEL = """\
import torch
from proj.layers import QLinear


class Attn(torch.nn.Module):
    def __init__(self, o_proj: QLinear):
        super().__init__()
        self.o_proj = o_proj

{body}
"""

# name -> weight dtype (None: the layer has no `.weight`, as AWQ/GPTQ layers)
STORAGES = {
    "int32": torch.int32, "uint8": torch.uint8, "int8": torch.int8, "fp8": torch.float8_e4m3fn,
    "missing": None, "float16": torch.float16, "bfloat16": torch.bfloat16, "float32": torch.float32,
    "complex64": torch.complex64,
}
FLOAT_STORAGES = ("float16", "bfloat16", "float32")





project = stub_project





def layer_of(root: Path, storage: str):
    layers = importlib.import_module("proj.layers")
    weight = STORAGES[storage]
    layer = layers.QLinear(weight or torch.float16)
    if weight is None:
        del layer.weight
    return layer


def outcome(call) -> str:
    """What `call()` gives: each result's dtype (or the value itself), or the exception raised."""
    try:
        result = call()
    except Exception as e:  # noqa: BLE001 - the exception is the outcome being compared
        return f"{type(e).__name__}: {e}"
    items = result if isinstance(result, (list, tuple)) else [result]
    return repr([getattr(r, "dtype", r) for r in items])


def run_forward(root: Path, *args) -> dict[str, str]:
    """`Attn(layer).forward(torch.zeros(2), *args)` for a layer of each storage."""
    mod = fresh_import(root)
    out = {}
    for storage in STORAGES:
        attn = mod.Attn(layer_of(root, storage))
        out[storage] = outcome(lambda attn=attn: attn.forward(torch.zeros(2), *args))
    return out


def helper_decides(root: Path, extra: tuple = ()) -> dict[str, str]:
    """What a fixed site must give per storage: the created helper's dtype, else the input's
    (float32), then whatever else the forward returns (`extra`)."""
    helper = fresh_import(root, "proj.dtypes").get_layer_input_dtype
    out = {}
    for storage in STORAGES:
        dtype = helper(layer_of(root, storage), True)
        out[storage] = repr([dtype or torch.float32, *extra])
    return out


def fix(root: Path, *extra: str):
    return dtl(root, "check", "--fix", "--no-cache", "--output-format", "concise", *extra)


def assert_fixed_as_the_helper_decides(root: Path, before: dict[str, str], proc, extra: tuple = ()) -> str:
    fixed = (root / "proj/model.py").read_text(encoding="utf-8")
    assert "Traceback" not in proc.stderr and "DTL901" not in proc.stdout, proc.stdout + proc.stderr
    assert "get_layer_input_dtype(" in fixed, fixed
    after = run_forward(root)
    assert after == helper_decides(root, extra), fixed
    assert {s: after[s] for s in FLOAT_STORAGES} == {s: before[s] for s in FLOAT_STORAGES}, fixed
    return fixed


# --- A. re-indentation and wrapping never reach inside a string -----------------------------------

# Each: a forward whose cast statement continues a string literal onto its next lines. 0.3 put the
# statement under `if v is not None:` and indented every continuation line, the string's too:
# `"hidden_\<newline>states"` became `"hidden_    states"` and the lookup raised KeyError on
# every storage (only triple-quoted strings were spared).
STRING_SITES = {
    "backslash-in-a-string": '''\
    def forward(self, x):
        cache = {"hidden_states": x}
        cache["hidden_\\
states"] = cache["hidden_\\
states"].to(self.o_proj.weight.dtype)
        return cache["hidden_states"]
''',
    "bytes-single-quoted": '''\
    def forward(self, x):
        cache = {b'hidden_states': x}
        cache[b'hidden_\\
states'] = cache[b'hidden_\\
states'].to(self.o_proj.weight.dtype)
        return cache[b'hidden_states']
''',
    "raw-string": '''\
    def forward(self, x):
        cache = {"hidden_\\\\\\nstates": x}
        cache[r"hidden_\\
states"] = cache[r"hidden_\\
states"].to(self.o_proj.weight.dtype)
        return cache["hidden_\\\\\\nstates"]
''',
    "f-string": '''\
    def forward(self, x):
        part = "states"
        cache = {"hidden_states": x}
        cache[f"hidden_\\
{part}"] = cache[f"hidden_\\
{part}"].to(self.o_proj.weight.dtype)
        return cache["hidden_states"]
''',
    # The alias form guards the cast the same way.
    "alias-form": '''\
    def forward(self, x):
        w = self.o_proj.weight.dtype
        cache = {"hidden_states": x}
        cache["hidden_\\
states"] = cache["hidden_\\
states"].to(w)
        return cache["hidden_states"]
''',
}


@pytest.mark.parametrize("case", list(STRING_SITES))
def test_guarding_a_cast_never_reindents_a_line_inside_a_string(tmp_path: Path, case: str):
    root = project(tmp_path, MODEL.format(body=STRING_SITES[case]))
    before = run_forward(root)
    assert all("KeyError" not in v for v in before.values()), before
    assert_fixed_as_the_helper_decides(root, before, fix(root))


def test_a_continuation_line_outside_a_triple_quoted_string_is_still_indented(tmp_path: Path):
    """0.3 skipped every continuation line of a statement holding a triple-quoted string; the
    tokenizer tells the string's lines from the others, which move into the new block."""
    body = '''\
    def forward(self, x):
        cache = {"""a
b""": x}
        cache["""a
b"""] = cache["""a
b"""].to(
            self.o_proj.weight.dtype
        )
        return cache["""a
b"""]
'''
    root = project(tmp_path, MODEL.format(body=body))
    before = run_forward(root)
    fixed = assert_fixed_as_the_helper_decides(root, before, fix(root))
    lines = fixed.splitlines()
    assert lines.count('b"""] = cache["""a') == 1 and lines.count('b"""].to(') == 1, fixed  # the string's own
    assert "                o_proj_input_dtype" in lines and "            )" in lines, fixed  # moved in


def test_a_comment_like_line_of_a_string_above_an_alias_is_not_deleted_with_it(tmp_path: Path):
    """The idiom form deletes its alias with the comment lines right above it; 0.3 took a line
    of a triple-quoted string that starts with `#` for one, and the file no longer parsed."""
    body = '''\
    def forward(self, x, use_fp8=True):
        note = """
# not a comment"""
        w = self.o_proj.weight.dtype if hasattr(self.o_proj, "weight") else self.o_proj.params_dtype
        if (use_fp8 or w != torch.float8_e4m3fn) and w != torch.uint8:
            x = x.to(self.o_proj.weight.dtype)
        return x, note
'''
    root = project(tmp_path, MODEL.format(body=body))
    before = run_forward(root)
    proc = fix(root)
    fixed = (root / "proj/model.py").read_text(encoding="utf-8")
    assert "DTL901" not in proc.stdout and "get_layer_input_dtype(" in fixed, proc.stdout + fixed
    assert '# not a comment"""' in fixed
    after = run_forward(root)
    assert after == helper_decides(root, ("\n# not a comment",)), fixed
    assert {s: after[s] for s in FLOAT_STORAGES} == {s: before[s] for s in FLOAT_STORAGES}


def test_wrapping_leaves_rows_inside_strings_and_still_wraps_the_added_line():
    """0.3 wrapped every long added row as if it were a statement: a row of a triple-quoted
    string changed the module's AST, so no row was wrapped at all. Only whole logical lines, by
    the tokenizer, are wrapped now."""
    from dtype_lint.fix.formatting import wrap_long_lines

    original = 'def f(x):\n    return x\n'
    long_call = "    y = some_function_name(first_argument_value, second_argument_value, third_argument)\n"
    string_row = "    (this row of the string is long, ends in a bracket and is new, not a statement)\n"
    text = 'def f(x):\n    doc = """\n' + string_row + '"""\n' + long_call + '    return x\n'
    wrapped = wrap_long_lines(original, text, 79)
    assert string_row in wrapped, wrapped
    assert long_call not in wrapped and "    y = some_function_name(\n" in wrapped, wrapped


# --- B. the helper cannot shadow or be shadowed -------------------------------------------------

SITE = MODEL.format(body="""\
    def forward(self, x):
        x = x.to(self.o_proj.weight.dtype)
        return x
""")


@pytest.mark.parametrize("helper,template", [
    ("proj.dtypes:getattr", "torch"), ("proj.dtypes:torch", "torch"), ("proj.dtypes:_FP8_DTYPES", "torch"),
    ("proj.dtypes:frozenset", "torch"), ("proj.dtypes:current_platform", "vllm"), ("proj.dtypes:weight_dtype", "vllm"),
])
def test_a_helper_named_like_a_name_its_template_uses_is_refused(tmp_path: Path, helper: str, template: str):
    """0.3 created `def getattr(layer, fp8_input)` (or `torch`, or `_FP8_DTYPES`), which shadowed
    what its own body calls: every fixed site raised."""
    pyproject = (f'[tool.dtype-lint]\nquantizable = ["proj.layers.QLinear"]\nhelper = "{helper}"\n'
                 f'helper-template = "{template}"\n')
    root = project(tmp_path, SITE, pyproject=pyproject)
    before = run_forward(root)
    proc = fix(root)
    name = helper.split(":")[1]
    assert proc.returncode == 2, proc.stdout + proc.stderr
    message = proc.stderr.strip().splitlines()
    assert len(message) == 1 and f"`{name}`" in message[0] and "Traceback" not in proc.stderr, proc.stderr
    assert (root / "proj/model.py").read_text(encoding="utf-8") == SITE and not (root / "proj/dtypes.py").exists()
    assert run_forward(root) == before


def test_the_refused_names_come_from_the_template_text():
    from dtype_lint.fix.helper_template import helper_source, template_names

    for template in ("vllm", "torch"):
        names = template_names(template)
        assert {"torch", "getattr", "layer", "fp8_input", "weight_dtype"} <= names
        text = helper_source("get_layer_input_dtype", template)
        assert all(name in text for name in names) and "get_layer_input_dtype" not in names
    assert "_FP8_DTYPES" in template_names("torch") and "current_platform" in template_names("vllm")


OTHERS_OWN = """\
def get_layer_input_dtype(layer, fp8_input):
    return "the other module's own"


from proj.model import *  # noqa: E402,F403


def use():
    return get_layer_input_dtype(None, True)
"""


@pytest.mark.parametrize("layout", ["direct", "through-a-chain", "under-a-try"])
def test_the_helper_name_never_replaces_a_star_importers_own(tmp_path: Path, layout: str):
    """0.3 added `from proj.dtypes import get_layer_input_dtype` to proj/model.py, and
    `from proj.model import *` in another module then replaced that module's own function.
    A star import nested in a compound statement counts too (import_graph reads statements only)."""
    nested = OTHERS_OWN.replace("from proj.model import *  # noqa: E402,F403\n",
                                "try:\n    from proj.model import *  # noqa: F403\nexcept ImportError:\n    pass\n")
    extra = ({"proj/other.py": OTHERS_OWN} if layout == "direct" else
             {"proj/other.py": nested} if layout == "under-a-try" else
             {"proj/mid.py": "from proj.model import *  # noqa: F403\n",
              "proj/other.py": OTHERS_OWN.replace("from proj.model import", "from proj.mid import")})
    root = project(tmp_path, SITE, extra)
    before = outcome(lambda: fresh_import(root, "proj.other").use())
    assert before == repr(["the other module's own"])
    proc = fix(root)
    assert "Traceback" not in proc.stderr
    assert outcome(lambda: fresh_import(root, "proj.other").use()) == before, (root / "proj/model.py").read_text()
    assert "DTL901" in proc.stdout and "proj.other" in proc.stdout, proc.stdout


def test_a_module_whose_all_leaves_the_helper_out_is_fixed_for_a_star_importer(tmp_path: Path):
    root = project(tmp_path, '__all__ = ["Attn"]\n' + SITE, {"proj/other.py": OTHERS_OWN})
    before = run_forward(root)
    assert_fixed_as_the_helper_decides(root, before, fix(root))
    assert outcome(lambda: fresh_import(root, "proj.other").use()) == repr(["the other module's own"])


# Each: a function that reads its own locals. 0.3 added `o_proj_input_dtype` (or deleted the
# idiom's alias), and what the function returned changed with it.
FRAME_READERS = {
    "locals": ("""\
    def forward(self, x):
        x = x.to(self.o_proj.weight.dtype)
        return x, sorted(locals())
""", (["self", "x"],)),
    "vars": ("""\
    def forward(self, x):
        x = x.to(self.o_proj.weight.dtype)
        return x, sorted(vars())
""", (["self", "x"],)),
    "eval": ("""\
    def forward(self, x):
        x = x.to(self.o_proj.weight.dtype)
        return x, eval("len(dir())")
""", (2,)),
    "exec": ("""\
    def forward(self, x):
        x = x.to(self.o_proj.weight.dtype)
        found = {}
        exec("names = sorted(locals())", None, found)
        return x, len(locals())
""", (3,)),
    "alias": ("""\
    def forward(self, x):
        w = self.o_proj.weight.dtype
        x = x.to(w)
        return x, sorted(locals())
""", (["self", "w", "x"],)),
}


@pytest.mark.parametrize("case", list(FRAME_READERS))
def test_a_function_that_reads_its_locals_gets_no_new_variable(tmp_path: Path, case: str):
    body, extra = FRAME_READERS[case]
    root = project(tmp_path, MODEL.format(body=body))
    before = run_forward(root)
    proc = fix(root)
    fixed = (root / "proj/model.py").read_text(encoding="utf-8")
    assert "_input_dtype =" not in fixed and "get_layer_input_dtype(" in fixed, fixed
    after = run_forward(root)
    # The helper's dtype (the input's when it says None) and the very locals the original saw;
    # the alias form's alias, which the expression form leaves, still reads `.weight` first.
    expected = helper_decides(root, extra)
    if case == "alias":
        expected["missing"] = before["missing"]
    assert after == expected, fixed
    assert {s: after[s] for s in FLOAT_STORAGES} == {s: before[s] for s in FLOAT_STORAGES}
    assert "Traceback" not in proc.stderr


def test_the_idiom_in_a_function_that_reads_its_locals_keeps_its_alias(tmp_path: Path):
    body = """\
    def forward(self, x, use_fp8=True):
        w = self.o_proj.weight.dtype if hasattr(self.o_proj, "weight") else self.o_proj.params_dtype
        if (use_fp8 or w != torch.float8_e4m3fn) and w != torch.uint8:
            x = x.to(self.o_proj.weight.dtype)
        return x, sorted(vars())
"""
    root = project(tmp_path, MODEL.format(body=body))
    before = run_forward(root)
    proc = fix(root)
    fixed = (root / "proj/model.py").read_text(encoding="utf-8")
    assert "Traceback" not in proc.stderr and "_input_dtype =" not in fixed, fixed
    after = run_forward(root)
    assert all(after[s].endswith("['self', 'use_fp8', 'w', 'x']]") for s in STORAGES if "Error" not in before[s]), after
    assert {s: after[s] for s in FLOAT_STORAGES} == {s: before[s] for s in FLOAT_STORAGES}


# --- C. the work of --fix grows linearly with a file's sites --------------------------------------

def _sites_module(count: int) -> str:
    methods = "".join(f"\n    def forward_{i}(self, x):\n        x = x.to(self.o_proj.weight.dtype)\n        return x\n"
                      for i in range(count))
    return ("import torch\nfrom vllm.model_executor.layers.linear import RowParallelLinear\n\n\n"
            "class Attn(torch.nn.Module):\n    def __init__(self, o_proj: RowParallelLinear):\n"
            "        super().__init__()\n        self.o_proj = o_proj\n" + methods)


def _count_calls(monkeypatch, owner, name: str, counter: list[int]) -> None:
    original = getattr(owner, name)

    def counted(*args, **kwargs):
        counter[0] += 1
        return original(*args, **kwargs)

    monkeypatch.setattr(owner, name, counted)


def test_one_round_of_edits_compares_each_edit_with_its_neighbours_only(monkeypatch):
    """0.3 tested each fix's edits against every edit accepted before it (`in` on a list, then
    `_overlaps` pairwise): comparisons grew with the square of the sites."""
    from dtype_lint.core.findings import Edit, Finding, Fix, Span
    from dtype_lint.fix import fixer

    def comparisons(count: int) -> tuple[int, str]:
        text = "".join(f"x{i} = x{i}.to(w)\n" for i in range(count))
        findings, offset = [], 0
        for i in range(count):
            line = f"x{i} = x{i}.to(w)\n"
            arg = offset + line.index("(w)") + 1
            edits = (Edit(offset, offset, "if v:\n    "), Edit(arg, arg + 1, "v"))
            findings.append(Finding("DTL001", "m", "t.py", Span(i + 1, 1, i + 1, 2), scope=f"f{i}",
                                    fix=Fix("d", True, edits, (), binds=())))
            offset += len(line)
        counter = [0]
        with monkeypatch.context() as patch:
            _count_calls(patch, Edit, "__eq__", counter)
            _count_calls(patch, fixer, "_overlaps", counter)
            new_text, applied = fixer.apply_edits(text, findings)
        assert len(applied) == count and new_text.count("if v:\n    x") == count
        return counter[0], new_text

    small, _ = comparisons(200)
    large, _ = comparisons(800)
    assert large <= 4.5 * max(small, 1), (small, large)


def test_the_name_check_looks_each_new_variable_up_once(monkeypatch):
    """0.3's check scanned every scope's every use for each new variable; every fixed function
    names its variable alike (`o_proj_input_dtype`), so the scan grew with the square of the sites."""
    pytest.importorskip("libcst")
    from libcst.metadata import scope_provider

    from dtype_lint.api import make_config
    from dtype_lint.fix import fixer
    from dtype_lint.run.pipeline import fix_one_text

    config = make_config({"helper": "proj.dtypes:get_layer_input_dtype"})
    looked_up = {}
    for count in (40, 160):
        counter = [0]
        with monkeypatch.context() as patch:
            original = scope_provider.Access.referents

            def referents(self, original=original, counter=counter):
                counter[0] += 1
                return original.fget(self)

            patch.setattr(scope_provider.Access, "referents", property(referents))
            calls = [0]
            _count_calls(patch, fixer, "verify_names", calls)
            outcome = fix_one_text(_sites_module(count), "m.py", config, False)
        assert not outcome.error and outcome.text.count("get_layer_input_dtype(self.o_proj, True)") == count
        assert calls[0] == 1
        looked_up[count] = counter[0]
    assert looked_up[160] <= 4.5 * looked_up[40], looked_up


def test_the_analysis_of_a_file_does_work_linear_in_its_functions():
    """0.3 decided a function's exemption by testing every function before it for nesting, and
    a node's scope by testing every function's span: each grew with the square of a file's
    functions (a 100,000-function module took minutes). Measured as the lines rule.py executes
    (a trace of that file only), which count loop iterations as well as calls."""
    import os

    from dtype_lint import rule
    from dtype_lint.api import check_source

    settings = {"helper": "proj.dtypes:get_layer_input_dtype"}
    rule_file = os.path.normcase(rule.__file__)

    def lines_run(count: int) -> int:
        counter = [0]

        def local(frame, event, arg):
            if event == "line":
                counter[0] += 1
            return local

        def tracer(frame, event, arg):
            return local if os.path.normcase(frame.f_code.co_filename) == rule_file else None

        source = _sites_module(count)
        sys.settrace(tracer)
        try:
            findings = check_source(source, filename="m.py", settings=settings)
        finally:
            sys.settrace(None)
        assert len([f for f in findings if f.code == "DTL001"]) == count
        return counter[0]

    check_source(_sites_module(2), filename="m.py", settings=settings)  # imports and caches warm
    small, large = lines_run(50), lines_run(200)  # a quadratic walk gives 16x, a linear one 4x
    assert large <= 4.5 * small, (small, large)


_PEP701_SCRIPT = """\
import ast, sys
from dtype_lint.fix.string_lines import code_columns, rows_starting_in_strings, single_row_statements
src = 'd = {"hidden_states": 1}\\nx = f"{d["hidden_\\\\\\nstates"]}"\\ny = f\\"\\"\\"{\\n1}\\n\\"\\"\\"\\nz = 1\\n'
ast.parse(src)
assert rows_starting_in_strings(src) == {3, 5, 6}, rows_starting_in_strings(src)
assert single_row_statements(src) == {1, 7}, single_row_statements(src)
assert code_columns('f(f"{d["#"]}", 1)  # c') == ([0, 1, 13, 14, 15, 16, 17, 18], 19)
print("ok")
"""


@pytest.mark.parametrize("version", ["3.12", "3.13"])
def test_nested_f_strings_of_python_3_12_are_strings_to_the_edits(version: str):
    """From 3.12 an f-string is many tokens (PEP 701) and may nest strings of its own quotes,
    continued by a backslash-newline: a line starting inside one is still inside a string."""
    import shutil
    import subprocess

    # On PATH, or installed by pyenv (whose shim answers only for the selected versions).
    candidates = [shutil.which(f"python{version}")] + sorted(
        str(p) for p in (Path.home() / ".pyenv" / "versions").glob(f"{version}.*/bin/python"))
    python = next((c for c in candidates if c and subprocess.run(
        [c, "-c", "import sys; assert sys.version_info >= (3, 12)"], capture_output=True).returncode == 0), None)
    if python is None:
        pytest.skip(f"no python{version} here: the tokenizer of that version cannot be asked")
    root = Path(__file__).resolve().parents[1]
    proc = subprocess.run([python, "-c", _PEP701_SCRIPT], capture_output=True, text=True, cwd=root,
                          env={"PYTHONPATH": str(root), "PATH": "/usr/bin:/bin"}, timeout=120)
    assert proc.stdout.strip() == "ok", proc.stdout + proc.stderr
