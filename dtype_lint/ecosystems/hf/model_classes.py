"""The model class names of transformers and diffusers, known without reading site-packages.

A project that reshapes Hugging Face models (unsloth, axolotl) subclasses a *concrete* model
class (`class LongcatCausalLM(LlamaForCausalLM)`) or patches one's forward
(`LlamaForCausalLM.forward = patched_forward`). Those classes live in transformers or diffusers,
which the user's tree does not contain: their MRO stops at the imported name, and the model bases
(`PreTrainedModel`, `ModelMixin`) are never seen. So the names of every model class of a pinned
release are shipped as data (`model-classes-*.txt`, one sorted list per library), computed from
the release's own code by `build_catalogue` (scripts/hf_model_classes.py), as vLLM's storage
catalogue is: a class whose ancestry, read in the release's files, reaches the library's model
base. Nothing here imports transformers or diffusers.

A project may also subclass a transformers *module* class that is no model
(`class GaudiMistralAttention(MistralAttention)`) and read a layer its base's `__init__` builds
(`self.k_proj.weight.dtype`). So the pinned transformers release's `modeling_*.py` files give a
second list (`linear-attributes-*.txt`, `build_linear_attributes`): each module class that is no
model class, with the attributes its `__init__` (or, where that calls `super().__init__`, its
ancestors' in those files) assigns from `nn.Linear(...)` and from nothing else. Names only.
"""

from __future__ import annotations

import ast
from functools import cache
from pathlib import Path

# The releases the shipped lists were computed from (regenerate: scripts/hf_model_classes.py).
PINNED = {"transformers": "5.23.0", "diffusers": "0.42.1"}
# What a model class descends from, per library (the classes `from_pretrained` quantizes).
MODEL_ROOTS = {"transformers": "PreTrainedModel", "diffusers": "ModelMixin"}
HERE = Path(__file__).resolve().parent


def catalogue_path(library: str) -> Path:
    return HERE / f"model-classes-{library}-{PINNED[library]}.txt"


@cache
def model_class_names(library: str) -> frozenset[str]:
    """The public model class names of the pinned release of `library` (the shipped list)."""
    lines = catalogue_path(library).read_text(encoding="utf-8").splitlines()
    return frozenset(line for line in lines if line and not line.startswith("#"))


def linear_attributes_path(library: str) -> Path:
    return HERE / f"linear-attributes-{library}-{PINNED[library]}.txt"


@cache
def _linear_attributes(library: str) -> dict[str, frozenset[str]]:
    """`models.llama.modeling_llama.LlamaAttention` → its `nn.Linear` attributes (the shipped list)."""
    path = linear_attributes_path(library)
    if not path.is_file():
        return {}
    found: dict[str, frozenset[str]] = {}
    for line in path.read_text(encoding="utf-8").splitlines():
        if line and not line.startswith("#"):
            name, *attrs = line.split()
            found[name] = frozenset(attrs)
    return found


def linear_attribute(qualname: str, attr: str) -> bool:
    """Does the module class `qualname` of the pinned release (as its file's import spells it:
    `transformers.models.llama.modeling_llama.LlamaAttention`) build `self.<attr>` as an
    `nn.Linear` in its `__init__` (the shipped list)? Model classes are not listed."""
    library, _, rest = qualname.partition(".")
    return library == "transformers" and attr in _linear_attributes(library).get(rest, ())


def is_model_class(qualname: str) -> bool:
    """Is `qualname` (as an import spells it: `transformers.LlamaForCausalLM`,
    `transformers.models.llama.modeling_llama.LlamaForCausalLM`) a model class of its library?"""
    library = qualname.split(".", 1)[0]
    if library not in PINNED or "." not in qualname:
        return False
    return qualname.rsplit(".", 1)[-1] in model_class_names(library)


# ---- building the list from a release tree ------------------------------------------------------


