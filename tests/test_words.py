"""Words and output a user reads (#40): messages name the quantizers of the finding's own family,
`doctor` labels each setting by its true source, each warning is one short line (its detail under
`--verbose`), and the text output ends with Ruff's "N fixable" next step.

A generic project (its own layer class configured as quantizable, or a layer known only by its
name with `--name-heuristics`) used to read "(int32 under Marlin, uint8 under NVFP4, absent under
AWQ)" in every message: vLLM's backends, which such a project never meets.
"""

from __future__ import annotations

import json
import re
import shutil
import textwrap
from pathlib import Path

from cli_runner import dtl
from tiny_project import ATTN, write_tree

from dtype_lint.core.findings import Evidence
from dtype_lint.ecosystems.registry import default_words, plugin

REPO = Path(__file__).resolve().parents[1]
VLLM_BACKENDS = re.compile(r"marlin|nvfp4|\bawq\b", re.IGNORECASE)
GENERIC_WORDS = plugin("generic", "words").DEFAULT_WORDS
VLLM_WORDS = plugin("vllm", "words").DEFAULT_WORDS

# A generic PyTorch project: its own layer class, configured as quantizable, built with a config.
GENERIC_LAYERS = """\
import torch


class QLinear(torch.nn.Module):
    def __init__(self, n, quant_config=None):
        super().__init__()
        self.weight = torch.nn.Parameter(torch.empty(n, n))
"""
GENERIC_MODEL = """\
import torch

from mypkg.layers import QLinear


class Block(torch.nn.Module):
    def __init__(self, quant_config):
        super().__init__()
        self.proj = QLinear(8, quant_config=quant_config)

    def forward(self, x):
        buf = torch.empty(3, dtype=self.proj.weight.dtype)
        return x.to(self.proj.weight.dtype) + buf
"""
GENERIC_PYPROJECT = '[project]\nname = "mypkg"\nversion = "0.1"\n\n[tool.dtype-lint]\nquantizable = ["mypkg.layers.QLinear"]\n'

# Neither configured nor resolvable: a layer known only by its name (`--name-heuristics`).
NAMED_MODEL = """\
class Block:
    def __init__(self, layers):
        self.out_proj = layers["out_proj"]

    def forward(self, x):
        return x.to(self.out_proj.weight.dtype)
"""


def generic_project(root: Path) -> Path:
    return write_tree(root, {"pyproject.toml": GENERIC_PYPROJECT, "mypkg/__init__.py": "",
                             "mypkg/layers.py": GENERIC_LAYERS, "mypkg/model.py": GENERIC_MODEL})


def findings(root: Path, *args: str) -> list[dict]:
    proc = dtl(root, "check", ".", "--no-cache", "--output-format", "json", "--exit-zero", *args)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return json.loads(proc.stdout)["findings"]


# --- messages per family ---------------------------------------------------------------------------

def test_a_configured_generic_project_names_no_vllm_backend(tmp_path: Path):
    found = findings(generic_project(tmp_path / "gen"))
    assert sorted(f["code"] for f in found) == ["DTL001", "DTL002"], found
    for finding in found:
        assert not VLLM_BACKENDS.search(finding["message"]), finding["message"]
        assert f"({GENERIC_WORDS})" in finding["message"], finding["message"]


def test_name_heuristics_on_a_generic_project_names_no_vllm_backend(tmp_path: Path):
    root = write_tree(tmp_path / "named", {"pyproject.toml": '[project]\nname = "mypkg"\nversion = "0.1"\n',
                                           "mypkg/__init__.py": "", "mypkg/model.py": NAMED_MODEL})
    assert findings(root) == []  # known only by its name: reported with the heuristics alone
    found = findings(root, "--name-heuristics")
    assert [f["code"] for f in found] == ["DTL001"], found
    assert found[0]["confidence"] == "low"
    assert not VLLM_BACKENDS.search(found[0]["message"]), found[0]["message"]
    assert GENERIC_WORDS in found[0]["message"]


def test_a_hugging_face_project_names_its_quantizers(tmp_path: Path):
    root = tmp_path / "hf"
    shutil.copytree(REPO / "fixtures" / "journeys" / "hf_package", root)
    [finding] = findings(root)
    assert "bitsandbytes 4-bit" in finding["message"] and "GPTQ" in finding["message"], finding["message"]
    assert not re.search(r"marlin|nvfp4", finding["message"], re.IGNORECASE), finding["message"]


