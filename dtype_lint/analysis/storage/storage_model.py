"""The storage model: what each quantization backend leaves in a layer's `.weight`, read from the
backends' own code.

Every rule asks one question: *on this path, which storages can this layer's `weight` have, and
who makes them?* This module answers it the way a reviewer does, from the tree's code:

- **backends**: the subclasses of the config type a quantizable layer takes
  (`quant_config: QuantizationConfig | None`), found in that type's package;
- **backend → layer types**: the `isinstance`/`issubclass` dispatch of the config's
  `get_quant_method` (followed into `super()`, its own methods and project helpers that are
  handed the layer), and the quant-method classes each branch builds;
- **method → parameters**: what its `create_weights` registers (`register_parameter("weight" |
  "qweight" | "weight_packed", ...)`), with the dtype where the code states it (followed into the
  helper that builds the parameter); a `create_weights` handed to an object it does not name
  (a scheme's `layer.scheme.create_weights`) stands for every `create_weights` of its
  package; `super().create_weights` is the next class of the MRO that has one; a method whose
  `create_weights` or `process_weights_after_loading` runs in a class outside the tree (a plugin's
  `class PluginFp8LinearMethod(Fp8LinearMethod)`) gets the shipped catalogue's record of that
  class, or an unknown storage when no catalogue records it (`_first_definer`);
- **method → after loading**: what `process_weights_after_loading` and the project functions it
  calls do to `weight` (a repack into int32, `del layer.weight`).

Only the methods needed are parsed (a method's text is cut out by indentation and parsed alone),
and only for the layer types the sites ask about; results live in the index's shared facts cache,
so every file analysed against it shares them and a change to a backend's file invalidates
exactly the findings that read it.

Families plug in through `BackendFamily.storages_for(layer_class, construction)`; `StorageModel`
asks each family in turn (the tree's own code, then the shipped catalogue for engines imported
from outside the tree, see analysis/storage/catalogue.py).
"""

from __future__ import annotations

import ast
import os
import re
import textwrap
import weakref
from collections import OrderedDict
from collections.abc import Iterable
from dataclasses import replace
from typing import Callable, Protocol

from dtype_lint.analysis.function_walk import walk
from dtype_lint.analysis.index.class_facts import annotation_name
from dtype_lint.analysis.index.class_index import ModuleHeader, QuantizableLayerIndex, dotted, record_import
from dtype_lint.analysis.storage.verdicts import BACKEND_MARK, UNKNOWN_BACKENDS
from dtype_lint.core.findings import Evidence
from dtype_lint.core.records import record
from dtype_lint.dtypes.storage_formats import (
    ABSENT,
    COMPUTE,
    COMPUTE_DTYPE_NAMES,
    FP8,
    PACKED,
    UNKNOWN,
    format_of_kernel,
    integer_dtypes,
)
from dtype_lint.ecosystems.registry import model_dtype_attributes

# Module sources (text lines and parsed methods) kept at once. One engine's quantization package
# has about 60 backend modules, read copy after copy at ten times vLLM: 32 build 610 sources there
# instead of 580 (all kept) and peak at 136 MiB instead of 192 (benchmarks/README.md). On vLLM
# 0.34.0, cold `-j 1`, 8 build 46 sources instead of 39 (65 methods parsed instead of 64) and take
# the peak RSS from 60 to 57 MiB (a source's lines cost twice its text); with every rule on, 307
# instead of 214 (315 methods instead of 245), 120 to 116 MiB; at ten times vLLM 0.34.0, 460
# instead of 390 sources.
SOURCES_KEPT = 8
# Answers the storage model keeps for the run (`_memo`), least recently used dropped beyond this:
# vLLM's tree asks about 220 questions with every rule on, but an answer may hold parsed methods
# and dispatch tables, and a tree with many times the backends must not keep them all alive. A
# dropped answer is computed again (or read from the disk memo) when asked for, with its reads.
STORAGE_MEMO_ENTRIES = 1024


def _scan_configs(index: QuantizableLayerIndex, base: str, folder: str):
    """The subclasses of `base` defined under `folder`, in discovery order."""
    for module, header in index.modules.iter_under(folder):
        for name in header.classes:
            q = f"{module}.{name}"
            if q != base and base in index.mro(q):
                yield q


def _trim(memo: OrderedDict) -> None:
    while len(memo) > STORAGE_MEMO_ENTRIES:
        memo.popitem(last=False)  # the least recently used


_INT_DTYPES = {dtype: PACKED for dtype in integer_dtypes()}
# How a compute storage's dtype is written: the engine's layers' name for their model dtype.
_MODEL_DTYPE = model_dtype_attributes()[0]
_FLOAT_COMPUTE = COMPUTE_DTYPE_NAMES


@record(frozen=True)
class Storage:
    """One storage a backend can leave in a layer's `weight`, with the code that makes it."""

    backend: str  # the config class's short name ("Fp8Config")
    method: str  # the quant method class's short name ("Fp8LinearMethod")
    kind: str  # ABSENT, PACKED, FP8, COMPUTE or UNKNOWN
    dtype: str  # "int32", "float8_e4m3fn", the model dtype attribute (compute), "" (none or not stated)
    what: str  # "registers `qweight`, not `weight`", "repacks `weight` to int32"
    evidence: tuple[Evidence, ...] = ()
    # The dispatch tests the layer's type on the way (`isinstance(layer, LinearBase)`); False: it
    # reaches the method only because no test on the way could be read (a table lookup).
    typed: bool = True
    # The parameters the method registers with `weight` (`weight_scale_inv`, ...), when read: what a
    # test on the layer's other parameters (`hasattr(L, "weight_scale_inv")`) tells apart.
    params: tuple[str, ...] = ()

    @property
    def non_compute(self) -> bool:
        return self.kind != COMPUTE

    def describe(self) -> str:
        """"under Fp8Config (fp8.py:194 -> repack_utils.py:80) `weight` is repacked to int32"."""
        located = [e for e in self.evidence if e.path]
        ends = located[:1] + located[-1:] if len(located) > 1 else located
        where = " -> ".join(f"{os.path.basename(e.path)}:{e.line}" for e in ends)
        return (f"{_backend_name(self.backend)} ({where}) {self.what}" if where
                else f"{_backend_name(self.backend)} {self.what}")

    def to_dict(self) -> dict:
        out = {"backend": self.backend, "method": self.method, "kind": self.kind, "dtype": self.dtype,
               "what": self.what, "evidence": [[e.message, e.path, e.line] for e in self.evidence],
               "typed": self.typed}
        if self.params:
            out["params"] = list(self.params)
        return out

    @classmethod
    def from_dict(cls, d: dict) -> Storage:
        return cls(d["backend"], d["method"], d["kind"], d["dtype"], d["what"],
                   tuple(Evidence(m, p, line) for m, p, line in d["evidence"]), d.get("typed", True),
                   tuple(d.get("params", ())))


def _backend_name(config: str) -> str:
    return config[:-len("Config")] if config.endswith("Config") and len(config) > 6 else config


class BackendFamily(Protocol):
    """A family of quantization backends (a vLLM-style tree's configs, a shipped catalogue, the
    Hugging Face quantizers): the storages its backends can give a layer class, or None when the
    family knows nothing of that class (the next family is asked)."""

    name: str

    def storages_for(self, layer_class: str, construction: object = None) -> frozenset[Storage] | None: ...


class StorageModel:
    """Asks each family in turn; the first that knows the layer class answers, narrowed to the
    backends the project's platforms admit (analysis/storage/platforms.py) when they restrict."""

    def __init__(self, families: Iterable[BackendFamily], narrowing=None):
        self.families = list(families)
        self.narrowing = narrowing  # platforms.PlatformNarrowing, or None: every backend counts

    def storages_for(self, layer_class: str, construction: object = None) -> frozenset[Storage] | None:
        for family in self.families:
            got = family.storages_for(layer_class, construction)
            if got is not None:
                narrowed = self._narrowed(layer_class, got, family)
                return got if narrowed is None else narrowed
        return None

    def _narrowed(self, layer_class: str, got: frozenset[Storage], family) -> frozenset[Storage] | None:
        if self.narrowing is None or self.narrowing.narrowing() is None:
            return None
        data_for = getattr(family, "data_for", None)
        return self.narrowing.narrow(layer_class, got, family.name, data_for(layer_class) if data_for else None)

    def narrowed_by(self, layer_class: str) -> Evidence | None:
        """The platforms' evidence when they narrow this class's backends (None: they do not)."""
        if self.narrowing is None or self.narrowing.narrowing() is None:
            return None
        for family in self.families:
            got = family.storages_for(layer_class)
            if got is not None:
                return self.narrowing.narrowing().evidence() if self._narrowed(layer_class, got, family) is not None \
                    else None
        return None

    def undispatched(self, layer_class: str) -> tuple[str, Evidence] | None:
        """Why no backend was found for this class because none could be read, not because none
        gives such a storage (CodeBackends.undispatched); None otherwise."""
        for family in self.families:
            reason = getattr(family, "undispatched", lambda _class: None)(layer_class)
            if reason is not None:
                return reason
        return None

    def find(self, layer_class: str, need: str, limit: int = 2) -> list[Storage] | None:
        """The storages of `need` some family's backends give this class (a few suffice); None
        when no family knows the class."""
        if self.narrowing is not None and self.narrowing.narrowing() is not None:
            every = self.storages_for(layer_class)
            return None if every is None else summarize(every, need)
        for family in self.families:
            finder = getattr(family, "find", None)
            if finder is not None:
                got = finder(layer_class, need, limit)
            else:
                every = family.storages_for(layer_class)
                got = None if every is None else summarize(every, need)
            if got is not None:
                return got
        return None


