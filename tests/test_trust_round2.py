"""Trusted like a compiler, round two (#20): a fix never changes what the code does, and no input
or output path can hurt.

Every class of #20 has cases here that failed on 0.2.0 (the note above each says how) and pass
now. A fix either leaves behaviour identical (the module is imported with a small layer and run
before and after the fix; results and exceptions are compared) or writes nothing and says why.
"""

from __future__ import annotations

import importlib
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")

from cli_runner import dtl  # noqa: E402
from tiny_project import (  # noqa: E402
    STUB_LAYERS,
    STUB_PYPROJECT,
    fresh_import,
    stub_project,
    time_limit,
    tiny_project,
    tree_bytes,
    write_tree,
)

# The runtime stub project (a layer whose weight dtype the test picks) is shared: tiny_project.py.
PYPROJECT, LAYERS = STUB_PYPROJECT, STUB_LAYERS

MODEL = """\
import torch
from proj.layers import QLinear


class Attn(torch.nn.Module):
    def __init__(self, o_proj: QLinear):
        super().__init__()
        self.o_proj = o_proj
        self.use = True
        self.spare = QLinear(torch.float32)

    def swap(self):
        self.o_proj, self.spare = self.spare, self.o_proj

{body}
"""





project = stub_project





def outcome(call) -> str:
    """What running `call()` gives: the dtypes it returns, or the exception it raises."""
    try:
        result = call()
    except Exception as e:  # noqa: BLE001 - the exception is the outcome being compared
        return f"{type(e).__name__}: {e}"
    items = result if isinstance(result, (list, tuple)) else [result]
    return repr([getattr(r, "dtype", r) for r in items])


def fix(root: Path, *extra: str) -> object:
    return dtl(root, "check", "--fix", "--no-cache", "--output-format", "concise", *extra)


# --- 1. the helper is evaluated where the dtype was ----------------------------------------------

# Each: the method, and scenarios (what to do to the module before calling it) that 0.2.0's
# hoisted fix changed. `scenario(mod)` returns the call to compare.
HOISTS = {
    # 0.2.0 moved the call out of the `if`: AttributeError on None.
    "if-in-loop": ("""\
    def forward(self, xs):
        out = []
        for x in xs:
            if self.o_proj is not None:
                x = x.to(self.o_proj.weight.dtype)
            out.append(x)
        return out
""", lambda m: _none_layer(m)),
    # ... out of a `try/except AttributeError`.
    "try-in-loop": ("""\
    def forward(self, xs):
        out = []
        for x in xs:
            try:
                x = x.to(self.o_proj.weight.dtype)
            except AttributeError:
                pass
            out.append(x)
        return out
""", lambda m: _none_layer(m)),
    # ... out of the loop whose condition guards it.
    "while-condition": ("""\
    def forward(self, xs):
        out = []
        while self.use and xs:
            x = xs.pop()
            x = x.to(self.o_proj.weight.dtype)
            out.append(x)
        return out
""", lambda m: _deleted_layer(m, use=False)),
    # ... before a loop that runs zero times, on a layer deleted after loading.
    "zero-iterations": ("""\
    def forward(self, xs):
        out = []
        for x in xs:
            x = x.to(self.o_proj.weight.dtype)
            out.append(x)
        return out
""", lambda m: _deleted_layer(m, xs=[])),
    # ... past a method call that swaps the layer: the hoisted value goes stale.
    "swap-in-loop": ("""\
    def forward(self, xs):
        out = []
        for x in xs:
            x = x.to(self.o_proj.weight.dtype)
            out.append(x)
            self.swap()
        return out
""", lambda m: _swapping(m)),
    # The guarded idiom with its alias computed before the loop: 0.2.0 moved the helper into the
    # loop and deleted the alias; now the site is left alone (the alias is not beside its guard).
    "idiom-alias-before-loop": ("""\
    def forward(self, xs, use_fp8):
        out = []
        w = self.o_proj.weight.dtype if hasattr(self.o_proj, "weight") else self.o_proj.params_dtype
        for x in xs:
            if (use_fp8 or w != torch.float8_e4m3fn) and w != torch.uint8:
                x = x.to(self.o_proj.weight.dtype)
            out.append(x)
            self.swap()
        return out
""", lambda m: _swapping(m, use_fp8=True)),
}


def _layers(mod):
    return importlib.import_module("proj.layers")


def _none_layer(mod):
    attn = mod.Attn(_layers(mod).QLinear(torch.float16))
    attn.o_proj = None
    return lambda: attn.forward([torch.zeros(2), torch.zeros(2)])


def _deleted_layer(mod, use=True, xs=None):
    attn = mod.Attn(_layers(mod).QLinear(torch.float16))
    del attn.o_proj
    attn.use = use
    return lambda: attn.forward([torch.zeros(2)] if xs is None else xs)


def _swapping(mod, **kwargs):
    attn = mod.Attn(_layers(mod).QLinear(torch.float16))
    return lambda: attn.forward([torch.zeros(2), torch.zeros(2), torch.zeros(2)], **kwargs)


