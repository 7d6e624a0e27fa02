"""DTL005 judged by the helper's real callers, also in other files (dtype_lint/analysis/flow/foreign_calls.py).

`fixtures/helper_callers` holds three copies of one unsound input-dtype helper, none called in its
own file: one whose only callers (through `from pkg import mod`, `mod.helper(...)`) hand it plain
`nn.Linear` layers, one called (by name) with a layer built with a quant config, and one called
nowhere (judged in the abstract, as a public helper).
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from cli_runner import dtl
from golden import assert_golden, lines_text

CALLERS = Path(__file__).resolve().parents[1] / "fixtures" / "helper_callers"


def findings(root: Path) -> list[dict]:
    proc = dtl(root, "check", ".", "--no-cache", "--output-format", "json", "--exit-zero")
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout)["findings"]


def definitions(found) -> set[str]:
    return {f["expression"] for f in found if f["expression"].startswith("def ")}


def test_findings_match_expected_txt():
    found = findings(CALLERS)
    assert_golden(CALLERS / "expected.txt", lines_text([f"{f['path']}:{f['line']}:{f['col']} {f['code']}"
                                                        for f in found]))
    # the helper whose every caller passes a plain nn.Linear is wrong for no real layer
    assert definitions(found) == {"def latent_input_dtype", "def unused_input_dtype"}


def test_the_caller_that_makes_it_wrong_is_the_evidence():
    (latent,) = [f for f in findings(CALLERS) if f["expression"] == "def latent_input_dtype"]
    (caller,) = [e for e in latent["evidence"] if e["message"].startswith("called from ")]
    assert caller["path"] == "callerlm/attention.py" and caller["line"] == 14
    assert "`self.kv_b_proj`" in caller["message"]


@pytest.fixture
def copy(tmp_path) -> Path:
    root = tmp_path / "helper_callers"
    shutil.copytree(CALLERS, root)
    return root


def test_one_caller_with_a_quantizable_layer_makes_the_helper_a_finding(copy):
    policy = copy / "callerlm" / "policy.py"
    text = policy.read_text(encoding="utf-8")
    policy.write_text(text.replace("from torch import nn\n",
                                   "from torch import nn\nfrom vllm.model_executor.layers.linear import ReplicatedLinear\n")
                      .replace("self.out_proj = nn.Linear(width, width)",
                               "self.out_proj = ReplicatedLinear(width, width, quant_config=quant_config)")
                      .replace("def __init__(self, width: int):", "def __init__(self, width: int, quant_config):"),
                      encoding="utf-8")
    assert "def plain_input_dtype" in definitions(findings(copy))


def test_a_caller_in_the_helper_s_own_file_counts_as_before(copy):
    dtypes = copy / "callerlm" / "dtypes.py"
    dtypes.write_text(dtypes.read_text(encoding="utf-8") + (
        "\n\nclass Local:\n    def go(self, x):\n        return x.to(unused_input_dtype(self.head, False))\n"
        "\n    def __init__(self):\n        from torch import nn\n\n        self.head = nn.Linear(4, 4)\n"),
        encoding="utf-8")
    # its one caller, in its own file, hands it a plain nn.Linear
    assert "def unused_input_dtype" not in definitions(findings(copy))
