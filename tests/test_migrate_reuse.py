"""`migrate` and the project's own input-dtype helpers: a sound one gets the fixes, unsound ones
are replaced by one shared helper whose callers are rewritten, and the report shows each one's
table beside the shared helper's."""

from __future__ import annotations

import textwrap
from pathlib import Path

from cli_runner import dtl

# Our own helper in the shape forks copy (int32 and uint8 handled, int8 falls through).
UNSOUND = textwrap.dedent("""\
    import torch


    def proj_input_dtype(layer, fp8_input):
        weight = getattr(layer, "weight", None)
        wd = weight.dtype if weight is not None else layer.params_dtype
        if wd == torch.int32:
            return layer.params_dtype
        if wd == torch.uint8:
            return None
        if wd in (torch.float8_e4m3fn, torch.float8_e5m2) and not fp8_input:
            return None
        return wd
""")
SOUND = UNSOUND.replace("        return None\n    if wd in", "        return layer.params_dtype if fp8_input else None\n"
                        "    if not wd.is_floating_point:\n        return layer.params_dtype\n    if wd in")
MODEL = textwrap.dedent("""\
    from torch import nn

    from pkg.helpers import proj_input_dtype


    class Block(nn.Module):
        def __init__(self, proj):
            self.proj = proj

        def forward(self, x, fp8):
            dt = proj_input_dtype(self.proj, fp8)
            if dt is not None:
                x = x.to(dt)
            return x

        def other(self, y):
            y = y.to(self.proj.weight.dtype)
            return y
""")
PYPROJECT = ('[tool.dtype-lint]\npreset = "generic"\nname-heuristics = true\nname-patterns = ["proj"]\n')


def project(tmp_path: Path, helper: str) -> Path:
    (tmp_path / "pkg").mkdir()
    (tmp_path / "pkg" / "__init__.py").write_text("")
    (tmp_path / "pkg" / "helpers.py").write_text(helper)
    (tmp_path / "pkg" / "model.py").write_text(MODEL)
    (tmp_path / "pyproject.toml").write_text(PYPROJECT)
    return tmp_path


def migrate(root: Path) -> str:
    dtl(root, "migrate", ".", "--report", "PR.md", "--no-progress", "--unsafe-fixes")
    return (root / "PR.md").read_text()


def test_unsound_helper_is_replaced_by_one_shared_helper(tmp_path):
    root = project(tmp_path, UNSOUND)
    report = migrate(root)
    model = (root / "pkg" / "model.py").read_text()
    # The caller of the old helper and the plain cast both go through the shared helper now.
    assert "dt = get_layer_input_dtype(self.proj, fp8)" in model
    assert "get_layer_input_dtype(self.proj, True)" in model
    assert (root / "pkg" / "layer_input_dtype.py").exists()
    assert "## Existing input-dtype helpers" in report
    assert "`pkg/helpers.py:4` `proj_input_dtype`: unsound: uint8 storage, fp8_input=True → returns None" in report
    assert "int8 storage → returns torch.int8" in report
    assert "1 call sites were rewritten to it" in report
    # The two tables side by side, differences in bold, from each one's own code.
    assert "| int8 | True | **torch.int8** | **torch.bfloat16** |" in report
    assert "| bfloat16 | True | torch.bfloat16 | torch.bfloat16 |" in report


def test_sound_helper_gets_the_fixes(tmp_path):
    root = project(tmp_path, SOUND)
    report = migrate(root)
    model = (root / "pkg" / "model.py").read_text()
    # The plain cast is routed through the project's own helper; no new helper is created.
    assert "proj_input_dtype(self.proj, True)" in model
    assert "get_layer_input_dtype" not in model
    assert not (root / "layer_input_dtype.py").exists() and not (root / "pkg" / "layer_input_dtype.py").exists()
    assert "`pkg/helpers.py:4` `proj_input_dtype`: sound: the fixes are routed to it" in report
    assert "Helper: `pkg.helpers:proj_input_dtype`" in report


def test_a_configured_helper_is_respected(tmp_path):
    root = project(tmp_path, SOUND)
    (root / "pyproject.toml").write_text(PYPROJECT + 'helper = "pkg.shared:input_dtype"\n')
    migrate(root)
    assert "input_dtype(self.proj, True)" in (root / "pkg" / "model.py").read_text()
    assert (root / "pkg" / "shared.py").exists()
