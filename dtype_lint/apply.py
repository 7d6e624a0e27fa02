"""Fix a whole run: locate or create the helper, fix each file (in parallel), write or diff."""

from __future__ import annotations

import ast
import os
import sys
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass
from pathlib import Path

from .config import Config
from .discovery import module_name
from .engine import analyze_file, build_index
from .findings import Finding
from .fixer import FileText, FixOutcome, fix_text, write_atomic
from .helper_template import helper_source
from .index import ModuleHeader, QuantizableLayerIndex


class HelperError(Exception):
    pass


@dataclass
class HelperLocation:
    module: str
    func: str
    path: Path
    exists: bool
    source: str = ""  # the template text when it must be created


def locate_helper(config: Config, files: list[str]) -> HelperLocation:
    """Where the configured helper lives: next to the scanned package that shares its top-level
    package (`vllm/...` for `vllm.x.y:f`), else under the project root."""
    module, func = config.helper_spec
    parts = module.split(".")
    root = config.root
    for f in files:
        mod = module_name(f)
        if mod and mod.split(".")[0] == parts[0]:
            p = Path(f).resolve()
            n = len(mod.split("."))
            root = p.parents[n if p.name == "__init__.py" else n - 1]
            break
    path = root.joinpath(*parts[:-1], parts[-1] + ".py")
    pkg_init = root.joinpath(*parts, "__init__.py")
    if pkg_init.exists():
        path = pkg_init
    if path.exists():
        try:
            tree = ast.parse(path.read_text(encoding="utf-8"))
        except (SyntaxError, OSError, UnicodeDecodeError) as e:
            raise HelperError(f"helper module {path} cannot be read: {e}") from None
        if not any(isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef)) and n.name == func for n in tree.body):
            raise HelperError(f"{path} exists but defines no `{func}`; add it or point `helper` elsewhere")
        return HelperLocation(module, func, path, True)
    if not config.helper and len(parts) > 1 and not root.joinpath(parts[0]).exists():
        # The preset's default lives in a package this tree does not hold (vLLM, for a project
        # that imports it): creating `vllm/__init__.py` here would shadow the installed package.
        raise HelperError(
            f"the {config.preset} preset's helper `{module}:{func}` belongs to package `{parts[0]}`, "
            f"which is not among the checked files; creating it under {root} would shadow the installed "
            f"`{parts[0]}`. Set `helper = \"yourpackage.module:{func}\"` in [tool.dtype-lint]")
    return HelperLocation(module, func, path, False, helper_source(func, config.template))


def create_helper(loc: HelperLocation) -> None:
    """Write the template; create missing package directories with an empty __init__.py."""
    loc.path.parent.mkdir(parents=True, exist_ok=True)
    d = loc.path.parent
    for _i in range(len(loc.module.split(".")) - 1):
        init = d / "__init__.py"
        if not init.exists():
            init.write_text("", encoding="utf-8")
        d = d.parent
    tmp = loc.path.with_suffix(".py.dtl-tmp")
    tmp.write_text(loc.source, encoding="utf-8")
    os.replace(tmp, loc.path)


# ---- per-file fixing (worker-safe) ------------------------------------------------------------
_W: dict = {}


def _init(headers: list[dict], config: Config, unsafe: bool) -> None:
    _W["index"] = build_index([ModuleHeader.from_dict(h) for h in headers], config)
    _W["config"], _W["unsafe"] = config, unsafe


def _fix_job(path: str) -> FixOutcome:
    return fix_one(path, _W["index"], _W["config"], _W["unsafe"])


def fix_one(path: str, index: QuantizableLayerIndex, config: Config, unsafe: bool,
            first: list[Finding] | None = None) -> FixOutcome:
    try:
        original = FileText.read(path)
    except (OSError, UnicodeDecodeError, SyntaxError, LookupError) as e:
        out = FixOutcome(path, "", "", error=f"cannot read: {e}")
        out.remaining = first or []
        return out
    return fix_text(path, original.text, lambda t: _unsuppressed_fixes(analyze_file(path, index, config, text=t), t),
                    unsafe, first)


def _unsuppressed_fixes(findings: list[Finding], text: str) -> list[Finding]:
    """A finding a suppression comment covers is not fixed (as in ruff): its fix is dropped. The
    finding itself stays, so the comment still counts as used when the run reports."""
    from dataclasses import replace

    from .suppressions import apply_suppressions

    if not any(f.fix for f in findings):
        return findings
    kept = {id(f) for f in apply_suppressions(findings, lambda _p: text)[0]}
    return [f if id(f) in kept or f.fix is None else replace(f, fix=None, no_fix_reason="suppressed")
            for f in findings]


def fix_files(paths: list[str], headers: list[ModuleHeader], index: QuantizableLayerIndex, config: Config,
              unsafe: bool, jobs: int, progress=None) -> list[FixOutcome]:
    if jobs > 1 and len(paths) >= 4:
        import multiprocessing

        ctx = multiprocessing.get_context("fork" if sys.platform.startswith("linux") else "spawn")
        with ProcessPoolExecutor(max_workers=jobs, mp_context=ctx, initializer=_init,
                                 initargs=([h.to_dict() for h in headers], config, unsafe)) as pool:
            outs = []
            for i, o in enumerate(pool.map(_fix_job, paths), 1):
                outs.append(o)
                if progress:
                    progress(i, len(paths), "fix")
            return outs
    outs = []
    for i, p in enumerate(paths, 1):
        outs.append(fix_one(p, index, config, unsafe))
        if progress:
            progress(i, len(paths), "fix")
    return outs


def write_outcomes(outcomes: list[FixOutcome]) -> None:
    for o in outcomes:
        if o.changed:
            ft = FileText.read(o.path)
            if ft.text != o.original:
                o.error = "the file changed on disk while it was being fixed; not written"
                continue
            write_atomic(o.path, ft.encode(o.text))
