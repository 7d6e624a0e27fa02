"""The Hugging Face backend family: which storages a torch layer in transformers/diffusers model
code can have once a quantizer has replaced it at load time.

In vLLM a quantization config reaches a layer's constructor; in Hugging Face model code no config
reaches anything: `from_pretrained(..., quantization_config=...)` walks the built model and swaps
`nn.Linear` (and, for some quantizers, `Conv1D`, `nn.Embedding` or `nn.Conv*`) for its own
modules. So a plain `nn.Linear(a, b)` attribute of a model class *is* quantizable there, and the
question per site is which quantizers reach that layer and what they leave in `.weight`. The
facts below are read from the libraries' own code; docs/hf.md cites the versions and lines.

| quantizer (library) | replaces | `.weight` after | honours `_keep_in_fp32_modules` |
|---|---|---|---|
| bitsandbytes 4-bit (transformers) | exact `nn.Linear`, `Conv1D` | `Params4bit`, uint8 | yes |
| bitsandbytes 8-bit (transformers) | exact `nn.Linear`, `Conv1D` | `Int8Params`, int8 | yes |
| bitsandbytes 4/8-bit (diffusers) | `nn.Linear` and subclasses | uint8 / int8 | yes |
| GPTQ (gptqmodel) | `nn.Linear` and subclasses, `Conv1D` | none (`qweight`) | no |
| AWQ | exact `nn.Linear` | none (`qweight`) | yes |
| HQQ | `nn.Linear` and subclasses | none (`W_q`) | no |
| GGUF, not dequantized (transformers) | exact `nn.Linear`, `nn.Embedding` | uint8 blocks | no |
| GGUF (diffusers) | `nn.Linear` and subclasses | uint8 blocks | no |
| FP8 (finegrained) / compressed-tensors | exact `nn.Linear` (FP8: named embeddings) | float8_e4m3fn | yes |
| layerwise casting (diffusers) | `nn.Linear`, `nn.Conv*` and subclasses | fp8 storage | no |
| optimum-quanto, torchao | — | `.dtype` reports the float dtype: safe | — |

The lm_head / output embedding / tied weights are skipped by default by every quantizer but GGUF;
`_keep_in_fp32_modules(_strict)` and `modules_to_not_convert` / `llm_int8_skip_modules` skip by
name; diffusers' layerwise casting skips `DEFAULT_SKIP_MODULES_PATTERN` and the model class's
`_skip_layerwise_casting_patterns`. Quantizer, integration and hook code owns storage: exempt.

A site's storages are narrowed by the checks that dominate it (`partial_guard`): HF code guards
with `is_floating_point` (misses fp8), `!= torch.int8` (misses uint8) and
`isinstance(M.weight, torch.Tensor)` (raises where there is no `.weight`), so a partially guarded
site is reported with the storages it still breaks on.
"""

from __future__ import annotations

import ast
import re

from dtype_lint.analysis.flow.recognisers import first_parameter_of
from dtype_lint.analysis.index.class_facts import LazyClasses, local_call
from dtype_lint.analysis.index.class_index import dotted
from dtype_lint.analysis.storage.verdicts import BACKEND_MARK
from dtype_lint.core.findings import Evidence
from dtype_lint.core.records import record
from dtype_lint.dtypes.storage_formats import format_named, packed_storages
from dtype_lint.ecosystems.hf.model_classes import PINNED, is_model_class, linear_attribute, model_class_names

HF_LIBRARIES = ("transformers", "diffusers", "peft")
# Model base classes whose subclasses `from_pretrained` quantizes (a project built on the libraries).
MODEL_BASES = frozenset({
    "transformers.PreTrainedModel", "transformers.modeling_utils.PreTrainedModel",
    "diffusers.ModelMixin", "diffusers.models.ModelMixin", "diffusers.models.modeling_utils.ModelMixin",
})
ENGINE_PACKAGES = frozenset({"vllm", "sglang", "aphrodite", "lmdeploy"})
# Code whose job is the storage format or its hooks: it is handed the replaced modules.
# diffusers' `models/lora.py` holds the LoRA adapter layers, attached after loading: no quantizer
# replaces them (as peft's tuners).
STORAGE_PACKAGES = ("transformers.integrations", "transformers.quantizers", "transformers.fusion_mapping",
                    "diffusers.quantizers", "diffusers.hooks", "diffusers.models.lora", "peft")
# transformers 5.23.0 loads GGUF files only for these architectures (integrations/ggml.py lines
# 28-335, GGUF_CONFIG_MAPPING; modeling_gguf_pytorch_utils.py line 649 refuses the others): the
# model folders whose layers GGUF can reach.
GGUF_ARCHITECTURES = frozenset({
    "llama", "mistral", "qwen2", "qwen2_moe", "gpt_oss", "lfm2", "qwen3", "qwen3_moe", "falcon", "phi3",
    "bloom", "t5", "stablelm", "gpt2", "starcoder2", "mamba", "nemotron", "gemma2", "gemma3", "gemma4",
    "umt5", "deci", "minimax_m2"})

LINEAR, LINEAR_SUBCLASS, CONV1D_HF, EMBEDDING, CONV = "linear", "linear-subclass", "Conv1D", "embedding", "conv"
_TORCH_LINEAR = frozenset({"torch.nn.Linear", "torch.nn.modules.linear.Linear"})
_TORCH_EMBEDDING = frozenset({"torch.nn.Embedding", "torch.nn.modules.sparse.Embedding"})
_TORCH_CONV = frozenset(f"torch.nn.{c}" for c in ("Conv1d", "Conv2d", "Conv3d", "ConvTranspose1d",
                                                    "ConvTranspose2d", "ConvTranspose3d"))
_HF_CONV1D = frozenset({"transformers.pytorch_utils.Conv1D", "transformers.modeling_utils.Conv1D"})

# Storage words: what `.weight` is after the quantizer ran.
UINT8, INT8, FP8, NO_WEIGHT = "uint8", "int8", "fp8", "none"
# Each storage word names the format (dtypes/storage_formats.py) the quantizers of that word leave.
STORAGE_FORMATS = {UINT8: format_named("bnb_4bit"), INT8: format_named("bnb_8bit"), FP8: format_named("fp8"),
                   NO_WEIGHT: format_named("gptq")}
STORAGE_WORDS = {word: storage.storage_word() for word, storage in STORAGE_FORMATS.items()}
# The integer containers a sentinel test on `.weight.dtype` can name.
_INTEGER_CONTAINERS = frozenset(dtype for dtype in packed_storages() if dtype is not None)


