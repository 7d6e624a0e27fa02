"""A layer built by a class whose code is not read here, with every rule on and zero configuration.

Without the class's code there is no signature to bind: a keyword that names the config
(`quant_config=...`) says a config reaches it, and 6 or more positional arguments only may carry
one (vLLM's layers take `quant_config` sixth at the earliest). torch 2.13.0's
`ao/nn/intrinsic/qat/modules/conv_fused.py` builds `cls._FLOAT_CONV_MODULE(...)` with nine
positional arguments and no config at all, and was reported as "constructed with a quantization
config", high confidence. A count is a guess: such a layer is reported with low confidence, no
fix, and evidence saying what is known and what cannot be told. And a read of `conv.weight` right
after the function set `conv.weight = nn.Parameter(...)` cannot find the weight missing.

`fixtures/unseen_classes` is our own code in those shapes (nothing copied from torch).
"""

from __future__ import annotations

from pathlib import Path

from tiny_project import copy_project, json_findings

from dtype_lint.api import check_source

ROOT = Path(__file__).resolve().parents[1]
FIXTURE = ROOT / "fixtures" / "unseen_classes"
PACKAGE = "src/foldconv"
TOLD = ("which backends reach it cannot be told: `cls._FLOAT_CONV(...)` names a class whose code is not read "
        "here, called with 9 positional arguments that may carry a quantization config (no keyword names one)")


def where(found: dict) -> tuple[str, int, str, str]:
    return Path(found["path"]).as_posix().split("proj/")[-1], found["line"], found["code"], found["confidence"]


def test_a_config_only_the_positional_count_suggests_is_low_confidence_and_says_so(tmp_path: Path):
    """fused.py: `to_float` reads the weight it set (not reported); `preview` reads and casts to
    the weight of the same unseen construction (low, no fix, the reason in message and evidence).
    projector.py: the factory is handed `quant_config=` by keyword: high, the cast fixed, as before."""
    found = json_findings(copy_project(FIXTURE, tmp_path, "proj"), "--select", "ALL")
    assert sorted(where(f) for f in found) == [
        (f"{PACKAGE}/fused.py", 43, "DTL003", "low"),
        (f"{PACKAGE}/fused.py", 44, "DTL001", "low"),
        (f"{PACKAGE}/projector.py", 14, "DTL003", "high"),
        (f"{PACKAGE}/projector.py", 15, "DTL001", "high"),
    ], found
    for finding in found:
        steps = [step["message"] for step in finding["evidence"]]
        if finding["path"].endswith("fused.py"):
            assert TOLD in finding["message"], finding["message"]
            assert f"backend: {TOLD}" in steps, steps
            assert not any("constructed with a quantization config" in step for step in steps), steps
            assert finding["fix"] is None, finding
        else:
            assert "constructed with a quantization config: its quant method may repack `.weight`" in steps, steps
    cast = next(f for f in found if f["code"] == "DTL001" and f["path"].endswith("fused.py"))
    assert "no helper is proven to run on it" in cast["no_fix_reason"], cast
    kept = next(f for f in found if f["code"] == "DTL001" and f["path"].endswith("projector.py"))
    assert kept["fix"] is not None, kept


def _verdicts(call: str) -> list[tuple[str, str]]:
    """(code, confidence) of each finding on a cast to the weight of `layer = <call>`, the callee a
    factory of a library this tree does not hold."""
    code = ("from servekit.layers import make_projection\n\n\n"
            "def cast(x, n, qc, spread):\n"
            f"    layer = {call}\n"
            "    return x.to(layer.weight.dtype)\n")
    return [(f.code, f.confidence) for f in check_source(code, filename="pkg/block.py", settings={"select": ["ALL"]})]


def test_the_positional_count_and_the_keyword_read_apart():
    """Fewer than 6 positionals: no config; 6 or more: low; a config keyword: high (None: no
    config); a `*` spread (what it holds cannot be read): no config passed that anything names."""
    assert _verdicts("make_projection(n, n, n, n, n)") == []
    assert _verdicts("make_projection(n, n, n, n, n, n)") == [("DTL001", "low")]
    assert _verdicts("make_projection(n, n, quant_config=qc)") == [("DTL001", "high")]
    assert _verdicts("make_projection(n, n, n, n, n, n, quant_config=qc)") == [("DTL001", "high")]
    assert _verdicts("make_projection(n, n, n, n, n, n, quant_config=None)") == []
    assert _verdicts("make_projection(n, *spread)") == []
