"""Fixing: the fixer computes, the writer writes.

A fix must be written atomically and keep what it does not own (file mode, newline style, source
encoding, BOM); leave a file byte-for-byte untouched when a fix would not parse (DTL901); apply
overlapping fixes in rounds; add the helper import exactly once; and be idempotent.
"""

from __future__ import annotations

import ast
import os
import stat
from pathlib import Path

import pytest

from dtype_lint.api import check_source, fix_source
from dtype_lint.cli import main
from dtype_lint.core import writer
from dtype_lint.core.findings import FIX_FAILED, Edit, Finding, Fix, Span
from dtype_lint.core.source import FileText
from dtype_lint.core.writer import ProjectWriter, WriteError, write_atomic
from dtype_lint.fix import fixer
from dtype_lint.fix.fixer import fix_text

HELPER_IMPORT = "from proj.dtypes import get_layer_input_dtype"

PYPROJECT = '[tool.dtype-lint]\nhelper = "proj.dtypes:get_layer_input_dtype"\n'

ATTN = """\
import torch
from vllm.model_executor.layers.linear import ColumnParallelLinear, RowParallelLinear


class Attn(torch.nn.Module):
    def __init__(self, kv_b_proj: ColumnParallelLinear, o_proj: RowParallelLinear):
        super().__init__()
        self.kv_b_proj = kv_b_proj
        self.o_proj = o_proj

    def forward(self, x):
        x = x.to(self.kv_b_proj.weight.dtype)
        return self.kv_b_proj(x)

    def out(self, y):
        return self.o_proj(y.to(dtype=self.o_proj.weight.dtype))
"""

FIXED_FORWARD = (
    "        kv_b_proj_input_dtype = get_layer_input_dtype(self.kv_b_proj, True)\n"
    "        if kv_b_proj_input_dtype is not None:\n"
    "            x = x.to(kv_b_proj_input_dtype)\n"
)
FIXED_OUT = "self.o_proj(y.to(dtype=get_layer_input_dtype(self.o_proj, True) or y.dtype))"


def project(root: Path, files: dict[str, bytes | str]) -> Path:
    (root / "proj").mkdir(parents=True)
    (root / "pyproject.toml").write_text(PYPROJECT, encoding="utf-8")
    (root / "proj/__init__.py").write_text("", encoding="utf-8")
    for rel, data in files.items():
        p = root / rel
        if isinstance(data, str):
            p.write_text(data, encoding="utf-8", newline="")
        else:
            p.write_bytes(data)
    return root


def run_fix(root: Path, capsys, *extra: str) -> tuple[int, str]:
    rc = main(["check", "--fix", "-j", "1", "--no-cache", "--output-format", "concise", *extra, str(root)])
    out, err = capsys.readouterr()
    assert "Traceback" not in err
    return rc, out


def normalised(data: bytes, encoding: str = "utf-8") -> str:
    return data.decode(encoding).replace("\r\n", "\n")


# --- writing -------------------------------------------------------------------------------------


@pytest.mark.parametrize("mode", [0o640, 0o755, 0o600])
def test_fix_keeps_file_mode_and_writes_by_rename(tmp_path: Path, capsys, mode: int):
    root = project(tmp_path, {"proj/attn.py": ATTN})
    target = root / "proj/attn.py"
    os.chmod(target, mode)
    inode = os.stat(target).st_ino
    rc, out = run_fix(root, capsys)
    assert rc == 0, out
    st = os.stat(target)
    assert stat.S_IMODE(st.st_mode) == mode
    assert st.st_ino != inode  # a new file renamed over the old one, not rewritten in place
    assert FIXED_FORWARD in target.read_text()
    leftovers = [p for p in root.rglob("*") if p.name.endswith(".dtl-tmp")]
    assert leftovers == []
    assert not (root / ".dtype_lint_cache").exists()  # --no-cache: nothing left behind


def test_write_atomic_failure_leaves_the_original(tmp_path: Path, monkeypatch):
    target = tmp_path / "m.py"
    target.write_bytes(b"x = 1\n")

    def boom(src, dst):
        raise OSError("disk full")

    monkeypatch.setattr(writer.os, "replace", boom)
    with pytest.raises(OSError, match="disk full"):
        write_atomic(str(target), b"x = 2\n")
    assert target.read_bytes() == b"x = 1\n"
    assert [p.name for p in tmp_path.iterdir()] == ["m.py"]  # the temp file is gone too


