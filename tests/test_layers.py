"""The package's layers, bottom-up: every module imports only from its own layer or below (#35).

Imports are read with `ast` from every module of `dtype_lint/` and `rules/` (installed as
`dtype_lint.rules`), function-level imports included: an import deferred into a function for
start-up time is still a dependency. Three things fail:

- a back arrow: a module importing a module of a higher layer;
- a stage below the run (core, dtypes, analysis, fix, rule) importing `dtype_lint.run`;
- a private name (`_name`) taken from a module of another package, by `from M import _name` or
  by `M._name` on an imported module: a name the owner may change without looking outside.

`LAYERS` is the one statement of the order; `docs/architecture.md` draws it, and a test below
checks that the drawing names the same layers in the same order.
"""

from __future__ import annotations

import ast
import functools
import re
from pathlib import Path

import pytest
from parsed_sources import nodes, parsed

ROOT = Path(__file__).resolve().parent.parent

# Bottom-up. A module's layer is the first entry whose prefix names it (longest prefix wins).
# Why this order is true, not only wished for:
# - core: what every stage reads (source text, safe reading and writing, trees, regions, text
#   facts, the prefilter, suppressions, discovery and module names, findings, config, presets);
# - dtypes: the abstract interpreter over torch dtypes (reads only core);
# - analysis: what the code says (index, storage model, guard engine, value flow);
# - fix: the planners and the fixer (reads analysis and dtypes: a fix is planned from facts);
# - rule: the rule contract and the rules, which build the planner as one of their facts;
# - run: one run, discovery to writing (the only caller of the rules over a project);
# - api: check_source / fix_source / check_paths, the run for tools (the kernels' harness, the guard);
# - the consumers of a run: the migration, the reporters, the run-time guard and the proofs;
# - the front ends: command line (and its pre-commit fast path), language server, `explain`, `doctor`.
LAYERS: list[tuple[str, tuple[str, ...]]] = [
    ("core", ("dtype_lint.core",)),
    ("dtypes", ("dtype_lint.dtypes",)),
    ("analysis", ("dtype_lint.analysis",)),
    ("fix", ("dtype_lint.fix",)),
    ("rule", ("dtype_lint.rule", "dtype_lint.rules")),
    ("run", ("dtype_lint.run",)),
    ("api", ("dtype_lint.api",)),
    ("consumers", ("dtype_lint.migrate", "dtype_lint.reporters", "dtype_lint.guard", "dtype_lint.ecosystems.hf.verify",
                   "dtype_lint.releases",
                   "dtype_lint.stdout_guard", "dtype_lint.kernels_ref")),
    ("front", ("dtype_lint.fast_path", "dtype_lint.cli", "dtype_lint.cli_output", "dtype_lint.cli_modes",
               "dtype_lint.server", "dtype_lint.server_edits", "dtype_lint.explain", "dtype_lint.doctor",
               "dtype_lint.entry", "dtype_lint.__main__")),
]
# An ecosystem (dtype_lint/ecosystems/<name>/) plugs a module into each stage it extends, so each
# of its modules sits in the layer of the stage it plugs into, by its role (the file name the
# registry names it by). A module of its own that is no role (megatron's specs.py) is declared with
# its layer in the ecosystem's `__init__.py` (`MODULE_LAYERS`), so adding an ecosystem touches only
# its folder and the registry; a name in neither fails test_every_module_has_a_layer.
ECOSYSTEM_ROLES: dict[str, str] = {
    "registry": "core",        # names the plug-ins as data; imports none of them itself
    "presets": "core",         # what a preset knows (config reads it)
    "layer_attributes": "core",  # what a layer's attributes mean (the model dtype's name): text facts read it
    "formats": "dtypes",       # the storage formats its backends leave (dtypes/storage_formats.py's rows)
    "family": "analysis",      # the backend family: layers, quantizers, storages, guards
    "adapter": "analysis",     # an adapter library's base layers (peft)
    "words": "analysis",       # a message's storage words where the verdict names no backend
    "rule_words": "analysis",  # the passages a rule's page (and its examples) name backends with
    "planner": "fix",          # a site of the family → edits through its helper
    "template": "fix",         # the input-dtype helper's text `--fix` creates (vllm, torch)
    "helper": "fix",           # its helper's text and where it lives
    "series": "consumers",     # its conventions for a patch series
    "regression": "consumers",  # the regression tests a series adds
    "verify": "consumers",     # its proof against real quantized layers
    "series_words": "consumers",  # its words in a patch series' messages
    "proofs": "consumers",     # a patch's executable proof (vllm: the reference kernels, the release's own code)
    "stand_ins": "consumers",  # what a release's code imports that its tree cannot serve (vllm.platforms)
    "runtime": "consumers",    # how the run-time guard recognises its quantizers in a live model
}


