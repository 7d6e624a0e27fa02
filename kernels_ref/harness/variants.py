"""The code ``dtype-lint verify`` runs: the fixture and its fix, vLLM's functions and their fix.

Two sources, both rewritten by the linter's stable API (``dtype_lint.api.fix_source`` and
``helper_module_source``), never by hand:

* **the fixture** (``kernels_ref/harness/verify_fixture/mla_prefill.py``, our own code in vLLM's
  shape, shipped as package data: the one test input the installed tool needs): written into a
  fresh temp package as ``pre.py``, the fixer's ``post.py`` and helper module beside it, all three imported from there (:func:`fixture_package`);
* **vLLM's own functions**: 0.27.1's ``mla_attention.py`` from ``dtype_lint.releases`` (the
  original, and the fixer's rewrite of it with the ``vllm`` helper template) and 0.28.0's, cut out
  by :mod:`.upstream_source` (:func:`upstream_releases`).

Both can be saved on a machine with libcst and the release trees (:func:`write_variants`) and
loaded on one without (the GPU machine). Loading checks every file that will be imported or
executed, not only ``pre.py`` (:func:`load_variants`): each file's sha256 against the record, no
file unrecorded, ``pre.py`` against the current fixture, ``post.py`` importing nothing but what
``pre.py`` imports plus the helper, the helper importing only torch (or vLLM's platform, which the
harness supplies), every extracted function's free names resolvable inside the extraction; and
where libcst and the trees are present, everything regenerated and compared.
"""

from __future__ import annotations

import ast
import difflib
import hashlib
import importlib
import importlib.resources
import json
import shutil
import sys
import tempfile
import uuid
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType
from typing import Callable, Iterator

from dtype_lint.core.writer import write_atomic

from . import upstream_source as us

FIXTURE = "verify_fixture/mla_prefill.py"  # beside this module, shipped as package data
HELPER_MODULE = "layer_input_dtype"
HELPER_FUNC = "get_layer_input_dtype"
UPSTREAM_PRE, UPSTREAM_FIXED = "0.27.1", "0.28.0"
#: Labels of the three upstream sources, in the order the table shows them.
UPSTREAM_LABELS = ("0.27.1", "0.27.1+dtype-lint", "0.28.0")
#: What a helper module may import: torch, and vLLM's platform (supplied by the harness).
HELPER_IMPORTS = frozenset({"torch", "vllm.platforms", "__future__"})


class VariantsError(ValueError):
    """Saved variants that cannot be trusted, or sources that cannot be produced."""


class FixerChangedNothing(VariantsError):
    """The fixer left vLLM 0.27.1's module as it was (e.g. it would not route a site through a
    helper its proof rejects). ``verify`` reports it as a violation and still runs the helper the
    rewrite would have called through the matrix; ``--emit-variants`` refuses to save."""

    def __init__(self, message: str, helper_text: str, helper_func: str, module: str) -> None:
        super().__init__(message)
        self.helper_text, self.helper_func, self.module = helper_text, helper_func, module