# ---- reading methods without parsing whole files -------------------------------------------------
_DEF = re.compile(r"^([ \t]*)(?:async[ \t]+)?def[ \t]+(\w+)[ \t]*\(", re.MULTILINE)


def _indent(line: str) -> int:
    return len(line) - len(line.lstrip(" \t"))


def _block_end(lines: list[str], start: int, indent: int) -> int:
    """The index after the block that starts at `lines[start]` (a `def` or `class` at `indent`)."""
    i = start + 1
    while i < len(lines):
        line = lines[i]
        stripped = line.strip()
        if stripped and not stripped.startswith("#") and _indent(line) <= indent and stripped[0] not in ")]}":
            return i
        i += 1
    return i


def _parse_snippet(lines: list[str], start: int, end: int):
    # A comment-only line (the block takes in a comment at column 0 before the next statement)
    # would stop the dedent: blank it, keeping the line numbers.
    text = textwrap.dedent("".join("\n" if line.lstrip().startswith("#") else line for line in lines[start:end]))
    try:
        # Blank lines before it give its nodes their lines in the file (cheaper than
        # `ast.increment_lineno`, a walk of every node).
        tree = ast.parse("\n" * start + text)
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return None
    if not tree.body or not isinstance(tree.body[0], (ast.FunctionDef, ast.AsyncFunctionDef)):
        return None
    return tree.body[0]


@record
class _Source:
    """One module's text, split in lines, with its header (imports, classes)."""

    module: str
    path: str
    header: ModuleHeader
    lines: list[str]

    def __post_init__(self):
        self._parsed: dict = {}
        self._class_defs: dict[int, dict[str, int] | None] = {}  # header line -> `_defs_of`

    def method(self, class_name: str, name: str):
        """The method `name` of top-level class `class_name`, parsed alone (None: not defined)."""
        key = (class_name, name)
        if key not in self._parsed:
            self._parsed[key] = self._method(class_name, name)
        return self._parsed[key]

    def _method(self, class_name: str, name: str):
        got = self.header.classes.get(class_name)
        if got is None:
            return None
        if got[1] not in self._class_defs:
            self._class_defs[got[1]] = self._defs_of(got[1])
        defs = self._class_defs[got[1]]
        i = defs.get(name) if defs is not None else None
        if i is None:
            return None
        return _parse_snippet(self.lines, i, _block_end(self.lines, i, _indent(self.lines[i])))

    def _defs_of(self, header_line: int) -> dict[str, int] | None:
        """Name -> index of the first `def` of that name in the class whose header is at this line
        (None: no `class` line there), read once per class whatever methods are asked for."""
        start = header_line - 1
        # The header's line is where the `class` keyword is; a decorated class's body follows it.
        while start < len(self.lines) and not self.lines[start].lstrip().startswith("class"):
            start += 1
        if start >= len(self.lines):
            return None
        cls_indent = _indent(self.lines[start])
        end = _block_end(self.lines, start, cls_indent)
        defs: dict[str, int] = {}
        for i in range(start + 1, end):
            match = _DEF.match(self.lines[i])
            if match and len(match.group(1).expandtabs()) > cls_indent:
                defs.setdefault(match.group(2), i)
        return defs

    def function(self, name: str):
        key = (None, name)
        if key not in self._parsed:
            self._parsed[key] = self._function(name)
        return self._parsed[key]

    def _function(self, name: str):
        needle = f"def {name}("
        for i, line in enumerate(self.lines):
            if needle not in line:
                continue
            if line.startswith(("def ", "async def ")):
                match = _DEF.match(line)
                if match and match.group(2) == name:
                    return _parse_snippet(self.lines, i, _block_end(self.lines, i, 0))
        return None