def _plain(mod, **kwargs):
    attn = mod.Attn(_layers(mod).QLinear(torch.float16))
    return lambda: attn.forward([torch.zeros(2), torch.zeros(2)], **kwargs)


@pytest.mark.parametrize("case", list(HOISTS))
def test_a_fix_never_moves_the_helper_past_what_guarded_the_cast(tmp_path: Path, case: str):
    body, scenario = HOISTS[case]
    root = project(tmp_path, MODEL.format(body=body))
    before = outcome(scenario(fresh_import(root)))
    kwargs = {"use_fp8": True} if "use_fp8" in body else {}
    plain_before = outcome(_plain(fresh_import(root), **kwargs))
    proc = fix(root)
    assert "Traceback" not in proc.stderr
    after = outcome(scenario(fresh_import(root)))
    assert after == before, (case, (root / "proj/model.py").read_text())
    assert outcome(_plain(fresh_import(root), **kwargs)) == plain_before
    fixed = (root / "proj/model.py").read_text()
    if "get_layer_input_dtype(" in fixed:
        # Called right before its guard, in the block the cast was in.
        lines = fixed.splitlines()
        call = next(i for i, line in enumerate(lines) if "= get_layer_input_dtype(" in line)
        assert lines[call + 1].strip().startswith("if ") and lines[call + 1].strip().endswith("is not None:")
    else:
        assert "DTL001" in proc.stdout and proc.returncode == 1


def test_the_verifier_refuses_a_helper_call_hoisted_out_of_its_block():
    from dtype_lint.core.findings import Edit, Finding, Fix, Span
    from dtype_lint.fix.fixer import fix_text

    src = ("from m import h\n\n\ndef f(self, xs):\n    for x in xs:\n        x = x.to(self.p.weight.dtype)\n"
           "    return xs\n")
    loop = src.index("    for x")
    cast = src.index("        x = x.to")
    arg = src.index("self.p.weight.dtype")
    edits = (Edit(loop, loop, "    v = h(self.p, True)\n"), Edit(cast, cast, "        if v is not None:\n    "),
             Edit(arg, arg + len("self.p.weight.dtype"), "v"))
    bad = Finding("DTL001", "m", "t.py", Span(6, 13, 6, 40), scope="f",
                  fix=Fix("d", True, edits, (("m", "h"),), aliases=("h",), binds=("v",)))
    out = fix_text("t.py", src, lambda t: [bad] if t == src else [], unsafe=False)
    assert out.text == src and "not right before" in out.error


# --- 2. an existing helper is called only as it can be called -------------------------------------

SITE = MODEL.format(body="""\
    def forward(self, x):
        x = x.to(self.o_proj.weight.dtype)
        return x
""")

HELPER_BODY = """\
    weight = getattr(layer, "weight", None)
    weight_dtype = weight.dtype if weight is not None else layer.params_dtype
    if weight_dtype in (torch.int32, torch.uint8, torch.int8):
        return layer.params_dtype
    return weight_dtype
"""

SIGNATURES = {
    "keyword-only-without-default": ("def get_layer_input_dtype(layer, fp8_input, *, device):\n", "keyword-only"),
    "one-parameter": ("def get_layer_input_dtype(layer):\n", "1 positional parameter"),
    "async": ("async def get_layer_input_dtype(layer, fp8_input):\n", "async def"),
    "third-required": ("def get_layer_input_dtype(layer, fp8_input, device):\n", "no default"),
    "decorated": ("@functools.lru_cache\ndef get_layer_input_dtype(layer, fp8_input):\n", "decorated"),
}


@pytest.mark.parametrize("case", list(SIGNATURES))
def test_an_existing_helper_that_cannot_be_called_so_is_an_error_naming_it(tmp_path: Path, case: str):
    """0.2.0 made safe fixes through each of these, which raise TypeError at run time (the async
    one hands `x.to` a coroutine)."""
    signature, why = SIGNATURES[case]
    helper = "import functools\n\nimport torch\n\n\n" + signature + HELPER_BODY
    root = project(tmp_path, SITE, {"proj/dtypes.py": helper})
    before = tree_bytes(root)
    proc = fix(root)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert "get_layer_input_dtype" in proc.stderr and why in proc.stderr
    assert tree_bytes(root) == before


def test_an_existing_helper_with_defaults_beyond_the_flag_is_used(tmp_path: Path):
    helper = "import torch\n\n\ndef get_layer_input_dtype(layer, fp8_input=True, device=None, *, strict=False):\n" \
        + HELPER_BODY
    root = project(tmp_path, SITE, {"proj/dtypes.py": helper})
    proc = fix(root)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    mod = fresh_import(root)
    attn = mod.Attn(_layers(mod).QLinear(torch.int32))
    assert attn.forward(torch.zeros(2)).dtype == torch.bfloat16