def _class_bases(tree_root: Path, library: str) -> dict[str, set[str]]:
    """Every class of the library's package: its name → the simple names of its bases (names are
    unique enough per library for this: a model class's ancestry is named by its own classes)."""
    bases: dict[str, set[str]] = {}
    for path in sorted((tree_root / library).rglob("*.py")):
        try:
            module = ast.parse(path.read_text(encoding="utf-8"), str(path))
        except (SyntaxError, UnicodeDecodeError):
            continue
        for node in ast.walk(module):
            if isinstance(node, ast.ClassDef):
                names = {base.attr if isinstance(base, ast.Attribute) else getattr(base, "id", "")
                         for base in node.bases}
                bases.setdefault(node.name, set()).update(name for name in names if name)
    return bases


def build_catalogue(tree_root: Path, library: str) -> list[str]:
    """The sorted public names of the classes of `tree_root/library` that descend from its model
    base (`MODEL_ROOTS`), the base included."""
    bases = _class_bases(tree_root, library)
    root = MODEL_ROOTS[library]
    known: dict[str, bool] = {root: True}
    return sorted(name for name in bases if not name.startswith("_") and _descends(name, bases, known))


def _descends(name: str, bases: dict[str, set[str]], known: dict[str, bool],
              seen: frozenset[str] = frozenset()) -> bool:
    """Does class `name` descend from a class `known` says does (memoized in `known`)? At module
    level: a closure that calls itself is a reference cycle."""
    if name not in known:
        known[name] = name not in seen and any(_descends(base, bases, known, seen | {name})
                                               for base in bases.get(name, ()))
    return known[name]


# ---- the `nn.Linear` attributes of the release's module classes -----------------------------------

_LINEAR_CALLS = frozenset({"nn.Linear", "torch.nn.Linear"})


def build_linear_attributes(tree_root: Path, library: str) -> list[str]:
    """Lines `models.x.modeling_x.Class attr ...` (sorted) for each public class of the
    library's `modeling_*.py` files that is no model class and whose `__init__` leaves `self.<attr>`
    an `nn.Linear`: every assignment of it there is `nn.Linear(...)` (or a call of a class of the
    same file subclassing it: falcon's `FalconLinear`); an ancestor of those files
    counts where the `__init__` calls `super().__init__` (or there is none), and the class's own
    assignments of a name replace the ancestor's."""
    classes: dict[str, tuple[list[str], dict[str, bool] | None]] = {}
    for path in sorted((tree_root / library).rglob("modeling_*.py")):
        module = ".".join(path.relative_to(tree_root / library).with_suffix("").parts)
        try:
            tree = ast.parse(path.read_text(encoding="utf-8"), str(path))
        except (SyntaxError, UnicodeDecodeError):
            continue
        names = _imported_classes(tree, module)
        linear_names = _LINEAR_CALLS | ({"Linear"} if names.get("Linear") == "torch.nn.Linear" else set())
        # A class of the file subclassing `nn.Linear` (falcon's `FalconLinear`) builds one too:
        # transformers' quantizers replace each module that is an `nn.Linear` (`isinstance`).
        linear_names |= {node.name for node in tree.body if isinstance(node, ast.ClassDef)
                         and any(_dotted(base) in linear_names for base in node.bases)}
        local = {node.name for node in tree.body if isinstance(node, ast.ClassDef)}
        for node in tree.body:
            if isinstance(node, ast.ClassDef):
                bases = [f"{module}.{name}" if name in local else names.get(name, "")
                         for name in (_base_name(base) for base in node.bases)]
                classes[f"{module}.{node.name}"] = (bases, _own_linears(node, linear_names))
    models = set(build_catalogue(tree_root, library)) if library in MODEL_ROOTS else set()
    memo: dict[str, frozenset[str]] = {}
    lines = []
    for qualname in sorted(classes):
        short = qualname.rsplit(".", 1)[-1]
        attrs = _linears_of(qualname, classes, memo, frozenset())
        if attrs and not short.startswith("_") and short not in models:
            lines.append(" ".join([qualname, *sorted(attrs)]))
    return lines