class CodeBackends:
    """The backends of the scanned tree, read from their code (vLLM, its forks, sglang)."""

    name = "code"

    def __init__(self, project, config_params: tuple[str, ...] = ("quant_config",), method_lookup=None):
        self.project = project
        self.index: QuantizableLayerIndex = project.index
        self.config_params = config_params
        # What the shipped catalogues record of a quant method class outside the tree
        # (catalogue.method_record), handed in by the catalogue module that builds on this one.
        self.method_lookup = method_lookup

    def _memo(self, key, build):
        """`build()` once per key while it stays among the STORAGE_MEMO_ENTRIES last used (shared by
        every file analysed against the index), replaying what it read for each later user so a
        cached finding is invalidated when a backend's file changes."""
        memo = self.index.__dict__.setdefault("_storage_memo", OrderedDict())
        hit = memo.pop(key, None)
        if hit is None:
            if key[0] == "method storages":  # methods_read() lists them after the run
                self.index.__dict__.setdefault("_storage_methods_read", set()).add(key[1])
            # The top-level answers are also kept on disk across runs (run/facts_cache.py),
            # with their reads, valid while every file and folder they read is unchanged.
            hit = memo[key] = self.index.stored_facts(key, build)
            _trim(memo)  # after the build: the answers it asked for were added meanwhile
        else:
            memo[key] = hit  # now the most recently used
            self.index.replay(hit[1])
        return hit[0]

    # ---- the public question ---------------------------------------------------------------------
    def storages_for(self, layer_class: str, construction: object = None) -> frozenset[Storage] | None:
        """Every storage some backend of the tree can give `weight` of an instance of this class;
        None when the tree's backends cannot be found (the layer's config type does not resolve)."""
        return self._memo(("storages", layer_class), lambda: self._storages(layer_class))

    def find(self, layer_class: str, need: str, limit: int = 2) -> list[Storage] | None:
        """Storages of `need` (ABSENT or NON_COMPUTE) from up to `limit` backends, reading the
        backends only until they are found (a rule needs one to report, two to explain); None
        when the tree's backends cannot be found."""
        def build():
            if self._config_base(layer_class) is None:
                return None
            found: list[Storage] = []
            backends: set[str] = set()
            for config in self._iter_configs(layer_class):
                for storage in self._config_storages(config, layer_class):
                    if summarize((storage,), need):
                        found.append(storage)
                        backends.add(storage.backend)
                # A cast's message is best with a repacked storage as well as a missing one.
                typed = {s.backend for s in found if s.typed}
                stored = any(s.kind in (PACKED, FP8) and s.typed for s in found) or need == ABSENT
                if len(typed) >= limit + (0 if stored else 2) or (stored and len(typed) >= limit):
                    break
            return summarize(found, need)
        return self._memo(("find", layer_class, need, limit), build)

    def undispatched(self, layer_class: str) -> tuple[str, Evidence] | None:
        """(why, where) the backends handed this class cannot be told, or None: its config type
        resolves in the tree but no class there subclasses it (a plain dataclass, TensorRT-LLM's
        shape), so the quant methods it reaches are chosen by code this model does not read (a
        module-level `get_quant_method(quant_config)`). Not knowing them is not "no backend"."""
        base = self._config_base(layer_class)
        if base is None or next(iter(self._iter_configs(layer_class)), None) is not None:
            return None
        loc = self.index.class_location(base)
        where = Evidence("", loc[0].path, loc[0].classes[loc[1]][1]) if loc else Evidence("", "", 0)
        return (f"{UNKNOWN_BACKENDS}: its config type `{base}` has no subclass in the "
                "tree, so its quant methods are chosen elsewhere"), where

    def backends(self, layer_class: str) -> list[str] | None:
        """The config classes that may be handed an instance of this class (None: not found)."""
        if self._config_base(layer_class) is None:
            return None
        return list(self._iter_configs(layer_class))

    def _storages(self, layer_class: str) -> frozenset[Storage] | None:
        if self._config_base(layer_class) is None:
            return None
        out: set[Storage] = set()
        for config in self._iter_configs(layer_class):
            out.update(self._config_storages(config, layer_class))
        return frozenset(out)

    def config_storages(self, config: str, layer_class: str, mro: list[str] | None = None) -> list[Storage]:
        """The storages one config gives the layer; `mro`: the layer's classes when the tree does not
        define it (a layer of an engine outside the tree, from the catalogue's record)."""
        if mro is None:
            return self._config_storages(config, layer_class)
        return self._memo(("config storages", config, layer_class, tuple(mro)),
                          lambda: self._read_config_storages(config, set(mro)))

    def _config_storages(self, config: str, layer_class: str) -> list[Storage]:
        return self._memo(("config storages", config, layer_class),
                          lambda: self._read_config_storages(config, set(self.index.mro(layer_class))))

    def _read_config_storages(self, config: str, layer_mro: set[str]) -> list[Storage]:
        out = []
        for method, line, src_path, typed in self._methods_for(config, layer_mro):
            if method is None:
                out.append(Storage(_short(config), "", UNKNOWN, "", "hands it a quant method we cannot name",
                                   (Evidence(f"`{_short(config)}`: a quant method we cannot read",
                                             src_path, line),),
                                   typed))
                continue
            dispatch = Evidence(f"`{_short(config)}.get_quant_method` hands it `{_short(method)}`", src_path, line)
            for storage in self._method_storages(method):
                out.append(Storage(_short(config), storage.method, storage.kind, storage.dtype, storage.what,
                                   (dispatch, *storage.evidence), typed, storage.params))
        return out

    def _iter_configs(self, layer_class: str):
        """The config classes of the layer's config type, found lazily in its package (the folder of
        the module defining the type), in discovery order; what was found is remembered."""
        base = self._config_base(layer_class)
        if base is None:  # never: every caller asks _config_base first
            return
        state = self.index.__dict__.setdefault("_storage_configs", {})
        if base not in state:
            loc = self.index.class_location(base)
            folder = os.path.dirname(loc[0].path) if loc else None
            # (config, what finding it read) in order; the scan; what the scan read after the last one
            # The scan is kept for the run: made from the index alone, not from this model, whose
            # project (the analysis that asked first, its tree and every file's facts it read)
            # it would keep alive to the end (vLLM 0.34.0: 2.7 MiB).
            state[base] = ([], _scan_configs(self.index, base, folder) if folder else iter(()), [])
        found, pending, tail = state[base]
        i = 0
        while True:
            if i < len(found):  # found before (by this search or another): what finding it read counts
                config, frame = found[i]
                self.index.replay(frame)
                yield config
                i += 1
                continue
            for frame in tail:
                self.index.replay(frame)
            with self.index.reading() as frame:
                nxt = next(pending, None)
            if nxt is None:
                tail.append(frame)
                return
            found.append((nxt, frame))
            tail.clear()


    # ---- which configs --------------------------------------------------------------------------
    def _config_base(self, layer_class: str) -> str | None:
        """The config type the layer's quant root takes: its `__init__`'s config parameter's annotation."""
        for ancestor in self.index.mro(layer_class):
            class_facts = self.project.class_facts(ancestor)
            init = class_facts.methods.get("__init__") if class_facts else None
            if init is None:
                continue
            args = init.args.posonlyargs + init.args.args + init.args.kwonlyargs
            for arg in args:
                if arg.arg in self.config_params and arg.annotation is not None:
                    name = annotation_name(arg.annotation)
                    if not name:
                        continue
                    loc = self.index.class_location(ancestor)
                    resolved = self.index.resolve(loc[0].module, name, loc[0].imports) if loc else None
                    if resolved and self.index.class_location(resolved) is not None:
                        return self.index.canonical(resolved)
        return None

    # ---- dispatch ---------------------------------------------------------------------------------
    def _source(self, qualname_module: str) -> _Source | None:
        def build():
            header = self.index.modules.get(qualname_module)
            if header is None or self.project.load_file is None:
                return None
            text = self.project.load_file(header.path)
            if text is None:
                return None
            return _Source(qualname_module, header.path, header, text.splitlines(keepends=True))
        return self._kept_source(("storage source", qualname_module), build)

    def _kept_source(self, key, build):
        """`_memo` for a module's text and its parsed methods, but only the SOURCES_KEPT last used:
        every answer made from a source is memoised itself, so a source is asked for again only
        by a question not asked before. Ten times vLLM's tree held 605 sources (22 MiB of lines,
        128,000 AST nodes of parsed methods, most of the live AST at the end of the run) when
        they lived as long as the run (benchmarks/README.md)."""
        kept = self.index.__dict__.setdefault("_storage_sources", OrderedDict())
        hit = kept.pop(key, None)
        if hit is None:
            with self.index.reading() as reads:
                value = build()
            hit = (value, reads)
            while len(kept) >= SOURCES_KEPT:
                kept.popitem(last=False)
        else:
            self.index.replay(hit[1])
        kept[key] = hit  # now the most recently used
        return hit[0]

    def _method_of(self, qualname: str, name: str, after: str | None = None):
        """(the class in the MRO that defines `name`, its _Source, the parsed method); `after`:
        start after this class (`super()`)."""
        mro = self.index.mro(qualname)
        if after is not None and after in mro:
            mro = mro[mro.index(after) + 1:]
        for ancestor in mro:
            loc = self.index.class_location(ancestor)
            if loc is None:
                continue
            src = self._source(loc[0].module)
            if src is None:
                continue
            function_node = src.method(loc[1], name)
            if function_node is not None:
                return ancestor, src, function_node
        return None

    def _first_definer(self, qualname: str, name: str, after: str | None = None):
        """The class whose `name` an instance of `qualname` runs (`after`: the next one after this
        class, as `super()` in it): ("tree", class) for a class of the tree that defines it;
        ("outside", class, record) for a class outside the tree a shipped catalogue records with
        it (an out-of-tree plugin's `class PluginFp8LinearMethod(Fp8LinearMethod)`); ("unknown",
        class) for a named class outside the tree that may define it and no catalogue knows;
        None when no class of the MRO can. (An out-of-tree base is never passed over for an
        in-tree base behind it: Python would run the outside one's.)"""
        mro = self.index.mro(qualname)
        if after is not None and after in mro:
            mro = mro[mro.index(after) + 1:]
        for ancestor in mro:
            loc = self.index.class_location(ancestor)
            if loc is not None:
                src = self._source(loc[0].module)
                if src is not None and src.method(loc[1], name) is not None:
                    return ("tree", ancestor)
                continue
            if "." not in ancestor or ancestor.split(".", 1)[0] in _NO_HOOKS:
                continue  # a name we cannot place, or `abc.ABC`, `torch.nn.Module`, `typing.Generic`
            record = self.method_lookup(ancestor) if self.method_lookup else None
            if record is None:
                return ("unknown", ancestor)
            storages, _after, has_after, _kernel = record
            if (storages is not None) if name == "create_weights" else has_after:
                return ("outside", ancestor, record)
        return None

    def _inherits(self, method: str, first, what: str) -> Evidence:
        """`PluginFp8LinearMethod` inherits `create_weights` from `vllm...Fp8LinearMethod`, at the class line."""
        loc = self.index.class_location(method)
        src = self._source(loc[0].module) if loc else None
        line = src.header.classes[loc[1]][1] if src is not None and loc is not None else 0
        return Evidence(f"`{_short(method)}` {what} `{first[1]}`", src.path if src is not None else "", line)

    def _outside_storages(self, method: str, first, step: Evidence) -> list[Storage]:
        """The storages of a `create_weights` that runs outside the tree: the catalogue's record of
        that class (an after-loading the tree's class overrides replaces its), else unknown."""
        short = _short(method)
        if first[0] == "unknown":
            return [Storage("", short, UNKNOWN, "", f"runs `create_weights` of `{first[1]}`, outside the tree, "
                            "which no shipped catalogue records", (step,))]
        storages = first[2][0]
        after = self._after_loading(method)
        if after is not None and (self._first_definer(method, "process_weights_after_loading") or ("",))[0] == "tree":
            return [Storage("", short, after[0], after[1], after[2], (step, *after[3]),
                            params=storages[0].params if storages else ())]
        return [Storage("", short, s.kind, s.dtype, s.what, (step, *s.evidence), s.typed, s.params)
                for s in storages]

    # ---- what the catalogue of an engine records of its methods (run/catalogue_build.py) ----
    def methods_read(self) -> list[str]:
        """The quant method classes whose storages this run has read."""
        return sorted(self.index.__dict__.get("_storage_methods_read", ()))

    def defines(self, qualname: str, name: str) -> bool:
        return self._defines(qualname, name)

    def has_method(self, qualname: str, name: str) -> bool:
        return self._method_of(qualname, name) is not None

    def method_storages(self, qualname: str) -> list[Storage]:
        return self._method_storages(qualname)

    def after_loading_storage(self, qualname: str, kernel: bool = False) -> Storage | None:
        """What `process_weights_after_loading` leaves in `weight` when it repacks or deletes it
        (`kernel`: when a kernel object the method holds does, one storage among the registered)."""
        after = self._kernel_after_loading(qualname) if kernel else self._after_loading(qualname)
        return None if after is None else Storage("", _short(qualname), after[0], after[1], after[2], after[3])

    def _resolver(self, src: _Source, fn):
        """Name → qualified name in `fn`'s module, with the imports made inside `fn` too."""
        memo = self.__dict__.setdefault("_resolvers", {})
        if id(fn) not in memo:
            memo[id(fn)] = (fn, self._make_resolver(src, fn))
        return memo[id(fn)][1]

    def _make_resolver(self, src: _Source, fn):
        local: dict[str, str] = {}
        for node in walk(fn):
            if isinstance(node, (ast.Import, ast.ImportFrom)):
                record_import(node, local, src.module, src.header.is_package)
        imports = {**src.header.imports, **local}

        known: dict[str, str | None] = {}
        # The index, not `self`: the resolver lives on in the run-long memo (dispatch tables), and
        # `self` would keep this analysis's project facts and every tree they parsed alive with it
        # (ten times vLLM: 88 files' facts past the class-facts LRU; benchmarks/README.md). The
        # module's name, not its source: that would keep the module's lines and parsed methods.
        index = self.index
        module = src.module

        def resolve(name: str | None) -> str | None:
            if not name:
                return None
            if name not in known:
                known[name] = index.resolve(module, name, imports)
            return known[name]
        return resolve

    def _methods_for(self, config: str, layer_mro: set[str]) -> list[tuple[str | None, int, str, bool]]:
        """(method class or None, line of the dispatch, path, typed) for each quant method the config
        can hand an instance whose MRO is `layer_mro` (typed: a test on the layer's type leads there)."""
        canon = frozenset(self.index.canonical(q) for q in layer_mro)
        out: set[tuple[str | None, int, str, bool]] = set()
        for method, line, path, conds in self.dispatch_table(config):
            held = [self._applies(test, param, canon, resolve) for test, param, resolve, _expected in conds]
            if all(h in (None, c[3]) for h, c in zip(held, conds)):
                typed = any(h is not None for h in held)
                out.add((method, line, path, typed))
        return sorted(out, key=lambda t: (t[0] or "", t[1], t[2], t[3]))

    def dispatch_table(self, config: str) -> list[tuple]:
        """Backend → layer types: every quant method the config's `get_quant_method` can build,
        with the tests on the layer that lead there ((test, layer parameter, resolver, expected
        truth) each), read once per config whatever layer asks."""
        def build():
            got = self._method_of(config, "get_quant_method")
            if got is None:  # no dispatch we can read: the config may hand any layer anything
                loc = self.index.class_location(config)
                return [(None, loc[0].classes[loc[1]][1] if loc else 0, loc[0].path if loc else "", ())]
            owner, src, function_node = got
            out: list[tuple] = []
            self._dispatch(function_node, src, owner, config, (), out, depth=0)
            return out
        return self._memo(("dispatch table", config), build)

    def _dispatch(self, fn, src: _Source, owner: str, config: str, conds: tuple, out: list, depth: int,
                  layer_param: str | None = None, bound: dict[str, tuple[str, ...]] | None = None,
                  feeds_return: bool = True) -> None:
        if depth > 3:
            return
        # A parameter bound to several method classes (`Linear=A if w4a16 else B`): each counts
        # where the helper builds it, under the helper's own tests on the layer. `feeds_return`:
        # whether what this function returns is the quant method (False: a helper whose result the
        # caller keeps as a value, `matched = self._find_matched_config(prefix, layer)`): only then
        # is a `return` we cannot name a method we cannot name.
        resolve = _DispatchResolve(self._resolver(src, fn), bound or {}, feeds_return,
                                   {r.value.id for r in walk(fn)
                                    if isinstance(r, ast.Return) and isinstance(r.value, ast.Name)})
        args = [a.arg for a in fn.args.posonlyargs + fn.args.args + fn.args.kwonlyargs]
        if layer_param is None:
            layer_param = "layer" if "layer" in args else (args[1] if len(args) > 1 else "layer")
        assigns = _assignments(fn)
        resolve.flags = {k: v for k, v in assigns.items() if isinstance(v, (ast.BoolOp, ast.Call, ast.UnaryOp))}
        self._walk(fn.body, conds, src, owner, config, out, depth, layer_param, resolve)

    def _applies(self, test: ast.expr, layer_param: str, layer_mro: frozenset[str], resolve,
                 depth: int = 0) -> bool | None:
        """Does `test` hold for the layer? None when it does not test the layer's type. A local
        flag (`lm_head_quantized = isinstance(layer, ParallelLMHead) and ...`) is read through."""
        flags = getattr(resolve, "flags", {})
        if isinstance(test, ast.Name) and test.id in flags and depth < 3:
            return self._applies(flags[test.id], layer_param, layer_mro, resolve, depth + 1)
        if isinstance(test, ast.UnaryOp) and isinstance(test.op, ast.Not):
            inner = self._applies(test.operand, layer_param, layer_mro, resolve, depth)
            return None if inner is None else not inner
        if isinstance(test, ast.BoolOp):
            parts = [self._applies(v, layer_param, layer_mro, resolve, depth) for v in test.values]
            known = [p for p in parts if p is not None]
            if not known:
                return None
            if isinstance(test.op, ast.Or):
                return True if any(known) else (None if len(known) < len(parts) else False)
            return False if not all(known) else (None if len(known) < len(parts) else True)
        if isinstance(test, ast.Call) and isinstance(test.func, ast.Name) \
                and test.func.id in ("isinstance", "issubclass") and len(test.args) == 2 \
                and isinstance(test.args[0], ast.Name) and test.args[0].id == layer_param:
            kinds = test.args[1].elts if isinstance(test.args[1], ast.Tuple) else [test.args[1]]
            types = {self.index.canonical(t) for t in (resolve(dotted(k)) for k in kinds) if t}
            return bool(types & layer_mro)
        return None

    def _walk(self, body: list[ast.stmt], conds: tuple, src, owner, config, out, depth, layer_param, resolve):
        for stmt in body:
            if isinstance(stmt, ast.If):
                self._walk(stmt.body, conds + ((stmt.test, layer_param, resolve, True),), src, owner, config, out,
                           depth, layer_param, resolve)
                self._walk(stmt.orelse, conds + ((stmt.test, layer_param, resolve, False),), src, owner, config, out,
                           depth, layer_param, resolve)
                # `if not isinstance(layer, X): return ...`: what follows is only for X.
                if _terminates(stmt.body):
                    conds = conds + ((stmt.test, layer_param, resolve, False),)
                elif _terminates(stmt.orelse):
                    conds = conds + ((stmt.test, layer_param, resolve, True),)
                continue
            if isinstance(stmt, ast.Match) and isinstance(stmt.subject, ast.Name) and stmt.subject.id == layer_param:
                # `match layer: case LinearBase(): ...`: each case is a test of the layer's type, and
                # a case without a guard excludes its types from the cases after it.
                before: tuple = ()
                for case in stmt.cases:
                    test = _case_test(case.pattern, layer_param)
                    own = () if test is None else ((test, layer_param, resolve, True),)
                    self._walk(case.body, conds + before + own, src, owner, config, out, depth, layer_param, resolve)
                    if test is not None and case.guard is None:
                        before = before + ((test, layer_param, resolve, False),)
                continue
            if isinstance(stmt, (ast.For, ast.While, ast.With, ast.Try)):
                blocks = [getattr(stmt, f, []) or [] for f in ("body", "orelse", "finalbody")]
                blocks += [h.body for h in getattr(stmt, "handlers", []) or []]
                for block in blocks:
                    self._walk(block, conds, src, owner, config, out, depth, layer_param, resolve)
                continue
            found_before = len(out)
            self._calls(stmt, conds, src, owner, config, out, depth, layer_param, resolve)
            if isinstance(stmt, ast.Return) and len(out) == found_before and getattr(resolve, "feeds_return", True) \
                    and isinstance(stmt.value, (ast.Call, ast.Attribute)):
                # A method we cannot name (`return self.method_cls(self)`): it may store anything.
                out.append((None, stmt.lineno, src.path, conds))
            if isinstance(stmt, (ast.Return, ast.Raise)):
                return

    def _calls(self, stmt, conds, src, owner, config, out, depth, layer_param, resolve):
        # A method class handed to a helper that dispatches on the layer counts only where the
        # helper's own dispatch builds it (`get_linear_quant_method(self, layer, prefix, Int4LinearMethod)`).
        followed: set[int] = set()
        for node in walk(stmt):
            if isinstance(node, ast.Call) and self._follow(node, conds, config, owner, layer_param, resolve, out,
                                                           depth, _feeds_return(stmt, resolve)):
                # the classes handed to it, also inside a conditional (`Linear=A if c else B`)
                for arg in (*node.args, *(k.value for k in node.keywords)):
                    followed.update(id(n) for n in ast.walk(arg))
        bound = getattr(resolve, "bound", {})
        for node in walk(stmt):
            if id(node) in followed:
                continue
            if isinstance(node, (ast.Name, ast.Attribute)) and isinstance(getattr(node, "ctx", None), ast.Load):
                name = dotted(node)
                for target in (bound[name] if name in bound else (resolve(name),)):
                    if target and self._is_method_class(target):
                        out.append((self.index.canonical(target), node.lineno, src.path, conds))

    def _follow(self, node: ast.Call, conds, config, owner, layer_param, resolve, out, depth,
                feeds_return: bool = True) -> bool:
        """Follow a call that hands the layer on (`super().get_quant_method(layer, prefix)`,
        `self.get_xxx_method(layer)`, a project helper); True when it was followed."""
        func = node.func
        passes_layer = any(isinstance(a, ast.Name) and a.id == layer_param for a in node.args) or \
            any(isinstance(k.value, ast.Name) and k.value.id == layer_param for k in node.keywords)
        if not passes_layer or depth >= 3:
            return False
        if isinstance(func, ast.Attribute) and isinstance(func.value, ast.Call) and dotted(func.value.func) == "super":
            got = self._method_of(config, func.attr, after=owner)
        elif isinstance(func, ast.Attribute) and isinstance(func.value, ast.Name) and func.value.id == "self":
            got = self._method_of(config, func.attr)
        else:
            got = self._function(resolve(dotted(func)))
        if got is None:
            return False
        callee_owner, callee_src, callee = got
        param = _param_for(callee, node, layer_param)
        if param is None:
            return False
        bound = _bound_classes(callee, node, resolve, self._is_method_class)
        self._dispatch(callee, callee_src, callee_owner or owner, config, conds, out, depth + 1, param, bound,
                       feeds_return)
        return True

    def _function(self, qualname: str | None):
        if not qualname or "." not in qualname:
            return None
        module, _, name = qualname.rpartition(".")
        src = self._source(module)
        function_node = src.function(name) if src is not None else None
        return (None, src, function_node) if function_node is not None else None

    def _is_method_class(self, qualname: str) -> bool:
        """A quant method: a class of the tree whose MRO defines `create_weights`."""
        if self.index.class_location(qualname) is None:
            return False

        def build():
            first = self._first_definer(qualname, "create_weights")
            # an unknown outside base alone does not make one (a layer class subclassing the engine's)
            return (first is not None and first[0] != "unknown"
                    or self._method_of(qualname, "create_weights") is not None)
        return self._memo(("has create_weights", qualname), build)

    # ---- what a method stores ---------------------------------------------------------------------
    def _method_storages(self, method: str, depth: int = 0) -> list[Storage]:
        return self._memo(("method storages", method), lambda: self._read_method(method, depth))

    def _read_method(self, method: str, depth: int) -> list[Storage]:
        first = self._first_definer(method, "create_weights")
        short = _short(method)
        if first is None:
            return [Storage("", short, UNKNOWN, "", "has no `create_weights` we can read")]
        if first[0] != "tree":
            step = self._inherits(method, first, "inherits `create_weights` from")
            return self._outside_storages(method, first, step)
        got = self._method_of(first[1], "create_weights")
        owner, src, function_node = got
        if _abstract(function_node):
            return []  # an interface (`raise NotImplementedError`): its subclasses are read instead
        registered = self._registered(function_node, src, depth=0)
        delegated = [n for n in walk(function_node) if isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute)
                     and n.func.attr == "create_weights"]
        out: list[Storage] = []
        supers = [n for n in delegated if isinstance(n.func, ast.Attribute)  # all are: narrows the type
                  and isinstance(n.func.value, ast.Call) and dotted(n.func.value.func) == "super"]
        if supers and "weight" not in registered:
            # `super().create_weights(...)`: the next class of the MRO that has one, in the tree or
            # outside it (the catalogue's record), never every method of the package.
            return self._super_storages(method, owner, supers[0], src, registered, depth)
        named = self._named_delegates(delegated, src, function_node) if "weight" not in registered else []
        if named:
            # `KernelSpec().create_weights(layer, ...)`: the object is built here, its class named.
            for call, built, target in named:
                step = Evidence(f"`{short}.create_weights` hands the layer to `{ast.unparse(call.func)}`",
                                src.path, call.lineno)
                if target is None or self.index.class_location(target) is None:
                    shown = ast.unparse(built.func)
                    out.append(Storage("", short, UNKNOWN, "", f"hands `create_weights` to `{shown}`, which the "
                                       "tree does not define", (step,)))
                    continue
                for storage in self._method_storages(target, depth + 1):
                    out.append(replace(storage, evidence=(step, *storage.evidence)))
            if out:
                return out
        if "weight" not in registered and delegated and depth == 0:
            # `layer.scheme.create_weights(...)`: the object is chosen elsewhere; every method of
            # the package that creates weights stands for it.
            for other in self._package_methods(src, method):
                for storage in self._method_storages(other, depth + 1):
                    out.append(Storage("", storage.method, storage.kind, storage.dtype, storage.what,
                                       (Evidence(f"`{short}.create_weights` hands the layer to "
                                                 f"`{ast.unparse(delegated[0].func)}`",
                                                 src.path, delegated[0].lineno), *storage.evidence),
                                       params=storage.params))
            if out:
                return out
        if "weight" in registered:
            line, kinds = registered["weight"]
            reg = Evidence(f"`{short}.create_weights` registers `weight`", src.path, line)
            after = self._after_loading(method)
            if _keeps_registered(after, kinds):
                # Replaced after loading by a tensor of the dtype it registered (a placeholder,
                # a copy): the storage is unchanged and the registration names it.
                after = None
            for kind, dtype, dtype_ev in kinds:
                if after is not None:
                    out.append(Storage("", short, after[0], after[1], after[2], (reg, *after[3])))
                    break
                what = (f"registers `weight` as {dtype}" if dtype
                        else "registers `weight` in a dtype it does not state")
                if kind == COMPUTE:
                    what = f"registers `weight` in the compute dtype (`{_MODEL_DTYPE}`)"
                out.append(Storage("", short, kind, dtype, what, (reg, *dtype_ev)))
            if after is None:
                # A kernel object the method holds may repack it after loading (one of the kernels
                # it can choose does): that storage as well as the one registered.
                chosen = self._kernel_after_loading(method)
                if chosen is not None:
                    out.append(Storage("", short, chosen[0], chosen[1], chosen[2], (reg, *chosen[3])))
            params = tuple(sorted(registered))
            return [replace(s, params=params) for s in out]
        if registered and not any("weight" in n for n in registered):
            # Only scales (`k_scale`, `q_scale`): a method for an attention's KV cache, not for a
            # layer with weights; a dispatch we could not narrow may name it for any layer.
            return []
        if registered:
            # The parameter that holds the weights names the storage (`qweight`, `weight_packed`).
            names = sorted(registered, key=lambda n: (not n.endswith("weight") and "weight_packed" not in n,
                                                      "scale" in n, len(n), n))
            line = min(v[0] for v in registered.values())
            shown = f"`{names[0]}`"
            return [Storage("", short, ABSENT, "", f"registers {shown}, not `weight`",
                            (Evidence(f"`{short}.create_weights` registers {shown}", src.path, line),))]
        return [Storage("", short, UNKNOWN, "", "registers no parameter we can read",
                        (Evidence(f"`{short}.create_weights`", src.path, function_node.lineno),))]

    def _super_storages(self, method: str, owner: str, call: ast.Call, src: _Source, registered, depth: int):
        short = _short(method)
        step = Evidence(f"`{_short(owner)}.create_weights` calls `super().create_weights`", src.path, call.lineno)
        target = self._first_definer(method, "create_weights", after=owner)
        if target is None:
            return [Storage("", short, UNKNOWN, "", "calls `super().create_weights`, which no base we can read "
                            "defines", (step,))]
        if target[0] != "tree":
            return self._outside_storages(method, target, step)
        after = self._after_loading(method)
        inner = self._method_storages(target[1], depth + 1)
        if _keeps_registered(after, [(s.kind, s.dtype, ()) for s in inner]):
            after = None
        if after is not None and inner:
            return [Storage("", short, after[0], after[1], after[2], (step, *after[3]),
                            params=tuple(sorted({*inner[0].params, *registered})))]
        return [Storage("", short, s.kind, s.dtype, s.what, (step, *s.evidence), s.typed,
                        tuple(sorted({*s.params, *registered}))) for s in inner]

    def _named_delegates(self, delegated: list[ast.Call], src: _Source, fn
                         ) -> list[tuple[ast.Call, ast.Call, str | None]]:
        """The `create_weights` calls on an object built in the call itself (`Cls(...).create_weights`),
        with that construction and the class it resolves to (None: it does not resolve); `super()`
        is not one."""
        resolve = self._resolver(src, fn)
        out = []
        for call in delegated:
            built = call.func.value if isinstance(call.func, ast.Attribute) else None  # always an attribute
            if isinstance(built, ast.Call) and isinstance(built.func, (ast.Name, ast.Attribute)) \
                    and dotted(built.func) != "super":
                target = resolve(dotted(built.func))
                out.append((call, built, self.index.canonical(target) if target else None))
        return out

    def _package_methods(self, src: _Source, exclude: str) -> list[str]:
        """The classes of the method's package that create weights and are not quant methods
        themselves (no base in common with the delegating method): its schemes."""
        folder = os.path.dirname(src.path)
        own = {q for q in self.index.mro(exclude)[1:] if self.index.class_location(q) is not None}
        out = []
        for module, header in self.index.modules.under(folder):
            for name in header.classes:
                q = f"{module}.{name}"
                if q != exclude and not (own & set(self.index.mro(q))) and self._defines(q, "create_weights"):
                    out.append(q)
        return out

    def _defines(self, qualname: str, name: str) -> bool:
        loc = self.index.class_location(qualname)
        src = self._source(loc[0].module) if loc else None
        if src is None or loc is None:
            return False
        start = src.header.classes[loc[1]][1] - 1
        end = _block_end(src.lines, start, _indent(src.lines[start])) if start < len(src.lines) else start
        return any(f"def {name}(" in line for line in src.lines[start:end])

    def _registered(self, fn, src: _Source, depth: int) -> dict[str, tuple[int, list]]:
        """Parameter name → (line, [(kind, dtype, evidence)]) for each parameter `fn` registers."""
        resolve = self._resolver(src, fn)
        assigns = _assignments(fn)
        out: dict[str, tuple[int, list]] = {}
        for node in walk(fn):
            if not isinstance(node, (ast.Call, ast.Assign)):  # every registration below is one
                continue
            name: str | None = None
            value: ast.expr | None = None
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and \
                    node.func.attr in ("register_parameter", "register_buffer") and len(node.args) >= 2:
                name, value = _const_str(node.args[0]), node.args[1]
            elif isinstance(node, ast.Call) and dotted(node.func) in ("setattr",) and len(node.args) == 3:
                name, value = _const_str(node.args[1]), node.args[2]
            elif isinstance(node, ast.Assign) and len(node.targets) == 1 \
                    and isinstance(node.targets[0], ast.Attribute) \
                    and isinstance(node.targets[0].value, ast.Name) and node.targets[0].value.id == "layer":
                name, value = node.targets[0].attr, node.value
                if not _makes_parameter(value, assigns):
                    name = None
            elif isinstance(node, ast.Call) and depth < 2:
                # a project helper handed the layer: `_create_weights(layer, ...)`
                if any(isinstance(a, ast.Name) and a.id == "layer" for a in node.args):
                    got = self._function(resolve(dotted(node.func)))
                    if got is not None:
                        for k, v in self._registered(got[2], got[1], depth + 1).items():
                            out.setdefault(k, v)
                continue
            if not name or value is None:  # a name comes with its value
                continue
            kinds = self._dtype_of(value, assigns, src, resolve, depth=0)
            out.setdefault(name, (node.lineno, kinds))
        return out

    def _dtype_of(self, value: ast.expr, assigns, src: _Source, resolve, depth: int) -> list:
        """[(kind, dtype, evidence)] the expression's tensor may have."""
        if depth > 4 or value is None:
            return [(UNKNOWN, "", ())]
        if isinstance(value, ast.Name) and value.id in assigns:
            return self._dtype_of(assigns[value.id], assigns, src, resolve, depth + 1)
        for node in ast.walk(value):
            if isinstance(node, ast.keyword) and node.arg == "dtype":
                return [(k, d, (Evidence(f"`dtype={ast.unparse(node.value)}`", src.path, node.value.lineno),) + e)
                        for k, d, e in self._classify_dtype(node.value, assigns, src, resolve, depth)]
        # `create_fp8_weight_parameter(...)`, `ModelWeightParameter(data=...)`: follow a project helper
        for node in ast.walk(value):
            if isinstance(node, ast.Call):
                got = self._function(resolve(dotted(node.func)))
                if got is not None:
                    inner = self._returned_dtype(got[2], got[1], depth + 1)
                    if inner:
                        return inner
                if isinstance(node.func, ast.Attribute) and node.func.attr in ("view", "to") and node.args:
                    return self._classify_dtype(node.args[0], assigns, src, resolve, depth)
        return [(UNKNOWN, "", ())]

    def _returned_dtype(self, fn, src: _Source, depth: int) -> list:
        resolve = self._resolver(src, fn)
        assigns = _assignments(fn)
        for node in walk(fn):
            if isinstance(node, ast.Return) and node.value is not None:
                got = self._dtype_of(node.value, assigns, src, resolve, depth)
                if got and got[0][0] != UNKNOWN:
                    return got
        return []

    def _classify_dtype(self, expr: ast.expr, assigns, src: _Source, resolve, depth: int) -> list:
        if isinstance(expr, ast.IfExp):
            return self._classify_dtype(expr.body, assigns, src, resolve, depth) + \
                self._classify_dtype(expr.orelse, assigns, src, resolve, depth)
        text = ast.unparse(expr)
        last = text.rsplit(".", 1)[-1]
        if "fp8" in text.lower() or last.startswith("float8"):
            return [(FP8, last if last.startswith("float8") else "fp8", ())]
        if last in _INT_DTYPES:
            return [(_INT_DTYPES[last], last, ())]
        if any(name in text for name in model_dtype_attributes()) or last in _FLOAT_COMPUTE or "orig_dtype" in text:
            return [(COMPUTE, _MODEL_DTYPE, ())]
        if isinstance(expr, ast.Name) and expr.id in assigns and depth < 4:
            return self._classify_dtype(assigns[expr.id], assigns, src, resolve, depth + 1)
        if "fp4" in text.lower() or "uint8" in text:
            return [(PACKED, "uint8", ())]
        return [(UNKNOWN, "", ())]

    # ---- after loading ----------------------------------------------------------------------------
    def _after_loading(self, method: str):
        """(kind, dtype, what, evidence) when `process_weights_after_loading` (or a project function
        it calls, three calls deep) repacks or deletes `weight`; None when it leaves it be."""
        first = self._first_definer(method, "process_weights_after_loading")
        if first is None:
            return None
        if first[0] == "unknown":
            return (UNKNOWN, "", f"is processed after loading by `{first[1]}`, outside the tree, which no shipped "
                    "catalogue records", (self._inherits(method, first, "inherits `process_weights_after_loading` "
                                                                         "from"),))
        if first[0] == "outside":
            return self._inherited_after_loading(method, first, first[2][1])
        _owner, src, function_node = self._method_of(first[1], "process_weights_after_loading")
        return self._mutation(function_node, src, depth=0, seen=set())

    def _inherited_after_loading(self, method: str, first, fact):
        """(kind, dtype, what, evidence) of an outside class's recorded `process_weights_after_loading`
        fact (what it does itself, or through a kernel it holds) for `method`, which inherits it;
        None when the record says it leaves `weight` be."""
        if fact is None:
            return None
        return (fact.kind, fact.dtype, fact.what,
                (self._inherits(method, first, "inherits `process_weights_after_loading` from"), *fact.evidence))

    def _kernel_after_loading(self, method: str):
        """(kind, dtype, what, evidence) when `process_weights_after_loading` hands the layer to a
        kernel object the method holds (`self.fp8_linear.process_weights_after_loading(layer)`,
        `self.fp8_linear = init_fp8_linear_kernel(...)` in `__init__`) and one of the kernel
        classes it can be repacks or deletes `weight`: the class built there, or the classes
        the factory's return annotation names and their subclasses in their package."""
        first = self._first_definer(method, "process_weights_after_loading")
        if first is None or first[0] == "unknown":
            return None
        if first[0] == "outside":
            return self._inherited_after_loading(method, first, first[2][3])
        owner, src, function_node = self._method_of(first[1], "process_weights_after_loading")
        for node in ast.walk(function_node):
            if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
                    and isinstance(node.func.value, ast.Attribute) and isinstance(node.func.value.value, ast.Name)
                    and node.func.value.value.id == "self" and _hands_layer(node)):
                continue
            for kernel, built in self._held_kernels(owner, node.func.value.attr):
                inner = self._method_of(kernel, node.func.attr)
                if inner is None:
                    continue
                found = self._mutation(inner[2], inner[1], depth=2, seen=set())  # the kernel and one helper
                if found is not None:
                    steps = (Evidence(f"`{_short(method)}.process_weights_after_loading` hands it to "
                                      f"`self.{node.func.value.attr}`", src.path, node.lineno), built)
                    return (found[0], found[1], f"{found[2]} under {_short(kernel)}", (*steps, *found[3]))
        return None

    def _held_kernels(self, owner: str, attr: str):
        """The classes `self.<attr>` can hold, from its assignments in `owner`'s `__init__` or
        `create_weights`: a class constructed there, or what a factory's return annotation names
        (and their subclasses in the same folder), at most a few dozen; yielded lazily (the
        search stops at the first kernel that repacks)."""
        for name in ("__init__", "create_weights"):
            got = self._method_of(owner, name)
            if got is not None:
                yield from self._kernels_assigned(got[1], got[2], attr)

    def _kernels_assigned(self, src: _Source, method, attr: str):
        resolve = self._resolver(src, method)
        for node in ast.walk(method):
            if not (isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.value, ast.Call)):
                continue
            target = node.targets[0]
            if not (isinstance(target, ast.Attribute) and target.attr == attr and isinstance(target.value, ast.Name)
                    and target.value.id == "self"):
                continue
            built = Evidence(f"`self.{attr} = {ast.unparse(node.value.func)}(...)`", src.path, node.lineno)
            callee = resolve(dotted(node.value.func))
            classes = [callee] if callee and self.index.class_location(callee) else self._returned_classes(callee)
            for cls in classes:
                yield cls, built
                loc = self.index.class_location(cls)
                folder = os.path.dirname(loc[0].path) if loc else None
                for count, kernel in enumerate(_scan_configs(self.index, cls, folder) if folder else ()):
                    if count >= 40:
                        break
                    yield kernel, built

    def _returned_classes(self, function: str | None) -> list[str]:
        """The classes a project function's return annotation names (`A | B`, `Optional[A]`)."""
        got = self._function(function)
        if got is None or got[2].returns is None:
            return []
        _none, src, function_node = got
        resolve = self._resolver(src, function_node)
        names = []
        for node in ast.walk(function_node.returns):
            if isinstance(node, (ast.Name, ast.Attribute)) and not isinstance(getattr(node, "ctx", None), ast.Store):
                name = resolve(dotted(node))
                if name and self.index.class_location(name) is not None and name not in names:
                    names.append(name)
        return names

    def _mutation(self, fn, src: _Source, depth: int, seen: set):
        resolve = self._resolver(src, fn)
        assigns = _assignments(fn)
        for node in walk(fn):
            if isinstance(node, ast.Delete):
                for t in node.targets:
                    if isinstance(t, ast.Attribute) and t.attr == "weight":
                        return self._deleted(fn, node, Evidence("`del ...weight`", src.path, node.lineno), src,
                                             assigns)
            if isinstance(node, ast.Call) and dotted(node.func) == "delattr" and len(node.args) == 2 \
                    and _const_str(node.args[1]) == "weight":
                return self._deleted(fn, node, Evidence("`delattr(..., \"weight\")`", src.path, node.lineno), src,
                                     assigns)
            if not isinstance(node, (ast.Call, ast.Assign)):  # what _replacement reads
                continue
            value = _replacement(node)
            if value is None:
                continue
            dtype = self._repacked_dtype(value, assigns, src, resolve)
            if dtype is not None:
                return (PACKED, dtype, f"repacks `weight` to {dtype}",
                        (Evidence(f"`{ast.unparse(value)[:60]}` replaces `weight`", src.path, node.lineno),))
        if depth >= 3:
            return None
        for node in walk(fn):
            if not isinstance(node, ast.Call):
                continue
            if not any(isinstance(a, ast.Name) and a.id == "layer" for a in node.args) and \
                    not any(isinstance(k.value, ast.Name) and k.value.id == "layer" for k in node.keywords):
                continue
            target = resolve(dotted(node.func))
            if not target or target in seen:
                continue
            seen.add(target)
            got = self._function(target)
            if got is None:
                continue
            inner = self._mutation(got[2], got[1], depth + 1, seen)
            if inner is not None:
                return (inner[0], inner[1], inner[2], (Evidence(f"`{fn.name}` calls `{dotted(node.func)}`", src.path,
                                                                 node.lineno), *inner[3]))
        return None

    def _deleted(self, fn, node: ast.AST, deletion: Evidence, src: _Source, assigns):
        """`weight` deleted after loading: absent, unless a later statement of the function sets a
        new one (`delattr(layer, "weight")`, then `layer.weight = Parameter(device_copy)`): then the
        new one's storage, repacked or of a dtype not stated here."""
        top = next((stmt for stmt in fn.body if any(n is node for n in ast.walk(stmt))), None)
        later = fn.body[fn.body.index(top) + 1:] if top is not None else []
        for stmt in later:
            for inner in ast.walk(stmt):
                value = _replacement(inner)
                if value is None or not isinstance(inner, (ast.Call, ast.Assign)) or (
                        isinstance(inner, ast.Call) and not (isinstance(inner.func, ast.Attribute)
                                                             and inner.func.attr == "register_parameter")):
                    continue
                again = Evidence(f"`{ast.unparse(value)[:60]}` becomes `weight` again", src.path, inner.lineno)
                dtype = self._repacked_dtype(value, assigns, src, self._resolver(src, fn))
                if dtype is not None:
                    return (PACKED, dtype, f"repacks `weight` to {dtype}", (deletion, again))
                return (UNKNOWN, "", "replaces `weight` after loading, in a dtype it does not state", (deletion, again))
        return (ABSENT, "", "deletes `weight`", (deletion,))

    def _repacked_dtype(self, value: ast.expr, assigns: dict[str, ast.expr], src: _Source, resolve) -> str | None:
        """The integer dtype of the new tensor registered as `weight` (a repack), read from what the
        code does to it, never from a function's name; None when it is not an integer tensor or its
        dtype cannot be read."""
        dtype = self._tensor_dtype(value, assigns, src, resolve, 0)
        return dtype if dtype is not None and dtype in _INT_DTYPES else None

    def _tensor_dtype(self, expr: ast.expr | None, assigns: dict[str, ast.expr], src: _Source, resolve,
                      depth: int) -> str | None:
        """The torch dtype the tensor an expression makes gets: a `dtype=` it is allocated with, a
        cast or view to a dtype (`.view(torch.int32)`, `.to(torch.uint8)`), the receiver's through
        views and copies, an operand's through packing arithmetic (`hi << 4 | lo`), a project
        function's return, a compiled op the storage formats record; None when nothing says."""
        if expr is None or depth > 8:
            return None
        if isinstance(expr, ast.Name):
            value = assigns.get(expr.id)
            return None if value is None or value is expr else self._tensor_dtype(value, assigns, src, resolve,
                                                                                 depth + 1)
        if isinstance(expr, ast.Subscript) or (isinstance(expr, ast.Attribute) and expr.attr in _KEEPS_DTYPE):
            return self._tensor_dtype(expr.value, assigns, src, resolve, depth + 1)
        if isinstance(expr, ast.BinOp):
            return self._tensor_dtype(expr.left, assigns, src, resolve, depth + 1) \
                or self._tensor_dtype(expr.right, assigns, src, resolve, depth + 1)
        if not isinstance(expr, ast.Call):
            return None
        stated = next((k.value for k in expr.keywords if k.arg == "dtype"), None)
        if stated is not None:
            return _dtype_name(stated, assigns)
        func = expr.func
        if isinstance(func, ast.Attribute) and func.attr in _CASTS | _KEEPS_DTYPE:
            cast = _dtype_name(expr.args[0], assigns) if func.attr in _CASTS and expr.args else None
            return cast or self._tensor_dtype(func.value, assigns, src, resolve, depth + 1)
        name = dotted(func) or ""
        if name.rsplit(".", 1)[-1].endswith("Parameter"):
            # `Parameter(new)`, `ModelWeightParameter(data=new, ...)`: the tensor it wraps.
            data = expr.args[0] if expr.args else next((k.value for k in expr.keywords if k.arg == "data"), None)
            return self._tensor_dtype(data, assigns, src, resolve, depth + 1)
        target = resolve(name) if name else None
        if target and "." not in target:
            target = f"{src.module}.{target}"  # a function of the same module (`pack_mxfp6(w)`)
        got = self._function(target)
        if got is not None:
            _qualname, fn_src, fn = got
            fn_assigns, fn_resolve = _assignments(fn), self._resolver(fn_src, fn)
            for node in walk(fn):
                if isinstance(node, ast.Return) and node.value is not None:
                    found = self._tensor_dtype(node.value, fn_assigns, fn_src, fn_resolve, depth + 1)
                    if found is not None:
                        return found
            return None
        known = format_of_kernel(name.rsplit(".", 1)[-1])
        return known.container if known is not None else None


