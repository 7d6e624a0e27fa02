"""Storage formats as data (dtype_lint/dtypes/storage_formats.py), and repacks read from what the
code does.

The MXFP6 experiment: a vLLM-style backend registers `weight` in the compute dtype and, after
loading, packs it into uint8 through its own `pack_mxfp6(w)`. A function-name regex used to decide
what a repack is: `pack_mxfp6` matched nothing (the layers' casts were not reported at all), the
same code renamed `repack_int_mxfp6` matched and was called int32. The storage model now reads the
dtype the new tensor gets, whatever the function is called. The table's own invariants (one helper
answer per container) and its agreement with the helper template and the kernels' verify matrix
are checked here too.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
import torch
from cli_runner import dtl
from tiny_project import write_tree

from dtype_lint.dtypes import storage_formats
from dtype_lint.dtypes.evaluator import PARAMS
from dtype_lint.dtypes.storage_formats import FORMATS, KEEP, MODEL_DTYPE, WEIGHT_DTYPE

CORE = {
    "pyproject.toml": """
        [project]
        name = "mxlm"
        version = "0"

        [tool.dtype-lint]
        preset = "generic"
    """,
    "mxlm/__init__.py": "",
    "mxlm/layers/__init__.py": "",
    "mxlm/layers/linear.py": """
        import torch
        from torch import nn

        from mxlm.quant.base import QuantConfig


        class LinearBase(nn.Module):
            def __init__(self, n: int, quant_config: QuantConfig | None = None):
                super().__init__()
                self.quant_method = quant_config.get_quant_method(self, "") if quant_config else None
                self.quant_method.create_weights(self, n, torch.bfloat16)
    """,
    "mxlm/quant/__init__.py": "",
    "mxlm/quant/base.py": """
        class QuantConfig:
            def get_quant_method(self, layer, prefix):
                raise NotImplementedError
    """,
    "mxlm/models/__init__.py": "",
    "mxlm/models/attention.py": """
        from torch import nn

        from mxlm.layers.linear import LinearBase


        class Attention(nn.Module):
            def __init__(self, quant_config=None):
                super().__init__()
                self.q_proj = LinearBase(64, quant_config=quant_config)
                self.kv_proj = LinearBase(64, quant_config=quant_config)
                self.o_proj = LinearBase(64, quant_config=quant_config)

            def forward(self, x, latent, out):
                q = self.q_proj(x.to(self.q_proj.weight.dtype))
                kv = self.kv_proj(latent.to(self.kv_proj.weight.dtype))
                return self.o_proj(out.to(self.o_proj.weight.dtype)), q, kv
    """,
}
SITES = 3  # the casts of `mxlm/models/attention.py`

BACKEND = """
    import torch

    from mxlm.layers.linear import LinearBase
    from mxlm.quant.base import QuantConfig

{packer}

    class Mx6LinearMethod:
        def create_weights(self, layer, n, params_dtype):
            layer.register_parameter("weight", torch.nn.Parameter(torch.empty(n, n, dtype=params_dtype)))

        def process_weights_after_loading(self, layer):
            layer.weight = torch.nn.Parameter({name}(layer.weight.data), requires_grad=False)


    class Mx6Config(QuantConfig):
        def get_quant_method(self, layer, prefix):
            if isinstance(layer, LinearBase):
                return Mx6LinearMethod()
            return None