def test_the_writer_refuses_a_file_changed_meanwhile(tmp_path: Path):
    target = tmp_path / "m.py"
    target.write_text("x = 1\n")
    target.write_text("x = 3\n")  # someone saved the file after it was read as "x = 1"
    w = ProjectWriter(tmp_path)
    with pytest.raises(WriteError, match="changed on disk"):
        w.write(target, b"x = 2\n", "fix", expect=b"x = 1\n")
    assert target.read_text() == "x = 3\n"
    assert w.records == []


def test_crlf_is_kept(tmp_path: Path, capsys):
    data = ATTN.replace("\n", "\r\n").encode()
    root = project(tmp_path, {"proj/attn.py": data})
    rc, out = run_fix(root, capsys)
    assert rc == 0, out
    fixed = (root / "proj/attn.py").read_bytes()
    assert fixed.count(b"\n") == fixed.count(b"\r\n") > ATTN.count("\n")  # every line, new ones too
    text = normalised(fixed)
    assert FIXED_FORWARD in text and FIXED_OUT in text
    assert text.count(HELPER_IMPORT + "\n") == 1


def test_latin1_coding_cookie_and_non_ascii_bytes_are_kept(tmp_path: Path, capsys):
    source = (
        "# -*- coding: latin-1 -*-\n"
        + ATTN.replace("    def forward(self, x):\n        x = x.to(",
                       "    def forward(self, xé):\n        # déjà vu: the café's crème\n        xé = xé.to(")
              .replace("return self.kv_b_proj(x)", "return self.kv_b_proj(xé)")
    )
    data = source.encode("latin-1")
    assert b"caf\xe9" in data
    root = project(tmp_path, {"proj/attn.py": data})
    rc, out = run_fix(root, capsys)
    assert rc == 0, out
    fixed = (root / "proj/attn.py").read_bytes()
    assert fixed.startswith(b"# -*- coding: latin-1 -*-\n")
    assert b"# d\xe9j\xe0 vu: the caf\xe9's cr\xe8me\n" in fixed
    assert b"\xc3" not in fixed  # nothing was re-encoded as UTF-8
    text = fixed.decode("latin-1")
    assert ("        kv_b_proj_input_dtype = get_layer_input_dtype(self.kv_b_proj, True)\n"
            "        if kv_b_proj_input_dtype is not None:\n"
            "            xé = xé.to(kv_b_proj_input_dtype)\n") in text
    compile(fixed, "attn.py", "exec")  # the cookie still matches the bytes


def test_utf8_bom_is_kept(tmp_path: Path, capsys):
    data = b"\xef\xbb\xbf" + ATTN.replace("import torch\n", "import torch  # \u00b5s \u2192 \u2713\n", 1).encode()
    root = project(tmp_path, {"proj/attn.py": data})
    rc, out = run_fix(root, capsys)
    assert rc == 0, out
    fixed = (root / "proj/attn.py").read_bytes()
    assert fixed.startswith(b"\xef\xbb\xbfimport torch  # \xc2\xb5s \xe2\x86\x92 \xe2\x9c\x93\n")
    assert fixed.count(b"\xef\xbb\xbf") == 1
    assert FIXED_FORWARD in fixed[3:].decode("utf-8")


def test_file_text_round_trips_encodings(tmp_path: Path):
    """read() then encode(text) gives back the same bytes: BOM, cookie encodings, CRLF."""
    samples = (b"\xef\xbb\xbfx = 1\r\n", b"# coding: latin-1\nx = '\xe9'\n", b"x = '\xc3\xa9'\n",
               b"# vim: set fileencoding=cp1252 :\nx = '\x80'\r\n")
    for i, data in enumerate(samples):
        p = tmp_path / f"m{i}.py"
        p.write_bytes(data)
        ft = FileText.decode(p.read_bytes())
        assert not ft.text.startswith("\ufeff")
        assert ft.encode(ft.text) == data


# --- failed fixes --------------------------------------------------------------------------------

SIMPLE = "def f(layer, x):\n    x = x.to(layer.weight.dtype)\n    return x\n"


