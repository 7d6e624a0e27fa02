"""The run-time guard on the real quantizers (issue #38's "done when"): each kind on bitsandbytes
4-bit and 8-bit layers on CPU, the bitsandbytes rows of docs/hf.md (the tiny models of
`dtype_lint.ecosystems.hf.verify`, reloaded quantized), peft's `orthogonal_init` on a 4-bit base, and nothing
on the same models unquantized. Slow: importing bitsandbytes alone takes seconds.

The CI budget runs the three model classes `tests/test_hf_verify.py` runs; DTL_FULL=1 every one.
"""

from __future__ import annotations

import fnmatch
import importlib
import inspect
import tempfile
from pathlib import Path

import pytest
from conftest import FULL

torch = pytest.importorskip("torch")
bnb = pytest.importorskip("bitsandbytes", reason="the `hf` extra (pip install -e '.[hf]') is not installed")

from dtype_lint.guard import DtypeGuard  # noqa: E402

HERE = Path(__file__)
CI_MODELS = ("LongT5Model", "Siglip2VisionModel", "Wav2Vec2ForPreTraining")
# The layer each model's reported site reads, under `model=` (docs/hf.md's proof rows); Switch's
# dense MLP is an expert's, whichever the seeded router sends the first token to.
LAYER_BY_MODEL = {
    "LongT5Model": "encoder.block.0.layer.1.DenseReluDense.wo",
    "SwitchTransformersModel": "encoder.block.0.layer.1.mlp.experts.expert_*.wo",
    "Siglip2VisionModel": "embeddings.patch_embedding",
    "Wav2Vec2ForPreTraining": "project_q",
    "Wav2Vec2ConformerForPreTraining": "project_q",
    "UniSpeechForPreTraining": "project_q",
}
QUANTIZER = {"bnb-4bit": ("bitsandbytes 4-bit", "torch.uint8", "Linear4bit"),
             "bnb-8bit": ("bitsandbytes 8-bit", "torch.int8", "Linear8bitLt")}


def line_of(marker: str) -> int:
    for number, text in enumerate(HERE.read_text(encoding="utf-8").splitlines(), start=1):
        if text.rstrip().endswith(f"# SITE: {marker}"):
            return number
    raise AssertionError(marker)


def bnb_layer(quantizer: str | None) -> torch.nn.Module:
    """A 64x64 layer, quantized on CPU (`.to("cpu")` packs the weight) or plain."""
    if quantizer == "bnb-4bit":
        return bnb.nn.Linear4bit(64, 64, compute_dtype=torch.float32).to("cpu")
    if quantizer == "bnb-8bit":
        return bnb.nn.Linear8bitLt(64, 64, has_fp16_weights=False).to("cpu")
    return torch.nn.Linear(64, 64)


class Model(torch.nn.Module):
    def __init__(self, quantizer: str | None) -> None:
        super().__init__()
        self.proj = bnb_layer(quantizer)

    def forward(self, x):
        hidden = self.proj(x)
        cast = hidden.to(self.proj.weight.dtype)  # SITE: cast
        scratch = torch.empty(x.shape[0], 64, dtype=self.proj.weight.dtype)  # SITE: allocate
        try:
            low = torch.finfo(self.proj.weight.dtype).min  # SITE: finfo
        except TypeError:
            low = None
        return cast, scratch, low


@pytest.mark.parametrize("quantizer", ["bnb-4bit", "bnb-8bit"])
def test_each_kind_on_real_bitsandbytes_layers(quantizer):
    model = Model(quantizer)
    with DtypeGuard(model) as guard:
        model(torch.randn(2, 64))
    assert guard.errors == []
    name, storage, layer_class = QUANTIZER[quantizer]
    found = {(Path(site.path).resolve(), site.line, site.kind, site.layer_path, site.layer_class, site.quantizer,
              site.storage) for site in guard.sites}
    assert found == {(HERE.resolve(), line_of(marker), kind, "proj", layer_class, name, storage)
                     for marker, kind in (("cast", "activation-cast"), ("allocate", "buffer-allocation"),
                                          ("finfo", "finfo"))}