def test_migrate_does_not_reuse_a_helper_it_cannot_call(tmp_path: Path):
    """`migrate` reuses a project's own sound helper; one it cannot call is left alone and a new
    one is made."""
    helper = "import torch\n\n\ndef get_layer_input_dtype(layer, fp8_input, *, device):\n" + HELPER_BODY
    pyproject = '[tool.dtype-lint]\nquantizable = ["proj.layers.QLinear"]\nhelper-template = "torch"\n'
    root = project(tmp_path, SITE, {"proj/utils.py": helper}, pyproject=pyproject)
    proc = dtl(root, "migrate", ".", "--report", "report.md")
    assert proc.returncode in (0, 1), proc.stdout + proc.stderr
    fixed = (root / "proj/model.py").read_text()
    assert "from proj.utils import" not in fixed


# --- 3. the import graph ---------------------------------------------------------------------------

CYCLE_HELPER = "import torch\n\nfrom proj.model import Attn  # noqa: F401\n\n\ndef get_layer_input_dtype(layer, fp8_input):\n" \
    + HELPER_BODY


def test_an_added_import_never_closes_a_cycle(tmp_path: Path):
    """0.2.0: `proj/utils.py` imports `proj.model`; the fix made `proj.model` import it back and
    `import proj.model` failed ("partially initialized module")."""
    pyproject = PYPROJECT.replace("proj.dtypes", "proj.utils")
    root = project(tmp_path, SITE, {"proj/utils.py": CYCLE_HELPER}, pyproject=pyproject)
    before = tree_bytes(root)
    proc = fix(root)
    assert proc.returncode == 1
    assert "DTL901" in proc.stdout and "import cycle" in proc.stdout and "proj.utils" in proc.stdout
    assert tree_bytes(root) == before
    fresh_import(root)  # still imports


def test_an_import_in_a_function_or_under_type_checking_is_no_cycle(tmp_path: Path):
    helper = ("import typing\n\nimport torch\n\nif typing.TYPE_CHECKING:\n    from proj.model import Attn  # noqa: F401\n\n\n"
              "def later():\n    from proj.model import Attn  # noqa: F401\n\n\n"
              "def get_layer_input_dtype(layer, fp8_input):\n" + HELPER_BODY)
    pyproject = PYPROJECT.replace("proj.dtypes", "proj.utils")
    root = project(tmp_path, SITE, {"proj/utils.py": helper}, pyproject=pyproject)
    proc = fix(root)
    assert proc.returncode == 0, proc.stdout
    assert "from proj.utils import get_layer_input_dtype" in (root / "proj/model.py").read_text()


IDIOM = """\
import torch
from proj.layers import QLinear
from proj.plat import current_platform


class Attn(torch.nn.Module):
    def __init__(self, o_proj: QLinear):
        super().__init__()
        self.o_proj = o_proj

    def forward(self, x, use_fp8):
        w = self.o_proj.weight.dtype if hasattr(self.o_proj, "weight") else self.o_proj.params_dtype
        if (use_fp8 or w != current_platform.fp8_dtype()) and w != torch.uint8:
            x = x.to(self.o_proj.weight.dtype)
        return x
"""

PLAT = "import torch\n\n\nclass _Platform:\n    def fp8_dtype(self):\n        return torch.float8_e4m3fn\n\n\ncurrent_platform = _Platform()\n"


@pytest.mark.parametrize("user", ["from proj.model import current_platform\n",
                                  "from .model import current_platform as plat\n",
                                  "from proj.model import *\n",
                                  "import proj.model\n\nplat = proj.model.current_platform\n"])
def test_an_orphaned_import_another_module_takes_from_here_stays(tmp_path: Path, user: str):
    """0.2.0 dropped `from proj.plat import current_platform` from proj/model.py after the idiom
    fix; proj/other.py, importing it from proj.model, then failed."""
    root = project(tmp_path, IDIOM, {"proj/plat.py": PLAT, "proj/other.py": user})
    proc = fix(root)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    fixed = (root / "proj/model.py").read_text()
    assert "w != torch.uint8" not in fixed  # the idiom was rewritten
    assert "from proj.plat import current_platform" in fixed
    fresh_import(root, "proj.other")


def test_an_orphaned_import_nobody_else_takes_goes(tmp_path: Path):
    root = project(tmp_path, IDIOM, {"proj/plat.py": PLAT, "proj/other.py": "from proj.plat import current_platform\n"})
    proc = fix(root)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "current_platform" not in (root / "proj/model.py").read_text()


def test_an_orphaned_import_listed_in_a_computed_all_stays(tmp_path: Path):
    model = IDIOM + "\n__all__ = [n for n in dir() if not n.startswith('_')]\n"
    root = project(tmp_path, model, {"proj/plat.py": PLAT})
    proc = fix(root)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "from proj.plat import current_platform" in (root / "proj/model.py").read_text()


# --- 4. one safe reader: .gitignore as a FIFO, /dev/zero, not UTF-8 ---------------------------------