def _declared_layers(ecosystem_init: Path) -> dict[str, str]:
    """An ecosystem's `MODULE_LAYERS` literal, read without importing the package."""
    for node in parsed(ecosystem_init).body:
        if isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id == "MODULE_LAYERS"
                                                for t in node.targets):
            return ast.literal_eval(node.value)
    return {}


LAYER_NAMES = [name for name, _ in LAYERS]
# The layers below the run: none of them may import `dtype_lint.run`, directly or by a back arrow.
STAGES = {"core", "dtypes", "analysis", "fix", "rule"}


def _module_files() -> dict[str, Path]:
    """Dotted module name → file, for the package and its rules (installed as dtype_lint.rules)."""
    files: dict[str, Path] = {}
    for folder, package in ((ROOT / "dtype_lint", "dtype_lint"), (ROOT / "rules", "dtype_lint.rules"),
                            (ROOT / "kernels_ref", "dtype_lint.kernels_ref")):
        for path in folder.rglob("*.py"):
            parts = list(path.relative_to(folder).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts = parts[:-1]
            files[".".join([package, *parts])] = path
    return files


MODULES = _module_files()


def layer_of(module: str) -> str:
    if module == "dtype_lint":  # the package itself holds only `__version__`
        return "core"
    if module.startswith("dtype_lint.ecosystems"):
        role = ECOSYSTEM_ROLES.get(module.rpartition(".")[2])
        if role is not None:
            return role
        parts = module.split(".")  # dtype_lint.ecosystems.<ecosystem>.<module>
        ecosystem_init = ROOT / "dtype_lint" / "ecosystems" / parts[2] / "__init__.py" if len(parts) == 4 else None
        if ecosystem_init is not None and ecosystem_init.exists():
            declared = _declared_layers(ecosystem_init).get(parts[3])
            if declared is not None:
                assert declared in LAYER_NAMES, f"{ecosystem_init}: {declared!r} is no layer of {LAYER_NAMES}"
                return declared
        if module in MODULES and MODULES[module].name == "__init__.py":  # the packages: docstrings only
            return "core"
        raise AssertionError(f"{module} has no role: name it in its ecosystem's `MODULE_LAYERS` (its __init__.py)")
    best, best_len = None, -1
    for name, prefixes in LAYERS:
        for prefix in prefixes:
            if (module == prefix or module.startswith(prefix + ".")) and len(prefix) > best_len:
                best, best_len = name, len(prefix)
    if best is None:
        raise AssertionError(f"{module} is in no layer: add it to LAYERS in tests/test_layers.py")
    return best


def _package_of(module: str, path: Path) -> str:
    return module if path.name == "__init__.py" else module.rpartition(".")[0]


class Import:
    """One imported module, and the name taken from it (None for `import M` / a module import)."""

    def __init__(self, importer: str, target: str, name: str | None, line: int) -> None:
        self.importer, self.target, self.name, self.line = importer, target, name, line

    def __repr__(self) -> str:
        taken = f" ({self.name})" if self.name else ""
        return f"{self.importer}:{self.line} -> {self.target}{taken}"


def imports_of(module: str, path: Path) -> list[Import]:
    """Every import of a dtype_lint module in this file, at any depth, with the private attribute
    reads of the modules it binds (`source._helper`) as imports of that name."""
    package = _package_of(module, path)
    found: list[Import] = []
    bound_modules: dict[str, str] = {}
    for node in nodes(path):
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.startswith("dtype_lint"):
                    found.append(Import(module, alias.name, None, node.lineno))
                    if alias.asname:
                        bound_modules[alias.asname] = alias.name
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[: len(package.split(".")) - (node.level - 1)]
                source = ".".join(base + ([node.module] if node.module else []))
            else:
                source = node.module or ""
            if not source.startswith("dtype_lint"):
                continue
            for alias in node.names:
                submodule = f"{source}.{alias.name}"
                if submodule in MODULES:
                    found.append(Import(module, submodule, None, node.lineno))
                    bound_modules[alias.asname or alias.name] = submodule
                else:
                    found.append(Import(module, source, alias.name, node.lineno))
    for node in nodes(path):
        if (isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id in bound_modules
                and node.attr.startswith("_") and not node.attr.startswith("__")):
            found.append(Import(module, bound_modules[node.value.id], node.attr, node.lineno))
    return found


ALL_IMPORTS = [imp for module, path in sorted(MODULES.items()) for imp in imports_of(module, path)]


def test_every_module_has_a_layer():
    assert MODULES, "no module found"
    for module in MODULES:
        layer_of(module)


def test_each_declared_ecosystem_module_exists_and_is_no_role():
    """An ecosystem's `MODULE_LAYERS` names its own modules only: a stale name (a module moved or
    deleted) or a role's name (whose layer the role already says) is a declaration that lies."""
    declared = {(init.parent.name, name): layer for init in (ROOT / "dtype_lint" / "ecosystems").glob("*/__init__.py")
                for name, layer in _declared_layers(init).items()}
    assert declared, "no ecosystem declares its own modules"
    for (ecosystem, name), layer in declared.items():
        assert f"dtype_lint.ecosystems.{ecosystem}.{name}" in MODULES, f"{ecosystem}: no module {name}.py"
        assert name not in ECOSYSTEM_ROLES, f"{ecosystem}: {name} is a role; its layer is {ECOSYSTEM_ROLES[name]}"
        assert layer in LAYER_NAMES, f"{ecosystem}: {name}: {layer!r} is no layer"


def test_no_import_goes_up_the_stack():
    back_arrows = [imp for imp in ALL_IMPORTS
                   if LAYER_NAMES.index(layer_of(imp.target)) > LAYER_NAMES.index(layer_of(imp.importer))]
    assert back_arrows == [], "imports against the layer order:\n" + "\n".join(map(repr, back_arrows))


def test_no_stage_imports_the_run():
    into_run = [imp for imp in ALL_IMPORTS
                if layer_of(imp.importer) in STAGES and imp.target.startswith("dtype_lint.run")]
    assert into_run == [], "stages reaching into the run:\n" + "\n".join(map(repr, into_run))


def _owning_package(module: str) -> str:
    path = MODULES.get(module)
    return _package_of(module, path) if path is not None else module


def test_no_private_name_crosses_a_package():
    crossing = [imp for imp in ALL_IMPORTS
                if imp.name and imp.name.startswith("_") and not imp.name.startswith("__")
                and _owning_package(imp.target) != _package_of(imp.importer, MODULES[imp.importer])]
    assert crossing == [], "private names taken from another package:\n" + "\n".join(map(repr, crossing))


# The registry's calls that hand a stage an ecosystem module, and the role each hands out (for
# `plugins(ROLE)` and `plugin(ECOSYSTEM, ROLE)`, the role is the string argument).
PLUGIN_CALLS = {"family_of": "family", "planner_of": "planner", "helper_of": "helper"}


@functools.cache  # the test below asks twice per module, and walking a tree is its whole cost
def plugin_requests(module: str, path: Path) -> list[tuple[int, str]]:
    """(line, role) of every plug-in this module asks the registry for."""
    found = []
    for node in nodes(path):
        if not isinstance(node, ast.Call):
            continue
        name = node.func.id if isinstance(node.func, ast.Name) else getattr(node.func, "attr", None)
        strings = [arg.value for arg in node.args if isinstance(arg, ast.Constant) and isinstance(arg.value, str)]
        if name in PLUGIN_CALLS:
            found.append((node.lineno, PLUGIN_CALLS[name]))
        elif name in ("plugins", "plugin") and strings:
            found.append((node.lineno, strings[-1]))
    return found


def test_no_stage_asks_the_registry_for_a_plug_in_above_it():
    """A plug-in is imported by name (ecosystems/registry.py), so the import check above cannot see
    it: the role a stage asks for must sit at or below the stage's layer, as an import must."""
    upward = [f"{module}:{line} asks for a {role} ({ECOSYSTEM_ROLES[role]})"
              for module, path in sorted(MODULES.items()) if not module.startswith("dtype_lint.ecosystems")
              for line, role in plugin_requests(module, path)
              if LAYER_NAMES.index(ECOSYSTEM_ROLES[role]) > LAYER_NAMES.index(layer_of(module))]
    assert upward == [], "\n".join(upward)
    asked = {role for module, path in MODULES.items() for _line, role in plugin_requests(module, path)}
    assert {"family", "planner", "helper"} <= asked, asked  # the reader sees the stages' requests


@pytest.mark.parametrize("source, expected", [
    ("from dtype_lint.run.pipeline import run\n", "dtype_lint.core.x:1 -> dtype_lint.run.pipeline (run)"),
    ("def f():\n    import dtype_lint.cli as c\n    return c._render\n", "dtype_lint.core.x:3 -> dtype_lint.cli (_render)"),
])
def test_the_reader_sees_function_level_imports_and_private_reads(tmp_path, source, expected):
    """The checks above are only as good as the reader: it must see imports inside functions and
    private attributes read off an imported module."""
    path = tmp_path / "x.py"
    path.write_text(source)
    found = [repr(imp) for imp in imports_of("dtype_lint.core.x", path)]
    assert expected in found


def test_architecture_doc_draws_the_same_layers():
    """docs/architecture.md's layer diagram lists the layers top-down, one `name` per row."""
    text = (ROOT / "docs" / "architecture.md").read_text(encoding="utf-8")
    block = re.search(r"<!-- layers -->\n```\n(.*?)```", text, re.S)
    assert block, "docs/architecture.md has no layer diagram (a ``` block after `<!-- layers -->`)"
    drawn = re.findall(r"^\s*(\w+)\s+│", block.group(1), re.M)
    assert drawn == LAYER_NAMES[::-1]