@record(frozen=True)
class Quantizer:
    """A Hugging Face quantizer: the storage it gives the layers it replaces, and which layers it skips."""
    name: str
    library: str  # "transformers" | "diffusers"
    storage: str
    kinds: frozenset[str]
    keeps_fp32: bool  # honours `_keep_in_fp32_modules(_strict)`
    skips_head: bool  # skips lm_head / output embeddings / tied weights by default
    layerwise: bool = False  # diffusers layerwise casting: its own skip patterns


QUANTIZERS = (
    Quantizer("bitsandbytes 4-bit", "transformers", UINT8, frozenset({LINEAR, CONV1D_HF}), True, True),
    Quantizer("bitsandbytes 8-bit", "transformers", INT8, frozenset({LINEAR, CONV1D_HF}), True, True),
    Quantizer("GPTQ", "transformers", NO_WEIGHT, frozenset({LINEAR, LINEAR_SUBCLASS, CONV1D_HF}), False, True),
    Quantizer("AWQ", "transformers", NO_WEIGHT, frozenset({LINEAR}), True, True),
    Quantizer("HQQ", "transformers", NO_WEIGHT, frozenset({LINEAR, LINEAR_SUBCLASS}), False, True),
    Quantizer("GGUF", "transformers", UINT8, frozenset({LINEAR, EMBEDDING}), False, False),
    # FP8 embeddings only where the config names them (`quantize_embeddings`, off by default).
    Quantizer("FP8", "transformers", FP8, frozenset({LINEAR}), True, True),
    Quantizer("compressed-tensors", "transformers", FP8, frozenset({LINEAR}), True, True),
    Quantizer("bitsandbytes 4-bit", "diffusers", UINT8, frozenset({LINEAR, LINEAR_SUBCLASS}), True, True),
    Quantizer("bitsandbytes 8-bit", "diffusers", INT8, frozenset({LINEAR, LINEAR_SUBCLASS}), True, True),
    Quantizer("GGUF", "diffusers", UINT8, frozenset({LINEAR, LINEAR_SUBCLASS}), False, False),
    Quantizer("layerwise casting", "diffusers", FP8, frozenset({LINEAR, LINEAR_SUBCLASS, CONV}), False, False,
              layerwise=True),
)
# diffusers/hooks/layerwise_casting.py (0.42.1) line 31.
LAYERWISE_DEFAULT_SKIPS = ("pos_embed", "patch_embed", "norm", "^proj_in$", "^proj_out$")
# The family answers only the rules that declare `dtype_site` (dtype_lint/rule.py): the dtype
# sites. DTL003 (a `.weight` read without fallback) and DTL004 (a storage-sentinel branch) speak of
# vLLM's backends; in HF code the quantizers without `.weight` (GPTQ/AWQ/HQQ) and the sentinel
# guards are named by DTL001/DTL002 at the dtype site (a partial guard's storages), and other
# `.weight` reads (init, tying) are not this bug class.
HEAD_NAMES = frozenset({"lm_head", "output_embeddings"})
# The class attributes of a model class that name modules no quantizer (or some) touches.
SKIP_ATTRS = ("_keep_in_fp32_modules", "_keep_in_fp32_modules_strict", "_skip_layerwise_casting_patterns")


class StorageEvidence(Evidence):
    """The formats that can reach the layer and the storage each leaves: (format, storage word).
    Serialised as plain Evidence (the words are in its message): the storages are for the rules
    of this run. Each family that builds on this one's torch-level guards (peft, megatron, the
    quantizer family) subclasses it, so a verdict's family is the type of its evidence."""

    storages: tuple[tuple[str, str], ...]  # set in __init__ (Evidence is frozen); not a dataclass field
    FORMAT_PREFIX = ""  # how a message introduces a format's name (`modelopt NVFP4`)

    def __init__(self, message: str, path: str, line: int, storages=()):
        super().__init__(message, path, line)
        object.__setattr__(self, "storages", tuple(storages))

    @classmethod
    def phrase(cls, storages) -> str:
        """`uint8 under bitsandbytes 4-bit, int8 under bitsandbytes 8-bit, absent under GPTQ/HQQ`."""
        by_storage: dict[str, list[str]] = {}
        for name, storage in storages:
            names = by_storage.setdefault(storage, [])
            if name not in names:
                names.append(name)
        return ", ".join(f"{STORAGE_WORDS[storage]} under {cls.FORMAT_PREFIX}{'/'.join(names)}"
                         for storage, names in by_storage.items())

    @classmethod
    def first_in(cls, evidence):
        """The first evidence item of this kind in a verdict's evidence, or None."""
        for item in evidence or ():
            if isinstance(item, cls):
                return item
        return None


class BackendEvidence(StorageEvidence):
    """The HF quantizers that can reach the layer and the storage each leaves: (quantizer, storage)."""


def libraries_of(module: str, imports: dict[str, str]) -> frozenset[str]:
    """The HF libraries whose quantizers may reach this file's modules: its own package's, or (a
    project built on them) those it imports."""
    top = module.split(".", 1)[0]
    if top in HF_LIBRARIES:
        return frozenset({top})
    found = {v.split(".", 1)[0] for v in imports.values()} & {"transformers", "diffusers"}
    return frozenset(found)


def is_storage_module(module: str) -> bool:
    return any(module == p or module.startswith(p + ".") for p in STORAGE_PACKAGES)


def layer_kind(mro: list[str]) -> str | None:
    """What a quantizer sees in this class: the torch leaf it is, or a subclass of one."""
    if not mro:
        return None
    if mro[0] in _TORCH_LINEAR:
        return LINEAR
    if mro[0] in _HF_CONV1D:
        return CONV1D_HF
    if mro[0] in _TORCH_EMBEDDING:
        return EMBEDDING
    if mro[0] in _TORCH_CONV:
        return CONV
    rest = set(mro[1:])
    if rest & _TORCH_LINEAR:
        return LINEAR_SUBCLASS
    if rest & _HF_CONV1D:
        return CONV1D_HF
    if rest & _TORCH_CONV:
        return CONV
    return None


def _matches(patterns: list[str], attr: str, search: bool) -> bool:
    for pattern in patterns:
        if pattern.rsplit(".", 1)[-1] == attr:
            return True
        try:
            if (re.search(pattern, attr) if search else re.fullmatch(pattern, attr)):
                return True
        except re.error:
            continue
    return False