@pytest.mark.parametrize("kind", ["fifo", "fifo-symlink", "dev-zero-symlink", "not-utf8"])
def test_a_hostile_gitignore_is_a_message_never_a_hang_or_traceback(tmp_path: Path, kind: str):
    """0.2.0 read `.gitignore` with `read_text()`: a FIFO hung every run, `/dev/zero` ended in a
    MemoryError traceback, one non-UTF-8 byte in a UnicodeDecodeError traceback (exit 1)."""
    root = tiny_project(tmp_path)
    gitignore = root / ".gitignore"
    if kind == "fifo":
        os.mkfifo(gitignore)
    elif kind == "fifo-symlink":
        os.mkfifo(tmp_path / "pipe")
        gitignore.symlink_to(tmp_path / "pipe")
    elif kind == "dev-zero-symlink":
        gitignore.symlink_to("/dev/zero")
    else:
        gitignore.write_bytes(b"# caf\xe9\nbuild/\n")
    with time_limit(20):
        proc = dtl(root, "check", "--no-cache", "--output-format", "concise")
    assert proc.returncode == 1, proc.stdout + proc.stderr  # the one finding of proj/attn.py
    assert "proj/attn.py" in proc.stdout
    assert ".gitignore" in proc.stderr and ("not read" in proc.stderr or "not UTF-8" in proc.stderr)


def test_a_gitignore_with_non_utf8_bytes_matches_names_byte_for_byte(tmp_path: Path):
    root = tiny_project(tmp_path)
    (root / ".gitignore").write_bytes(b"gen_\xff.py\n")
    name = os.fsdecode(b"gen_\xff.py")
    (root / "proj" / name).write_text("x = 1\n")
    from dtype_lint.core.discovery import discover

    assert not any(p.endswith(name) for p in discover([str(root)], (), root))


# --- 5. .gitignore as git reads it ------------------------------------------------------------------

# (the .gitignore files, a path -> ignored?) from gitignore(5) and git's own examples.
GIT_EXAMPLES = {
    # "Example to exclude everything except a specific directory foo/bar": the whitelist idiom.
    "whitelist": ({".gitignore": "*\n!*/\n!*.py\n"}, {"proj/attn.py": False, "top.py": False, "proj/sub/x.py": False}),
    # "It is not possible to re-include a file if a parent directory of that file is excluded."
    "parent-excluded": ({".gitignore": "build/\n!build/keep.py\n"}, {"build/keep.py": True, "src/build/x.py": True,
                                                                      "top.py": False}),
    # "/foo/*" + "!/foo/bar": only foo/bar of foo.
    "foo-bar": ({".gitignore": "/foo/*\n!/foo/bar\n"}, {"foo/bar/x.py": False, "foo/baz.py": True, "foo/q/y.py": True}),
    # A leading slash anchors to the .gitignore's folder; "doc/frotz/" anchored by its middle slash.
    "anchored": ({".gitignore": "/top.py\ndoc/frotz/\n"}, {"top.py": True, "a/top.py": False, "doc/frotz/x.py": True,
                                                            "a/doc/frotz/x.py": False}),
    # "**/foo", "abc/**", "a/**/b".
    "double-star": ({".gitignore": "**/gen\nvendor/**\na/**/b.py\n"},
                    {"x/gen/y.py": True, "gen/y.py": True, "vendor/z.py": True, "a/x/y/b.py": True, "a/b.py": True,
                     "c/a/b.py": False}),
    # A `!` re-includes what an earlier line excluded; a later line wins.
    "negation": ({".gitignore": "*.py\n!keep.py\n"}, {"keep.py": False, "a/keep.py": False, "a/x.py": True}),
    # A nested .gitignore applies below its folder, relative to it, and decides over the root's.
    "nested": ({".gitignore": "*_gen.py\n", "sub/.gitignore": "!a_gen.py\n/local.py\n"},
               {"x_gen.py": True, "sub/a_gen.py": False, "sub/b_gen.py": True, "sub/local.py": True,
                "sub/deeper/local.py": False, "local.py": False}),
    # Escapes and comments.
    "escapes": ({".gitignore": "# a comment\n\\#hash.py\n\\!bang.py\n"}, {"#hash.py": True, "!bang.py": True,
                                                                          "a.py": False}),
}


@pytest.mark.parametrize("case", list(GIT_EXAMPLES))
def test_gitignore_follows_git(tmp_path: Path, case: str):
    """0.2.0 skipped every `!` line (the whitelist excluded every file: "No Python files
    checked.", exit 0) and read only the root's .gitignore."""
    from dtype_lint.core.discovery import discover

    ignores, expected = GIT_EXAMPLES[case]
    write_tree(tmp_path, {**ignores, **{p: "x = 1\n" for p in expected}})
    found = {Path(p).relative_to(tmp_path).as_posix() for p in discover([str(tmp_path)], (), tmp_path)}
    assert {p: p not in found for p in expected} == expected
    if shutil.which("git"):
        subprocess.run(["git", "init", "-q", str(tmp_path)], check=True)
        listed = subprocess.run(["git", "-C", str(tmp_path), "ls-files", "--others", "--exclude-standard"],
                                capture_output=True, text=True, check=True).stdout.split()
        assert {p: p not in listed for p in expected} == expected, "git itself disagrees with the case"