# Packages whose classes never define a quant method's hooks: a base from them is passed over.
_NO_HOOKS = frozenset({"abc", "typing", "typing_extensions", "builtins", "torch", "enum", "collections",
                       "dataclasses", "functools"})


def _hands_layer(call: ast.Call) -> bool:
    return any(isinstance(a, ast.Name) and a.id == "layer" for a in call.args) or \
        any(isinstance(k.value, ast.Name) and k.value.id == "layer" for k in call.keywords)


def _keeps_registered(after, kinds) -> bool:
    """Does an after-loading repack leave the very dtype every registered storage has? Then it
    changes nothing a rule reads (a block-quantized method that registers uint8 and replaces it by
    an empty uint8 placeholder on some layers only)."""
    return after is not None and after[0] == PACKED and bool(kinds) \
        and all(kind == PACKED and dtype == after[1] for kind, dtype, _evidence in kinds)


def _replacement(node: ast.AST) -> ast.expr | None:
    """The new tensor a statement registers as `weight`: `replace_parameter(layer, "weight", new)`,
    `layer.weight = new`, `layer.register_parameter("weight", new)`; None for any other node."""
    if isinstance(node, ast.Call) and (dotted(node.func) or "").rsplit(".", 1)[-1] == "replace_parameter" \
            and len(node.args) >= 3 and _const_str(node.args[1]) == "weight":
        return node.args[2]
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "register_parameter" \
            and len(node.args) >= 2 and _const_str(node.args[0]) == "weight":
        return node.args[1]
    if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Attribute) \
            and node.targets[0].attr == "weight" and isinstance(node.targets[0].value, ast.Name):
        return node.value
    return None


