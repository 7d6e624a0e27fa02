"""The shared test-project builder and tree snapshot, and the smallest project with one fixable
site (for the tests that attack dtype-lint from outside: bad input, hostile file systems,
interrupted runs): `proj/attn.py` casts an activation to a vLLM ColumnParallelLinear's weight
dtype; `--fix` creates `proj/dtypes.py` and routes the cast through it.

`write_tree(root, files)` writes a project for any test (text, bytes, or None to leave a file
out; `dedent=True` for files written as indented triple-quoted blocks); `tree_bytes(root)` is the
one snapshot of a tree to compare before and after a run."""

from __future__ import annotations

import contextlib
import importlib
import signal
import sys
import textwrap
from pathlib import Path

PYPROJECT = '[tool.dtype-lint]\nhelper = "proj.dtypes:get_layer_input_dtype"\n'

ATTN = """\
import torch
from vllm.model_executor.layers.linear import ColumnParallelLinear


class Attn(torch.nn.Module):
    def __init__(self, kv_b_proj: ColumnParallelLinear):
        super().__init__()
        self.kv_b_proj = kv_b_proj

    def forward(self, x):
        x = x.to(self.kv_b_proj.weight.dtype)
        return self.kv_b_proj(x)
"""

FIXED_CALL = "get_layer_input_dtype(self.kv_b_proj, True)"

# A project whose layer is a real torch module with a weight of the dtype a test picks: runtime
# tests import the module before and after a fix and compare what it does.
STUB_PYPROJECT = """\
[tool.dtype-lint]
quantizable = ["proj.layers.QLinear"]
helper = "proj.dtypes:get_layer_input_dtype"
helper-template = "torch"
"""

# A module of that project casting to its layer's weight dtype (the layer handed in).
STUB_MODEL = """\
import torch
from proj.layers import QLinear


class Attn(torch.nn.Module):
    def __init__(self, o_proj: QLinear):
        super().__init__()
        self.o_proj = o_proj

    def forward(self, x):
        x = x.to(self.o_proj.weight.dtype)
        return x
"""

# The start of a model module of that project: a model holding a QLinear handed in, up to where
# its `forward` (a test's own) begins.
STUB_MODEL_HEAD = (
    "import torch\n"
    "from proj.layers import QLinear\n\n\n"
    "class Model(torch.nn.Module):\n"
    "    def __init__(self, proj: QLinear):\n"
    "        super().__init__()\n"
    "        self.proj = proj\n\n"
)

STUB_LAYERS = """\
import torch


class QLinear(torch.nn.Module):
    def __init__(self, weight_dtype, params_dtype=torch.bfloat16):
        super().__init__()
        self.weight = torch.nn.Parameter(torch.zeros(2, dtype=weight_dtype), requires_grad=False)
        self.params_dtype = params_dtype
"""


def write_tree(root: Path, files: dict[str, str | bytes | None], *, dedent: bool = False) -> Path:
    """Write `files` (path relative to `root` -> text, bytes, or None: leave it out) under `root`,
    creating folders; text is written as is (no newline translation), dedented first with
    `dedent`. Returns `root`."""
    for rel, data in files.items():
        if data is None:
            continue
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        if isinstance(data, bytes):
            path.write_bytes(data)
        else:
            path.write_text(textwrap.dedent(data).lstrip("\n") if dedent else data, encoding="utf-8", newline="")
    return root


def tiny_project(root: Path, files: dict[str, str | bytes | None] | None = None, pyproject: str | bytes = PYPROJECT) -> Path:
    """`root` holding pyproject.toml, proj/__init__.py, proj/attn.py, and `files` (None: leave out)."""
    return write_tree(root, {"pyproject.toml": pyproject, "proj/__init__.py": "", "proj/attn.py": ATTN,
                             **(files or {})})


def stub_project(root: Path, model: str, extra: dict[str, str] | None = None, pyproject: str = STUB_PYPROJECT) -> Path:
    """`root` holding the run-time stub project: `proj/layers.py` (a real torch layer whose weight
    has the dtype a test picks), `proj/model.py` = `model`, and `extra` files."""
    return write_tree(root, {"pyproject.toml": pyproject, "proj/__init__.py": "", "proj/layers.py": STUB_LAYERS,
                             "proj/model.py": model, **(extra or {})})