def reaching(libraries: frozenset[str], kind: str, attr: str, skips: dict[str, list[str]],
             module: str = "") -> list[Quantizer]:
    """The quantizers of these libraries that replace a layer of this kind named `attr`, given the
    model classes' skip lists (`_keep_in_fp32_modules` ... → names); `module`: the file's module
    (transformers' GGUF loads only some architectures' folders)."""
    parts = module.split(".")
    gguf_ok = len(parts) > 2 and parts[:2] == ["transformers", "models"] and parts[2] in GGUF_ARCHITECTURES
    keep = skips.get("_keep_in_fp32_modules", []) + skips.get("_keep_in_fp32_modules_strict", [])
    layerwise_skips = list(LAYERWISE_DEFAULT_SKIPS) + skips.get("_skip_layerwise_casting_patterns", [])
    out = []
    for q in QUANTIZERS:
        if q.library not in libraries or kind not in q.kinds:
            continue
        if q.skips_head and attr in HEAD_NAMES:
            continue
        if q.name == "GGUF" and q.library == "transformers" and not gguf_ok:
            continue
        if q.keeps_fp32 and _matches(keep, attr, search=False):
            continue
        if q.layerwise and _matches(layerwise_skips, attr, search=True):
            continue
        out.append(q)
    return out


# A class-level value is a statement of the class body naming it: a class whose text holds none
# of these names declares no skip list.
_SKIP_WORDS = re.compile("|".join(SKIP_ATTRS))


def file_skips(classes) -> dict[str, list[str]]:
    """`model_skips` of every class of a file, reading (parsing) only the classes whose text names
    a skip list: a Transformers modeling file defines dozens of classes, and parsing each of them
    for this was a tenth of a cold check of transformers 5.25.0."""
    if not isinstance(classes, LazyClasses):
        return model_skips(classes[q] for q in classes)
    return model_skips(classes[q] for q in classes if classes.text_holds(q, _SKIP_WORDS) is not False)


def model_skips(classes) -> dict[str, list[str]]:
    """The skip lists the model classes of a file declare (string literals of the class-level
    `_keep_in_fp32_modules = [...]` and friends)."""
    out: dict[str, list[str]] = {}
    for class_facts in classes:
        for attr in SKIP_ATTRS:
            value = class_facts.class_values.get(attr)
            if isinstance(value, (ast.List, ast.Tuple, ast.Set)):
                out.setdefault(attr, []).extend(e.value for e in value.elts
                                                if isinstance(e, ast.Constant) and isinstance(e.value, str))
    return out


# Every verdict of this family carries evidence saying so (evidence_for, named_verdict): what a
# finding read back from the cache is known by.
FAMILY_EVIDENCE = "in Hugging Face model code"


def evidence_for(quantizers: list[Quantizer], kind: str, path: str, line: int) -> BackendEvidence:
    what = {LINEAR: "an `nn.Linear`", LINEAR_SUBCLASS: "an `nn.Linear` subclass", CONV1D_HF: "a `Conv1D`",
            EMBEDDING: "an `nn.Embedding`", CONV: "an `nn.Conv*`"}[kind]
    storages = tuple((q.name, q.storage) for q in quantizers)
    return BackendEvidence(f"{what} in Hugging Face model code: replaced at load time by "
                           f"{storage_phrase(storages)}", path, line, storages)


storage_phrase = BackendEvidence.phrase


def backend_words(evidence, default: str) -> str:
    """The words a message uses for the storages: the HF family's when it decided the layer."""
    backend = hf_storages(evidence)
    return storage_phrase(backend.storages) if backend is not None else default


def hf_storages(evidence) -> BackendEvidence | None:
    return BackendEvidence.first_in(evidence)


def words_after_reason(kind: type[StorageEvidence], evidence, default: str, joiner: str) -> str:
    """A family's storages (`kind`) for a message; where its verdict is low confidence, the reason
    first (`...: a model not known here; if so: uint8 under ...`), so the words never claim more
    than the family knows."""
    packed = kind.first_in(evidence)
    words = kind.phrase(packed.storages) if packed is not None else default
    unknown = [item.message[len(BACKEND_MARK):] for item in evidence or () if item.message.startswith(BACKEND_MARK)]
    return f"{unknown[0]}; {joiner}: {words}" if unknown else words


# ---- partial guards ------------------------------------------------------------------------------
_RAISES = "raises"
_FLOATS = frozenset({"float16", "bfloat16", "float32", "float64", "half", "float", "double"})


def _dtype_constant(node: ast.AST) -> str | None:
    name = dotted(node) or ""
    head, _, attr = name.rpartition(".")
    if head != "torch":
        return None
    if attr in _FLOATS:
        return "float"
    if attr.startswith("float8"):
        return FP8
    if attr in _INTEGER_CONTAINERS:
        return attr
    return None