# Tensor methods and attributes whose result keeps the receiver's dtype.
_KEEPS_DTYPE = frozenset({"t", "T", "mT", "data", "contiguous", "transpose", "reshape", "permute", "clone", "detach",
                          "cuda", "cpu", "squeeze", "unsqueeze", "flatten", "narrow", "expand", "repeat", "flip",
                          "view_as", "requires_grad_", "pin_memory"})
# Tensor methods that take a dtype (`x.view(torch.int32)`, `x.to(torch.uint8)`, `x.type(torch.int8)`);
# given a shape or a device instead, they keep the receiver's.
_CASTS = frozenset({"view", "to", "type"})
# torch's dtype aliases a cast may spell.
_DTYPE_ALIASES = {"int": "int32", "long": "int64", "short": "int16", "half": "float16", "float": "float32",
                  "double": "float64", "bfloat": "bfloat16"}
_TORCH_DTYPE_NAMES = frozenset({*integer_dtypes(), *COMPUTE_DTYPE_NAMES, "int64", "bool", "float8_e4m3fn",
                                "float8_e4m3fnuz", "float8_e5m2", "float8_e5m2fnuz"})


def _dtype_name(expr: ast.expr | None, assigns: dict[str, ast.expr], depth: int = 0) -> str | None:
    """The torch dtype an expression names (`torch.uint8`, `torch.int`, a local bound to one)."""
    if expr is None or depth > 3:
        return None
    if isinstance(expr, ast.Name) and expr.id in assigns and assigns[expr.id] is not expr:
        return _dtype_name(assigns[expr.id], assigns, depth + 1)
    if not (isinstance(expr, ast.Attribute) and isinstance(expr.value, ast.Name) and expr.value.id == "torch"):
        return None
    name = _DTYPE_ALIASES.get(expr.attr, expr.attr)
    return name if name in _TORCH_DTYPE_NAMES else None