def _finding(path: str, edits: tuple[Edit, ...], safe: bool = True) -> Finding:
    return Finding("DTL001", "cast", path, Span(2, 9, 2, 33), fix=Fix("test fix", safe, edits, ()),
                   scope="f", expression="x.to(layer.weight.dtype)")


def test_fix_that_would_not_parse_leaves_the_file_untouched(tmp_path: Path):
    path = tmp_path / "m.py"
    data = SIMPLE.replace("\n", "\r\n").encode()
    path.write_bytes(data)
    start = SIMPLE.index("x.to(")
    bad = _finding(str(path), (Edit(start, start + len("x.to(layer.weight.dtype)"), "x.to(("),))
    calls = []

    def analyze(text: str) -> list[Finding]:
        calls.append(text)
        return [bad] if text == SIMPLE else []

    out = fix_text(str(path), SIMPLE, analyze, unsafe=False)
    assert out.error and "does not parse" in out.error
    assert out.text == SIMPLE and not out.changed and out.applied == []
    codes = [f.code for f in out.remaining]
    assert codes == ["DTL001", FIX_FAILED]
    dtl901 = out.remaining[-1]
    assert dtl901.path == str(path) and "file left untouched" in dtl901.message
    assert path.read_bytes() == data


def test_one_bad_fix_keeps_the_good_ones_from_being_written(tmp_path: Path):
    text = SIMPLE + "def g(layer, y):\n    return y.to(layer.weight.dtype)\n"
    path = tmp_path / "m.py"
    path.write_text(text)
    good_at = text.index("y.to(layer.weight.dtype)") + len("y.to(")
    good = _finding(str(path), (Edit(good_at, good_at + len("layer.weight.dtype"), "layer.params_dtype"),))
    bad_at = text.index("x.to(")
    bad = _finding(str(path), (Edit(bad_at, bad_at, "x.to(("),))
    out = fix_text(str(path), text, lambda t: [good, bad] if t == text else [], unsafe=False)
    assert out.error and out.text == text and not out.changed
    assert path.read_text() == text


def test_unsafe_fixes_are_applied_only_when_asked():
    at = SIMPLE.index("layer.weight.dtype")
    f = _finding("m.py", (Edit(at, at + len("layer.weight.dtype"), "layer.params_dtype"),), safe=False)
    analyze = lambda t: [f] if t == SIMPLE else []  # noqa: E731
    assert not fix_text("m.py", SIMPLE, analyze, unsafe=False).changed
    out = fix_text("m.py", SIMPLE, analyze, unsafe=True)
    assert out.changed and "x.to(layer.params_dtype)" in out.text and out.applied == [f]


# --- rounds --------------------------------------------------------------------------------------


def _wrap_g(path: str):
    """A toy rule: every `g(ARG)` should be `h(ARG)`; its fix rewrites the whole call, so the fixes
    of nested calls overlap."""
    calls: list[str] = []

    def analyze(text: str) -> list[Finding]:
        calls.append(text)
        out = []
        lines = text.splitlines(keepends=True)
        starts = [0]
        for ln in lines:
            starts.append(starts[-1] + len(ln))
        for node in ast.walk(ast.parse(text)):
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "g":
                a = starts[node.lineno - 1] + node.col_offset
                b = starts[node.end_lineno - 1] + node.end_col_offset
                arg = ast.get_source_segment(text, node.args[0])
                out.append(Finding("DTL001", "g", path, Span(node.lineno, node.col_offset + 1, node.end_lineno,
                                                              node.end_col_offset + 1),
                                   fix=Fix("g -> h", True, (Edit(a, b, f"h({arg})"),), ())))
        return sorted(out, key=lambda f: f.fix.edits[0].start)

    return analyze, calls


def test_overlapping_fixes_are_applied_in_rounds():
    analyze, calls = _wrap_g("m.py")
    text = "y = g(g(g(x)))\nz = g(1)\n"
    out = fix_text("m.py", text, analyze, unsafe=False)
    assert out.text == "y = h(h(h(x)))\nz = h(1)\n"
    assert len(out.applied) == 4 and out.remaining == []
    # Round 1: the outer g and z's (the nested ones overlap it); round 2 and 3: one level each;
    # then one analysis finds nothing left.
    assert calls == [text, "y = h(g(g(x)))\nz = h(1)\n", "y = h(h(g(x)))\nz = h(1)\n", out.text]