class StorageReader:
    """Evaluates a test over one storage of `layer.weight`: True, False, _RAISES or None (cannot tell)."""

    def __init__(self, layer: ast.expr, aliases: dict[str, ast.expr], storage: str):
        self.layer = ast.dump(layer)
        self.aliases = aliases
        self.storage = storage

    def _is_weight(self, node: ast.AST, depth: int = 0) -> bool:
        if isinstance(node, ast.NamedExpr):
            return self._is_weight(node.value, depth)
        module = first_parameter_of(node)
        if module is not None:
            return ast.dump(module) == self.layer
        if isinstance(node, ast.Name) and node.id in self.aliases and depth < 4:
            return self._is_weight(self.aliases[node.id], depth + 1)
        if isinstance(node, ast.Attribute) and node.attr == "weight":
            return ast.dump(node.value) == self.layer
        if isinstance(node, ast.Call) and dotted(node.func) == "getattr" and len(node.args) >= 2 and \
                isinstance(node.args[1], ast.Constant) and node.args[1].value == "weight":
            return ast.dump(node.args[0]) == self.layer
        return False

    def _is_dtype(self, node: ast.AST, depth: int = 0) -> bool:
        if isinstance(node, ast.NamedExpr):
            return self._is_dtype(node.value, depth)
        if isinstance(node, ast.Name) and node.id in self.aliases and depth < 4:
            return self._is_dtype(self.aliases[node.id], depth + 1)
        return isinstance(node, ast.Attribute) and node.attr == "dtype" and self._is_weight(node.value)

    def mentions(self, node: ast.AST) -> bool:
        return any(self._is_weight(n) or self._is_dtype(n) or _quantized_flag(n) for n in ast.walk(node))

    def value(self, node: ast.AST):
        s = self.storage
        if isinstance(node, ast.BoolOp):
            results = [self.value(v) for v in node.values]
            stop = not isinstance(node.op, ast.And)
            out: bool | None = not stop
            for result in results:
                if result == _RAISES:
                    return _RAISES
                if result is stop:
                    return stop
                if result is None:
                    out = None
            return out
        if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.Not):
            result = self.value(node.operand)
            return result if result in (None, _RAISES) else not result
        if isinstance(node, ast.NamedExpr):
            return self.value(node.value)
        # `<dtype>.is_floating_point`, `<weight>.is_floating_point()`, `torch.is_floating_point(<weight>)`
        target = None
        if isinstance(node, ast.Attribute) and node.attr == "is_floating_point":
            target = node.value
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and \
                node.func.attr == "is_floating_point" and not node.args:
            target = node.func.value
        elif isinstance(node, ast.Call) and dotted(node.func) == "torch.is_floating_point" and node.args:
            target = node.args[0]
        if target is not None and (self._is_dtype(target) or self._is_weight(target)):
            return _RAISES if s == NO_WEIGHT else s == FP8
        if isinstance(node, ast.Call) and dotted(node.func) == "isinstance" and len(node.args) == 2 and \
                self._is_weight(node.args[0]) and not isinstance(node.args[0], ast.Call):
            return _RAISES if s == NO_WEIGHT else True
        if isinstance(node, ast.Call) and dotted(node.func) == "hasattr" and len(node.args) == 2 and \
                ast.dump(node.args[0]) == self.layer and isinstance(node.args[1], ast.Constant) and \
                node.args[1].value == "weight":
            return s != NO_WEIGHT
        if _quantized_flag(node):
            return True  # every transformers quantizer marks the config (quantizers/base.py `_assign_is_quantized`)
        if isinstance(node, ast.Compare) and len(node.ops) == 1:
            return self._compare(node.left, node.ops[0], node.comparators[0])
        return None

    def _compare(self, left, op, right):
        s = self.storage
        if self._is_dtype(right) and not self._is_dtype(left):
            left, right = right, left
        if isinstance(op, (ast.Is, ast.IsNot)) and isinstance(right, ast.Constant) and right.value is None \
                and self._is_weight(left) and isinstance(left, ast.Call):  # getattr(L, "weight", None) is None
            return (s == NO_WEIGHT) == isinstance(op, ast.Is)
        if not self._is_dtype(left):
            return None
        if s == NO_WEIGHT:
            return _RAISES
        consts = right.elts if isinstance(right, (ast.Tuple, ast.List, ast.Set)) and \
            isinstance(op, (ast.In, ast.NotIn)) else [right]
        kinds = [_dtype_constant(c) for c in consts]
        if any(k is None for k in kinds):
            return None  # against another tensor's dtype (`x.dtype != w.dtype`): cannot tell
        equal = s in kinds
        if isinstance(op, (ast.Eq, ast.Is, ast.In)):
            return equal
        if isinstance(op, (ast.NotEq, ast.IsNot, ast.NotIn)):
            return not equal
        return None


_LEAVES = (ast.Return, ast.Raise, ast.Continue, ast.Break)
# What a transformers quantizer sets on the model's config: `hasattr(self.config, "_is_quantized")`
# (gpt_neo, gptj, falcon take `config.dtype` then, and the weight's dtype only unquantized).
QUANTIZED_FLAGS = ("_is_quantized", "_pre_quantization_dtype")


def _quantized_flag(node: ast.AST) -> bool:
    return isinstance(node, ast.Call) and dotted(node.func) == "hasattr" and len(node.args) == 2 and \
        isinstance(node.args[1], ast.Constant) and node.args[1].value in QUANTIZED_FLAGS


def partial_guard(site: ast.AST, fn: ast.AST, parents: dict[int, ast.AST], layer: ast.expr,
                  aliases: dict[str, ast.expr], storages: tuple[tuple[str, str], ...]) \
        -> tuple[tuple[tuple[str, str], ...], list[ast.expr], bool]:
    """(the storages that still reach the site and break it, the dominating tests that read the
    weight, whether some test could not be read). A storage on which a test raises
    (`isinstance(L.weight, ...)` without `.weight`) still breaks: at the test."""
    conditions: list[tuple[ast.expr, bool]] = []  # (test, must hold)
    node = site
    while id(node) in parents and node is not fn:
        parent = parents[id(node)]
        if isinstance(parent, (ast.If, ast.While)) and node in parent.body or \
                isinstance(parent, ast.IfExp) and node is parent.body:
            conditions.append((parent.test, True))
        elif isinstance(parent, ast.If) and node in parent.orelse or \
                isinstance(parent, ast.IfExp) and node is parent.orelse:
            conditions.append((parent.test, False))
        if isinstance(parent, ast.BoolOp) and isinstance(parent.op, ast.And) and node in parent.values:
            conditions.extend((v, True) for v in parent.values[: parent.values.index(node)])
        body = _body_holding(parent, node)
        if body is not None:  # earlier `if T: return` in the same block: T is false here
            for stmt in body[: body.index(node)]:
                if isinstance(stmt, ast.If) and stmt.body and isinstance(stmt.body[-1], _LEAVES) and not stmt.orelse:
                    conditions.append((stmt.test, False))
        node = parent
    read = []
    unreadable = False
    for test, _ in conditions:
        if StorageReader(layer, aliases, UINT8).mentions(test):
            read.append(test)
    left = []
    for name, storage in storages:
        reader = StorageReader(layer, aliases, storage)
        reached = True
        for test, must in conditions:
            if not reader.mentions(test):
                continue
            got = reader.value(test)
            if got == _RAISES:
                break  # the test itself raises: the site breaks there
            if got is None:
                unreadable = True
                continue
            if got != must:
                reached = False
                break
        if reached:
            left.append((name, storage))
    return tuple(left), read, unreadable


def _body_holding(parent: ast.AST, node: ast.AST) -> list | None:
    for field_name in ("body", "orelse", "finalbody"):
        block = getattr(parent, field_name, None)
        if isinstance(block, list) and node in block:
            return block
    return None


# ---- the verdict, for layers.LayerResolver ------------------------------------------------------
def hf_model_file(resolver) -> frozenset[str]:
    """The HF libraries whose quantizers reach this file's layers: a file of transformers or
    diffusers itself, or one of a project that defines a subclass of their model bases."""
    key = ("hf libraries", resolver.module)
    return resolver.index.cached_facts(key, lambda: _libraries(resolver))