def _bound_classes(callee, call: ast.Call, resolve, is_method) -> dict[str, tuple[str, ...]]:
    """The callee's parameters bound to method classes by the call (`linear_method_cls=Int4LinearMethod`,
    or a table of roles `Linear=A if w4a16 else B, Moe=C`: each arm of a conditional)."""
    params = [a.arg for a in callee.args.posonlyargs + callee.args.args + callee.args.kwonlyargs]
    offset = 1 if params and params[0] in ("self", "cls") and isinstance(call.func, ast.Attribute) else 0
    out = {}
    positional = [a.arg for a in callee.args.posonlyargs + callee.args.args]
    pairs = [(positional[i + offset], a) for i, a in enumerate(call.args) if i + offset < len(positional)]
    pairs += [(k.arg, k.value) for k in call.keywords if k.arg in params]
    for name, arg in pairs:
        targets = tuple(resolve(dotted(arm)) for arm in _arms(arg) if isinstance(arm, (ast.Name, ast.Attribute)))
        if targets and len(targets) == len(_arms(arg)) and all(t and is_method(t) for t in targets):
            out[name] = targets
    return out


class _DispatchResolve:
    """`resolve(name)` in one function of a config's dispatch: a parameter the caller bound to
    method classes first (`bound`), else the module's name; with what the walk reads beside it
    (`feeds_return`, the names the function returns, and `flags`, its local flags, set after)."""

    __slots__ = ("plain", "bound", "feeds_return", "returned_names", "flags")

    def __init__(self, plain: Callable[[str | None], str | None], bound: dict[str, tuple[str, ...]],
                 feeds_return: bool, returned_names: set[str]):
        self.plain, self.bound = plain, bound
        self.feeds_return, self.returned_names = feeds_return, returned_names
        self.flags: dict[str, ast.expr] = {}

    def __call__(self, name: str | None) -> str | None:
        return self.bound[name][0] if name in self.bound else self.plain(name)