def test_rounds_stop_at_the_limit():
    analyze, calls = _wrap_g("m.py")
    depth = fixer.MAX_ROUNDS + 2
    text = "y = " + "g(" * depth + "x" + ")" * depth + "\n"
    out = fix_text("m.py", text, analyze, unsafe=False)
    assert len(out.applied) == fixer.MAX_ROUNDS
    assert out.text.count("h(") == fixer.MAX_ROUNDS and out.text.count("g(") == 2
    assert len(out.remaining) == 2  # what is left is still reported
    ast.parse(out.text)


def test_real_sites_in_one_statement_are_all_fixed():
    src = ATTN.replace("return self.o_proj(y.to(dtype=self.o_proj.weight.dtype))",
                       "return self.o_proj(y.to(dtype=self.o_proj.weight.dtype)) + y.to(self.kv_b_proj.weight.dtype)")
    fixed = fix_source(src)
    assert "self.o_proj(y.to(dtype=get_layer_input_dtype(self.o_proj, True) or y.dtype))" in fixed
    assert "y.to(get_layer_input_dtype(self.kv_b_proj, True) or y.dtype)" in fixed
    assert check_source(fixed) == []


# --- the helper import -----------------------------------------------------------------------------

VLLM_IMPORT = "from vllm.model_executor.layers.quantization.utils.layer_input_dtype import get_layer_input_dtype"


def _import_count(text: str, name: str = "get_layer_input_dtype") -> int:
    return sum(1 for n in ast.walk(ast.parse(text)) if isinstance(n, (ast.Import, ast.ImportFrom))
               for a in n.names if (a.asname or a.name) == name)


def test_helper_import_added_once_for_many_sites():
    fixed = fix_source(ATTN)
    assert FIXED_FORWARD in fixed and FIXED_OUT in fixed
    assert _import_count(fixed) == 1 and fixed.count(VLLM_IMPORT) == 1


def test_existing_helper_import_is_not_duplicated():
    for existing in (
        VLLM_IMPORT + "\n",
        "from vllm.model_executor.layers.quantization.utils.layer_input_dtype import (\n"
        "    get_layer_input_dtype,\n)\n",
    ):
        src = ATTN.replace("import torch\n", "import torch\n" + existing, 1)
        fixed = fix_source(src)
        assert FIXED_FORWARD in fixed
        assert _import_count(fixed) == 1, fixed
        assert fixed.startswith("import torch\n" + existing)


def test_import_added_to_a_file_without_imports():
    src = ("def run(layer, x):\n    from vllm.model_executor.layers.linear import LinearBase\n"
           "    assert isinstance(layer, LinearBase)\n    return x\n")
    assert fix_source(src) == src  # no annotated layer, nothing to do
    src = "from vllm.model_executor.layers.linear import LinearBase\n\n\ndef run(layer: LinearBase, x):\n    return layer(x.to(layer.weight.dtype))\n"
    fixed = fix_source(src)
    assert _import_count(fixed) == 1 and "layer(x.to(get_layer_input_dtype(layer, True) or x.dtype))" in fixed


# --- idempotence -----------------------------------------------------------------------------------


def test_second_fix_changes_nothing(tmp_path: Path, capsys):
    root = project(tmp_path, {"proj/attn.py": ATTN})
    rc, out = run_fix(root, capsys)
    assert rc == 0, out
    snapshot = {p: p.read_bytes() for p in root.rglob("*.py")}
    assert root / "proj/dtypes.py" in snapshot
    rc, out = run_fix(root, capsys)
    assert rc == 0 and "All checks passed" in out
    assert {p: p.read_bytes() for p in root.rglob("*.py")} == snapshot
    rc = main(["check", "--diff", "-j", "1", "--no-cache", str(root)])
    assert rc == 0 and "+++" not in capsys.readouterr().out


def test_fix_source_is_idempotent():
    once = fix_source(ATTN)
    assert fix_source(once) == once
    assert check_source(once) == []


# --- behaviour kept by the rewrite -------------------------------------------------------------------


