"""A small programmatic API over the engine and fixer, for tools (the verify harness) and tests.

`settings` uses the `[tool.dtype-lint]` keys, e.g. {"preset": "vllm", "helper": "pkg.mod:func",
"helper-template": "torch"}; nothing is read from disk unless a path is given.
"""

from __future__ import annotations

import os
from pathlib import Path

from .config import Config, apply_settings
from .engine import analyze_file, build_index
from .findings import Finding
from .fixer import fix_text
from .helper_template import helper_source
from .index import extract_header


def make_config(settings: dict | None = None, root: Path | None = None) -> Config:
    cfg = Config(root=root or Path.cwd())
    return apply_settings(cfg, dict(settings or {}), where="settings")


def _single_file_index(source: str, filename: str, cfg: Config):
    # The text is analysed as a standalone module named "" (see analyze_file(module="")), so its
    # own classes are indexed under that name whether or not `filename` exists on disk.
    return build_index([extract_header(source, "", filename, os.path.basename(filename) == "__init__.py")], cfg)


def check_source(source: str, *, filename: str = "<string>", settings: dict | None = None) -> list[Finding]:
    """Findings for one module's text, with the class index built from that text alone (the file
    system is not consulted, even when `filename` names an existing file)."""
    cfg = make_config(settings)
    return analyze_file(filename, _single_file_index(source, filename, cfg), cfg, text=source, module="")


def fix_source(source: str, *, filename: str = "<string>", settings: dict | None = None,
               unsafe_fixes: bool = False) -> str:
    """The text after applying every (safe, or also unsafe) fix; raises ValueError if a fix fails."""
    cfg = make_config(settings)
    index = _single_file_index(source, filename, cfg)
    outcome = fix_text(filename, source, lambda t: analyze_file(filename, index, cfg, text=t, module=""), unsafe_fixes)
    if outcome.error:
        raise ValueError(outcome.error)
    return outcome.text


def helper_module_source(settings: dict | None = None) -> str:
    """The text of the helper module that `--fix` would create for these settings."""
    cfg = make_config(settings)
    return helper_source(cfg.helper_spec[1], cfg.template)