def hf_module(resolver) -> str:
    """The file's dotted name inside transformers/diffusers/peft when its path lies in one of their
    package folders (a single file checked on its own gets a shorter module name), else its module."""
    parts = resolver.path.replace("\\", "/").removesuffix(".py").split("/")
    for i in range(len(parts) - 1):  # the outermost: diffusers has a `models/transformers/` folder
        if parts[i] in HF_LIBRARIES and ".".join(parts[i:]).endswith(resolver.module):
            return ".".join(parts[i:]).removesuffix(".__init__")
    return resolver.module


def _libraries(resolver) -> frozenset[str]:
    module = hf_module(resolver)
    libraries = libraries_of(module, resolver.imports)
    if module != resolver.module:
        return libraries
    # An inference engine's model file that borrows an HF class (sglang's gemma4_unified subclasses
    # PreTrainedModel) is loaded by the engine's own loader and quantized by its own configs.
    tops = {resolver.module.split(".", 1)[0]} | {v.split(".", 1)[0] for v in resolver.imports.values()}
    if tops & ENGINE_PACKAGES:
        return frozenset()
    if not libraries or resolver.module.split(".", 1)[0] in HF_LIBRARIES:
        return libraries
    facts = resolver.project.file_facts(resolver.module)
    for qualname in (facts.classes if facts else ()):
        if is_model_code(resolver.index, qualname):
            return libraries
    return frozenset()


def is_model_code(index, qualname: str) -> bool:
    """A model class `from_pretrained` quantizes: a subclass of the model bases, or of a concrete
    transformers/diffusers model class (`class LongcatCausalLM(LlamaForCausalLM)`, the catalogue),
    or one of those classes itself."""
    mro = index.mro(qualname)
    return bool(set(mro) & MODEL_BASES) or any(is_model_class(ancestor) for ancestor in mro)


# ---- layers an HF model class of the tree builds -------------------------------------------------
@record(frozen=True)
class Construction:
    """Where a class of the tree is built inside a model: `builder`'s attribute constructs it at
    path:line (`self.layers = nn.ModuleList([Block(config) ...])`)."""
    builder: str
    path: str
    line: int


_WALK_LIMIT = 512  # classes one model's walk visits at most (a tree of generated model code stays bounded)


def built_within(resolver, model: str) -> dict[str, Construction | None]:
    """The classes of the tree the class `model` builds, transitively (its own and its ancestors'
    attributes' constructions, every class called inside them: `nn.ModuleList([Block(...)])`),
    each with the construction that first reached it (None for `model` itself). Shared by the
    quantizer family (the models a quantizer is applied to) and this family (the layers an HF
    model class builds in sibling modules)."""
    return resolver.index.cached_facts(("built within", model), lambda: _built_within(resolver, model))


def _built_within(resolver, model: str) -> dict[str, Construction | None]:
    found: dict[str, Construction | None] = {model: None}
    seen: set[str] = set()
    todo = [model]  # depth first, as the quantizer family's walk always did: the same classes under the limit
    while todo and len(seen) < _WALK_LIMIT:
        current = todo.pop()
        if current in seen:
            continue
        seen.add(current)
        for ancestor in resolver.index.mro(current):
            location = resolver.index.class_location(ancestor)
            class_facts = resolver.project.class_facts(ancestor) if location else None
            facts = resolver.project.file_facts(location[0].module) if location else None
            if class_facts is None or facts is None:
                continue
            for origins in class_facts.attrs.values():
                for origin in origins:
                    if origin.kind != "call" or origin.call is None:
                        continue
                    for node in ast.walk(origin.call):
                        if isinstance(node, ast.Call) and (name := dotted(node.func)):
                            built = resolver.index.resolve(facts.module, name, facts.imports)
                            if resolver.index.class_location(built) is not None and built not in seen:
                                found.setdefault(built, Construction(current, origin.path, origin.line))
                                todo.append(built)
    return {name: how for name, how in found.items() if name in seen}


@record(frozen=True)
class ReachedLayers:
    """The module classes of the tree that an HF model class of the tree builds (outside the HF
    libraries and the engines): class → (the model class, its libraries, the class it builds:
    the class itself, or a subclass of it whose inherited methods are the sites)."""
    by_class: dict[str, tuple[str, frozenset[str], str]]


def reached_layers(resolver) -> ReachedLayers:
    """Computed once per run: a layer class defined in a file with no model class
    (`fla/layers/rodimus.py`) is HF model code when a model class of the tree builds it
    (`fla/models/rodimus/modeling_rodimus.py`), since `from_pretrained` quantizes the whole
    module tree the model class builds."""
    return resolver.index.cached_facts(("hf reached layers",), lambda: _reached_layers(resolver), census=True)


def _reached_layers(resolver) -> ReachedLayers:
    by_class: dict[str, tuple[str, frozenset[str], str]] = {}
    inherited: dict[str, tuple[str, frozenset[str], str]] = {}
    for module, header in list(resolver.index.modules.items()):
        tops = {module.split(".", 1)[0]} | {v.split(".", 1)[0] for v in header.imports.values()}
        if module.split(".", 1)[0] in HF_LIBRARIES or tops & ENGINE_PACKAGES:
            continue  # the libraries' own files are decided file by file; engines load with their own configs
        # Last defined first: the outermost model of a file (`FooForCausalLM` after `FooModel`) is
        # walked first, and a model class another one builds is not walked again (what it builds,
        # the outer walk reached already).
        for name in sorted(header.classes, key=lambda class_name: -header.classes[class_name][1]):
            qualname = f"{module}.{name}"
            if qualname in by_class or not is_model_code(resolver.index, qualname):
                continue
            ancestors = resolver.index.mro(qualname)
            libraries = frozenset({a.split(".", 1)[0] for a in ancestors} & {"transformers", "diffusers"}) \
                or libraries_of(module, header.imports)
            if not libraries:
                continue
            for built in _built_within(resolver, qualname):
                if built == qualname:
                    continue
                by_class.setdefault(built, (qualname, libraries, built))
                # An ancestor's methods run on the built subclass (the site is an inherited method).
                for ancestor in resolver.index.mro(built)[1:]:
                    if resolver.index.class_location(ancestor) is not None:
                        inherited.setdefault(ancestor, (qualname, libraries, built))
    for ancestor, hit in inherited.items():
        by_class.setdefault(ancestor, hit)
    return ReachedLayers(by_class)


