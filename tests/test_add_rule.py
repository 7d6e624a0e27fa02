"""scripts/add_rule.py: adding an opt-in rule is one module plus its test file. The scaffold runs in
a copy of this checkout; there the new rule is discovered, off by default, selectable by its code,
documented (its page and the rules tables), and its own tests and the rule-wide tests pass with no
other file edited."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

# Imports `dtype_lint` (and its `rules` and `kernels_ref`, which live at the top of a checkout) from
# the checkout this module sits in, ahead of the editable install of the one running the tests.
BOOT = textwrap.dedent('''
    import importlib.util
    import sys
    from pathlib import Path

    ROOT = Path(__file__).resolve().parents[1]
    PACKAGES = {"dtype_lint": ROOT / "dtype_lint", "dtype_lint.rules": ROOT / "rules",
                "dtype_lint.kernels_ref": ROOT / "kernels_ref"}


    class CheckoutFinder:
        @staticmethod
        def find_spec(name, path=None, target=None):
            folder = PACKAGES.get(name)
            if folder is None:
                return None
            return importlib.util.spec_from_file_location(name, folder / "__init__.py",
                                                          submodule_search_locations=[str(folder)])


    sys.meta_path.insert(0, CheckoutFinder)
''')


def _tracked(root: Path) -> list[str]:
    listed = subprocess.run(["git", "ls-files", "--cached", "--others", "--exclude-standard", "-z"], cwd=root,
                            capture_output=True, text=True, check=True).stdout
    return [name for name in listed.split("\0") if name and (root / name).is_file()]


@pytest.fixture(scope="module")
def checkout(tmp_path_factory) -> Path:
    """A copy of this checkout's files (not its virtualenv or caches), a git repository of its own
    so that what the scaffold touched is `git status`."""
    copy = tmp_path_factory.mktemp("checkout")
    for name in _tracked(ROOT):
        (copy / name).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(ROOT / name, copy / name)
    (copy / "_boot").mkdir()
    (copy / "_boot" / "checkout_boot.py").write_text(BOOT, encoding="utf-8")
    for command in (["init", "-q"], ["add", "-A"], ["-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "base"]):
        subprocess.run(["git", *command], cwd=copy, check=True, capture_output=True)
    return copy


def _python(copy: Path, *args: str, timeout: int = 600) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(copy / "_boot"), "PYTHONDONTWRITEBYTECODE": "1"}
    code = "import checkout_boot, runpy, sys; sys.argv = sys.argv[1:]; runpy.run_module(sys.argv[0], run_name='__main__', alter_sys=True)"
    return subprocess.run([sys.executable, "-c", code, *args], cwd=copy, env=env, capture_output=True, text=True,
                          timeout=timeout)


@pytest.fixture(scope="module")
def scaffolded(checkout: Path) -> tuple[Path, str]:
    run = subprocess.run([sys.executable, str(checkout / "scripts" / "add_rule.py"), "storage-dtype-iinfo",
                          "--summary", "integer limits of a quantizable layer's storage dtype", "--root", str(checkout)],
                         cwd=checkout, capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stderr
    codes = sorted(path.stem[:6].upper() for path in (checkout / "rules").glob("dtl*.py"))
    return checkout, codes[-1]


def test_the_scaffold_writes_one_module_one_test_and_the_generated_docs(scaffolded):
    copy, code = scaffolded
    status = subprocess.run(["git", "status", "--porcelain"], cwd=copy, capture_output=True, text=True,
                            check=True).stdout.splitlines()
    added = sorted(line[3:] for line in status if line.startswith("??"))
    changed = sorted(line[3:] for line in status if not line.startswith("??"))
    assert added == [f"docs/rules/{code}.md", f"rules/{code.lower()}_storage_dtype_iinfo.py",
                     f"tests/rules/test_{code.lower()}.py"]
    # The generated tables, and nothing else: no list of rules to edit by hand.
    assert changed == ["README.md", "docs/rules/README.md"]
    diff = subprocess.run(["git", "diff", "-U0", "--", "README.md"], cwd=copy, capture_output=True, text=True).stdout
    assert f"+| [{code}](docs/rules/{code}.md) | storage-dtype-iinfo | (opt-in) integer limits" in diff


def test_the_new_rule_is_discovered_off_by_default_and_selectable(scaffolded):
    copy, code = scaffolded
    probe = _python(copy, "dtype_lint", "rule", code)
    assert probe.returncode == 0, probe.stderr
    assert probe.stdout.startswith(f"# {code} storage-dtype-iinfo:")
    assert probe.stdout == (copy / "docs" / "rules" / f"{code}.md").read_text(encoding="utf-8")
    site = copy / "site" / "block.py"
    site.parent.mkdir()
    site.write_text("import torch\nfrom vllm.model_executor.layers.linear import RowParallelLinear\n\n\n"
                    "class Block:\n    def __init__(self, o_proj: RowParallelLinear):\n        self.o_proj = o_proj\n\n"
                    "    def limit(self):\n        return torch.iinfo(self.o_proj.weight.dtype).max\n", encoding="utf-8")
    (copy / "site" / "pyproject.toml").write_text("[tool.dtype-lint]\n")
    default = _python(copy, "dtype_lint", "check", "--no-cache", "site")
    assert default.returncode == 0 and code not in default.stdout, default.stdout + default.stderr
    selected = _python(copy, "dtype_lint", "check", "--no-cache", "--select", code, "site")
    assert selected.returncode == 1 and f"{code} " in selected.stdout, selected.stdout + selected.stderr
    listed = _python(copy, "dtype_lint", "check", "--help")
    assert code in listed.stdout.replace("\n", " ")  # --select's help names the opt-in rules


def test_the_fast_tier_tests_of_rules_pass_in_the_scaffolded_checkout(scaffolded):
    copy, code = scaffolded
    run = _python(copy, "pytest", "-v", "-n", "0", "-p", "no:cacheprovider", "-m", "not slow and not network",
                  f"tests/rules/test_{code.lower()}.py", "tests/test_rule_examples.py", "tests/test_rule_registry.py",
                  "tests/test_docs.py", "tests/test_rule_contract.py", "tests/test_config.py",
                  "-k", f"{code} or registry or generated or fix_column or contract or opt_in or select")
    assert run.returncode == 0, run.stdout[-4000:] + run.stderr[-2000:]
    ran = run.stdout
    assert f"tests/rules/test_{code.lower()}.py::test_selected_by_its_code" in ran and " PASSED" in ran
    assert f"test_valid[{code}-valid-0] PASSED" in ran and f"test_invalid[{code}-invalid-0] PASSED" in ran
    assert f"test_rule_page_is_generated_from_the_rule[{code}] PASSED" in ran