def test_the_whitelist_gitignore_still_checks_the_tree(tmp_path: Path):
    root = tiny_project(tmp_path)
    (root / ".gitignore").write_text("*\n!*/\n!*.py\n")
    proc = dtl(root, "check", "--no-cache", "--output-format", "concise")
    assert proc.returncode == 1 and "proj/attn.py" in proc.stdout


# --- 6. outputs never clobber inputs -----------------------------------------------------------------


@pytest.mark.parametrize("args", [
    ("check", ".", "-o", "proj/attn.py"),  # 0.2.0: "wrote proj/attn.py (report)", exit 0
    ("check", ".", "-o", "proj/new_report.py"),
    ("check", ".", "-o", "pyproject.toml"),
    ("check", ".", "-o", ".gitignore"),
    ("check", ".", "--write-baseline", "proj/attn.py"),
    ("check", ".", "--baseline", "base.json", "--write-baseline", "base.json"),
    ("check", "notes.txt", "proj", "-o", "notes.txt"),
    ("migrate", ".", "--report", "proj/attn.py"),  # 0.2.0 overwrote it with the report
    ("migrate", ".", "--series", "proj/attn.py"),
    ("check", ".", "-o", ".dtype_lint_cache/report.txt"),
])
def test_an_output_that_is_an_input_is_refused(tmp_path: Path, args: tuple):
    root = tiny_project(tmp_path, {".gitignore": "*.log\n", "notes.txt": "mine\n",
                                   "base.json": '{"version": 1, "findings": []}\n'})
    (root / ".dtype_lint_cache").mkdir()
    before = tree_bytes(root)
    proc = dtl(root, *args)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert "not overwritten" in proc.stderr or "not written" in proc.stderr
    assert tree_bytes(root) == before


def test_a_relative_output_symlinked_outside_the_project_is_refused(tmp_path: Path):
    """0.2.0: `-o report.txt`, where the repository's report.txt links to a file outside it,
    overwrote that file."""
    root = tiny_project(tmp_path / "repo")
    victim = tmp_path / "victim.txt"
    victim.write_text("precious\n")
    (root / "report.txt").symlink_to(victim)
    (root / "out").symlink_to(tmp_path, target_is_directory=True)
    for target in ("report.txt", "out/r.txt"):
        proc = dtl(root, "check", ".", "-o", target)
        assert proc.returncode == 2 and "outside the project root" in proc.stderr, proc.stderr
    assert victim.read_text() == "precious\n" and not (tmp_path / "r.txt").exists()
    # Named by its absolute path, the user means it.
    proc = dtl(root, "check", ".", "-o", str(victim), "--output-format", "concise")
    assert proc.returncode == 1 and "proj/attn.py" in victim.read_text()


def test_an_ordinary_report_is_written(tmp_path: Path):
    root = tiny_project(tmp_path)
    proc = dtl(root, "check", ".", "-o", "report.txt", "--output-format", "concise")
    assert proc.returncode == 1 and "proj/attn.py" in (root / "report.txt").read_text()


# --- 7. cache keys that cannot go stale ----------------------------------------------------------------


def _codes(proc) -> list[str]:
    return sorted(f"{f['path']}:{f['line']} {f['code']} {f['message']} {(f['fix'] or {}).get('applicability')}"
                  for f in json.loads(proc.stdout)["findings"])


@pytest.mark.parametrize("how", ["same-size-same-mtime", "touch-r"])
def test_an_edit_that_keeps_size_and_mtime_gets_fresh_findings(tmp_path: Path, how: str):
    """0.2.0 keyed the cache by mtime and size: an edit keeping both (`touch -r`, `cp -p`, a
    same-tick rewrite) got the old findings back."""
    root = tiny_project(tmp_path)
    target = root / "proj/attn.py"
    first = dtl(root, "check", "--output-format", "json")
    assert _codes(first)
    # Same length: the cast becomes a comment, the site goes away.
    old = "        x = x.to(self.kv_b_proj.weight.dtype)\n"
    new = target.read_text().replace(old, "        # " + old.strip()[:-2] + "\n")
    st = target.stat()
    assert len(new.encode()) == st.st_size
    target.write_text(new)
    if how == "touch-r":
        reference = tmp_path / "ref"
        reference.write_text("")
        os.utime(reference, ns=(st.st_atime_ns, st.st_mtime_ns))
        subprocess.run(["touch", "-r", str(reference), str(target)], check=True)
    else:
        os.utime(target, ns=(st.st_atime_ns, st.st_mtime_ns))
    assert target.stat().st_mtime_ns == st.st_mtime_ns and target.stat().st_size == st.st_size
    cached = dtl(root, "check", "--output-format", "json")
    fresh = dtl(root, "check", "--no-cache", "--output-format", "json")
    assert _codes(cached) == _codes(fresh)
    assert _codes(cached) != _codes(first)


# --- 8. no traceback from any environment -----------------------------------------------------------


def _cli(cwd: Path, *args: str, env: dict | None = None, unset: tuple[str, ...] = ()) -> subprocess.CompletedProcess:
    environment = {k: v for k, v in os.environ.items() if k not in unset}
    environment.update(env or {})
    return subprocess.run([sys.executable, "-m", "dtype_lint", *args], cwd=cwd, env=environment,
                          capture_output=True, text=True, timeout=120)