def _reached_by_model(resolver, owner: str | None):
    """(libraries, evidence, the model's skip lists) where an HF model class of the tree builds
    the class `owner` (or a subclass of it: the site is an inherited method), else None. Not in
    an engine's files, nor in the HF libraries' own (decided file by file)."""
    if not owner or owner.split(".", 1)[0] in HF_LIBRARIES:
        return None
    tops = {resolver.module.split(".", 1)[0]} | {v.split(".", 1)[0] for v in resolver.imports.values()}
    if tops & ENGINE_PACKAGES:
        return None
    hit = reached_layers(resolver).by_class.get(owner)
    if hit is None:
        return None
    model, libraries, built = hit
    steps = built_within(resolver, model)
    chain = [built]
    while (how := steps.get(chain[-1])) is not None and how.builder != model and len(chain) < 8:
        chain.append(how.builder)
    first = steps.get(built)
    short = model.rsplit(".", 1)[-1]
    path_words = " → ".join(f"`{name.rsplit('.', 1)[-1]}`" for name in reversed(chain))
    subclass = "" if built == owner else f" (as its subclass `{built.rsplit('.', 1)[-1]}`)"
    why = Evidence(f"built by `{short}` (Hugging Face model code){subclass}: `{short}` → {path_words}",
                   first.path if first else "", first.line if first else 0)
    skips = model_skips(class_facts for ancestor in resolver.index.mro(model)
                        if (class_facts := resolver.project.class_facts(ancestor)) is not None)
    return libraries, why, skips


def _model_class_libraries(resolver, qualname: str | None) -> frozenset[str]:
    """The HF library of the model class `self` stands for, where the file itself is not HF
    model code: a function patched onto a model class (`LongcatCausalLM.draft = fast_draft`,
    `setattr(LlamaModel, "gate", fn)`) in a file that defines none. Not in an engine's files."""
    if not qualname or not is_model_code(resolver.index, qualname):
        return frozenset()
    tops = {resolver.module.split(".", 1)[0]} | {v.split(".", 1)[0] for v in resolver.imports.values()}
    if tops & ENGINE_PACKAGES:
        return frozenset()
    found = {ancestor.split(".", 1)[0] for ancestor in resolver.index.mro(qualname)} & {"transformers", "diffusers"}
    return frozenset(found) or libraries_of(resolver.module, resolver.imports)


def speaks_for_file(resolver) -> bool:
    """Is the file Hugging Face code: a file of transformers, diffusers or peft, or one importing
    them, and of no inference engine (which loads and quantizes HF classes its own way)? A site
    there that no family decided and whose backends cannot be told is spoken of with the HF
    helper, which runs on any module (registry.fallback_family)."""
    tops = {hf_module(resolver).split(".", 1)[0]} | {v.split(".", 1)[0] for v in resolver.imports.values()}
    return bool(tops & set(HF_LIBRARIES)) and not tops & ENGINE_PACKAGES


def helper_words() -> str:
    """`doctor`'s words for a project of Hugging Face code where no site needs a helper yet
    (registry.project_family): the helper a fix there would use and where it would live."""
    return ("Hugging Face code, so a fix would use the HF helper `get_module_input_dtype` (it runs on any "
            "module), created by --fix as `module_input_dtype` in the fixed file's top-level package")


def class_named(name: str) -> str | None:
    """`transformers.Name` / `diffusers.Name` where `name` is a model class of the shipped
    catalogue (a patch that finds the model's modules by `type(m).__name__ == name`)."""
    return next((f"{library}.{name}" for library in PINNED if name in model_class_names(library)), None)


def outside_attribute(index, qualname: str, attr: str):
    """`self.<attr>` of a class of the tree whose nearest ancestor outside the tree is a module
    class of transformers that builds it as `nn.Linear` in its `__init__` (the shipped list:
    `GaudiMistralAttention(MistralAttention)` reading `self.k_proj`): `torch.nn.Linear`, with the
    step that says so. None for anything else (an ancestor no list records, an attribute it does
    not build as a Linear). The class's own assignments were read first (layers.py)."""
    for ancestor in index.mro(qualname)[1:]:
        if index.class_location(ancestor) is not None:
            continue
        if not ancestor.startswith("transformers.") or not linear_attribute(ancestor, attr):
            return None
        location = index.class_location(qualname)
        header, name = location if location else (None, "")
        short = ancestor.rsplit(".", 1)[-1]
        return "torch.nn.Linear", Evidence(
            f"`self.{attr}` is an `nn.Linear` built in `{short}.__init__` (transformers {PINNED['transformers']}, "
            f"outside the tree: the shipped list of its modeling classes' linear attributes)",
            header.path if header else "", header.classes[name][1] if header else 0)
    return None


def verdict(resolver, inst, expr_text: str):
    """None: not the HF family's call. False: no HF quantizer reaches this layer. Else
    ("high", evidence), the last step a BackendEvidence with the quantizers and their storages."""
    if not inst.qualname:
        return _unread_member(resolver, inst, expr_text)
    libraries = hf_model_file(resolver) or _model_class_libraries(resolver, inst.origin)
    kind = layer_kind(resolver.index.mro(inst.qualname))
    if kind is None:
        return None
    reached = None
    if not libraries:  # a layer class in a file with no model class: a model class of the tree may build it
        reached = _reached_by_model(resolver, inst.origin)
        if reached is None:
            return None
        libraries = reached[0]
    if "peft" in libraries and len(libraries) == 1:
        return None
    module = hf_module(resolver)
    if is_storage_module(module) or expr_text == "self":
        return False  # storage code; a layer's own code runs only where no quantizer replaced it
    if "diffusers" in libraries and inst.origin and "Processor" in inst.origin.rsplit(".", 1)[-1] \
            and expr_text.startswith("self."):
        # An attention processor's own layers (custom diffusion, IP-Adapter) are adapter weights,
        # attached with `set_attn_processor` after the model was loaded and quantized.
        return False
    attr = re.sub(r"\[.*\]$", "", expr_text).rsplit(".", 1)[-1]
    facts = resolver.project.file_facts(resolver.module)
    skips = resolver.index.cached_facts(("hf skips", resolver.module),
                                        lambda: file_skips(facts.classes) if facts else {})
    if reached is not None:  # the building model's `_keep_in_fp32_modules` and friends name its layers too
        skips = {attr_name: skips.get(attr_name, []) + reached[2].get(attr_name, [])
                 for attr_name in {*skips, *reached[2]}}
    quantizers = reaching(libraries, kind, attr, skips, module)
    if not quantizers:
        return False
    # No config reaches an HF layer's constructor: the vLLM family's words about one are moot.
    chain = tuple(Evidence(e.message.replace(" without a quantization config", ""), e.path, e.line)
                  for e in inst.chain) + ((reached[1],) if reached is not None else ())
    where = chain[0] if chain else Evidence("", resolver.path, 0)
    return "high", (*chain, evidence_for(quantizers, kind, where.path, where.line))


