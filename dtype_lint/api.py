"""A small programmatic API over the pipeline, for tools (the verify harness) and tests.

`settings` uses the `[tool.dtype-lint]` keys, e.g. {"preset": "vllm", "helper": "pkg.mod:func",
"helper-template": "torch"}; nothing is read from disk unless a path is given.
"""

from __future__ import annotations

from pathlib import Path

from dtype_lint.core.config import Config, apply_settings
from dtype_lint.core.findings import Finding
from dtype_lint.fix.helper_template import helper_source
from dtype_lint.fix.scope_check import libcst_unavailable
from dtype_lint.run.pipeline import RunOptions, RunResult, check_text, fix_one_text, run


def make_config(settings: dict | None = None, root: Path | None = None) -> Config:
    cfg = Config(root=root or Path.cwd())
    return apply_settings(cfg, dict(settings or {}), where="settings")


def check_source(source: str, *, filename: str = "<string>", settings: dict | None = None) -> list[Finding]:
    """Findings for one module's text, with the class index built from that text alone (the file
    system is not consulted, even when `filename` names an existing file). Per-file ignores and
    suppression comments apply exactly as in a run."""
    return check_text(source, filename, make_config(settings))


def fix_source(source: str, *, filename: str = "<string>", settings: dict | None = None,
               unsafe_fixes: bool = False) -> str:
    """The text after applying every (safe, or also unsafe) fix; raises ValueError if a fix fails,
    and ``scope_check.LibcstUnavailable`` (an ImportError) if it failed for want of libcst, which
    the fixer's name check imports lazily."""
    outcome = fix_one_text(source, filename, make_config(settings), unsafe_fixes)
    if outcome.error:
        missing = libcst_unavailable()
        if missing is not None:
            raise missing
        raise ValueError(outcome.error)
    return outcome.text


def helper_module_source(settings: dict | None = None) -> str:
    """The text of the helper module that `--fix` would create for these settings."""
    cfg = make_config(settings)
    return helper_source(cfg.helper_spec[1], cfg.template)


def check_paths(paths: list[str], config: Config, **options) -> RunResult:
    """A whole run (the CLI's `check`), e.g. `check_paths(["src"], cfg, fix=True)`."""
    return run(config, RunOptions(paths=list(paths), **options))