def test_a_deleted_working_folder_is_a_message(tmp_path: Path):
    """0.2.0: a FileNotFoundError traceback from Path.cwd()."""
    root = tiny_project(tmp_path / "p")
    gone = tmp_path / "gone"
    gone.mkdir()
    script = ("import os, sys, subprocess\nos.chdir(sys.argv[1])\nos.rmdir(sys.argv[1])\n"
              "p = subprocess.run([sys.executable, '-m', 'dtype_lint', 'check', sys.argv[2]], capture_output=True, text=True)\n"
              "sys.stdout.write(p.stderr)\nsys.exit(p.returncode)\n")
    proc = subprocess.run([sys.executable, "-c", script, str(gone), str(root)], capture_output=True, text=True,
                          timeout=120)
    assert proc.returncode == 2 and "Traceback" not in proc.stdout
    assert "current folder" in proc.stdout


@pytest.mark.parametrize("env,unset", [({}, ("HOME",)), ({"HOME": "/nonexistent/home"}, ()),
                                        ({"HOME": "/dev/null"}, ()), ({"XDG_CACHE_HOME": "/dev/null/x"}, ())])
def test_an_odd_home_is_a_normal_run(tmp_path: Path, env: dict, unset: tuple):
    """In this process: the run reads HOME and the XDG folders when it needs them (its cache key,
    git's global excludes, the tool's cache), and `dtl` fails on a traceback."""
    root = tiny_project(tmp_path)
    proc = dtl(root, "check", ".", "--output-format", "concise", env=env, unset=unset)
    assert proc.returncode == 1, proc.stderr
    assert "proj/attn.py" in proc.stdout


def test_an_interpreter_started_with_a_file_for_home_runs_normally(tmp_path: Path):
    """The odd homes above start no interpreter; this one does, so what is imported at start-up
    sees a home that is a file too."""
    root = tiny_project(tmp_path)
    proc = _cli(root, "check", ".", "--output-format", "concise", env={"HOME": "/dev/null"})
    assert proc.returncode == 1 and "Traceback" not in proc.stderr, proc.stderr
    assert "proj/attn.py" in proc.stdout


def _failing_writes(monkeypatch, folder: Path, error: int):
    """Every write into `folder` fails with `error` (ENOSPC: a full disk; EROFS: read-only), as a
    full or read-only staging folder would (root ignores permission bits: simulated)."""
    import errno as errno_module

    real_fdopen, real_mkstemp, real_open = os.fdopen, __import__("tempfile").mkstemp, os.open

    def inside(path) -> bool:
        return str(os.path.realpath(path)).startswith(str(os.path.realpath(folder)))

    class Failing:
        def __init__(self, f):
            self._f = f

        def write(self, _data):
            raise OSError(error, os.strerror(error))

        def __getattr__(self, name):
            return getattr(self._f, name)

        def __enter__(self):
            return self

        def __exit__(self, *exc):
            self._f.close()

    def fdopen(fd, mode="r", *args, **kwargs):
        f = real_fdopen(fd, mode, *args, **kwargs)
        try:
            where = os.readlink(f"/proc/self/fd/{fd}")
        except OSError:
            return f
        return Failing(f) if "w" in mode and inside(where) else f

    def mkstemp(*args, dir=None, **kwargs):
        if error == errno_module.EROFS and dir is not None and inside(dir):
            raise OSError(error, os.strerror(error))
        return real_mkstemp(*args, dir=dir, **kwargs)

    def open_(path, flags, *args, **kwargs):
        if error == errno_module.EROFS and flags & os.O_CREAT and inside(path):
            raise OSError(error, os.strerror(error))
        return real_open(path, flags, *args, **kwargs)

    monkeypatch.setattr(os, "fdopen", fdopen)
    monkeypatch.setattr("tempfile.mkstemp", mkstemp)
    monkeypatch.setattr(os, "open", open_)


@pytest.mark.parametrize("error", ["ENOSPC", "EROFS"])
def test_a_full_or_read_only_cache_folder_still_fixes(tmp_path: Path, monkeypatch, error: str):
    """The staging folder (in the cache) is full or read-only: the cache is not written, and the
    fix is staged beside its file instead; a message or a normal run, never a traceback."""
    import errno as errno_module

    root = tiny_project(tmp_path)
    cache = root / ".dtype_lint_cache"
    cache.mkdir()
    _failing_writes(monkeypatch, cache, getattr(errno_module, error))
    proc = dtl(root, "check", "--fix", "--output-format", "concise")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "get_layer_input_dtype(self.kv_b_proj, True)" in (root / "proj/attn.py").read_text()
    monkeypatch.undo()
    assert dtl(root, "check", "--no-cache", "--output-format", "concise").returncode == 0