def _sha256(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


def _settings(package: str, template: str) -> dict:
    return {"preset": "vllm", "helper": f"{package}.{HELPER_MODULE}:{HELPER_FUNC}", "helper-template": template}


def _absent_filename(package: str, name: str) -> str:
    # A path that does not exist: the fix must depend on the text and settings alone.
    return str(Path(tempfile.gettempdir()) / f"{package}.absent" / package / name)


# ----------------------------------------------------------------------------- the fixture


@dataclass(frozen=True)
class FixtureSources:
    """``pre.py`` (the fixture), the fixer's ``post.py`` and helper module."""

    name: str
    settings: dict
    unsafe_fixes: bool
    pre: str
    post: str
    helper: str
    problem: str = ""  # why the fixer wrote no post.py (then post == pre)

    @property
    def diff(self) -> str:
        return "".join(difflib.unified_diff(self.pre.splitlines(True), self.post.splitlines(True), "pre.py", "post.py"))

    def files(self) -> dict[str, str]:
        return {"__init__.py": "", "pre.py": self.pre, "post.py": self.post, f"{HELPER_MODULE}.py": self.helper}


def fixture_source() -> str:
    return importlib.resources.files("dtype_lint.kernels_ref.harness").joinpath(FIXTURE).read_text()


def fix_fixture(*, unsafe_fixes: bool = False, name: str | None = None) -> FixtureSources:
    """Run dtype-lint's own fixer on the fixture."""
    from dtype_lint.api import fix_source, helper_module_source

    name = name or f"dtl_verify_{uuid.uuid4().hex[:12]}"
    settings = _settings(name, "torch")
    pre = fixture_source()
    try:
        post = fix_source(pre, filename=_absent_filename(name, "pre.py"), settings=settings, unsafe_fixes=unsafe_fixes)
    except ImportError:
        raise
    except ValueError as exc:  # the fixer refused: verify reports it and runs the helper anyway
        return FixtureSources(name, settings, unsafe_fixes, pre, pre, helper_module_source(settings),
                              problem=f"fixer: it failed on the fixture: {exc}")
    return FixtureSources(name, settings, unsafe_fixes, pre, post, helper_module_source(settings))


@dataclass
class FixturePackage:
    """The imported temp package."""

    name: str
    pre: ModuleType
    post: ModuleType
    helper: Callable
    settings: dict
    diff: str
    origin: str
    unsafe_fixes: bool


@contextmanager
def fixture_package(src: FixtureSources, origin: str) -> Iterator[FixturePackage]:
    """Write and import ``<tmp>/<name>/{pre,post,layer_input_dtype}.py``; clean up after."""
    root = Path(tempfile.mkdtemp(prefix="dtl_verify_"))
    try:
        for fname, text in src.files().items():
            (root / src.name).mkdir(exist_ok=True)
            (root / src.name / fname).write_text(text)
        sys.path.insert(0, str(root))
        try:
            pre = importlib.import_module(f"{src.name}.pre")
            post = importlib.import_module(f"{src.name}.post")
            helper = getattr(importlib.import_module(f"{src.name}.{HELPER_MODULE}"), HELPER_FUNC)
        finally:
            sys.path.remove(str(root))
        yield FixturePackage(src.name, pre, post, helper, src.settings, src.diff, origin, src.unsafe_fixes)
    finally:
        for mod in [m for m in sys.modules if m == src.name or m.startswith(src.name + ".")]:
            del sys.modules[mod]
        shutil.rmtree(root, ignore_errors=True)


# ----------------------------------------------------------------------------- vLLM


@dataclass
class UpstreamSources:
    """The three extractions and where they came from."""

    releases: dict[str, us.Extraction]  # label -> extraction, labels as UPSTREAM_LABELS
    settings: dict
    diff: str  # the fixer's diff of 0.27.1's mla_attention.py (the two functions' hunks)
    unsafe_fixes: bool = False


@dataclass(frozen=True)
class ReusedFix:
    """vLLM 0.27.1's MLA module as a migration already rewrote it (`migrate --series`): the text
    its patch writes and the helper that text imports. :func:`upstream_sources` runs these bytes as
    "ours" instead of running the fixer on the release again, but only when ``before`` is the
    release's own text: a fix of another text proves nothing about 0.27.1. Nothing here is
    trusted: the matrix judges "ours" by what it does on every kv_b_proj storage, so a text that is
    not the fix (one that still casts to the weight's storage, or changes nothing) fails its checks."""

    before: str  # the module's text the migration read
    after: str  # the text the patch writes
    helper_module: str  # the module the rewrite imports the helper from (the tree's own)
    helper_text: str  # that module's text, as the series adds it (or the tree has it)
    helper_func: str = HELPER_FUNC  # the helper's name in it
    origin: str = "the migration's patch"


def _runnable_helper(reused: ReusedFix) -> bool:
    """The reused helper's module is one the harness can run on its own (it imports only torch
    and vLLM's platform, and defines the helper): a helper living in a larger module of the tree
    is not, and the fixer's own rewrite and helper are run instead, as without reuse."""
    try:
        check_helper_text(reused.helper_text, reused.helper_func, "the reused helper")
    except (VariantsError, SyntaxError):
        return False
    return True


def upstream_sources(*, unsafe_fixes: bool = False, name: str | None = None,
                     reused: ReusedFix | None = None) -> UpstreamSources:
    """Fetch (from the cache) 0.27.1 and 0.28.0, rewrite 0.27.1 with the fixer, extract all three.
    ``reused``: the rewrite a migration already made (see :class:`ReusedFix`), used instead of the
    fixer's when it is a rewrite of this release's text; otherwise the fixer runs as without it."""
    from dtype_lint.api import fix_source, helper_module_source
    from dtype_lint.releases import release_tree

    name = name or f"dtl_verify_{uuid.uuid4().hex[:12]}"
    settings = _settings(name, "vllm")
    root_pre, root_fixed = release_tree("vllm", UPSTREAM_PRE), release_tree("vllm", UPSTREAM_FIXED)
    text = (root_pre / us.MLA_MODULE).read_text()
    if reused is not None and reused.before == text and _runnable_helper(reused):
        settings = {"reused": reused.origin, "helper": f"{reused.helper_module}:{reused.helper_func}"}
        helper, helper_module, fixed = reused.helper_text, reused.helper_module, reused.after
        helper_func = reused.helper_func
        nothing = f"the reused rewrite ({reused.origin}) changed nothing in vLLM {UPSTREAM_PRE}'s {us.MLA_MODULE}"
    else:
        helper, helper_module, helper_func = helper_module_source(settings), f"{name}.{HELPER_MODULE}", HELPER_FUNC
        nothing = f"fixer: it changed nothing in vLLM {UPSTREAM_PRE}'s {us.MLA_MODULE}"
        try:
            fixed = fix_source(text, filename=_absent_filename(name, "mla_attention.py"), settings=settings,
                               unsafe_fixes=unsafe_fixes)
        except ImportError:
            raise
        except ValueError as exc:
            raise FixerChangedNothing(f"fixer: it failed on vLLM {UPSTREAM_PRE}'s {us.MLA_MODULE}: {exc}", helper,
                                      helper_func, helper_module) from exc
    if fixed == text:
        raise FixerChangedNothing(nothing, helper, helper_func, helper_module)
    releases = {
        "0.27.1": us.extract(text, UPSTREAM_PRE, "0.27.1", read=us.read_release(root_pre)),
        "0.27.1+dtype-lint": us.extract(
            fixed, UPSTREAM_PRE, "0.27.1+dtype-lint", read=us.read_release(root_pre),
            helper_module=helper_module, helper_text=helper,
        ),
        "0.28.0": us.extract((root_fixed / us.MLA_MODULE).read_text(), UPSTREAM_FIXED, "0.28.0",
                             read=us.read_release(root_fixed)),
    }
    if not releases["0.28.0"].has(us.FIXED_HELPER):
        raise VariantsError(f"vLLM {UPSTREAM_FIXED} has no {us.FIXED_HELPER}")
    diff = "".join(difflib.unified_diff(text.splitlines(True), fixed.splitlines(True), "0.27.1/mla_attention.py",
                                        "0.27.1+dtype-lint/mla_attention.py", n=1))
    return UpstreamSources(releases, settings, diff, unsafe_fixes)


def validate_extraction(ext: us.Extraction) -> None:
    """Every free name of every unit resolves inside the extraction (units, executed imports,
    harness-provided names, the helper); the imports are plain ones; the helper imports only
    torch and vLLM's platform. Raises :class:`VariantsError`."""
    defined = {u.name for u in ext.units} | set(ext.provided)
    for stmt in ext.imports:
        node = ast.parse(stmt).body[0]
        if not isinstance(node, (ast.Import, ast.ImportFrom)):  # extract() records import statements only
            raise VariantsError(f"{ext.label}: {stmt!r} is not an import")
        module = (node.module or "") if isinstance(node, ast.ImportFrom) else node.names[0].name  # "": relative
        if module.split(".")[0] not in us.PLAIN_IMPORTS:
            raise VariantsError(f"{ext.label}: import {stmt!r} is not one the harness executes")
        defined |= {(a.asname or a.name).split(".")[0] for a in node.names}
    if not set(ext.provided) <= us.PROVIDED:
        raise VariantsError(f"{ext.label}: unknown provided names {sorted(set(ext.provided) - us.PROVIDED)}")
    if ext.helper_text is not None:
        if ext.helper_name is None:  # extract() names the helper whenever it is given its text
            raise VariantsError(f"{ext.label}: a helper text the release never imports")
        defined.add(ext.helper_name)
        check_helper_text(ext.helper_text, ext.helper_name, f"{ext.label} helper")
    for unit in ext.units:
        node = ast.parse(unit.text).body[0]
        if getattr(node, "name", None) not in (unit.name, None) or len(ast.parse(unit.text).body) != 1:
            raise VariantsError(f"{ext.label}: unit {unit.name} is not one definition of that name")
        free = us.free_names(node) - {"self"} - defined
        if free:
            raise VariantsError(f"{ext.label}: {unit.name} uses {sorted(free)}, defined nowhere in the extraction")


def check_helper_text(text: str, func: str, what: str) -> None:
    tree = ast.parse(text)
    for module, _name, stmt in us.helper_imports(text):
        if module not in HELPER_IMPORTS:
            raise VariantsError(f"{what}: {stmt!r} is not an import a helper may make")
    names = [n.name for n in tree.body if isinstance(n, ast.FunctionDef)]
    if func not in names:
        raise VariantsError(f"{what}: defines no {func}")


# ----------------------------------------------------------------------------- save and load


def write_variants(directory: str | Path, *, unsafe_fixes: bool = False, upstream: bool = True) -> Path:
    """Run the fixer here and save everything ``verify`` runs, for a machine without libcst or
    the release trees. Writes ``variants.json``, ``<package>/*.py`` and ``upstream.json``."""
    out = Path(directory)
    out.mkdir(parents=True, exist_ok=True)
    src = fix_fixture(unsafe_fixes=unsafe_fixes)
    if src.problem or src.post == src.pre:
        raise VariantsError(src.problem or "the fixer changed nothing in the fixture: nothing to save")
    meta: dict = {
        "fixture": {
            "package": src.name,
            "settings": src.settings,
            "unsafe_fixes": unsafe_fixes,
            "files": {fname: _sha256(text) for fname, text in src.files().items()},
        },
        "upstream": None,
    }
    pkg = out / src.name
    pkg.mkdir()
    for fname, text in src.files().items():
        write_atomic(pkg / fname, text.encode())
    if upstream:
        up = upstream_sources(unsafe_fixes=unsafe_fixes)
        data = {"settings": up.settings, "diff": up.diff, "unsafe_fixes": unsafe_fixes,
                "releases": {k: v.to_json() for k, v in up.releases.items()}}
        text = json.dumps(data, indent=1) + "\n"
        write_atomic(out / "upstream.json", text.encode())
        meta["upstream"] = {"file": "upstream.json", "sha256": _sha256(text)}
    write_atomic(out / "variants.json", (json.dumps(meta, indent=2) + "\n").encode())
    return out


def _imports_of(text: str) -> set[str]:
    return {stmt for _m, _n, stmt in us.helper_imports(text)}


def load_fixture(directory: str | Path, notes: list[str] | None = None) -> FixtureSources:
    """The fixture package saved by :func:`write_variants`, with every file checked (``notes``
    gets whether the fix could also be regenerated here)."""
    base = Path(directory)
    try:
        meta = json.loads((base / "variants.json").read_text())["fixture"]
        name, settings, recorded = meta["package"], meta["settings"], meta["files"]
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise VariantsError(f"{base}: no readable variants.json ({exc})") from exc
    pkg = base / name
    present = {p.name for p in pkg.iterdir()} if pkg.is_dir() else set()
    if present != set(recorded):
        raise VariantsError(f"{pkg}: files {sorted(present)} differ from the recorded {sorted(recorded)}")
    texts = {}
    for fname, digest in recorded.items():
        text = (pkg / fname).read_text()
        if _sha256(text) != digest:
            raise VariantsError(f"{pkg / fname}: contents differ from the recorded sha256")
        texts[fname] = text
    src = FixtureSources(name, settings, bool(meta.get("unsafe_fixes")), texts["pre.py"], texts["post.py"],
                         texts[f"{HELPER_MODULE}.py"])
    if texts["__init__.py"]:
        raise VariantsError(f"{pkg}/__init__.py must be empty")
    if src.pre != fixture_source():
        raise VariantsError(f"{base}: pre.py is not the current fixture; regenerate with --emit-variants")
    if settings != _settings(name, "torch"):
        raise VariantsError(f"{base}: unexpected fixer settings {settings}")
    helper_import = f"from {name}.{HELPER_MODULE} import {HELPER_FUNC}"
    extra = _imports_of(src.post) - _imports_of(src.pre) - {helper_import}
    if extra:
        raise VariantsError(f"{pkg}/post.py imports {sorted(extra)}, which pre.py does not")
    check_helper_text(src.helper, HELPER_FUNC, f"{pkg}/{HELPER_MODULE}.py")
    note = _regenerate_fixture_if_possible(src)
    if notes is not None:
        notes.append(note)
    return src


def _regenerate_fixture_if_possible(src: FixtureSources) -> str:
    """With libcst here, the saved fix must be what the fixer writes now; without it (the GPU
    machine) the checks of :func:`load_fixture` are what can be done. Returns what was done."""
    try:
        regenerated = fix_fixture(unsafe_fixes=src.unsafe_fixes, name=src.name)
    except ImportError as exc:  # LibcstUnavailable from dtype_lint.api.fix_source
        return f"fixture not regenerated: {exc.__class__.__name__}: {str(exc).split(':')[0]}"
    if (regenerated.post, regenerated.helper) != (src.post, src.helper):
        raise VariantsError(f"{src.name}: post.py or the helper differ from what the fixer writes now")
    return "fixture regenerated by the fixer here: identical"


def load_upstream(directory: str | Path, notes: list[str] | None = None) -> UpstreamSources | None:
    """The upstream extractions saved by :func:`write_variants` (None if none were saved)."""
    base = Path(directory)
    meta = json.loads((base / "variants.json").read_text()).get("upstream")
    if meta is None:
        return None
    text = (base / meta["file"]).read_text()
    if _sha256(text) != meta["sha256"]:
        raise VariantsError(f"{base / meta['file']}: contents differ from the recorded sha256")
    data = json.loads(text)
    try:
        releases = {label: us.Extraction.from_json(data["releases"][label]) for label in UPSTREAM_LABELS}
    except (KeyError, TypeError, ValueError) as exc:
        raise VariantsError(f"{base / meta['file']}: {exc}") from exc
    for ext in releases.values():
        validate_extraction(ext)
    saved = UpstreamSources(releases, data["settings"], data["diff"], bool(data.get("unsafe_fixes")))
    note = _regenerate_upstream_if_possible(saved)
    if notes is not None:
        notes.append(note)
    return saved


def _trees_cached() -> bool:
    from dtype_lint import releases

    return all((releases.cache_root() / f"vllm-{v}" / releases.MARKER).is_file() for v in (UPSTREAM_PRE, UPSTREAM_FIXED))


def _regenerate_upstream_if_possible(saved: UpstreamSources) -> str:
    """With libcst and the cached trees here, the saved extractions must be what they give now
    (never fetches: on the GPU machine there is no network and no tree). Returns what was done."""
    if not _trees_cached():
        return "vLLM's functions not regenerated: no cached vLLM trees here"
    name = saved.settings["helper"].split(".", 1)[0]
    try:
        now = upstream_sources(name=name, unsafe_fixes=saved.unsafe_fixes)
    except ImportError as exc:  # LibcstUnavailable: the fixer cannot rewrite 0.27.1 here
        return f"vLLM's functions not regenerated: {exc.__class__.__name__}: {str(exc).split(':')[0]}"
    for label in UPSTREAM_LABELS:
        if now.releases[label].to_json() != saved.releases[label].to_json():
            raise VariantsError(f"saved extraction {label} differs from what the trees and the fixer give now")
    return "vLLM's functions regenerated from the cached trees here: identical"


@dataclass
class Sources:
    fixture: FixtureSources | None  # None: the run has no fixture rows (sources(fixture=False))
    fixture_origin: str
    upstream: UpstreamSources | None
    upstream_origin: str | None = None
    notes: list[str] = field(default_factory=list)
    fixer_problems: list[str] = field(default_factory=list)  # violations of the "fixer" check
    upstream_helper: tuple[str, str, str] | None = None  # (text, func, module) when there is no rewrite


def sources(*, unsafe_fixes: bool = False, variants_dir: str | Path | None = None, upstream: bool = True,
            reused: ReusedFix | None = None, fixture: bool = True) -> Sources:
    """Produce (or load) what a verify run executes. ``reused``: see :func:`upstream_sources`.
    ``fixture`` False: vLLM's functions only, the fixer not run on the fixture."""
    if variants_dir is not None:
        notes: list[str] = []
        saved = load_fixture(variants_dir, notes)
        up = load_upstream(variants_dir, notes) if upstream else None
        if upstream and up is None:
            raise VariantsError(f"{variants_dir}: saved without vLLM's functions (emit them, or run with --no-upstream)")
        return Sources(saved, f"dtype_lint.api, saved in {variants_dir}", up,
                       f"vLLM trees and dtype_lint.api, saved in {variants_dir}" if up else None, notes)
    fixed = fix_fixture(unsafe_fixes=unsafe_fixes) if fixture else None
    problems = [fixed.problem] if fixed is not None and fixed.problem else []
    up, lone_helper = None, None
    if upstream:
        try:
            up = upstream_sources(unsafe_fixes=unsafe_fixes, reused=reused)
        except FixerChangedNothing as exc:
            problems.append(str(exc))
            lone_helper = (exc.helper_text, exc.helper_func, exc.module)
    origin = "dtype_lint.releases + dtype_lint.api"
    if up is not None and "reused" in up.settings:
        origin = f"dtype_lint.releases + {up.settings['reused']}"
    return Sources(fixed, "dtype_lint.api" if fixed is not None else "", up, origin if up else None,
                   fixer_problems=problems, upstream_helper=lone_helper)
