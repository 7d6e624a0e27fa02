"""`dtype-lint doctor` speaks the project's ecosystem (#40): on a project that is not the preset's
engine and writes nothing on its layers (no file is vLLM's or imports from
`vllm.model_executor.layers`), it names neither the `vllm` preset's helper and template as if they
applied, nor which vLLM release's backends would be used; it says which ecosystem's helper the fixes
use (the families that decided its sites, else the family whose code its files are), or plainly that
it cannot be told. A project on vLLM's layers keeps its lines (the preset's helper, the engine's
release).

At f0e42f0 every such project read `helper = "vllm.model_executor...:get_layer_input_dtype"
(the vllm preset)`, `helper-template = "vllm"`, "the shared `get_layer_input_dtype` ... is not in
this project" and `engine (vllm): vllm 0.34.0, shipped catalogue ...`.
"""

from __future__ import annotations

import re
from pathlib import Path

from cli_runner import dtl
from tiny_project import copy_project, fix_project, json_findings

JOURNEYS = Path(__file__).resolve().parents[1] / "fixtures" / "journeys"

UNSET = "(not set: the `vllm` preset's default is not used here; see `helper:` below)"


def doctor(tmp_path: Path, journey: str, fixed: bool = False) -> str:
    root = copy_project(JOURNEYS / journey, tmp_path, journey)
    if fixed:
        fix_project(root)
        assert json_findings(root) == []
    proc = dtl(root, "doctor", "--no-cache")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return proc.stdout


def assert_no_vllm_helper_or_release(out: str) -> None:
    assert f'  helper = ""  {UNSET}\n' in out, out
    assert f'  helper-template = ""  {UNSET}\n' in out, out
    assert "engine (" not in out and not re.search(r"vllm \d", out), out
    assert "get_layer_input_dtype" not in out and "model_executor.layers.quantization" not in out, out
    assert '"vllm"  (the vllm preset)' not in out


def test_an_hf_package_names_the_hf_helper_and_no_vllm_release(tmp_path: Path):
    out = doctor(tmp_path, "hf_package")
    assert_no_vllm_helper_or_release(out)
    assert ("\nhelper: fixes here use the HF helper, as the `family:` paragraph below says; no site needs the "
            "shared helper\n\nquantizable roots: ") in out, out
    assert "  helper: mypkg.module_input_dtype:get_module_input_dtype at src/mypkg/module_input_dtype.py" in out


def test_an_hf_project_with_no_site_left_is_told_the_hf_helper(tmp_path: Path):
    # no family paragraph: the files' ecosystem names the helper a fix would use
    out = doctor(tmp_path, "hf_package", fixed=True)
    assert_no_vllm_helper_or_release(out)
    assert "family:" not in out
    lines = out.splitlines()
    i = next(i for i, line in enumerate(lines) if line.startswith("helper:"))
    assert lines[i] == ("helper: no site needs one now; this is Hugging Face code, so a fix would use the HF helper "
                        "`get_module_input_dtype` (it runs on any module), created by --fix as `module_input_dtype` "
                        "in the fixed file's top-level package"), out
    assert re.fullmatch(r"  why: \d of 4 files are its code \(by what they import\)", lines[i + 1]), lines[i + 1]


def test_an_adapter_library_and_a_megatron_project_name_their_familys_helper(tmp_path: Path):
    adapter = doctor(tmp_path, "adapter_lib")
    assert_no_vllm_helper_or_release(adapter)
    assert "\nhelper: fixes here use the HF helper, as the `family:` paragraph below says" in adapter
    megatron = doctor(tmp_path, "megatron_spec")
    assert_no_vllm_helper_or_release(megatron)
    assert "\nhelper: fixes here use the megatron helper, as the `family:` paragraph below says" in megatron


def test_a_project_of_no_known_ecosystem_is_told_plainly(tmp_path: Path):
    # minitrt: its own engine, which no ecosystem family speaks for; its sites have no fix
    out = doctor(tmp_path, "trt_engine")
    assert f'  helper = ""  {UNSET}\n' in out and "engine (" not in out and not re.search(r"vllm \d", out), out
    assert ("\nhelper: no site needs one now, and which ecosystem's helper a fix would use cannot be told: no file "
            "here is the code of an ecosystem dtype-lint knows\n  a fix on a layer no family claims (a class in "
            "`quantizable`, or one whose code obtains a quant method) would use a shared `get_layer_input_dtype`, "
            "made from the `torch` template in the package that holds the most sites\n") in out, out


def test_a_project_on_vllms_layers_keeps_the_engine_and_the_presets_helper(tmp_path: Path):
    # the plugin imports vLLM's layers: its release and the preset's helper still apply (as at f0e42f0)
    plugin = doctor(tmp_path, "vllm_plugin")
    assert ("\nengine (vllm): vllm 0.34.0, shipped catalogue (for layers the project imports from vllm): no vllm "
            "installed in the project's environment; `vllm==0.34.0` in pyproject.toml") in plugin
    assert "helper: tinyllm_plugin.layer_input_dtype:get_layer_input_dtype (inferred)" in plugin
    assert UNSET not in plugin
    # ...while the HF package beside it, checked the same way, is off them
    assert_no_vllm_helper_or_release(doctor(tmp_path, "hf_package"))


def test_a_shared_helper_an_earlier_run_created_is_the_one_a_fix_reuses(tmp_path: Path):
    """Where no ecosystem can be told, doctor says a fix would reuse the shared helper an earlier
    fixing run created (`<package>.layer_input_dtype`), naming where it is."""
    import shutil

    root = tmp_path / "trt"
    shutil.copytree(JOURNEYS / "trt_engine", root)
    (root / "minitrt" / "layer_input_dtype.py").write_text(
        "def get_layer_input_dtype(layer, fp8_input=True):\n    return None\n", encoding="utf-8")
    out = dtl(root, "doctor", "--no-cache").stdout
    assert "a fix on a layer no family claims reuses `minitrt.layer_input_dtype:get_layer_input_dtype` in " \
           "minitrt/layer_input_dtype.py, which an earlier run created" in out, out