def assert_fixed_model_runs(before, after, layer, x) -> None:
    """The stub project's `Model.forward(x)` after a fix (module `after`), against the code before
    it (`before`), on every storage the helper's family can meet: float and complex storage cast as
    before, packed storage (Marlin's int32, NVFP4's uint8) and a layer without `.weight` (AWQ) to
    QLinear's model dtype (`params_dtype`, bf16). `layer`: the project's QLinear class."""
    import torch

    for dtype in (torch.bfloat16, torch.float16, torch.float32, torch.complex64):
        assert after.Model(layer(dtype)).forward(x).dtype == before.Model(layer(dtype)).forward(x).dtype == dtype
    for packed in (torch.int32, torch.uint8):
        assert after.Model(layer(packed)).forward(x).dtype == torch.bfloat16
    absent = layer(torch.bfloat16)
    del absent.weight
    assert after.Model(absent).forward(x).dtype == torch.bfloat16


def fresh_import(root: Path, module: str = "proj.model"):
    """Import `module` from the project at `root`, dropping every `proj` module imported before
    (so a test compares the code before and after a fix, not a cached module)."""
    for name in [m for m in sys.modules if m == "proj" or m.startswith("proj.")]:
        del sys.modules[name]
    sys.path.insert(0, str(root))
    try:
        importlib.invalidate_caches()
        return importlib.import_module(module)
    finally:
        sys.path.remove(str(root))


def tree_bytes(root: Path, *, cache: bool = False) -> dict[str, bytes]:
    """Every regular file under `root` (links not followed) and its bytes, by relative path; the
    cache folder's files too with `cache` (to show that a command writes nothing at all)."""
    return {p.relative_to(root).as_posix(): p.read_bytes() for p in sorted(root.rglob("*"))
            if p.is_file() and not p.is_symlink() and (cache or ".dtype_lint_cache" not in p.parts)}


class Hang(BaseException):
    """Raised by `time_limit`: a BaseException, so no `except Exception` in the code under test
    can swallow it."""


@contextlib.contextmanager
def time_limit(seconds: int):
    """Fail (Hang) instead of hanging when the body blocks or runs away (POSIX: SIGALRM)."""

    def expired(*_):
        raise Hang(f"took more than {seconds} s")

    previous = signal.signal(signal.SIGALRM, expired)
    signal.alarm(seconds)
    try:
        yield
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)


# --- a journey over a project of fixtures/journeys/ (tests/test_journey_*.py) -----------------------


def copy_project(fixture: Path, tmp_path: Path, name: str = "proj") -> Path:
    """A copy of the journey project `fixture` under `tmp_path/name`, to check and fix."""
    import shutil

    root = tmp_path / name
    shutil.copytree(fixture, root)
    return root


def json_findings(root: Path, *args: str) -> list[dict]:
    """`dtype-lint check . --no-cache --output-format json` in `root`: its findings."""
    import json

    from cli_runner import dtl

    proc = dtl(root, "check", ".", "--no-cache", "--output-format", "json", *args)
    assert proc.returncode in (0, 1), proc.stdout + proc.stderr
    return json.loads(proc.stdout)["findings"]


def fix_project(root: Path, *args: str):
    """`dtype-lint check . --fix --no-cache` in `root`, which must exit 0."""
    from cli_runner import dtl

    proc = dtl(root, "check", ".", "--fix", "--no-cache", *args)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return proc


def assert_fix_created_only(fixture: Path, fixed: Path, expected: list[str]) -> None:
    """The fixed copy of `fixture`: `--fix` created exactly the `expected` new .py files (its
    helper, inside the package), a fresh check finds nothing, and a second `--fix` changes nothing."""
    created = sorted(path.relative_to(fixed).as_posix() for path in fixed.rglob("*.py")
                     if not (fixture / path.relative_to(fixed)).exists())
    assert created == sorted(expected), created
    assert json_findings(fixed) == []
    before = tree_bytes(fixed)
    fix_project(fixed)
    assert tree_bytes(fixed) == before


# --- running a journey project's code on real quantized layers, in a fresh interpreter ---------------

# Prepended to every script `run_on_quantized_layers` runs: `bnb_layer(linear, kind)` is a real
# bitsandbytes layer ("bnb-4bit": Linear4bit computing in float32; "bnb-8bit": Linear8bitLt
# without fp16 weights) holding a copy of the float `linear`'s weight and bias, on CPU, as a
# loader leaves it. bitsandbytes is imported only when a script asks for a layer.
QUANTIZED_LAYERS = r'''
def bnb_layer(linear, kind):
    import bitsandbytes as bnb
    import torch

    if kind == "bnb-4bit":
        layer = bnb.nn.Linear4bit(linear.in_features, linear.out_features, compute_dtype=torch.float32)
        layer.weight = bnb.nn.Params4bit(linear.weight.data.clone(), requires_grad=False)
    elif kind == "bnb-8bit":
        layer = bnb.nn.Linear8bitLt(linear.in_features, linear.out_features, has_fp16_weights=False)
        layer.weight = bnb.nn.Int8Params(linear.weight.data.clone(), requires_grad=False, has_fp16_weights=False)
    else:
        raise ValueError(f"no bitsandbytes layer of kind {kind!r}")
    layer.bias = torch.nn.Parameter(linear.bias.data.clone(), requires_grad=False)
    return layer.to("cpu")
'''