def test_a_full_disk_everywhere_leaves_the_file_and_says_why(tmp_path: Path, monkeypatch):
    import errno as errno_module

    root = tiny_project(tmp_path)
    before = (root / "proj/attn.py").read_bytes()
    _failing_writes(monkeypatch, root, errno_module.ENOSPC)
    proc = dtl(root, "check", "--fix", "--output-format", "concise")
    assert proc.returncode == 2, proc.stdout + proc.stderr  # the helper cannot be created
    assert "No space left" in proc.stderr
    monkeypatch.undo()
    assert (root / "proj/attn.py").read_bytes() == before
    assert not [p for p in root.rglob("*.dtl-tmp")]


# --- 9. an adversarial pass of our own ------------------------------------------------------------------

# The method body; every case is run before and after `--fix` on a layer stored in fp16 (where the
# helper must agree with the old cast) and must give the same result or the same exception.
ADVERSARIAL = {
    "lambda": """\
    def forward(self, x):
        cast = lambda: x.to(self.o_proj.weight.dtype)
        return cast()
""",
    "comprehension": """\
    def forward(self, x):
        return [y.to(self.o_proj.weight.dtype) for y in (x, x)]
""",
    "default-argument": """\
    def forward(self, x):
        def inner(d=self.o_proj.weight.dtype):
            return x.to(d)
        return inner()
""",
    "class-body": """\
    def forward(self, x):
        layer = self.o_proj
        class Inner:
            dt = layer.weight.dtype
        return x.to(Inner.dt)
""",
    "walrus": """\
    def forward(self, x):
        if (y := x.to(self.o_proj.weight.dtype)) is not None:
            return y
        return x
""",
    "global": """\
    def forward(self, x):
        global CAST
        CAST = x
        CAST = CAST.to(self.o_proj.weight.dtype)
        return CAST
""",
    "nonlocal": """\
    def forward(self, x):
        def inner():
            nonlocal x
            x = x.to(self.o_proj.weight.dtype)
        inner()
        return x
""",
    "closure-statement": """\
    def forward(self, x):
        def inner(x):
            x = x.to(self.o_proj.weight.dtype)
            return x
        return inner(x)
""",
    "match": """\
    def forward(self, x, mode="a"):
        match mode:
            case "a":
                x = x.to(self.o_proj.weight.dtype)
            case _:
                pass
        return x
""",
    "twice-on-one-line": """\
    def forward(self, x):
        x, y = x.to(self.o_proj.weight.dtype), x.to(self.o_proj.weight.dtype)
        return x, y
""",
    "twice-in-a-row": """\
    def forward(self, x):
        x = x.to(self.o_proj.weight.dtype)
        x = x.to(self.o_proj.weight.dtype)
        return x
""",
    "type-comment": """\
    def forward(self, x):
        x = x.to(self.o_proj.weight.dtype)  # type: ignore[attr-defined]
        return x
""",
    "continuation": """\
    def forward(self, x):
        x = x.to(
            self.o_proj.weight.dtype
        )
        return x
""",
    "semicolon": """\
    def forward(self, x):
        y = 1; x = x.to(self.o_proj.weight.dtype)
        return x
""",
    "del-after": """\
    def forward(self, x):
        x = x.to(self.o_proj.weight.dtype)
        del self.o_proj
        return x
""",
    "helper-name-shadowed-later": """\
    def forward(self, x):
        x = x.to(self.o_proj.weight.dtype)
        get_layer_input_dtype = None
        return x, get_layer_input_dtype
""",
    "with-and-finally": """\
    def forward(self, x):
        import contextlib
        try:
            with contextlib.nullcontext():
                x = x.to(self.o_proj.weight.dtype)
        finally:
            x = x + 0
        return x
""",
    "loop-else": """\
    def forward(self, xs):
        for x in xs:
            break
        else:
            xs = [x.to(self.o_proj.weight.dtype) for x in xs]
        return xs
""",
    # Two nested functions of one name: one scope name, two functions (the placement check
    # first keyed functions by name and refused the fix).
    "two-defs-one-name": """\
    def forward(self, x):
        def inner(x):
            x = x.to(self.o_proj.weight.dtype)
            return x
        y = inner(x)
        def inner(x):
            x = x.to(self.o_proj.weight.dtype)
            return x
        return y, inner(x)
""",
    "alias-under-if": """\
    def forward(self, x, flag=True):
        if flag:
            w = self.o_proj.weight.dtype
            x = x.to(w)
        return x
""",
}

# Layout variants of the whole module: (name, transform of the text, encoding).
LAYOUTS = {
    "spaces": (lambda t: t, None),
    "tabs": (lambda t: "\n".join(_tabs(line) for line in t.split("\n")), None),
    "cr-only": (lambda t: t.replace("\n", "\r"), None),
    "crlf": (lambda t: t.replace("\n", "\r\n"), None),
    "bom": (lambda t: t, "utf-8-sig"),
    "form-feed": (lambda t: t.replace("\n    def forward", "\n\f    def forward"), None),
}