def test_a_vllm_plugin_keeps_the_backends_of_vllm(tmp_path: Path):
    """A project importing vLLM: its layer's backends come from the shipped catalogue, as before."""
    root = write_tree(tmp_path / "plugin", {"pyproject.toml": "[tool.dtype-lint]\n", "proj/__init__.py": "",
                                            "proj/attn.py": ATTN})
    [finding] = findings(root)
    assert finding["message"].startswith(
        "activation cast to `self.kv_b_proj.weight.dtype`, the storage dtype of a quantizable layer "
        "(CompressedTensors registers `weight` as int8"), finding["message"]
    assert re.search(r"in vllm \d+\.\d+\.\d+\)", finding["message"])  # why that release: in the evidence
    assert any(re.search(r"in vllm \d+\.\d+\.\d+, the newest shipped release", e["message"])
               for e in finding["evidence"])


def test_default_words_follow_the_layer_that_decided_the_verdict():
    """Where no backend was read: vLLM's repacks for a vLLM-style engine's layer (a root in the
    code, a preset class), the generic words for a project's own configured class."""
    code_root = Evidence("`LinearBase`: `quant_config.get_quant_method(self, ...)` gives it a quant method, "
                         "which decides its weight storage", "layers/linear.py", 10)
    preset = Evidence("`ColumnParallelLinear` is a configured quantizable class", "", 0)
    by_name = Evidence("`RowParallelLinear` matches configured quantizable class "
                       "`vllm.model_executor.layers.linear.RowParallelLinear` by name", "", 0)
    own = Evidence("`QLinear` is a configured quantizable class", "mypkg/layers.py", 4)
    built = Evidence("constructed with a quantization config: its quant method may repack `.weight`", "", 0)
    assert default_words((code_root,)) == VLLM_WORDS
    assert default_words((preset,)) == VLLM_WORDS
    assert default_words((by_name,)) == VLLM_WORDS
    assert default_words((own,)) == GENERIC_WORDS
    assert default_words((built,)) == GENERIC_WORDS
    assert default_words(()) == GENERIC_WORDS
    assert not VLLM_BACKENDS.search(GENERIC_WORDS)


# --- doctor's setting sources -----------------------------------------------------------------------

def _sources(doctor_output: str) -> dict[str, str]:
    return {match.group(1): match.group(2)
            for match in re.finditer(r"^  ([a-z-]+) = .*  \((.+)\)$", doctor_output, re.MULTILINE)}


def test_doctor_labels_each_setting_by_its_true_source(tmp_path: Path):
    root = generic_project(tmp_path / "gen")
    proc = dtl(root, "doctor", ".", "--no-cache")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    sources = _sources(proc.stdout)
    assert sources["quantizable"] == "pyproject.toml"
    # The helper's home was chosen from the code (the project is not vLLM's package): never
    # "(command line)", which the user did not type.
    assert sources["helper"] == "inferred from the code", proc.stdout
    assert sources["helper-template"] == "inferred from the code", proc.stdout
    assert sources["preset"] == "default" and sources["exclude"] == "default"
    assert "command line" not in sources.values(), sources

    # The flag overrides the file's `preset`: the command line is where the value in force came from.
    (root / "pyproject.toml").write_text(GENERIC_PYPROJECT + 'preset = "generic"\n')
    flagged = _sources(dtl(root, "doctor", ".", "--no-cache", "--preset", "vllm", "--exclude", "build").stdout)
    assert flagged["preset"] == "command line" and flagged["exclude"] == "command line", flagged
    assert flagged["quantizable"] == "pyproject.toml"


def test_doctor_names_the_preset_for_a_preset_helper(tmp_path: Path):
    # a plugin written on vLLM's layers: the preset's helper is the one in force
    root = write_tree(tmp_path / "plugin", {"pyproject.toml": "[tool.dtype-lint]\n", "proj/__init__.py": "",
                                            "proj/attn.py": "import torch\nfrom vllm.model_executor.layers.linear "
                                                            "import RowParallelLinear\n"})
    sources = _sources(dtl(root, "doctor", ".", "--no-cache").stdout)
    assert sources["helper"] == "the vllm preset", sources
    # a project off vLLM's layers is not shown the preset's helper as in force (#40)
    (root / "proj/attn.py").write_text("import torch\n")
    sources = _sources(dtl(root, "doctor", ".", "--no-cache").stdout)
    assert sources["helper"] == "not set: the `vllm` preset's default is not used here; see `helper:` below", sources