def _case_test(pattern, layer_param: str) -> ast.expr | None:
    """`isinstance(layer, (A, B))` for a case pattern of classes (`A()`, `A() | B()`, `A() as x`);
    None for a pattern that tests no type (`_`, a value)."""
    if isinstance(pattern, ast.MatchAs) and pattern.pattern is not None:
        return _case_test(pattern.pattern, layer_param)
    classes: list[ast.expr]
    if isinstance(pattern, ast.MatchClass):
        classes = [pattern.cls]
    elif isinstance(pattern, ast.MatchOr) and all(isinstance(p, ast.MatchClass) for p in pattern.patterns):
        classes = [p.cls for p in pattern.patterns if isinstance(p, ast.MatchClass)]  # all are (checked)
    else:
        return None
    test = ast.Call(func=ast.Name("isinstance", ast.Load()),
                    args=[ast.Name(layer_param, ast.Load()), ast.Tuple(classes, ast.Load())], keywords=[])
    return ast.copy_location(test, pattern)


def _feeds_return(stmt: ast.stmt, resolve) -> bool:
    """Does a call in `stmt` give the function its return value: the statement returns, or assigns
    a local the function returns by name (`method = pick(layer)` ... `return method`)?"""
    if not getattr(resolve, "feeds_return", True):
        return False
    if isinstance(stmt, ast.Return):
        return True
    targets = stmt.targets if isinstance(stmt, ast.Assign) else [stmt.target] if isinstance(stmt, ast.AnnAssign) \
        else []
    returned: set[str] = getattr(resolve, "returned_names", set())
    return any(isinstance(n, ast.Name) and n.id in returned for t in targets for n in ast.walk(t))


