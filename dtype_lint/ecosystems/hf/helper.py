"""The HF helper template: what dtype a Hugging Face module's forward expects of its input.

Hugging Face quantizers replace a model's modules at load time (docs/hf.md), so `M.weight.dtype`
is a storage dtype there: uint8 under bitsandbytes 4-bit (`Params4bit`) and GGUF, int8 under
bitsandbytes 8-bit, float8_e4m3fn under FP8 / compressed-tensors / diffusers' layerwise casting,
absent under GPTQ, AWQ and HQQ. The maintainers' stated preference (diffusers #13444) is to keep the
activation's dtype; the helper names a dtype only where the module states one:

  a floating-point or complex weight wider than a byte (unquantized, quanto, torchao, complex64)
                                                                      -> the weight dtype
  otherwise, the module's compute dtype (bitsandbytes 4-bit's `compute_dtype`) -> that dtype
  anything else (int8/uint8 storage, one-byte floats: fp8, fp4x2, e8m0; no `.weight`)
                                                                      -> None: keep the activation's

The weight is asked first: on a float weight the helper answers what the cast it replaces did,
whatever else the module states (a router keeping `compute_dtype = torch.float32` beside a bf16
weight had its input cast to fp32, and the next layer, bf16, raised). Its width is read with
`Tensor.element_size()`, which every torch has (`torch.dtype.itemsize` is torch 2.1's).

Its home is where the project keeps shared torch utilities (`HF_HELPER_HOMES`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:  # the fix layer imports this module lazily; only the annotations name its class
    from dtype_lint.fix.helper_template import HelperLocation

HF_HELPER_NAME = "get_module_input_dtype"
# Where transformers and diffusers keep shared torch utilities.
HF_HELPER_HOMES = {"transformers": "transformers.pytorch_utils", "diffusers": "diffusers.utils.torch_utils"}
# The helper's own module in a project built on them: inside the package of the fixed file (its
# wheel then ships it), named for the function as the shared helper's `layer_input_dtype` is.
HF_HELPER_MODULE = "module_input_dtype"
# A top-level module (a script beside its helper, not in a package): the folder's own module.
LOOSE_HF_HELPER_MODULE = "hf_utils"


def default_hf_helper_module(source_module: str, path: str) -> str:
    """Where the HF helper goes for a file of a project that did not set `helper`: its top-level
    package's `module_input_dtype` (a wheel of that package ships it; each package of a monorepo
    gets its own; below a namespace folder, its first regular package), or `hf_utils` beside a
    top-level module."""
    import os
    from pathlib import Path

    from dtype_lint.core.discovery import top_package
    from dtype_lint.fix.helper_home import unshadowed_module

    package = top_package(source_module, path)
    if not package:
        return LOOSE_HF_HELPER_MODULE
    # Not a name the package's `__init__.py` uses: importing the submodule would rebind it.
    folder = os.path.dirname(os.path.abspath(path))
    for _ in range(len(source_module.split(".")) - len(package.split(".")) - (os.path.basename(path) != "__init__.py")):
        folder = os.path.dirname(folder)
    return f"{package}.{unshadowed_module(Path(folder), HF_HELPER_MODULE)}"

HF_HELPER_SOURCE = '''\
def get_module_input_dtype(module: "torch.nn.Module") -> "torch.dtype | None":
    """The dtype `module`'s forward expects of its input, or None to keep the activation's dtype.

    Quantizers replace modules at load time, so `module.weight.dtype` may be a storage dtype
    (uint8 under bitsandbytes 4-bit and GGUF, int8 under bitsandbytes 8-bit, fp8 under FP8 layers
    and layerwise casting) or `.weight` may be absent (GPTQ, AWQ, HQQ).
    """
    import torch

    weight = getattr(module, "weight", None)
    if isinstance(weight, torch.Tensor) and weight.element_size() > 1 and (
        weight.dtype.is_floating_point or weight.dtype.is_complex
    ):
        return weight.dtype
    compute_dtype = getattr(module, "compute_dtype", None)
    if isinstance(compute_dtype, torch.dtype):
        return compute_dtype
    return None
'''


def hf_helper_location(module: str, index, root) -> HelperLocation:
    """Where the HF helper `module` is, or is to be created (settle_hf_helper), as a
    HelperLocation: helper_home.reach_problem_for then judges it as it judges the shared helper."""
    from pathlib import Path

    from dtype_lint.fix.helper_template import HelperLocation

    header = index.modules.get(module) if index is not None else None
    if header is not None:
        return HelperLocation(module, HF_HELPER_NAME, Path(header.path), True)
    return HelperLocation(module, HF_HELPER_NAME, new_helper_path(module, index, root), False,
                          fitted(NEW_HF_HELPER_TEXT, root))


NEW_HF_HELPER_TEXT = "import torch\n\n\n" + HF_HELPER_SOURCE


def fitted(template: str, root) -> str:
    """A helper template as the project at `root` is to get it: its docstrings re-filled to the
    line length its ruff/black/isort settings name (the templates are written to 100 columns;
    transformers' 119 keeps them as they are)."""
    from dtype_lint.core.project_style import project_style
    from dtype_lint.fix.formatting import fit_docstrings

    return fit_docstrings(template, project_style(str(root)).line_length)


def new_helper_path(module: str, index, root):
    """The file a new helper module is created as: beside the package it belongs to, wherever
    that package lives (`src/mypkg/module_input_dtype.py` in a src/ layout), else under the root."""
    from pathlib import Path

    package, _, name = module.rpartition(".")
    header = index.modules.get(package) if index is not None and package else None
    if header is not None and Path(header.path).name == "__init__.py":
        return Path(header.path).parent / f"{name}.py"
    return Path(root).joinpath(*module.split(".")).with_suffix(".py")


def is_hf_fix(finding) -> bool:
    """Does this finding's fix route through the HF helper?"""
    return finding.fix is not None and any(func == HF_HELPER_NAME for _module, func in finding.fix.imports)


def settle_hf_helper(outcomes, index, root) -> list[tuple[str, bytes, bytes | None]]:
    """(path, new bytes, the bytes it must still hold or None to create it) for each home of the HF
    helper that an applied fix imports from and that does not define it yet: the template is
    appended to the project's shared torch utilities (`transformers/pytorch_utils.py`), or a
    module of its own is created where the configured home does not exist."""
    import ast
    from pathlib import Path

    homes = sorted({module for o in outcomes if o.changed for f in o.applied if f.fix is not None
                    for module, func in f.fix.imports if func == HF_HELPER_NAME})
    out: list[tuple[str, bytes, bytes | None]] = []
    for module in homes:
        header = index.modules.get(module)
        if header is None:
            out.append((str(new_helper_path(module, index, root)), fitted(NEW_HF_HELPER_TEXT, root).encode("utf-8"),
                        None))
            continue
        data = Path(header.path).read_bytes()
        text = data.decode("utf-8")
        tree = ast.parse(text)
        if any(isinstance(n, ast.FunctionDef) and n.name == HF_HELPER_NAME for n in tree.body):
            continue
        out.append((header.path, (text.rstrip("\n") + "\n\n\n" + fitted(HF_HELPER_SOURCE, root)).encode("utf-8"),
                    data))
    return out


# ---- the helper protocol (ecosystems/registry.py) ----------------------------------------------

HELPER_LABEL = "HF helper"  # as messages name it
HELPER_NAME = HF_HELPER_NAME  # `helper = "pkg.mod:<this>"` pins this helper's home, not the shared one's


def owns_fix(finding) -> bool:
    """Does this finding's fix route through this ecosystem's helper?"""
    return is_hf_fix(finding)


def helper_location(finding, index, root) -> HelperLocation:
    """Where the helper a fix imports lives, judged as the shared helper's home is."""
    module = next(module for module, name in finding.fix.imports if name == HF_HELPER_NAME)
    return hf_helper_location(module, index, root)


settle_helper = settle_hf_helper


def doctor_lines(findings, index, root) -> list[str]:
    """`doctor`'s paragraph on this family, where the run found its sites: how many, its
    quantizable roots, and where its helper lives (or would be created)."""
    from dtype_lint.ecosystems.hf.family import FAMILY_EVIDENCE
    from dtype_lint.ecosystems.registry import plugins

    # Another family whose fixes route through this helper speaks for its own sites (a family
    # role's marker, or a helper role's where the family has no role of that name: adapters).
    others = [marker for family in (*plugins("family"), *plugins("helper"))
              if family.__name__ not in (__name__, __name__.replace(".helper", ".family"))
              for marker in [getattr(family, "FAMILY_EVIDENCE", "")] if marker]
    ours = [f for f in findings if ((f.fix is not None and is_hf_fix(f)) or
            any(FAMILY_EVIDENCE in e.message for e in f.evidence)) and
            not any(marker in e.message for marker in others for e in f.evidence)]
    if not ours:
        return []
    lines = [f"family: Hugging Face model code ({len(ours)} site{'s' if len(ours) != 1 else ''})",
             "  quantizable roots: `nn.Linear` and its subclasses, `Conv1D`, `nn.Embedding`, `nn.Conv*` in model "
             "code (files of transformers/diffusers, or a project's subclasses of their model bases): "
             "bitsandbytes, GPTQ, AWQ, HQQ, FP8, GGUF replace them at load time"]
    fixed = [finding for finding in ours if finding.fix is not None and is_hf_fix(finding)]
    return lines + helper_homes(fixed, helper_location, HF_HELPER_NAME, index, root)


def helper_homes(fixed, location_of, helper_name: str, index, root, *, with_path: bool = True) -> list[str]:
    """The `helper:` lines of a family's `doctor` paragraph: for each module the fixes of `fixed`
    import the helper from, whether it exists or `--fix` would create it."""
    homes: dict[str, HelperLocation] = {}
    for finding in fixed:
        location = location_of(finding, index, root)
        homes.setdefault(location.module, location)
    lines = []
    for module, location in sorted(homes.items()):
        state = "exists" if location.exists else "would be created by --fix"
        where = f" at {shown_path(location.path, root)}" if with_path else ""
        lines.append(f"  helper: {module}:{helper_name}{where}: {state}")
    return lines or ["  helper: none needed (no site here has a fix)"]


def shown_path(path, root) -> str:
    """`path` relative to `root` (posix), or as given where it lies outside."""
    from pathlib import Path

    try:
        return Path(path).resolve().relative_to(Path(root).resolve()).as_posix()
    except ValueError:
        return str(path)


# ---- a family whose fixes route through this helper (peft's adapters, the quantizer family) -----
# Its helper role owns no fix and settles nothing: this ecosystem's role creates and settles
# `get_module_input_dtype`. Such a role takes these, and writes only its own `doctor_lines`.
ROUTED_HELPER_LABEL = "HF helper"  # the helper its fixes route through, as messages name it


def routed_owns_fix(finding) -> bool:
    return False  # this ecosystem's helper role settles `get_module_input_dtype`


def routed_settle_helper(outcomes, index, root) -> list[tuple[str, bytes, bytes | None]]:
    return []