# --- the fixable line and the short warning -------------------------------------------------------

def test_text_output_says_how_many_findings_fix_fixes(tmp_path: Path):
    root = generic_project(tmp_path / "gen")
    for output_format in ("text", "concise"):
        proc = dtl(root, "check", ".", "--no-cache", "--output-format", output_format)
        assert proc.returncode == 1, proc.stdout + proc.stderr
        lines = proc.stdout.rstrip("\n").splitlines()
        assert lines[-2].startswith("Found 2 findings (1 fixable)"), lines[-2:]
        assert lines[-1] == "[*] 1 fixable with `--fix`.", lines[-2:]


def test_no_fixable_line_without_a_fix(tmp_path: Path):
    root = generic_project(tmp_path / "gen")
    model = root / "mypkg" / "model.py"
    model.write_text(GENERIC_MODEL.replace("        return x.to(self.proj.weight.dtype) + buf\n",
                                           "        return x + buf\n"))
    proc = dtl(root, "check", ".", "--no-cache")
    assert proc.returncode == 1 and "Found 1 finding" in proc.stdout, proc.stdout
    assert "fixable with" not in proc.stdout


def test_the_inferred_helper_warning_is_one_short_line_with_its_detail_under_verbose(tmp_path: Path):
    root = generic_project(tmp_path / "gen")
    proc = dtl(root, "check", ".", "--diff", "--no-cache")
    warnings = [line for line in proc.stderr.splitlines() if line.startswith("dtype-lint: warning:")]
    assert len(warnings) == 1, proc.stderr
    assert len(proc.stderr.splitlines()) == 1, proc.stderr  # once, and nothing under it
    assert len(warnings[0]) <= 160, warnings[0]
    assert "mypkg/layer_input_dtype.py" in warnings[0] and "--verbose" in warnings[0]

    verbose = dtl(root, "check", ".", "--diff", "--no-cache", "--verbose")
    detail = verbose.stderr.splitlines()
    assert detail[0] == warnings[0]
    # a plain torch project: the preset's default does not apply, its path is not named (#40)
    assert any(textwrap.dedent(line).startswith("`helper` is not set, and the `vllm` preset's default does not "
                                                "apply here") and
               'Pin it with `helper = "mypkg.layer_input_dtype:get_layer_input_dtype"`' in line
               for line in detail[1:]), verbose.stderr
    assert "model_executor" not in verbose.stderr and "shadow" not in verbose.stderr, verbose.stderr


# --- installs that respect the user's environment ---------------------------------------------------

def test_user_extras_take_ranges_and_ci_pins_through_its_constraints_file():
    """Installing `verify` or `hf` into a user's vLLM or HF environment must not replace its torch
    (they pinned `torch==2.13.0` and `transformers==5.23.0`); CI installs exactly what it tests."""
    from dtype_lint.core.config import tomllib  # tomli on Python 3.10

    extras = tomllib.loads((REPO / "pyproject.toml").read_text(encoding="utf-8"))["project"]["optional-dependencies"]
    for extra in ("verify", "hf", "test"):
        pinned = [requirement for requirement in extras[extra] if "==" in requirement.split(";")[0]]
        assert pinned == [], (extra, pinned)
    assert "torch>=2.4" in extras["verify"] and "torch>=2.4" in extras["hf"]
    constraints = (REPO / ".ci" / "constraints.txt").read_text(encoding="utf-8").splitlines()
    assert "torch==2.13.0" in constraints and "transformers==5.23.0" in constraints
    readme = (REPO / "README.md").read_text(encoding="utf-8").splitlines()
    test_command = next(line for line in readme if "pytest" in line)
    assert "-c .ci/constraints.txt" in test_command
    ci_lines = (REPO / ".ci" / "run").read_text(encoding="utf-8").splitlines()
    assert ci_lines[-1] == test_command  # CI runs exactly the README's test command