def _unread_member(resolver, inst, expr_text: str):
    """`self.proj` where `self` is a transformers/diffusers model class outside the tree (a
    function patched onto `LlamaModel`): its layers are the library's, not read here, so the
    layer is most likely an `nn.Linear` the quantizers replace, but cannot be told: low
    confidence, saying why (never a silent pass). None for anything else."""
    origin = inst.origin
    if not origin or not is_model_class(origin) or resolver.index.class_location(origin) is not None \
            or not re.fullmatch(r"\w+\.\w+", expr_text):
        return None
    libraries = _model_class_libraries(resolver, origin)
    attr = expr_text.rsplit(".", 1)[-1]
    quantizers = reaching(libraries, LINEAR, attr, {}, hf_module(resolver))
    if not quantizers:
        return None
    library, short = origin.split(".", 1)[0], origin.rsplit(".", 1)[-1]
    storages = tuple((q.name, q.storage) for q in quantizers)
    why = Evidence(f"`{attr}` of `{short}`, a {library} model class outside this tree: its layers are not "
                   f"read here", "", 0)
    note = BackendEvidence(f"if it is an `nn.Linear` in Hugging Face model code: replaced at load time by "
                           f"{storage_phrase(storages)}", "", 0, storages)
    return "low", (why, note)


def named_verdict(resolver, expr_text: str, named: tuple):
    """A layer whose class did not resolve and whose name looks like a projection (the
    `--name-heuristics` verdict, `named` its evidence), in Hugging Face model code: most likely an
    `nn.Linear`, which the HF quantizers replace, so the finding is this family's (its words, its
    helper: the shared helper's template reads `params_dtype`, which bitsandbytes layers lack).
    None where the file is not HF model code."""
    libraries = hf_model_file(resolver)
    if not libraries or "peft" in libraries and len(libraries) == 1:
        return None
    module = hf_module(resolver)
    attr = re.sub(r"\[.*\]$", "", expr_text).rsplit(".", 1)[-1]
    quantizers = reaching(libraries, LINEAR, attr, {}, module)
    if not quantizers:
        return None
    storages = tuple((q.name, q.storage) for q in quantizers)
    note = BackendEvidence(f"if it is an `nn.Linear` in Hugging Face model code: replaced at load time by "
                           f"{storage_phrase(storages)}", "", 0, storages)
    return "low", (*named, note)


def narrowed(verdict, site, fn, parents, layer, aliases, path: str, vllm_guard_proves, assigns=None, cls=None):
    """The HF verdict after the checks that dominate the site: None when no storage that breaks it
    reaches it, else the evidence with the storages left (and the partial guard named). A dtype
    reached through a local (`target_dtype = L.weight.dtype` in one branch) carries the checks
    that dominate its assignment too (`elif hasattr(self.config, "_is_quantized"): ... else:`)."""
    confidence, evidence = verdict
    backend = hf_storages(evidence)
    if backend is None:  # never: an HF verdict carries its backend evidence
        return None
    if runs_at_construction(fn, cls) and not getattr(backend, "built_after_loading", False):
        return None  # (an adapter is built after its base layer was loaded: ecosystems/peft)
    left, tests, unreadable = partial_guard(site, fn, parents, layer, aliases, backend.storages)
    reader = StorageReader(layer, {}, UINT8)
    for name in {n.id for n in ast.walk(site) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load)}:
        values = [arm for arm in (_dtype_arm(v, reader) for v in (assigns or {}).get(name, [])) if arm is not None]
        if not values:
            continue
        through: set = set()
        for value in values:
            got, more, more_unreadable = partial_guard(value, fn, parents, layer, aliases, left)
            through |= set(got)
            tests = tests + [t for t in more if t not in tests]
            unreadable = unreadable or more_unreadable
        left = tuple(st for st in left if st in through)
    if not left:
        return None
    if unreadable and vllm_guard_proves():
        return None  # a test this reader cannot read, that the storage evaluator proves a guard
    rest = tuple(e for e in evidence if e is not backend)
    if len(left) == len(backend.storages):
        return confidence, (*rest, backend)
    return confidence, (*rest, partial_guard_note(BackendEvidence, tests, left, path))


def partial_guard_note(kind: type[StorageEvidence], tests: list, left, path: str) -> StorageEvidence:
    """The evidence that replaces a family's storages when the checks that dominate a site let
    only some through: the guard named, the storages left."""
    guard = " and ".join(f"`{ast.unparse(test)}`" for test in tests) or "a dominating check"
    missed = {storage for _, storage in left}
    return kind(f"partial guard {guard}: still breaks on {kind.phrase(left)}"
                + (" (the test itself raises without `.weight`)" if NO_WEIGHT in missed else ""),
                path, tests[0].lineno if tests else 0, left)


def narrowed_after_build(kind: type[StorageEvidence], verdict, site, fn, parents, layer, aliases, path: str,
                         vllm_guard_proves, cls=None):
    """`narrowed` for a family whose quantizer runs on a built model (`mtq.compress`,
    `replace_with_bnb_linear`): None in `__init__` and the methods only it calls (the layer is
    built, not yet quantized) or where no storage that breaks the site gets past its guards; else
    the storages left, the partial guard named."""
    confidence, evidence = verdict
    packed = kind.first_in(evidence)
    if packed is None or runs_at_construction(fn, cls):
        return None
    left, tests, unreadable = partial_guard(site, fn, parents, layer, aliases, packed.storages)
    if not left:
        return None
    if unreadable and vllm_guard_proves():
        return None
    if len(left) == len(packed.storages):
        return verdict
    rest = tuple(item for item in evidence if item is not packed)
    return confidence, (*rest, partial_guard_note(kind, tests, left, path))


def _dtype_arm(value: ast.AST | None, reader: StorageReader) -> ast.AST | None:
    """The weight-dtype read a local is assigned: the value itself, or the arm of a conditional
    that reads it (`L.weight.dtype if L.weight.dtype not in [int8, uint8] else float32`, peft's
    adaption prompts), whose test then narrows the storages that reach it."""
    if value is None:
        return None
    if reader._is_dtype(value):
        return value
    if isinstance(value, ast.IfExp):
        for arm in (value.body, value.orelse):
            if reader._is_dtype(arm):
                return arm
    return None