def test_device_move_is_kept_when_the_dtype_is_none():
    """`x.to(device=d, dtype=L.weight.dtype)` must still move `x` when the helper says None, so it is
    rewritten in expression form, not skipped behind `if dt is not None`."""
    src = (
        "from vllm.model_executor.layers.linear import ColumnParallelLinear\n\n\n"
        "def f(layer: ColumnParallelLinear, x, dev):\n"
        "    x = x.to(device=dev, dtype=layer.weight.dtype)\n"
        "    w = layer.weight.dtype\n"
        "    x = x.to(dev, w)\n"
        "    x = x.to(w)\n"
        "    return layer(x)\n"
    )
    fixed = fix_source(src)
    assert "    x = x.to(device=dev, dtype=get_layer_input_dtype(layer, True) or x.dtype)\n" in fixed
    assert "    w = get_layer_input_dtype(layer, True)\n    x = x.to(dev, w or x.dtype)\n" in fixed
    assert "    if w is not None:\n        x = x.to(w)\n" in fixed
    assert check_source(fixed) == []


def test_statement_sharing_its_line_is_not_guarded_whole():
    """`x = x.to(w); y = 2` behind `if dt is not None:` would leave `y` unbound when the helper says
    None: such a cast is rewritten in expression form."""
    head = "from vllm.model_executor.layers.linear import ColumnParallelLinear\n\n\n"
    fixed = fix_source(head + "def f(layer: ColumnParallelLinear, x):\n    x = x.to(layer.weight.dtype); y = 2\n    return x, y\n")
    assert "    x = x.to(get_layer_input_dtype(layer, True) or x.dtype); y = 2\n" in fixed
    fixed = fix_source(head + "def f(layer: ColumnParallelLinear, x):\n    w = layer.weight.dtype\n"
                       "    x = x.to(w); y = 2\n    return x, y\n")
    assert "    w = get_layer_input_dtype(layer, True)\n    x = x.to(w or x.dtype); y = 2\n" in fixed
    # A trailing comment is not another statement.
    fixed = fix_source(head + "def f(layer: ColumnParallelLinear, x):\n    x = x.to(layer.weight.dtype)  # a; b\n    return x\n")
    assert "    if layer_input_dtype is not None:\n        x = x.to(layer_input_dtype)  # a; b\n" in fixed


def test_line_separators_inside_comments_do_not_shift_lines():
    """Python breaks lines only at \\r\\n, \\r, \\n: a form feed or U+2028 in a comment above a site
    must not move the site (str.splitlines would split there)."""
    src = (
        "from vllm.model_executor.layers.linear import ColumnParallelLinear\n"
        "# a line separator \u2028 and a form feed \x0c in a comment\n"
        "def f(layer: ColumnParallelLinear, x):\n"
        "    x = x.to(layer.weight.dtype)\n"
        "    return layer(x)\n"
    )
    (finding,) = check_source(src)
    assert (finding.span.line, finding.span.col) == (4, 9)
    fixed = fix_source(src)
    assert "\u2028" in fixed and "\x0c" in fixed
    assert ("    layer_input_dtype = get_layer_input_dtype(layer, True)\n"
            "    if layer_input_dtype is not None:\n        x = x.to(layer_input_dtype)\n") in fixed


def test_import_graph_module_level_edges_and_importers():
    from dtype_lint.analysis.index.class_index import ModuleTable
    from dtype_lint.fix.import_graph import ImportGraph

    texts = {
        "pkg/__init__.py": "",
        "pkg/model.py": "from pkg.plat import current_platform\n",
        "pkg/utils.py": "import typing\nif typing.TYPE_CHECKING:\n    import pkg.model\ndef f():\n    import pkg.model\n",
        "pkg/cyc.py": "try:\n    from pkg import model\nexcept ImportError:\n    pass\n",
        "pkg/plat.py": "current_platform = 1\n",
        "pkg/other.py": "from .model import current_platform\n",
    }
    files = [(p, p, p[:-3].replace("/__init__", "").replace("/", ".")) for p in texts]
    graph = ImportGraph(ModuleTable(files), {"pkg.new": "import pkg.utils\n"}, read_text=texts.get)
    assert graph.cycle_problem("pkg.model", "pkg.utils") == ""  # function / TYPE_CHECKING imports
    assert "pkg.cyc` → `pkg.model" in graph.cycle_problem("pkg.model", "pkg.cyc")
    assert graph.cycle_problem("pkg.model", "pkg.new") == ""
    assert graph.importers_of("pkg.model", "current_platform", skip="pkg.model") == "pkg.other"
    assert graph.importers_of("pkg.plat", "nothing_here") == ""