def _tabs(line: str) -> str:
    stripped = line.lstrip(" ")
    return "\t" * ((len(line) - len(stripped)) // 4) + stripped


def _run_forward(root: Path, body: str):
    mod = fresh_import(root)
    layers = _layers(mod)
    out = []
    for weight in (torch.float16, torch.int32):
        attn = mod.Attn(layers.QLinear(weight))
        arg = [torch.zeros(2)] if "xs" in body.split("\n")[0] else torch.zeros(2)
        out.append(outcome(lambda attn=attn, arg=arg: attn.forward(arg)))
    return out


# Every case in plain layout; the statement-form cases (the ones that insert lines) in every layout.
_COMBINATIONS = [(case, "spaces") for case in ADVERSARIAL] + [
    (case, layout) for case in ("twice-in-a-row", "continuation", "match", "closure-statement")
    for layout in LAYOUTS if layout != "spaces"]


@pytest.mark.parametrize("case,layout", _COMBINATIONS)
def test_an_adversarial_site_keeps_behaviour_or_is_left_with_a_reason(tmp_path: Path, case: str, layout: str):
    body = ADVERSARIAL[case]
    transform, encoding = LAYOUTS[layout]
    text = transform(MODEL.format(body=body))
    root = project(tmp_path, "")
    (root / "proj/model.py").write_bytes(text.encode(encoding or "utf-8"))
    before = _run_forward(root, body)
    original = (root / "proj/model.py").read_bytes()
    proc = fix(root)
    assert proc.returncode in (0, 1), proc.stdout + proc.stderr
    fixed = (root / "proj/model.py").read_bytes()
    compile(fixed, "model.py", "exec")
    after = _run_forward(root, body)
    assert after[0] == before[0], (case, fixed.decode("utf-8", "replace"))  # fp16: identical
    if fixed != original:
        assert "torch.int32" not in after[1], (case, after)  # int32 storage: no longer cast to it
        # The newline style and BOM are kept.
        assert fixed.startswith(b"\xef\xbb\xbf") == original.startswith(b"\xef\xbb\xbf")
        assert (b"\r\n" in fixed) == (b"\r\n" in original) and (b"\n" in fixed) == (b"\n" in original)
        again = dtl(root, "check", "--no-cache", "--output-format", "concise")
        assert "DTL901" not in again.stdout
    else:  # not a site, or left with its reason
        assert proc.returncode == (1 if "DTL0" in proc.stdout or "DTL9" in proc.stdout else 0)


def test_an_alias_a_closure_reads_is_not_redefined_as_the_helper(tmp_path: Path):
    """0.2.0 checked the alias's loads in the function only, not in a lambda or nested function
    inside it: `get = lambda: w` then returned None for a packed layer."""
    body = """\
    def forward(self, x):
        w = self.o_proj.weight.dtype
        x = x.to(w)
        get = lambda: w
        return x, get()
"""
    root = project(tmp_path, MODEL.format(body=body))
    mod = fresh_import(root)
    attn = mod.Attn(_layers(mod).QLinear(torch.uint8))
    before = outcome(lambda: attn.forward(torch.zeros(2))[1])
    fix(root)
    mod = fresh_import(root)
    attn = mod.Attn(_layers(mod).QLinear(torch.uint8))
    assert outcome(lambda: attn.forward(torch.zeros(2))[1]) == before == "[torch.uint8]"


def test_a_gitignore_pattern_that_would_backtrack_is_not_applied(tmp_path: Path):
    """`a*a*a*a*a*a*b` against a long file name makes Python's regular expressions backtrack for
    minutes: such a pattern is refused with a message, the run finishes."""
    root = tiny_project(tmp_path, {".gitignore": "a*a*a*a*a*a*a*a*a*a*b\n", "proj/" + "a" * 200 + ".py": "x = 1\n"})
    with time_limit(30):
        proc = dtl(root, "check", "--no-cache", "--output-format", "concise")
    assert proc.returncode == 1 and "cannot be matched safely" in proc.stderr


@pytest.mark.parametrize("files", [
    {"proj/sub/__init__.py": "from proj.model import Attn  # noqa: F401\n", "proj/sub/dtypes.py": None},
    {"proj/sub/__init__.py": "", "proj/sub/dtypes.py": "from ..model import Attn  # noqa: F401\n"},
])
def test_a_cycle_through_a_package_init_or_a_relative_import_is_refused(tmp_path: Path, files: dict):
    helper = "import torch\n\n\ndef get_layer_input_dtype(layer, fp8_input):\n" + HELPER_BODY
    files = {k: (helper if v is None else (v + "\n" + helper if k.endswith("dtypes.py") else v)) for k, v in files.items()}
    pyproject = PYPROJECT.replace("proj.dtypes", "proj.sub.dtypes")
    root = project(tmp_path, SITE, files, pyproject=pyproject)
    proc = fix(root)
    assert proc.returncode == 1 and "import cycle" in proc.stdout, proc.stdout + proc.stderr
    fresh_import(root)


def test_an_orphaned_import_listed_in_all_stays(tmp_path: Path):
    model = IDIOM + '\n__all__ = ["Attn", "current_platform"]\n'
    root = project(tmp_path, model, {"proj/plat.py": PLAT})
    proc = fix(root)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "from proj.plat import current_platform" in (root / "proj/model.py").read_text()