def test_nothing_on_the_same_layers_unquantized_nor_inside_bitsandbytes_own_packing():
    model = Model(None)
    with DtypeGuard(model) as guard:
        model(torch.randn(2, 64))
        # bitsandbytes packs int8 and uint8 rows itself (its own casts are storage code).
        bnb_layer("bnb-8bit")(torch.randn(2, 64))
        bnb_layer("bnb-4bit")(torch.randn(2, 64))
    assert (guard.sites, guard.errors) == ([], [])


def _hf_cases():
    from dtype_lint.ecosystems.hf import verify as hf_verify

    pytest.importorskip("transformers")
    return [case for case in hf_verify._cases() if FULL or case.model in CI_MODELS]


@pytest.mark.parametrize("model_name", list(LAYER_BY_MODEL))
def test_the_bitsandbytes_rows_of_docs_hf(model_name):
    """Each `breaks` row is reported at the release's line with its layer and quantizer; the rows
    whose own guard holds (T5-style `!= torch.int8` under 8-bit) and the unquantized twin are not."""
    from dtype_lint.ecosystems.hf import verify as hf_verify

    case = next((case for case in _hf_cases() if case.model == model_name), None)
    if case is None:
        pytest.skip("outside the CI budget: DTL_FULL=1 runs every model class")
    module = importlib.import_module(case.module)
    model_class = getattr(module, case.model)
    source_lines, _start = inspect.getsourcelines(module)
    site_line = next(number for number, text in enumerate(source_lines, start=1) if case.site in text)
    torch.manual_seed(0)
    config = case.config()
    with tempfile.TemporaryDirectory() as folder:
        model_class(config).save_pretrained(folder)
        inputs = case.inputs(config)
        for quantizer in (None, "bnb-4bit", "bnb-8bit"):
            options = {"quantization_config": hf_verify.quantization_config(quantizer)} if quantizer else {}
            model = model_class.from_pretrained(folder, config=config, **options).eval()
            with DtypeGuard(model) as guard, torch.no_grad():
                try:
                    model(**inputs)
                except RuntimeError:  # the 8-bit crash docs/hf.md records, after the cast was seen
                    pass
            assert guard.errors == []
            if quantizer is None or quantizer not in case.breaks:
                assert guard.sites == [], (quantizer, guard.sites)
                continue
            name, storage, layer_class = QUANTIZER[quantizer]
            (site,) = guard.sites
            assert (Path(site.path).resolve(), site.line, site.kind) == (
                Path(module.__file__).resolve(), site_line, "activation-cast")
            assert fnmatch.fnmatchcase(site.layer_path, LAYER_BY_MODEL[model_name]), site.layer_path
            assert (site.layer_class, site.quantizer, site.storage) == (layer_class, name, storage)
            assert (site.rule, site.static_reported) == ("DTL001", True)


@pytest.mark.parametrize("quantized", [True, False])
def test_peft_orthogonal_init_on_a_4bit_base(quantized):
    """peft 0.21.2 `LoraLayer.orthogonal_init`: `dtype = self.get_base_layer().weight.dtype`, then
    `lora_A...to(dtype)`: uint8 under bitsandbytes 4-bit, and `nn.Parameter` of it crashes. The
    guard records it, and the static run reports the same line (the adapter family, docs/hf.md)."""
    peft = pytest.importorskip("peft")
    from peft.tuners.lora import layer as lora_layer

    model = torch.nn.Sequential()
    model.add_module("proj", bnb_layer("bnb-4bit" if quantized else None))
    config = peft.LoraConfig(r=8, target_modules=["proj"], init_lora_weights="orthogonal")
    with DtypeGuard(model) as guard:
        try:
            peft.get_peft_model(model, config)
            crashed = False
        except RuntimeError:
            crashed = True
    assert guard.errors == []
    if not quantized:
        assert (crashed, guard.sites) == (False, [])
        return
    source_lines, start = inspect.getsourcelines(lora_layer.LoraLayer.orthogonal_init)
    cast_line = start + next(index for index, text in enumerate(source_lines) if "lora_A.contiguous().to(dtype)" in text)
    (site,) = guard.sites
    assert crashed
    assert (Path(site.path).resolve(), site.line, site.function, site.kind) == (
        Path(lora_layer.__file__).resolve(), cast_line, "LoraLayer.orthogonal_init", "activation-cast")
    assert (site.layer_path, site.layer_class, site.quantizer, site.storage) == (
        "proj", "Linear4bit", "bitsandbytes 4-bit", "torch.uint8")
    assert site.static_reported is True