_PARAMETER_CLASSES = frozenset({"torch.nn.Parameter", "torch.nn.parameter.Parameter"})


def first_parameter(resolver, inst, depth: int = 0, layer=None, scope=None):
    """(the layer holding `next(iter(M.parameters()))`, its attribute path below M) for a module
    instance M, or None when it cannot be told or is a plain parameter. `parameters()` yields a
    module's own parameters first, then its submodules' in the order `__init__` assigned them.
    `layer`, `scope`: M's expression, where M itself is an `nn.Sequential` attribute."""
    if not inst.qualname or depth > 3:
        return None
    if inst.qualname in _SEQUENTIAL and isinstance(layer, ast.Attribute) and scope is not None:
        owner = resolver.resolve(layer.value, scope)
        found = resolver.project.attr_origins(owner.qualname, layer.attr) if owner.qualname else None
        calls = [o for o in (found[1] if found else []) if o.kind == "call" and o.call is not None]
        item = _item_of(resolver, found[0], calls[0], 0, owner.origin) if len(calls) == 1 and found else None
        deeper = first_parameter(resolver, item, depth + 1) if item is not None else None
        return (deeper[0], "[0]" + (f".{deeper[1]}" if deeper[1] else "")) if deeper else None
    if layer_kind(resolver.index.mro(inst.qualname)) is not None:
        return inst, ""
    class_facts = resolver.project.class_facts(inst.qualname)
    if class_facts is None:
        return None
    first = None
    for attr, origins in class_facts.attrs.items():
        for origin in origins:
            if origin.method != "__init__" or origin.kind != "call":
                continue
            if origin.type_name in _PARAMETER_CLASSES:
                return None  # an own parameter comes first: a plain float tensor
            if first is None or origin.line < first[1]:
                first = (attr, origin.line)
    if first is None:
        return None
    sub = resolver.attribute(inst, first[0])
    if sub.qualname in _SEQUENTIAL:  # `nn.Sequential(nn.Linear(...), ...)`: its first layer's
        found = resolver.project.attr_origins(inst.qualname, first[0])
        calls = [o for o in (found[1] if found else []) if o.kind == "call" and o.call is not None]
        item = _item_of(resolver, found[0], calls[0], 0, inst.origin) if len(calls) == 1 else None
        if item is None:
            return None
        deeper = first_parameter(resolver, item, depth + 1)
        return (deeper[0], f"{first[0]}[0]" + (f".{deeper[1]}" if deeper[1] else "")) if deeper else None
    found = first_parameter(resolver, sub, depth + 1)
    if found is None:
        return None
    return found[0], first[0] + (f".{found[1]}" if found[1] else "")


def first_parameter_holder(resolver, layer: ast.expr, scope, text: str) -> str:
    """The expression of the layer that holds `next(iter(M.parameters()))` (`text` spells M):
    `self.time_embedder.linear_1`, `self.time_embedding[0]`; "" when it cannot be told. The fix
    gives this layer to the helper: its quantizer decides what M's forward expects first."""
    found = first_parameter(resolver, resolver.resolve(layer, scope), layer=layer, scope=scope)
    if found is None:
        return ""
    path = found[1]
    return text if not path else text + ("" if path.startswith("[") else ".") + path


_SEQUENTIAL = frozenset({"torch.nn.Sequential", "torch.nn.modules.container.Sequential"})


def sequential_item(resolver, expr: ast.Subscript, scope, depth: int, this):
    """The layer `self.mlp[i]` holds when `self.mlp = nn.Sequential(A(...), B(...), ...)` and `i`
    is a constant, in Hugging Face model code (diffusers' z_image `self.mlp[0].weight.dtype`);
    None otherwise."""
    if not hf_model_file(resolver) or not isinstance(expr.value, ast.Attribute) or \
            not isinstance(expr.slice, ast.Constant) or not isinstance(expr.slice.value, int):
        return None
    owner = resolver.resolve(expr.value.value, scope, depth + 1, this)
    found = resolver.project.attr_origins(owner.qualname, expr.value.attr) if owner.qualname else None
    if found is None:
        return None
    where, origins = found
    calls = [o for o in origins if o.kind == "call" and o.type_name in _SEQUENTIAL and o.call is not None]
    if len(calls) != 1:
        return None
    return _item_of(resolver, where, calls[0], expr.slice.value, owner.origin)


def _item_of(resolver, where: str, origin, index: int, self_origin):
    """The instance `nn.Sequential(A(...), B(...), ...)[index]` builds (origin: that assignment)."""
    args = origin.call.args
    if origin.type_name not in _SEQUENTIAL or any(isinstance(a, ast.Starred) for a in args) or \
            not -len(args) <= index < len(args):
        return None
    item = local_call(origin, args[index])
    if item is None:
        return None
    loc = resolver.index.class_location(where)
    facts = resolver.project.file_facts(loc[0].module) if loc else None
    name = dotted(item.func)
    if facts is None or not name:
        return None
    from dataclasses import replace as _replace

    attr = origin.how.split("`")[1] if "`" in origin.how else "the Sequential"
    step = _replace(origin, type_name=resolver.index.resolve(facts.module, name, facts.imports), call=item,
                    how=f"item {index} of `{attr}`: `{name}(...)`")
    inst = resolver._from_origin(step, where, {})
    return type(inst)(inst.qualname, inst.config, inst.env, inst.chain, inst.passed, self_origin)


def runs_at_construction(fn, cls) -> bool:
    """`__init__`, or a method of its class that only `__init__` calls: it runs while the model is
    built, before any quantizer replaced a layer (swinv2's `create_coords_table_and_index`)."""
    if fn is None:
        return False
    if fn.name == "__init__":
        return True
    if cls is None or not getattr(fn, "args", None) or not fn.args.args:
        return False
    callers = set()
    for name, method in cls.methods.items():
        for node in ast.walk(method):
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == fn.name \
                    and isinstance(node.func.value, ast.Name) and node.func.value.id == "self":
                callers.add(name)
    return callers == {"__init__"}


# ---- the family protocol (ecosystems/registry.py) ----------------------------------------------


def claims(evidence) -> bool:
    """Did this family decide the verdict that carries this evidence (its quantizers' storages)?"""
    return hf_storages(evidence) is not None