def _arms(expr: ast.expr) -> list[ast.expr]:
    """The values a conditional expression can take (`A if c else (B if d else C)`)."""
    if isinstance(expr, ast.IfExp):
        return _arms(expr.body) + _arms(expr.orelse)
    return [expr]


def _abstract(fn) -> bool:
    body = [s for s in fn.body if not (isinstance(s, ast.Expr) and isinstance(s.value, ast.Constant))]
    return not body or all(isinstance(s, (ast.Pass, ast.Raise)) for s in body)


def _terminates(body: list[ast.stmt]) -> bool:
    return bool(body) and isinstance(body[-1], (ast.Return, ast.Raise))


def _param_for(callee, call: ast.Call, layer_name: str) -> str | None:
    """The callee's parameter the call binds the layer to."""
    params = [a.arg for a in callee.args.posonlyargs + callee.args.args]
    offset = 1 if params and params[0] in ("self", "cls") and isinstance(call.func, ast.Attribute) else 0
    for i, arg in enumerate(call.args):
        if isinstance(arg, ast.Name) and arg.id == layer_name and i + offset < len(params):
            return params[i + offset]
    for k in call.keywords:
        if isinstance(k.value, ast.Name) and k.value.id == layer_name and k.arg:
            return k.arg
    return None


# Function node -> its assignments, while the node lives: an entry must not keep its function's
# tree alive, or a source dropped from SOURCES_KEPT (or a class's facts dropped from the index's
# caches) is kept here instead (vLLM 0.34.0: 1.2 MiB of trees held by 40 entries; a function
# parsed again is a new node, which a dropped one's entry never served).
_ASSIGNS: "weakref.WeakKeyDictionary[ast.AST, dict[str, ast.expr]]" = weakref.WeakKeyDictionary()


def _assignments(fn) -> dict[str, ast.expr]:
    """Local name → the last value assigned to it (good enough to follow a parameter's dtype)."""
    out = _ASSIGNS.get(fn)
    if out is None:
        out = _ASSIGNS[fn] = _compute_assignments(fn)
    return out


def _compute_assignments(fn) -> dict[str, ast.expr]:
    out: dict[str, ast.expr] = {}
    for node in walk(fn):
        if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name):
            out[node.targets[0].id] = node.value
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name) and node.value is not None:
            out[node.target.id] = node.value
    return out


def _makes_parameter(value: ast.expr, assigns) -> bool:
    text = ast.unparse(value)
    if isinstance(value, ast.Name) and value.id in assigns:
        text = ast.unparse(assigns[value.id])
    return "Parameter" in text or "torch.empty" in text or "torch.zeros" in text


def _const_str(node: ast.AST) -> str | None:
    return node.value if isinstance(node, ast.Constant) and isinstance(node.value, str) else None


def _short(qualname: str) -> str:
    return qualname.rsplit(".", 1)[-1]


def storage_evidence(storages: list[Storage], limit: int = 4) -> tuple[Evidence, ...]:
    """One evidence line per storage (its most specific line: where the storage is made)."""
    out = []
    seen = set()
    # One per backend first, then more of the same backends.
    firsts = {s.backend: s for s in reversed(storages)}
    ordered = ([s for s in storages if firsts.get(s.backend) is s]
               + [s for s in storages if firsts.get(s.backend) is not s])
    for s in ordered:
        if (s.backend, s.method) in seen:
            continue
        seen.add((s.backend, s.method))
        where = next((e for e in reversed(s.evidence) if e.path), None)
        out.append(Evidence(BACKEND_MARK + s.describe(), where.path if where else "", where.line if where else 0))
        if len(out) >= limit:
            break
    return tuple(out)


def summarize(storages: Iterable[Storage], want: str) -> list[Storage]:
    """The storages that make a site a finding: `want` "absent" (no `.weight`) or "non-compute"."""
    if want == ABSENT:
        return sorted((s for s in storages if s.kind == ABSENT), key=_order)
    return sorted((s for s in storages if s.non_compute), key=_order)


def _order(s: Storage) -> tuple:
    # What the code says for this layer type first; a table dispatch we could not read last.
    rank = {PACKED: 0, ABSENT: 1, FP8: 2, UNKNOWN: 3, COMPUTE: 4}
    # Total, so that the order never depends on a set's (per-process) iteration order.
    return (not s.typed, rank.get(s.kind, 5), s.backend, s.method, s.dtype, s.what,
            tuple((e.path, e.line, e.message) for e in s.evidence))