def test_import_graph_an_explicit_import_of_a_package_above_is_an_edge():
    """`pkg/__init__.py` imports `pkg.mod`; the helper does `from pkg import x`: importing
    `pkg.mod` first runs `pkg`, which imports `pkg.mod`, which imports the helper, which needs
    `x` from the half-initialised `pkg`."""
    from dtype_lint.analysis.index.class_index import ModuleTable
    from dtype_lint.fix.import_graph import ImportGraph

    texts = {"pkg/__init__.py": "from pkg.mod import f\nx = 1\n", "pkg/mod.py": "def f():\n    pass\n",
             "pkg/helper.py": "from pkg import x\n"}
    files = [(p, p, p[:-3].replace("/__init__", "").replace("/", ".")) for p in texts]
    graph = ImportGraph(ModuleTable(files), read_text=texts.get)
    assert "`pkg` → `pkg.mod`" in graph.cycle_problem("pkg.mod", "pkg.helper")
    # Only the packages above it, implicitly: no edge.
    texts["pkg/helper.py"] = "import torch\n"
    assert ImportGraph(ModuleTable(files), read_text=texts.get).cycle_problem("pkg.mod", "pkg.helper") == ""


def test_a_relative_import_of_the_helpers_module_is_an_import_the_module_already_has():
    """The import-cycle check asks only about a new edge: `from ..utils.torch_utils import x` in
    `pkg.models.attn` already imports `pkg.utils.torch_utils` (diffusers' fixes were refused
    before this counted)."""
    from dtype_lint.fix.fixer import _imports_module

    text = "from ..utils.torch_utils import randn_tensor\n"
    assert _imports_module(text, "pkg.utils.torch_utils", "pkg.models.attn")
    assert not _imports_module(text, "pkg.models.utils.torch_utils", "pkg.models.attn")
    # in a package's __init__, one dot is the package itself
    assert _imports_module("from .utils.torch_utils import x\n", "pkg.models.utils.torch_utils", "pkg.models", True)
    assert not _imports_module(text, "pkg.utils.torch_utils", "")  # no importer: a relative import says nothing
    assert _imports_module("from pkg.utils.torch_utils import x\n", "pkg.utils.torch_utils")


def test_import_graph_a_lazy_init_does_not_import_its_submodules():
    """diffusers' `__init__`s import every submodule under `if TYPE_CHECKING or
    DIFFUSERS_SLOW_IMPORT:` and install a `_LazyModule` otherwise: a model file importing
    `pkg.utils.torch_utils` (whose package imports `pkg` for its version) closes no cycle (the
    fix of `modeling_ace_step.py` was refused before). An `if` on another flag still counts."""
    from dtype_lint.analysis.index.class_index import ModuleTable
    from dtype_lint.fix.import_graph import ImportGraph

    lazy = ("import sys\nfrom typing import TYPE_CHECKING\nfrom .utils import SLOW\n__version__ = '1'\n"
            "if TYPE_CHECKING or SLOW:\n    from .models import Model\nelse:\n    sys.modules[__name__] = object()\n")
    texts = {"pkg/__init__.py": lazy, "pkg/utils/__init__.py": "from .. import __version__\nSLOW = False\n",
             "pkg/utils/torch_utils.py": "import torch\n", "pkg/models/__init__.py": "from .model import Model\n",
             "pkg/models/model.py": "class Model:\n    pass\n"}
    files = [(p, p, p[:-3].replace("/__init__", "").replace("/", ".")) for p in texts]
    assert ImportGraph(ModuleTable(files), read_text=texts.get).cycle_problem("pkg.models.model", "pkg.utils.torch_utils") == ""
    texts["pkg/__init__.py"] = lazy.replace("TYPE_CHECKING or SLOW", "SLOW or not SLOW")
    assert "`pkg` → `pkg.models`" in ImportGraph(ModuleTable(files), read_text=texts.get).cycle_problem(
        "pkg.models.model", "pkg.utils.torch_utils")
