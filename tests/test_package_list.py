"""Every package of the source tree is in pyproject.toml's explicit `packages` list.

The list is explicit because `rules/` and `kernels_ref/` are mapped under `dtype_lint.`
(`package-dir`); a folder left out is silently missing from the wheel. The ecosystems `generic`,
`megatron` and `quantizers` were: an installed dtype-lint then failed to import its storage
formats. The wheel test (test_release.py) builds and installs the wheel; this one says which
folder is missing in a second."""

from __future__ import annotations

from pathlib import Path

from dtype_lint.core.config import tomllib  # tomli on Python 3.10

ROOT = Path(__file__).resolve().parent.parent


def _listed() -> set[str]:
    config = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["tool"]["setuptools"]
    return set(config["packages"])


def _on_disk() -> set[str]:
    mapped = {"dtype_lint": ROOT / "dtype_lint", "dtype_lint.rules": ROOT / "rules",
              "dtype_lint.kernels_ref": ROOT / "kernels_ref"}
    found = set()
    for name, folder in mapped.items():
        for init in folder.rglob("__init__.py"):
            relative = init.parent.relative_to(folder)
            if "__pycache__" in relative.parts or "verify_fixture" in relative.parts:
                continue
            found.add(".".join([name, *relative.parts]))
    return found


def test_every_package_folder_is_listed():
    assert sorted(_on_disk() - _listed()) == []


def test_every_listed_package_exists():
    assert sorted(_listed() - _on_disk()) == []
