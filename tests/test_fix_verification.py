"""A fix is verified, not assumed (#8): the names a fix introduces resolve to what it meant.

Each case puts a name in the way of the fix (a local, a parameter, a module-level function, an
import, a star import, a `global`...). The fix must still be right: the fixed module is imported
and run with torch, on a layer whose weight is packed int32 (the input must become the layer's
params_dtype, bf16) and one whose weight is fp16 (the input must become fp16). When the planner
cannot find a safe name the site is left with a reason; the libcst check (fixcheck.py) is
tested on its own with fixes that were wrong on purpose. A fix that imports the helper from
outside the file's package layout is refused with DTL901.
"""

from __future__ import annotations

import importlib
import sys
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")

from cli_runner import dtl  # noqa: E402
from tiny_project import STUB_LAYERS, STUB_PYPROJECT  # noqa: E402

from dtype_lint.core.findings import Edit, Finding, Fix, Span  # noqa: E402
from dtype_lint.fix.fixer import fix_text  # noqa: E402
from dtype_lint.fix.scope_check import FixCheckError, verify_names  # noqa: E402

# The runtime stub project (a layer whose weight dtype the test picks) is shared: tiny_project.py.
PYPROJECT, LAYERS = STUB_PYPROJECT, STUB_LAYERS

# A helper of the same name elsewhere, deciding something else (float64): if the fixed code
# called it, the result would show.
OTHER = "import torch\n\n\ndef get_layer_input_dtype(layer, fp8_input):\n    return torch.float64\n"

HEAD = "import torch\n{imports}\nfrom proj.layers import QLinear\n\n{before}\n\n"
CLASS = """\
class Attn(torch.nn.Module):
    def __init__(self, kv_b_proj: QLinear):
        super().__init__()
        self.kv_b_proj = kv_b_proj

    def forward(self, x{params}):
{prologue}        x = x.to(self.kv_b_proj.weight.dtype)
{epilogue}        return x
"""


def attn(imports="", before="", params="", prologue="", epilogue="", after="") -> str:
    return HEAD.format(imports=imports, before=before) + CLASS.format(
        params=params, prologue=prologue, epilogue=epilogue) + after


def project(root: Path, attn_text: str, extra: dict[str, str] | None = None) -> Path:
    files = {"pyproject.toml": PYPROJECT, "proj/__init__.py": "", "proj/layers.py": LAYERS,
             "proj/other.py": OTHER, "proj/attn.py": attn_text, **(extra or {})}
    for rel, text in files.items():
        p = root / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(text, encoding="utf-8")
    return root


def imported(root: Path, module: str = "proj.attn"):
    """Import `module` from the fixed project, fresh."""
    for name in [m for m in sys.modules if m == "proj" or m.startswith("proj.")]:
        del sys.modules[name]
    sys.path.insert(0, str(root))
    try:
        return importlib.import_module(module)
    finally:
        sys.path.remove(str(root))
        importlib.invalidate_caches()


def forward_dtypes(root: Path, **kwargs) -> tuple:
    mod = imported(root)
    layers = importlib.import_module("proj.layers")
    out = []
    for weight in (torch.int32, torch.float16):
        result = mod.Attn(layers.QLinear(weight)).forward(torch.zeros(2), **kwargs)
        out.append(result.dtype if isinstance(result, torch.Tensor) else tuple(r.dtype for r in result))
    return tuple(out)


def fix_and_check(root: Path) -> str:
    """--fix exits 0, the file compiles, a second run finds nothing; returns the fixed text."""
    proc = dtl(root, "check", "--fix", "--no-cache", "--output-format", "concise")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    text = (root / "proj/attn.py").read_text()
    compile(text, "attn.py", "exec")
    again = dtl(root, "check", "--no-cache", "--output-format", "concise")
    assert again.returncode == 0, again.stdout
    return text