def run_on_quantized_layers(script: str, *args: str | Path, python: str | Path = sys.executable,
                            cwd: Path | None = None, pythonpath: Path | None = None) -> dict:
    """Run `script` (which may call `bnb_layer(linear, kind)`, QUANTIZED_LAYERS) with `args` in a
    fresh `python` and return the JSON object its last stdout line prints. The environment's
    PYTHONPATH is dropped (the script puts the project it runs on `sys.path` itself, or the
    interpreter has it installed), or set to `pythonpath`."""
    import json
    import os
    import subprocess

    env = {key: value for key, value in os.environ.items() if key not in ("PYTHONPATH", "PYTHONHOME")}
    if pythonpath is not None:
        env["PYTHONPATH"] = str(pythonpath)
    proc = subprocess.run([str(python), "-c", QUANTIZED_LAYERS + script, *map(str, args)], cwd=cwd, env=env,
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return json.loads(proc.stdout.strip().splitlines()[-1])



# Runs one script per project root in one interpreter: importing torch, bitsandbytes, transformers
# and the quantization libraries is most of a run's cost, and a journey runs the same script on the
# original and on the fixed copy of one project. Between runs the project's own modules (those
# loaded from that root) leave `sys.modules` and its root leaves `sys.path`, so the fixed copy is
# imported from its own files, as a fresh interpreter would.
_EACH_ROOT = r"""
def _run_each_root(script, roots, rest):
    import contextlib, importlib, io, json, os, sys
    results = []
    for root in roots:
        saved_path, loaded = list(sys.path), set(sys.modules)
        sys.argv = ["-c", root, *rest]
        printed = io.StringIO()
        with contextlib.redirect_stdout(printed):
            exec(compile(script, "<journey script>", "exec"), {"__name__": "__main__"})
        inside = os.path.abspath(root) + os.sep
        for name in set(sys.modules) - loaded:
            if os.path.abspath(getattr(sys.modules[name], "__file__", None) or "").startswith(inside):
                del sys.modules[name]
        sys.path[:] = saved_path
        importlib.invalidate_caches()
        results.append(json.loads(printed.getvalue().strip().splitlines()[-1]))
    print(json.dumps(results))
"""


def run_on_each_project(script: str, roots: list[Path], *args: str | Path) -> list[dict]:
    """`run_on_quantized_layers(script, ROOT, *args)` for each of `roots` (the script reads its
    project's root as `sys.argv[1]`), in one fresh interpreter: the JSON objects, in order."""
    driver = _EACH_ROOT + f"_run_each_root({QUANTIZED_LAYERS + script!r}, {[str(r) for r in roots]!r}, {[str(a) for a in args]!r})\n"
    found = run_on_quantized_layers(driver)
    assert isinstance(found, list) and len(found) == len(roots), found
    return found

# A stand-in for the vLLM a plugin or an out-of-tree model runs with (vLLM is never installed
# here), in vLLM's module layout so that the `vllm` preset names its layers. Each linear layer's
# `.weight` has the storage a test picks on `LinearBase.storage` (None: no `.weight`, as AWQ and
# GPTQ leave it) when it is built with a quantization config, and the model dtype (`params_dtype`,
# bfloat16) without one, as vLLM's unquantized method leaves it. It records the dtype of the input
# it is handed (`seen`) and computes as its float twin would, with a fixed float32 weight of its own.
STAND_IN_VLLM = {
    "vllm/__init__.py": (
        "class ModelRegistry:\n"
        "    models = {}\n\n"
        "    @classmethod\n"
        "    def get_supported_archs(cls):\n"
        "        return list(cls.models)\n\n"
        "    @classmethod\n"
        "    def register_model(cls, arch, where):\n"
        "        cls.models[arch] = where\n"),
    "vllm/model_executor/__init__.py": "",
    "vllm/model_executor/layers/__init__.py": "",
    "vllm/model_executor/layers/linear.py": '''\
import torch


class LinearBase(torch.nn.Module):
    storage = torch.bfloat16  # the weight's dtype under the backend a test picks, or None: no `.weight`

    def __init__(self, input_size, output_size, quant_config=None):
        super().__init__()
        self.params_dtype = torch.bfloat16
        storage = self.storage if quant_config is not None else self.params_dtype
        if storage is not None:
            self.weight = torch.nn.Parameter(torch.zeros(output_size, input_size).to(storage), requires_grad=False)
        else:
            self.register_buffer("qweight", torch.zeros(input_size // 8, output_size, dtype=torch.int32))
        generator = torch.Generator().manual_seed(1000 * input_size + output_size)
        self.reference = torch.randn(output_size, input_size, generator=generator)
        self.seen = None

    def forward(self, x):
        self.seen = x.dtype
        return torch.nn.functional.linear(x.to(torch.float32), self.reference), None


class ColumnParallelLinear(LinearBase):
    pass


class RowParallelLinear(LinearBase):
    pass


class ReplicatedLinear(LinearBase):
    pass


class MergedColumnParallelLinear(LinearBase):
    def __init__(self, input_size, output_sizes, quant_config=None):
        super().__init__(input_size, sum(output_sizes), quant_config=quant_config)


class QKVParallelLinear(LinearBase):
    def __init__(self, hidden_size, head_size, total_num_heads, total_num_kv_heads=None, quant_config=None):
        kv_heads = total_num_heads if total_num_kv_heads is None else total_num_kv_heads
        super().__init__(hidden_size, (total_num_heads + 2 * kv_heads) * head_size, quant_config=quant_config)
''',
}


def fix_in_editor(root: Path, files: list[str]) -> None:
    """Fix `files` of the project at `root` as an editor user would: open each in the language
    server (the workspace is `root`), apply its "fix all" code action (`source.fixAll.dtype-lint`,
    helper creation included) and save, one file after the other."""
    from lsprotocol import types
    from pygls.uris import to_fs_path
    from test_trust_round3_server import Editor, open_document, start

    from dtype_lint.server import FIX_ALL

    server, _ = start(root)
    for rel in files:
        uri = open_document(server, root / rel)
        actions = server.code_actions(types.CodeActionParams(
            text_document=types.TextDocumentIdentifier(uri=uri),
            range=types.Range(start=types.Position(line=0, character=0), end=types.Position(line=0, character=0)),
            context=types.CodeActionContext(diagnostics=[], only=[FIX_ALL])))
        assert len(actions) == 1, (rel, actions)
        editor = Editor()
        editor.open = {uri: (1, (root / rel).read_text(encoding="utf-8"))}
        assert editor.apply(actions[0].edit), rel
        Path(to_fs_path(uri)).write_text(editor.open[uri][1], encoding="utf-8")


def record_class_parses(monkeypatch) -> list[str]:
    """The names of the classes parsed from their own text (trees.parse_class) from here on, in
    order: what a test of a census or a text check reads to see which classes it spared."""
    from dtype_lint.core import trees

    parsed: list[str] = []
    real = trees.parse_class

    def recording(path, text, region, *args, **kwargs):
        parsed.append(region.name)
        return real(path, text, region, *args, **kwargs)

    monkeypatch.setattr(trees, "parse_class", recording)
    return parsed


def files_passed(monkeypatch, owner, name: str) -> list[str]:
    """The names of the files `owner.<name>` is called with from now on (its first argument, a
    path), in order; the calls still do what they did."""
    names: list[str] = []
    real = getattr(owner, name)

    def recorded(path, *args, **kwargs):
        names.append(Path(path).name)
        return real(path, *args, **kwargs)

    monkeypatch.setattr(owner, name, recorded)
    return names


def module_table_inputs(folder: Path, texts: dict[str, str], loaded: list[str]):
    """A ModuleTable's files and header loader for `texts` (module -> text) written under `folder`
    as `<module>.py`: the loader stamps each module `stamp:<module>` and records it in `loaded`."""
    from dtype_lint.analysis.index.class_index import extract_header

    folder.mkdir(parents=True, exist_ok=True)
    files = []
    for module, text in texts.items():
        path = folder / f"{module}.py"
        path.write_text(text, encoding="utf-8")
        files.append((str(path), str(path), module))

    def load(mf, module):
        loaded.append(module)
        mf.stamp = f"stamp:{module}"
        return extract_header(Path(mf.path).read_text(encoding="utf-8"), module, mf.path, False)

    return files, load
