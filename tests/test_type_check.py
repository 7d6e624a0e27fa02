"""The package passes its own type checker, as it passes ruff (tests/test_house_style.py) (#35).

mypy runs through scripts/type_check.py, which stages the installed layout (`rules/` and
`kernels_ref/` under `dtype_lint.`, as pyproject's package-dir installs them) and reads [tool.mypy]
from pyproject.toml. No module is excused: the type-debt override (`ignore_errors`) that listed the
modules not clean yet is empty and gone, and a new one fails here."""

from __future__ import annotations

import importlib.util
from pathlib import Path

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10
    import tomli as tomllib

REPO = Path(__file__).resolve().parents[1]
# The modules listed as type debt: 46 when the checker was set up, none since every one was fixed.
DEBT_CEILING = 0


def _script():
    spec = importlib.util.spec_from_file_location("dtype_lint_type_check_script", REPO / "scripts" / "type_check.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _mypy_config() -> dict:
    return tomllib.loads((REPO / "pyproject.toml").read_text(encoding="utf-8"))["tool"]["mypy"]


def _debt() -> list[str]:
    return [module for override in _mypy_config().get("overrides", []) if override.get("ignore_errors")
            for module in override["module"]]


def test_mypy_is_clean_on_the_package():
    assert importlib.util.find_spec("mypy") is not None, "mypy is in the test extra: pip install -e '.[test]'"
    proc = _script().run_mypy()
    assert proc.returncode == 0, proc.stdout[-6000:] + proc.stderr[-2000:]
    assert "Success: no issues found" in proc.stdout


def test_mypy_strictness_is_not_relaxed():
    config = _mypy_config()
    for flag in ("check_untyped_defs", "no_implicit_optional", "warn_unused_ignores", "strict_equality"):
        assert config.get(flag) is True, flag
    assert "ignore_missing_imports" not in config, "name the third-party modules without stubs in an override"
    assert "ignore_errors" not in config


def test_type_debt_only_shrinks_and_names_real_modules():
    debt = _debt()
    assert len(debt) <= DEBT_CEILING, f"{len(debt)} modules in the type-debt override (at most {DEBT_CEILING})"
    assert len(set(debt)) == len(debt)
    roots = {"dtype_lint.rules": REPO / "rules", "dtype_lint.kernels_ref": REPO / "kernels_ref",
             "dtype_lint": REPO / "dtype_lint"}
    for module in debt:
        prefix = next(name for name in roots if module == name or module.startswith(name + "."))
        relative = Path(*module[len(prefix):].lstrip(".").split(".")) if module != prefix else Path()
        base = roots[prefix] / relative
        assert base.with_suffix(".py").is_file() or (base / "__init__.py").is_file(), f"{module} is gone: drop it"


def test_staged_layout_maps_rules_and_kernels_under_the_package(tmp_path):
    script = _script()
    staged = script.stage(tmp_path) / "dtype_lint"
    assert (staged / "rules").resolve() == (REPO / "rules").resolve()
    assert (staged / "kernels_ref").resolve() == (REPO / "kernels_ref").resolve()
    assert (staged / "cli.py").resolve() == (REPO / "dtype_lint" / "cli.py").resolve()
    assert script.checkout_path("dtype_lint/rules/x.py:3: error") == "rules/x.py:3: error"
    assert script.checkout_path("dtype_lint/cli.py:3: error") == "dtype_lint/cli.py:3: error"