# name in the way -> (attn.py text, what the fixed text must show)
SHADOWS = {
    "local": (attn(prologue="        get_layer_input_dtype = 3\n"), "as _get_layer_input_dtype"),
    "local-after-the-site": (attn(epilogue="        get_layer_input_dtype = 3\n"), "as _get_layer_input_dtype"),
    # A fullwidth `ｇ` is `g` to the parser (NFKC): the text never spells the name, the tree binds it.
    "local-spelled-in-fullwidth": (attn(prologue="        \uff47et_layer_input_dtype = 3  # \u2014\n"),
                                   "as _get_layer_input_dtype"),
    "parameter": (attn(params=", get_layer_input_dtype=None"), "as _get_layer_input_dtype"),
    "module-function": (attn(after="\n\ndef get_layer_input_dtype(layer, fp8_input):\n    return None\n"),
                        "as _get_layer_input_dtype"),
    "other-import": (attn(imports="from proj.other import get_layer_input_dtype"), "as _get_layer_input_dtype"),
    "star-import": (attn(imports="from proj.other import *"), "as _get_layer_input_dtype"),
    "import-in-function": (attn(epilogue="        from proj.other import get_layer_input_dtype\n"),
                           "as _get_layer_input_dtype"),
    "except-name": (attn(prologue="        try:\n            pass\n        except Exception as get_layer_input_dtype:\n"
                                  "            pass\n"), "as _get_layer_input_dtype"),
    "nested-def": (attn(prologue="        def get_layer_input_dtype():\n            return 0\n"),
                   "as _get_layer_input_dtype"),
    "global-statement": (attn(before="get_layer_input_dtype = None",
                              prologue="        global get_layer_input_dtype\n"), "as _get_layer_input_dtype"),
    "alias-taken-too": (attn(before="_get_layer_input_dtype = None",
                             prologue="        get_layer_input_dtype = 3\n"), "as _get_layer_input_dtype_2"),
    "variable-name-local": (attn(prologue="        kv_b_proj_input_dtype = 'mine'\n",
                                 epilogue="        assert kv_b_proj_input_dtype == 'mine'\n"),
                            "kv_b_proj_input_dtype_2 = get_layer_input_dtype("),
    "variable-name-global": (attn(before="kv_b_proj_input_dtype = 'module'",
                                  epilogue="        assert kv_b_proj_input_dtype == 'module'\n"),
                             "kv_b_proj_input_dtype_2 = get_layer_input_dtype("),
    "variable-name-declared-global": (attn(before="kv_b_proj_input_dtype = 'module'",
                                           prologue="        global kv_b_proj_input_dtype\n"),
                                      "kv_b_proj_input_dtype_2 = get_layer_input_dtype("),
    "variable-name-unused-global": (attn(before="kv_b_proj_input_dtype = None"),
                                    "kv_b_proj_input_dtype = get_layer_input_dtype("),
}


@pytest.mark.parametrize("case", list(SHADOWS))
def test_a_fix_resolves_to_the_helper_whatever_is_in_the_way(tmp_path: Path, case: str):
    text, expect = SHADOWS[case]
    root = project(tmp_path, text)
    fixed = fix_and_check(root)
    assert expect in fixed
    if "as _get_layer_input_dtype" in expect:
        assert "from proj.dtypes import get_layer_input_dtype as _get_layer_input_dtype" in fixed
    assert forward_dtypes(root) == (torch.bfloat16, torch.float16)


def test_an_existing_aliased_import_of_the_helper_is_reused(tmp_path: Path):
    # The project's helper must agree with the cast on unpacked storage, or the fix is not safe (#36).
    agreeing = ("import torch\n\n\ndef get_layer_input_dtype(layer, fp8_input):\n"
                "    weight = getattr(layer, \"weight\", None)\n"
                "    if weight is None or not (weight.dtype.is_floating_point or weight.dtype.is_complex):\n"
                "        return layer.params_dtype\n"
                "    return weight.dtype\n")
    root = project(tmp_path, attn(imports="from proj.dtypes import get_layer_input_dtype as layer_dtype"),
                   {"proj/dtypes.py": agreeing})
    fixed = fix_and_check(root)
    assert fixed.count("import get_layer_input_dtype") == 1 and "layer_dtype(self.kv_b_proj, True)" in fixed


def test_two_layers_of_one_name_in_one_loop_get_two_variables(tmp_path: Path):
    """Both casts are hoisted before the loop; one shared variable would give both the second
    layer's dtype."""
    text = HEAD.format(imports="", before="") + (
        "class Attn(torch.nn.Module):\n"
        "    def __init__(self, kv_b_proj: QLinear):\n"
        "        super().__init__()\n"
        "        self.kv_b_proj = kv_b_proj\n\n"
        "    def forward(self, x, y, kv_b_proj: QLinear):\n"
        "        for _ in range(1):\n"
        "            y = y.to(kv_b_proj.weight.dtype)\n"
        "            x = x.to(self.kv_b_proj.weight.dtype)\n"
        "        return x, y\n")
    root = project(tmp_path, text)
    fixed = fix_and_check(root)
    assert "kv_b_proj_input_dtype_2" in fixed
    mod = imported(root)
    ql = importlib.import_module("proj.layers").QLinear
    x, y = mod.Attn(ql(torch.int32)).forward(torch.zeros(2), torch.zeros(2), ql(torch.float16))
    assert (x.dtype, y.dtype) == (torch.bfloat16, torch.float16)


# --- the libcst check itself, on fixes that are wrong on purpose -----------------------------------


SRC = "from m import h\n\n\ndef f(self, x):\n    h = 1\n    return x.to(self.p.weight.dtype)\n"


def _finding(edits, *, imports=(("m", "h"),), aliases=("h",), binds=(), scope="f") -> Finding:
    return Finding("DTL001", "m", "t.py", Span(6, 12, 6, 34), scope=scope,
                   fix=Fix("d", True, tuple(edits), imports, aliases=aliases, binds=binds))