"""

# Six-bit codes, four to three bytes: the result is allocated as uint8 and filled by shifts.
MXFP6_PACKER = """
    def {name}(w):
        codes = (w.float().abs().clamp(max=7.5) * 8).round().to(torch.uint8)
        packed = torch.empty(w.shape[0], w.shape[1] * 3 // 4, dtype=torch.uint8, device=w.device)
        packed[:, 0::3] = codes[:, 0::4] | (codes[:, 1::4] << 6)
        packed[:, 1::3] = (codes[:, 1::4] >> 2) | (codes[:, 2::4] << 4)
        packed[:, 2::3] = (codes[:, 2::4] >> 4) | (codes[:, 3::4] << 2)
        return packed
"""

# An innocent name; the words are int32 because the code views them so.
INT32_PACKER = """
    def {name}(w):
        return w.contiguous().view(torch.uint8).view(-1, 4).view(torch.int32)
"""


def _project(root: Path, name: str, packer: str) -> Path:
    body = BACKEND.format(packer=packer.format(name=name), name=name)
    return write_tree(root, {**CORE, "mxlm/quant/mx6.py": body}, dedent=True)


def _findings(root: Path) -> list[dict]:
    proc = dtl(root, "check", ".", "--no-cache", "--output-format", "json")
    assert proc.returncode in (0, 1), proc.stderr
    return json.loads(proc.stdout)["findings"]


@pytest.mark.parametrize("name", ["pack_mxfp6", "repack_int_mxfp6"])
def test_a_backend_packing_to_uint8_is_reported_as_uint8_whatever_its_packer_is_called(tmp_path, name):
    findings = _findings(_project(tmp_path, name, MXFP6_PACKER))
    casts = [f for f in findings if f["code"] == "DTL001"]
    assert len(casts) == SITES, [f["code"] for f in findings]
    for finding in casts:
        assert "Mx6 (mx6.py:" in finding["message"] and "repacks `weight` to uint8" in finding["message"]
        assert "int32" not in finding["message"]
        backend_lines = [e["message"] for e in finding["evidence"] if e["message"].startswith("backend: ")]
        assert backend_lines and all("repacks `weight` to uint8" in line for line in backend_lines)


def test_a_backend_viewing_its_words_as_int32_is_reported_as_int32(tmp_path):
    findings = _findings(_project(tmp_path, "tidy_weight", INT32_PACKER))
    casts = [f for f in findings if f["code"] == "DTL001"]
    assert len(casts) == SITES
    assert all("repacks `weight` to int32" in f["message"] and "uint8" not in f["message"] for f in casts)


def _storages(root: Path) -> set[tuple[str, str, str]]:
    from dtype_lint.analysis.storage.storage_model import CodeBackends
    from dtype_lint.run.catalogue_build import project_facts

    here = os.getcwd()
    os.chdir(root)
    try:
        config, project = project_facts(".")
        found = CodeBackends(project, config.all_config_params).storages_for("mxlm.layers.linear.LinearBase")
    finally:
        os.chdir(here)
    return {(s.kind, s.dtype, s.what) for s in found or ()}


@pytest.mark.parametrize("packer, expected", [
    # the result's dtype is stated where it is allocated, in a local the function returns
    ("""
    def squeeze_codes(w):
        words = torch.zeros(w.shape[0], w.shape[1] // 8, dtype=torch.int32, device=w.device)
        for i in range(8):
            words |= w[:, i::8].int() << (4 * i)
        return words
    """, "int32"),
    # a cast at the end, after arithmetic
    ("""
    def squeeze_codes(w):
        return (w[:, 0::2].int() | (w[:, 1::2].int() << 4)).to(torch.uint8)
    """, "uint8"),
    # through a second project function
    ("""
    def _bytes(w):
        return w.view(torch.int8)


    def squeeze_codes(w):
        return _bytes(w).t().contiguous()
    """, "int8"),
])
def test_the_repack_dtype_is_read_from_the_code(tmp_path, packer, expected):
    assert _storages(_project(tmp_path, "squeeze_codes", packer)) == {
        ("packed", expected, f"repacks `weight` to {expected}")}


def test_a_replacement_whose_dtype_is_not_integer_is_no_repack(tmp_path):
    """`layer.weight = Parameter(w.t().contiguous())` keeps the registered (compute) storage."""
    packer = """
    def squeeze_codes(w):
        return w.t().contiguous()
    """
    assert _storages(_project(tmp_path, "squeeze_codes", packer)) == {
        ("compute", "params_dtype", "registers `weight` in the compute dtype (`params_dtype`)")}


def test_a_replacement_in_the_registered_dtype_keeps_the_registration(tmp_path):
    """Registered uint8, replaced after loading by an empty uint8 placeholder (vLLM's ModelOpt
    block quant, on some layers only): the storage is unchanged, so the registration names it."""
    packer = """
    def squeeze_codes(w):
        return torch.empty(0, dtype=torch.uint8, device=w.device)
    """
    root = _project(tmp_path, "squeeze_codes", packer)
    backend = root / "mxlm/quant/mx6.py"
    backend.write_text(backend.read_text().replace("dtype=params_dtype", "dtype=torch.uint8"))
    assert _storages(root) == {("packed", "uint8", "registers `weight` as uint8")}


def test_a_compiled_op_is_read_from_the_formats_table(tmp_path):
    """A kernel outside the tree (no code to read) is known by the format that records it."""
    packer = """
    def squeeze_codes(w):
        return torch.ops._C.gptq_marlin_repack(w, None, w.shape[0], w.shape[1], 8)
    """
    assert storage_formats.format_of_kernel("gptq_marlin_repack").container == "int32"
    assert _storages(_project(tmp_path, "squeeze_codes", packer)) == {
        ("packed", "int32", "repacks `weight` to int32")}


# ---- the table ---------------------------------------------------------------------------------

def test_formats_sharing_a_container_differ_but_agree_on_the_helper_answer():
    """Two uint8 formats differ in what the layer does with its input (NVFP4 quantizes it,
    bitsandbytes 4-bit dequantizes its weight), yet a helper keyed by `weight.dtype` gives them
    one answer, and the table says that is right (module docstring)."""
    nvfp4, bnb4 = storage_formats.format_named("nvfp4"), storage_formats.format_named("bnb_4bit")
    assert nvfp4.container == bnb4.container == "uint8"
    assert nvfp4.quantizes_input and not bnb4.quantizes_input
    assert (nvfp4.answer, nvfp4.answer_fp8_input) == (bnb4.answer, bnb4.answer_fp8_input)
    assert storage_formats.answers_by_container()["uint8"] == (KEEP, MODEL_DTYPE)


def test_a_format_a_dtype_keyed_helper_cannot_serve_is_refused(monkeypatch):
    """A uint8 format that takes an fp8 input as it is would need another answer from the same
    dtype: the table refuses it rather than let the helper be wrong for one of them."""
    fp8_in = storage_formats.StorageFormat("w4a8_uint8", "W4A8", "uint8", 4, True, KEEP, KEEP)
    monkeypatch.setattr(storage_formats, "FORMATS", (*FORMATS, fp8_in))
    with pytest.raises(ValueError, match="w4a8_uint8 wants"):
        storage_formats.answers_by_container()


def test_the_tables_derived_from_the_formats():
    from dtype_lint.analysis.storage import storage_dispatch
    from dtype_lint.dtypes import evaluator
    from dtype_lint.ecosystems.hf.family import STORAGE_WORDS
    from dtype_lint.ecosystems.registry import plugin

    assert evaluator.STORAGES == ("float16", "bfloat16", "float32", "float8_e4m3fn", "float8_e5m2",
                                  "int32", "uint8", "int8", None)
    assert evaluator.PACKED == ("int32", "uint8", "int8", None)
    # int8 (W8A8, bitsandbytes 8-bit) holds one value per byte: a test of it names its format
    assert storage_dispatch.CONTAINER_DTYPES == {"int32", "uint8"}
    assert plugin("vllm", "words").DEFAULT_WORDS == "int32 under Marlin, uint8 under NVFP4, absent under AWQ"
    assert STORAGE_WORDS == {"uint8": "uint8", "int8": "int8", "fp8": "float8_e4m3fn", "none": "absent"}
    assert {f.kind for f in FORMATS} == {"compute", "fp8", "packed", "absent"}


def _expected(answer: str, container: str | None) -> str:
    return {MODEL_DTYPE: f"torch.{PARAMS}", KEEP: "None", WEIGHT_DTYPE: f"torch.{container}"}[answer]


@pytest.mark.parametrize("template", ["torch", "vllm"])
def test_the_helper_template_gives_each_format_its_answer(template):
    from dtype_lint.dtypes.evaluator import Case
    from dtype_lint.fix.helper_template import function_table, helper_source

    table = function_table(helper_source("input_dtype", template), "input_dtype")
    for storage in FORMATS:
        if template == "vllm" and storage.container == "float8_e5m2":
            continue  # the vllm template's fp8 is the platform's (e4m3fn here): e5m2 is no vLLM weight format
        for flag, answer in ((False, storage.answer), (True, storage.answer_fp8_input)):
            assert table.get(Case(storage.container, flag)) == _expected(answer, storage.container), (storage, flag)


# The verify matrix's layer kinds (kernels_ref/harness/backends.py) and the format each stores.
MATRIX_FORMATS = {"Fp8Linear": "fp8", "Fp8Block128": "fp8", "MarlinFp8": "marlin_fp8", "NvFp4": "nvfp4",
                  "AwqLike": "awq", "Int8": "int8"}


def test_the_kernels_matrix_stores_what_the_formats_say_and_the_helper_answers_them():
    """Each row of the verify matrix builds a layer; its `.weight` is its format's container, and
    the helper template gives that layer the format's answer."""
    from dtype_lint.fix.helper_template import helper_source
    from dtype_lint.kernels_ref.harness.backends import BACKENDS

    namespace: dict = {}
    exec(compile(helper_source("input_dtype", "torch"), "<helper>", "exec"), namespace)  # noqa: S102 our template
    helper = namespace["input_dtype"]
    torch.manual_seed(0)
    weight = torch.randn(128, 256)
    seen = set()
    for row in BACKENDS.values():
        kind = row.layer_kind.split(" ")[0]
        if (kind, row.model_dtype, row.fp8_prefill) in seen:
            continue
        seen.add((kind, row.model_dtype, row.fp8_prefill))
        name = MATRIX_FORMATS.get(kind) or {torch.bfloat16: "bf16", torch.float16: "fp16"}[row.model_dtype]
        storage = storage_formats.format_named(name)
        layer = row.build(weight, row.model_dtype, 4.0)
        stored = getattr(layer, "weight", None)
        assert (None if stored is None else str(stored.dtype).removeprefix("torch.")) == storage.container, row.id
        answer = storage.answer_fp8_input if row.fp8_prefill else storage.answer
        want = {MODEL_DTYPE: layer.params_dtype, KEEP: None, WEIGHT_DTYPE: getattr(stored, "dtype", None)}[answer]
        assert helper(layer, row.fp8_prefill) == want, row.id