def _base_name(base: ast.expr) -> str:
    return base.attr if isinstance(base, ast.Attribute) else getattr(base, "id", "")


def _imported_classes(tree: ast.Module, module: str) -> dict[str, str]:
    """The names a module imports at its top level → their dotted origin inside the library."""
    names: dict[str, str] = {}
    package = module.split(".")
    for node in tree.body:
        if isinstance(node, ast.ImportFrom):
            parts = package[:len(package) - node.level] if node.level else []
            origin = ".".join([*parts, *(node.module.split(".") if node.module else [])])
            for alias in node.names:
                names[alias.asname or alias.name] = f"{origin}.{alias.name}"
    return names


def _own_linears(node: ast.ClassDef, linear_names: set[str] | frozenset[str]) -> dict[str, bool] | None:
    """The class's own `__init__`: attribute → is every assignment of `self.<attr>` an
    `nn.Linear(...)`, with the key "__super__" saying whether it calls its bases' (`super().__init__`,
    `Base.__init__(self)`). None: no `__init__` of its own."""
    base_names = {_dotted(base) for base in node.bases}
    init = next((item for item in node.body if isinstance(item, ast.FunctionDef) and item.name == "__init__"), None)
    if init is None:
        return None
    own: dict[str, bool] = {"__super__": False}
    for sub in ast.walk(init):
        if isinstance(sub, ast.Call) and isinstance(sub.func, ast.Attribute) and sub.func.attr == "__init__" \
                and (_dotted(sub.func.value) in base_names or isinstance(sub.func.value, ast.Call)
                     and _dotted(sub.func.value.func) == "super"):
            own["__super__"] = True
        targets = sub.targets if isinstance(sub, ast.Assign) else [sub.target] \
            if isinstance(sub, (ast.AnnAssign, ast.AugAssign)) else []
        for target in targets:
            if isinstance(target, ast.Attribute) and isinstance(target.value, ast.Name) and target.value.id == "self":
                value = getattr(sub, "value", None)
                is_linear = isinstance(value, ast.Call) and _dotted(value.func) in linear_names \
                    and not isinstance(sub, ast.AugAssign)
                own[target.attr] = own.get(target.attr, True) and is_linear
    return own


def _dotted(node: ast.expr) -> str:
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        return f"{_dotted(node.value)}.{node.attr}"
    return ""


def _linears_of(qualname: str, classes: dict, memo: dict[str, frozenset[str]],
                seen: frozenset[str]) -> frozenset[str]:
    if qualname in memo or qualname not in classes or qualname in seen:
        return memo.get(qualname, frozenset())
    bases, own = classes[qualname]
    inherited: set[str] = set()
    if own is None or own["__super__"]:
        for base in reversed(bases):
            inherited |= _linears_of(base, classes, memo, seen | {qualname})
    for attr, is_linear in (own or {}).items():
        if attr != "__super__":
            (inherited.add if is_linear else inherited.discard)(attr)
    memo[qualname] = frozenset(inherited)
    return memo[qualname]


def render_linear_attributes(library: str, version: str, lines: list[str]) -> str:
    return (f"# {library} {version}: the module classes of its modeling_*.py files that are no model class, each with "
            f"the attributes its `__init__` builds as `nn.Linear(...)`.\n"
            f"# Generated by scripts/hf_model_classes.py from the release's own files; do not edit.\n"
            + "".join(f"{line}\n" for line in lines))


def render(library: str, version: str, names: list[str]) -> str:
    return (f"# {library} {version}: the model classes (descendants of `{MODEL_ROOTS[library]}`), one a line.\n"
            f"# Generated by scripts/hf_model_classes.py from the release's own files; do not edit.\n"
            + "".join(f"{name}\n" for name in names))