def test_the_check_rejects_a_helper_call_that_a_local_shadows():
    start = SRC.index("self.p.weight.dtype")
    bad = _finding([Edit(start, start + len("self.p.weight.dtype"), "h(self.p, True) or x.dtype")])
    out = fix_text("t.py", SRC, lambda t: [bad] if t == SRC else [], unsafe=False)
    assert out.error and "binds `h` 2 times" in out.error and out.text == SRC
    assert [f.code for f in out.remaining] == ["DTL001", "DTL901"]


def test_the_check_rejects_a_new_variable_that_shadows_or_is_assigned_twice():
    fixed = "from m import g\n\n\ndef f(self, x):\n    h = g(self.p, True)\n    h = 2\n    return x.to(h)\n"
    with pytest.raises(FixCheckError, match="already names something in `f`"):
        verify_names(SRC.replace("from m import h", "from m import g"), fixed,
                     [_finding([], imports=(("m", "g"),), aliases=("g",), binds=("h",))])
    fresh_original = "from m import g\n\n\ndef f(self, x):\n    return x\n"
    with pytest.raises(FixCheckError, match="not assigned exactly once"):
        verify_names(fresh_original, fixed, [_finding([], imports=(("m", "g"),), aliases=("g",), binds=("h",))])


def test_the_check_rejects_an_import_the_module_rebinds_or_a_star_import():
    fixed = "from m import g\nfrom x import *\n\n\ndef f(self, x):\n    return x.to(g(self.p, True))\n"
    with pytest.raises(FixCheckError, match="star import"):
        verify_names("", fixed, [_finding([], imports=(("m", "g"),), aliases=("g",))])
    rebound = "from m import g\n\n\ndef f(self, x):\n    return x.to(g(self.p, True))\n\n\ng = None\n"
    with pytest.raises(FixCheckError, match="binds `g` 2 times"):
        verify_names("", rebound, [_finding([], imports=(("m", "g"),), aliases=("g",))])
    nested = "from m import g\n\n\ndef f(self, x):\n    def g():\n        pass\n    return x.to(g(self.p, True))\n"
    with pytest.raises(FixCheckError, match="binds `g` 2 times"):
        verify_names("", nested, [_finding([], imports=(("m", "g"),), aliases=("g",))])
    wrong_module = "from n import g\n\n\ndef f(self, x):\n    return x.to(g(self.p, True))\n"
    with pytest.raises(FixCheckError, match="would not name the helper"):
        verify_names("", wrong_module, [_finding([], imports=(("m", "g"),), aliases=("g",))])


def test_the_check_accepts_what_the_planner_writes():
    fixed = ("from m import g as _g\n\n\ndef f(self, x, g):\n    v = _g(self.p, True)\n    if v is not None:\n"
             "        x = x.to(v)\n        return [v for _ in x], (lambda: v)\n    return x\n")
    verify_names("def f(self, x, g):\n    return x\n", fixed,
                 [_finding([], imports=(("m", "g"),), aliases=("_g",), binds=("v",))])


# --- the helper must be importable from the fixed file ---------------------------------------------


def test_a_file_whose_import_root_has_its_own_package_of_that_name_is_not_fixed(tmp_path: Path):
    """`third_party/proj/` is imported from `third_party/`, where `proj` is the vendored copy:
    `from proj.dtypes import ...` there would not find the helper in the project's `proj/`."""
    from tiny_project import ATTN as VLLM_ATTN  # a vLLM layer: resolved wherever the file lies

    root = project(tmp_path, attn(), {"third_party/proj/__init__.py": "", "third_party/proj/vendored.py": VLLM_ATTN,
                                      "examples/plugin/plugin_pkg/__init__.py": "",
                                      "examples/plugin/plugin_pkg/mod.py": VLLM_ATTN})
    proc = dtl(root, "check", "--fix", "--no-cache", "--output-format", "concise")
    assert proc.returncode == 1
    assert "third_party/proj/vendored.py:1:1: DTL901" in proc.stdout and "would not reach the helper" in proc.stdout
    assert (root / "third_party/proj/vendored.py").read_text() == VLLM_ATTN
    assert "get_layer_input_dtype(self.kv_b_proj, True)" in (root / "proj/attn.py").read_text()
    # Another import root without a `proj` of its own reaches the installed project's.
    assert "from proj.dtypes import" in (root / "examples/plugin/plugin_pkg/mod.py").read_text()


def test_a_src_layout_gets_its_helper_under_src(tmp_path: Path):
    root = tmp_path
    (root / "pyproject.toml").write_text(PYPROJECT)
    for rel, text in {"src/proj/__init__.py": "", "src/proj/layers.py": LAYERS, "src/proj/attn.py": attn(),
                      "scripts/run.py": attn().replace("class Attn", "class Script")}.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(text)
    proc = dtl(root, "check", "--fix", "--no-cache", "--output-format", "concise")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert (root / "src/proj/dtypes.py").exists() and not (root / "proj").exists()
    for rel in ("src/proj/attn.py", "scripts/run.py"):
        assert "from proj.dtypes import get_layer_input_dtype" in (root / rel).read_text()
