"""The run-time guard (`dtype_lint.guard`, issue #38), on layers that store their weight as a
quantizer does: a packed parameter (uint8, int8, int32, float8) or no `.weight` at all (`qweight`).
The guard identifies storage by what a layer holds, not by its class, so these run in the fast
tier; tests/test_guard_bnb.py runs the same kinds on real bitsandbytes layers, the Hugging Face
models of docs/hf.md and peft.

Each site's expected line is found by the `# SITE:` comment on it.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")

from dtype_lint.guard import DtypeGuard, DtypeGuardError, GuardSite  # noqa: E402

pytest_plugins = ["pytester"]

HERE = Path(__file__)


def line_of(marker: str) -> int:
    """The line of this file that carries `# SITE: marker`."""
    for number, text in enumerate(HERE.read_text(encoding="utf-8").splitlines(), start=1):
        if text.rstrip().endswith(f"# SITE: {marker}"):
            return number
    raise AssertionError(f"no `# SITE: {marker}` line")


class PackedLinear(torch.nn.Module):
    """A layer whose weight is stored the way a quantizer leaves it: packed, not trainable."""

    def __init__(self, dtype: torch.dtype) -> None:
        super().__init__()
        self.weight = torch.nn.Parameter(torch.zeros(16, 8, dtype=dtype), requires_grad=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x


class QuantLinear(torch.nn.Module):
    """GPTQ/AWQ-shaped: `qweight` instead of `weight`."""

    def __init__(self) -> None:
        super().__init__()
        self.register_buffer("qweight", torch.zeros(4, 8, dtype=torch.int32))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x


class Block(torch.nn.Module):
    def __init__(self, proj: torch.nn.Module) -> None:
        super().__init__()
        self.proj = proj

    def cast(self, x):
        return x.to(self.proj.weight.dtype)  # SITE: cast

    def cast_keyword(self, x):
        target_dtype = self.proj.weight.dtype
        return x.to(device=x.device, dtype=target_dtype)  # SITE: cast-keyword

    def cast_type(self, x):
        return x.type(self.proj.weight.dtype)  # SITE: cast-type

    def cast_to_weight(self, x):
        return x.to(self.proj.weight)  # SITE: cast-to-weight

    def allocate(self, x):
        return torch.zeros(x.shape[0], dtype=self.proj.weight.dtype)  # SITE: allocate

    def allocate_new(self, x):
        return x.new_empty(3, dtype=self.proj.weight.dtype)  # SITE: allocate-new

    def finfo(self, x):
        try:
            return torch.finfo(self.proj.weight.dtype).max  # SITE: finfo
        except TypeError:  # integer storage: finfo refuses it, which is how the bug crashes
            return None

    def iinfo(self, x):
        return torch.iinfo(self.proj.weight.dtype).max  # SITE: iinfo

    def storage_dtype(self):
        return self.proj.weight.dtype

    def cast_through_helper(self, x):
        return x.to(self.storage_dtype())  # SITE: helper

    def missing(self, x):
        return x.to(self.proj.weight.dtype)  # SITE: missing

    def missing_under_no_grad(self, x):
        with torch.no_grad():  # a `with` block's handler catches nothing
            return x.to(self.proj.weight.dtype)  # SITE: missing-with

    def missing_caught_in_a_tuple(self, x):
        try:
            return x.to(self.proj.weight.dtype)
        except (KeyError, AttributeError):
            return x

    def missing_caught_elsewhere(self, x):
        try:
            return x.to(self.proj.weight.dtype)  # SITE: missing-keyerror
        except KeyError:  # not the AttributeError that escapes
            return x

    def missing_guarded(self, x):
        weight = getattr(self.proj, "weight", None)
        if hasattr(self.proj, "weight") and weight is not None:
            return x.to(weight.dtype)
        try:
            return x.to(self.proj.weight.dtype)
        except AttributeError:
            return x


def run(block: Block, method: str, x: torch.Tensor | None = None, **guard_options) -> DtypeGuard:
    x = torch.randn(2, 8) if x is None else x
    guard_options.setdefault("model", block)
    with DtypeGuard(**guard_options) as guard:
        try:
            getattr(block, method)(x)
        except (RuntimeError, AttributeError):  # the bug's own crash, after the guard saw it
            pass
    assert guard.errors == []  # no handler of the guard failed (they never raise into the model)
    return guard


def only_site(guard: DtypeGuard) -> GuardSite:
    assert len(guard.sites) == 1, guard.sites
    return guard.sites[0]


@pytest.mark.parametrize("storage", [torch.uint8, torch.int8, torch.int32])
@pytest.mark.parametrize("method,marker", [("cast", "cast"), ("cast_keyword", "cast-keyword"),
                                           ("cast_type", "cast-type"), ("cast_to_weight", "cast-to-weight"),
                                           ("cast_through_helper", "helper")])
def test_activation_cast_to_packed_storage(storage, method, marker):
    site = only_site(run(Block(PackedLinear(storage)), method))
    assert (Path(site.path).resolve(), site.line, site.kind) == (HERE.resolve(), line_of(marker), "activation-cast")
    assert (site.layer_path, site.layer_class, site.storage, site.rule) == ("proj", "PackedLinear", str(storage),
                                                                           "DTL001")
    assert site.function == f"Block.{method}"


@pytest.mark.parametrize("method,marker", [("allocate", "allocate"), ("allocate_new", "allocate-new")])
@pytest.mark.parametrize("storage", [torch.uint8, torch.int8, torch.int32, torch.float8_e4m3fn])
def test_buffer_allocated_in_storage_dtype(method, marker, storage):
    site = only_site(run(Block(PackedLinear(storage)), method))
    assert (site.line, site.kind, site.rule, site.storage) == (line_of(marker), "buffer-allocation", "DTL002",
                                                               str(storage))


@pytest.mark.parametrize("storage", [torch.uint8, torch.int8, torch.float8_e4m3fn])
def test_finfo_of_storage_dtype(storage):
    site = only_site(run(Block(PackedLinear(storage)), "finfo"))
    assert (site.line, site.kind, site.rule) == (line_of("finfo"), "finfo", "DTL001")


def test_iinfo_of_storage_dtype():
    site = only_site(run(Block(PackedLinear(torch.int8)), "iinfo"))
    assert (site.line, site.kind, site.storage) == (line_of("iinfo"), "finfo", "torch.int8")


def test_missing_weight_on_a_layer_that_keeps_qweight():
    site = only_site(run(Block(QuantLinear()), "missing"))
    assert (site.line, site.kind, site.rule, site.layer_path) == (line_of("missing"), "missing-weight", "DTL003",
                                                                  "proj")
    assert site.quantizer == "GPTQ" and "qweight" in site.storage


@pytest.mark.parametrize("method,marker", [("missing_under_no_grad", "missing-with"),
                                           ("missing_caught_elsewhere", "missing-keyerror")])
def test_missing_weight_inside_with_or_a_try_that_does_not_catch_it(method, marker):
    site = only_site(run(Block(QuantLinear()), method))
    assert (site.line, site.kind) == (line_of(marker), "missing-weight")


@pytest.mark.parametrize("method", ["missing_guarded", "missing_caught_in_a_tuple"])
def test_getattr_hasattr_and_try_are_fallbacks_not_the_bug(method):
    assert run(Block(QuantLinear()), method).sites == []


def test_fp8_storage_breaks_a_float_activation_not_an_fp8_one():
    block = Block(PackedLinear(torch.float8_e4m3fn))
    assert only_site(run(block, "cast")).storage == "torch.float8_e4m3fn"
    assert run(block, "cast", torch.randn(2, 8).to(torch.float8_e5m2)).sites == []


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16, torch.float32])
@pytest.mark.parametrize("method", ["cast", "cast_keyword", "cast_type", "cast_to_weight", "allocate", "finfo",
                                    "cast_through_helper"])
def test_zero_reports_on_float_weights(dtype, method):
    """Unquantized layers (and quanto/torchao, whose `.weight.dtype` is the float one)."""
    linear = torch.nn.Linear(8, 16).to(dtype)
    assert run(Block(linear), method).sites == []


def test_an_integer_activation_is_not_an_activation():
    assert run(Block(PackedLinear(torch.int32)), "cast", torch.arange(8).reshape(2, 4)).sites == []


def test_int_buffers_and_own_quantization_without_a_weight_read_are_not_the_bug():
    block = Block(PackedLinear(torch.int32))
    with DtypeGuard(block) as guard:
        index = torch.zeros(4, dtype=torch.int32)
        scaled = (torch.randn(4) * 10).round().to(torch.int8)
        shape = block.proj.weight.shape  # a read of the weight, but not of its dtype
        int_info = torch.iinfo(torch.int32).max
    assert (index.dtype, scaled.dtype, int_info, shape) == (torch.int32, torch.int8, 2**31 - 1, (16, 8))
    assert guard.sites == []


def test_a_dtype_read_in_another_function_is_not_linked():
    """A read in a function that does not return it is not the dtype a later call uses."""
    block = Block(PackedLinear(torch.int8))

    def log_storage():
        print(block.proj.weight.dtype)

    with DtypeGuard(block) as guard:
        log_storage()
        torch.iinfo(torch.int8)
    assert guard.sites == []


def test_without_model_layers_are_named_from_self():
    site = only_site(run(Block(PackedLinear(torch.uint8)), "cast", model=None))
    assert site.layer_path == "Block.proj"


def test_sites_are_deduplicated_by_line_and_counted():
    block = Block(PackedLinear(torch.uint8))
    with DtypeGuard(block) as guard:
        for _ in range(3):
            block.cast(torch.randn(2, 8))
    site = only_site(guard)
    assert guard.occurrences[(site.path, site.line, site.kind)] == 3
    assert guard.to_json()["sites"][0]["occurrences"] == 3


def test_nothing_is_patched_after_the_block_not_even_when_it_raised():
    originals = (torch.nn.Module.__dict__["__getattr__"], torch.finfo, torch.iinfo, torch.zeros, torch.Tensor.to,
                 torch.Tensor.dtype, torch.Tensor.new_empty)
    block = Block(PackedLinear(torch.uint8))
    with pytest.raises(ValueError), DtypeGuard(block) as guard:
        assert torch.finfo is not originals[1]
        assert "dtype" in torch.Tensor.__dict__
        raise ValueError("the model's own error")
    assert (torch.nn.Module.__dict__["__getattr__"], torch.finfo, torch.iinfo, torch.zeros, torch.Tensor.to,
            torch.Tensor.dtype, torch.Tensor.new_empty) == originals
    assert "__getattr__" not in Block.__dict__ and "__getattr__" not in PackedLinear.__dict__
    assert not {"dtype", "to", "type", "new_zeros"} & set(torch.Tensor.__dict__)
    block.cast(torch.randn(2, 8))
    torch.zeros(2, dtype=block.proj.weight.dtype)
    assert guard.sites == []


def test_nested_guards_both_see_the_site_and_unwind_in_order():
    originals = (torch.Tensor.to, torch.finfo)
    block = Block(PackedLinear(torch.uint8))
    with DtypeGuard(block) as outer:
        outer_wrappers = (torch.Tensor.to, torch.finfo)
        with DtypeGuard(block) as inner:
            block.cast(torch.randn(2, 8))
        assert (torch.Tensor.to, torch.finfo) == outer_wrappers
        block.allocate(torch.randn(2, 8))
    assert (torch.Tensor.to, torch.finfo) == originals
    assert [site.kind for site in inner.sites] == ["activation-cast"]
    assert sorted(site.kind for site in outer.sites) == ["activation-cast", "buffer-allocation"]
    assert outer.errors == inner.errors == []


def test_a_guard_is_not_reentered():
    guard = DtypeGuard()
    with guard, pytest.raises(RuntimeError, match="already active"):
        guard.__enter__()


def test_strict_raises_on_leaving_with_the_sites():
    block = Block(PackedLinear(torch.uint8))
    with pytest.raises(DtypeGuardError) as raised, DtypeGuard(block, strict=True):
        block.cast(torch.randn(2, 8))
    text = str(raised.value)
    assert f"test_guard.py:{line_of('cast')} in Block.cast" in text
    assert "floating activation cast to torch.uint8" in text and "layer proj (PackedLinear)" in text


def test_strict_adds_the_sites_to_the_models_own_error():
    block = Block(PackedLinear(torch.uint8))
    with pytest.raises(RuntimeError) as raised, DtypeGuard(block, strict=True):
        x = block.cast(torch.randn(2, 8))
        torch.nn.Parameter(x)  # what the bug does next: an integer tensor cannot require grad
    assert any(f"test_guard.py:{line_of('cast')}" in note for note in raised.value.__notes__)


def test_strict_passes_silently_on_float_weights():
    block = Block(torch.nn.Linear(8, 16))
    with DtypeGuard(block, strict=True) as guard:
        block.cast(torch.randn(2, 8))
    assert guard.sites == []


def test_static_reported_is_asked_of_the_sites_file():
    site = only_site(run(Block(PackedLinear(torch.uint8)), "cast"))
    # The test file's `Block` is no layer the static analysis can call quantizable.
    assert site.static_reported is False
    assert only_site(run(Block(PackedLinear(torch.uint8)), "cast", static=False)).static_reported is None


def test_json_holds_the_sites_and_checks_finding_records():
    guard = run(Block(PackedLinear(torch.int8)), "allocate")
    document = json.loads(json.dumps(guard.to_json()))
    assert document["summary"] == {"sites": 1, "static_reported": 0}
    site = document["sites"][0]
    assert (site["kind"], site["rule"], site["layer_path"], site["storage"]) == (
        "buffer-allocation", "DTL002", "proj", "torch.int8")
    finding = document["findings"][0]
    assert list(finding) == ["code", "message", "path", "line", "col", "end_line", "end_col", "confidence", "scope",
                             "expression", "evidence", "fix", "no_fix_reason"]
    assert (finding["code"], finding["line"]) == ("DTL002", line_of("allocate"))
    assert finding["message"].startswith("run time: buffer allocated in torch.int8")


def test_sarif_is_checks_log_with_the_run_time_facts():
    guard = run(Block(PackedLinear(torch.uint8)), "cast")
    document = guard.to_sarif()
    run_log = document["runs"][0]
    assert document["version"] == "2.1.0" and run_log["tool"]["driver"]["name"] == "dtype-lint"
    assert run_log["automationDetails"] == {"id": "dtype-lint/guard/"}
    (result,) = run_log["results"]
    assert result["ruleId"] == "DTL001"
    assert result["locations"][0]["physicalLocation"]["region"]["startLine"] == line_of("cast")
    assert result["properties"]["source"] == "run time"
    assert (result["properties"]["layerPath"], result["properties"]["storage"]) == ("proj", "torch.uint8")
    assert [rule["id"] for rule in run_log["tool"]["driver"]["rules"]] == ["DTL001"]


# -- the pytest plugin -------------------------------------------------------------------------

PLUGIN_TEST = '''
import pytest
import torch


class Packed(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.weight = torch.nn.Parameter(torch.zeros(4, 4, dtype=torch.uint8), requires_grad=False)


class Model(torch.nn.Module):
    def __init__(self, layer):
        super().__init__()
        self.proj = layer

    def forward(self, x):
        return x.to(self.proj.weight.dtype)


def test_quantized():
    Model(Packed())(torch.randn(2, 4))


def test_unquantized():
    Model(torch.nn.Linear(4, 4))(torch.randn(2, 4))


@pytest.mark.no_dtype_guard
def test_exempt():
    Model(Packed())(torch.randn(2, 4))
'''
# makepyfile writes the text dedented and stripped: the cast's line there.
PLUGIN_SITE_LINE = PLUGIN_TEST.strip().splitlines().index("        return x.to(self.proj.weight.dtype)") + 1
# `-p dtype_lint.guard` in a session that imported it already (this one): not an error.
QUIET = ("-W", "ignore::pytest.PytestAssertRewriteWarning")


def test_plugin_strict_fails_the_test_that_triggers_it(pytester):
    pytester.makepyfile(test_model=PLUGIN_TEST)
    result = pytester.runpytest_inprocess(*QUIET, "-p", "dtype_lint.guard")
    result.assert_outcomes(passed=2, failed=1)
    result.stdout.fnmatch_lines([f"*test_model.py:{PLUGIN_SITE_LINE} in Model.forward: floating activation cast to torch.uint8, "
                                 "the storage of * layer Model.proj (Packed)*",
                                 "*FAILED test_model.py::test_quantized*"])
    assert not (pytester.path / "dtype-guard.json").exists()


def test_plugin_report_writes_json_and_sarif_and_fails_nothing(pytester):
    pytester.makepyfile(test_model=PLUGIN_TEST)
    (pytester.path / "out").mkdir()
    result = pytester.runpytest_inprocess(*QUIET, "-p", "dtype_lint.guard", "--dtype-guard=report",
                                          "--dtype-guard-report=out/guard.json")
    result.assert_outcomes(passed=3)
    result.stdout.fnmatch_lines(["*dtype-lint guard*", f"*test_model.py:{PLUGIN_SITE_LINE} in Model.forward*(1 test(s))"])
    document = json.loads((pytester.path / "out/guard.json").read_text())
    (site,) = document["sites"]
    assert (site["path"], site["line"], site["kind"], site["tests"]) == (
        "test_model.py", PLUGIN_SITE_LINE, "activation-cast", ["test_model.py::test_quantized"])
    sarif = json.loads((pytester.path / "out/guard.sarif").read_text())
    assert [r["locations"][0]["physicalLocation"]["region"]["startLine"] for r in sarif["runs"][0]["results"]] == [PLUGIN_SITE_LINE]


def test_plugin_off_does_nothing(pytester):
    pytester.makepyfile(test_model=PLUGIN_TEST)
    pytester.runpytest_inprocess(*QUIET, "-p", "dtype_lint.guard", "--dtype-guard=off").assert_outcomes(passed=3)


def test_plugin_rejects_an_unknown_mode(pytester):
    pytester.makepyfile(test_model=PLUGIN_TEST)
    result = pytester.runpytest_inprocess(*QUIET, "-p", "dtype_lint.guard", "--dtype-guard=loud")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*--dtype-guard: invalid choice: 'loud'*"])


def test_plugin_report_into_a_missing_folder_is_a_usage_error_before_any_test(pytester):
    pytester.makepyfile(test_model=PLUGIN_TEST)
    result = pytester.runpytest_inprocess(*QUIET, "-p", "dtype_lint.guard", "--dtype-guard=report",
                                          "--dtype-guard-report=missing/guard.json")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*--dtype-guard-report: folder missing does not exist*"])
    assert not (pytester.path / "missing").exists()


CRASHING_TEST = PLUGIN_TEST.split("def test_quantized")[0] + '''
def test_crashes_after_the_cast():
    torch.nn.Parameter(Model(Packed())(torch.randn(2, 4)))
'''


def test_plugin_strict_adds_the_sites_to_a_test_that_crashed_next(pytester):
    pytester.makepyfile(test_crash=CRASHING_TEST)
    result = pytester.runpytest_inprocess(*QUIET, "-p", "dtype_lint.guard")
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(["*RuntimeError: Only Tensors of floating point*",
                                 f"*test_crash.py:{PLUGIN_SITE_LINE} in Model.forward: floating activation cast*"])
