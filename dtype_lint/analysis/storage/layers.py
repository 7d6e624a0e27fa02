"""What layer does this expression hold, and may a quantization backend repack its weight?

A reviewer answers in two steps, and so does this module:

1. **The class.** Follow the expression to the line that constructs it: `self`, annotated
   parameters, local assignments, attribute chains (`self.embed_vision.embedding_projection`),
   `@property` getters and argument-less methods that return a layer.
2. **The construction.** A class is a quantizable layer when its code, or a base's, obtains a
   quant method for itself or lets one create its weights (facts.ClassFacts.quant_root), or when
   configuration names it (for classes outside the scanned tree). An *instance* is quantized only
   if a quantization config may reach it: its config parameter (`quant_config`, or the preset's
   `config-params`) is followed through constructor parameters, positional or keyword, across
   files. Absent with a None default, literally None, or forwarded as None by its class
   (`super().__init__(..., quant_config=None)`): never quantized. So the same class can be a
   finding in one model and clean in another.

Every step is recorded as Evidence, shown with the finding.
"""

from __future__ import annotations

import ast
import copy
import dataclasses
import fnmatch
import re
from dataclasses import field
from pathlib import Path
from typing import TYPE_CHECKING

from dtype_lint.analysis.index.class_facts import (
    LAYER_PARAM,
    STORAGE_METHOD_DEFS,
    AttrOrigin,
    ClassFacts,
    ContainerItem,
    FunctionScope,
    LazyClasses,
    ProjectFacts,
    Signature,
    annotation_name,
    layer_params,
    local_call,
    storage_method_name,
)
from dtype_lint.analysis.index.class_index import dotted
from dtype_lint.analysis.index.construction_forms import (
    leaves,
    module_method_receiver,
    returns_receiver,
    spliced_local,
)
from dtype_lint.analysis.instance_patches import named_only
from dtype_lint.analysis.storage.stored_reads import PLAIN_DTYPE_ATTRIBUTES, may_store_weight
from dtype_lint.analysis.storage.verdicts import BACKEND_MARK, NON_COMPUTE, UNKNOWN_BACKENDS
from dtype_lint.core.findings import Evidence
from dtype_lint.core.records import record
from dtype_lint.dtypes.storage_format import ABSENT
from dtype_lint.ecosystems.registry import optional, plugins

if TYPE_CHECKING:
    from dtype_lint.analysis.storage.storage_model import StorageModel

__all__ = ["ABSENT", "NAMED", "NON_COMPUTE", "ConfigArgument", "Instance", "LayerResolver"]

NONE, SET, UNKNOWN = "none", "set", "unknown"
# The torch containers that register the modules put into them.
_MODULE_CONTAINERS = frozenset({"ModuleList", "ModuleDict", "Sequential"})
# What `nn.Module` resolves to: a value typed only as a module (a model state's `model: nn.Module`).
GENERIC_MODULES = frozenset({"torch.nn.Module", "torch.nn.modules.module.Module"})
GENERIC_STEP = "a value typed `nn.Module`, its"
# A model class attribute listing the only quantization configs it accepts (vLLM).
RESTRICTING_ATTR = "supported_quantization_configs"
_IDENTIFIER = re.compile(r"[^\W\d]\w*")  # a name in a text (a superset of those it resolves)
_RESTRICTING = re.compile(RESTRICTING_ATTR)  # a class whose text lacks it sets no such value


def _merge(a: str, b: str) -> str:
    if a == b:
        return a
    return SET if SET in (a, b) else UNKNOWN


@record(frozen=True)
class ConfigArgument:
    """How a construction passes a quantization config argument (`Instance.passed`).

    `named`: a keyword names it (`quant_config=...`), or the constructor's signature binds an
    argument to its config parameter. Not `named`: the class is one whose code is not read here, so
    no signature can be read, and only the number of positional arguments suggests a config
    (vLLM's layers take `quant_config` sixth at the earliest). Such a guess cannot make a finding
    high confidence; `call` (the class as the call names it) and `positionals` let its evidence
    say what is known."""

    named: bool = True
    call: str = ""
    positionals: int = 0


NAMED = ConfigArgument()


@record(frozen=True)
class Instance:
    """A layer expression resolved: its class, whether a config may reach it, and the states of
    its constructor's parameters (to follow the config into its own attributes)."""

    qualname: str | None
    config: str = UNKNOWN  # NONE: no config can reach it; SET: one is passed; UNKNOWN: cannot tell
    env: tuple[tuple[str, str], ...] = ()
    chain: tuple[Evidence, ...] = ()
    # Its construction passes a config argument (None: left to the default, or none); how it
    # is passed decides how sure a verdict resting on it can be (ConfigArgument).
    passed: ConfigArgument | None = None
    # The class of the `self` the expression starts from (a model class may restrict the configs
    # its layers can receive).
    origin: str | None = None
    # Known only from an annotation (`head: ParallelLMHead`): no construction site in view.
    annotated: bool = False

    def param(self, name: str) -> str:
        return dict(self.env).get(name, UNKNOWN)


@record
class _Context:
    """Where an argument expression is evaluated: a method of `owner` running on an instance."""

    params: frozenset[str]
    locals: dict[str, ast.expr] = field(default_factory=dict)
    env: dict[str, str] = field(default_factory=dict)
    param_attrs: dict[str, str] = field(default_factory=dict)  # self.X = param, in the owner
    # The module whose names the expressions use (None: the resolver's own file).
    module: str | None = None
    imports: dict[str, str] | None = None


class LayerResolver:
    """Resolve layer expressions inside one function of one file, with evidence."""

    def __init__(self, project: ProjectFacts, module: str, imports: dict[str, str], path: str,
                 config_params: tuple[str, ...] = ("quant_config",)):
        self.project = project
        self.index = project.index
        self.module = module
        self.imports = imports
        self.path = path
        self.config_params = tuple(config_params)

    # ---- step 1: the class -------------------------------------------------------------------
    def resolve(self, expr: ast.expr, scope: FunctionScope, depth: int = 0, this: Instance | None = None) -> Instance:
        """`this`: the instance `self` stands for (a getter resolved on a known instance)."""
        if depth > 10:
            return Instance(None)
        if isinstance(expr, ast.Name):
            if expr.id == scope.self_name and scope.class_qualname:
                return this or Instance(scope.class_qualname, origin=scope.class_qualname)
            if expr.id in scope.params:
                return self._annotated(expr.id, scope.params[expr.id], "parameter")
            if expr.id in scope.annotations:
                inst = self._annotated(expr.id, scope.annotations[expr.id], "local")
                if inst.qualname:
                    return inst
            values = scope.assigns.get(expr.id, [])
            if len(values) == 1 and values[0] is not None:
                inner = self.resolve(values[0], scope, depth + 1, this)
                if inner.qualname or inner.config == SET:
                    step = Evidence(f"`{expr.id} = {ast.unparse(values[0])}`", self.path, values[0].lineno)
                    return Instance(inner.qualname, inner.config, inner.env, (step, *inner.chain), inner.passed)
            return Instance(None)
        if isinstance(expr, (ast.IfExp, ast.NamedExpr)) or returns_receiver(expr):
            # `A(...).to(...)`, `(x := A(...))`, `A(...) if c else B(...)`: the arm that names a
            # class a config may reach (construction_forms.leaves)
            found = [self.resolve(leaf, scope, depth + 1, this) for leaf in leaves(expr)]
            return min(found, key=self._rank) if found else Instance(None)
        receiver = module_method_receiver(expr)
        if receiver is not None:
            # `layer.cuda()` with `layer = A(...)`: a module method hands back its module; on a
            # tensor (the receiver resolves to no class) it is an ordinary call, below
            owner = self.resolve(receiver, scope, depth + 1, this)
            if owner.qualname:
                return owner
        if isinstance(expr, ast.Call):
            if isinstance(expr.func, ast.Attribute) and not expr.args and not expr.keywords:
                owner = self.resolve(expr.func.value, scope, depth + 1, this)
                if owner.qualname:  # `x.get_input_embeddings()`: an argument-less getter
                    got = self._getter(owner, expr.func.attr, depth)
                    if got is not None:
                        return got
            name = dotted(expr.func)
            if name:
                cls = self.index.resolve(self.module, name, self.imports)
                ctx = _Context(frozenset(scope.params))
                inst = self.construct(expr, cls, ctx)
                return Instance(inst.qualname, inst.config, inst.env,
                                (Evidence(f"`{name}(...)` call", self.path, expr.lineno), *inst.chain), inst.passed)
            return Instance(None)
        if isinstance(expr, ast.Subscript):  # `self.mlp[0]` of an `nn.Sequential(...)` in a family's code
            for family in plugins("family"):
                item = optional(family, "family", "sequential_item")(self, expr, scope, depth, this)
                if item is not None:
                    return item
        if isinstance(expr, ast.Attribute):
            owner = self.resolve(expr.value, scope, depth + 1, this)
            if not owner.qualname:  # an unread attribute keeps the class of its `self` (as `attribute`)
                return Instance(None, origin=owner.origin)
            return self.attribute(owner, expr.attr, depth)
        if isinstance(expr, ast.Subscript) and isinstance(expr.value, ast.Attribute) \
                and (position := _literal_index(expr.slice)) is not None:
            # `self.mlp[0]`, `self.heads["k"]`: an element of a container built in the class
            # (`nn.Sequential(A(...), ...)`, or filled by `.append(A(...))` / `self.heads["k"] = A(...)`)
            owner = self.resolve(expr.value.value, scope, depth + 1, this)
            if owner.qualname:
                return self._container_item(owner, expr.value.attr, position)
        return Instance(None)

    def _container_item(self, owner: Instance, attr: str, index: int | str) -> Instance:
        """Element `index` of `owner.attr` when the class builds it as `nn.Sequential(A(...), B(...))`,
        `nn.ModuleList([A(...), ...])`, `nn.ModuleList([A(...) for ...])` or `nn.ModuleDict({"k": A(...)})`,
        and fills it after making it (`.append(A(...))`, `self.heads["k"] = A(...)`, class_facts.ContainerItem):
        the slot at that position when every slot before it is counted (a literal's, an `.append`
        outside a loop), else any slot that may stand there (from the first uncounted one on; all
        of them after an `.insert`); for a string key, the slots under it. Of several candidates,
        the one a quantizer may reach (`_rank`)."""
        qualname = owner.qualname
        found = self.project.attr_origins(qualname, attr) if qualname is not None else None
        if found is None or qualname is None:  # no slot is known: a fill needs the attribute too
            return Instance(None)
        where = found[0]
        literals = [made for made in (self._literal_slots(origin, attr, index, where) for origin in found[1])
                    if made is not None]
        filled: list[ContainerItem] = []
        filled_in = where
        # Only a module container registers what it is filled with: a layer appended to a plain
        # list (`self.layers = []`) is no submodule, and no quantizer replaces or loads it.
        registered = any(
            isinstance(origin.call, ast.Call) and (dotted(origin.call.func) or "").rsplit(".", 1)[-1]
            in _MODULE_CONTAINERS for origin in found[1])
        for cls in self.index.mro(qualname) if registered else ():
            facts = self.project.class_facts(cls)
            if facts and facts.items.get(attr):
                filled_in, filled = cls, facts.items[attr]
                break
        for slots in literals or [[]]:
            slots = slots + filled
            if isinstance(index, str):
                candidates = [slot for slot in slots if slot.key == index]
            else:
                candidates = _slots_at([slot for slot in slots if slot.key is None], index)
            fills = {id(slot) for slot in filled}
            made = [self._from_origin(origin, built_in, self._env_in(owner, built_in))
                    for slot in candidates for built_in in [filled_in if id(slot) in fills else where]
                    for origin in slot.origins]
            if made:
                best = min(made, key=self._rank)
                return Instance(best.qualname, best.config, best.env, best.chain, best.passed, owner.origin)
        return Instance(None)

    def _literal_slots(self, origin: AttrOrigin, attr: str, index: int | str,
                       where: str | None) -> list[ContainerItem] | None:
        """The slots a container literal makes (`nn.Sequential(A(...), ...)`, `nn.ModuleList([...])`,
        `nn.ModuleList([A(...) for ...])`: one uncounted slot, `nn.ModuleDict({"k": A(...)})`), None
        when `origin` builds none."""
        call = origin.call
        if not isinstance(call, ast.Call):  # no kind: none of the literals below
            return None
        kind = (dotted(call.func) or "").rsplit(".", 1)[-1]
        keys: list[str | None]
        counted = True
        if kind == "ModuleDict" and call.args and isinstance(call.args[0], ast.Dict):
            literal = call.args[0]
            keys = [key.value if isinstance(key, ast.Constant) and isinstance(key.value, str) else "" for key in
                    literal.keys]
            elements = literal.values
        elif kind == "Sequential":
            elements = call.args
        elif kind == "ModuleList" and call.args and isinstance(call.args[0], (ast.List, ast.Tuple)):
            elements = call.args[0].elts
        elif kind == "ModuleList" and call.args and isinstance(call.args[0], ast.ListComp):
            elements, counted = [call.args[0].elt], False  # every element is built the same way
        else:
            return None
        if kind == "Sequential" and elements and spliced_local(elements[-1], dict(origin.locals)):
            # `nn.Sequential(*layers)`, `layers` filled before: its items are the class's fills
            # (class_facts hands them to the attribute), after the literal's own slots
            elements = elements[:-1]
        if kind != "ModuleDict":
            keys = [None] * len(elements)
            if any(isinstance(element, ast.Starred) for element in elements):
                counted = False
        loc = self.index.class_location(where) if where else None
        facts = self.project.file_facts(loc[0].module) if loc else None
        slots = []
        for key, element in zip(keys, elements):
            built = local_call(origin, element)
            name = dotted(built.func) if built is not None else None
            origins: tuple[AttrOrigin, ...] = ()
            if name and facts is not None:
                cls = self.index.resolve(facts.module, name, facts.imports)
                shown = f"[{key!r}]" if key is not None else f"[{index!r}]"
                origins = (dataclasses.replace(origin, type_name=cls, call=built,
                                               how=f"`self.{attr}{shown}` is `{name}(...)` in "
                                                   f"`{origin.how.strip('`')}`"),)
            slots.append(ContainerItem(origins, key, counted))
        return slots

    def _annotated(self, name: str, annotation, what: str) -> Instance:
        ann = annotation_name(annotation)
        if not ann:
            return Instance(None)
        cls = self.index.resolve(self.module, ann, self.imports)
        return Instance(cls, UNKNOWN, (), (Evidence(f"{what} `{name}: {ann}`", self.path,
                                                     getattr(annotation, "lineno", 0)),), annotated=True)

    def attribute(self, owner: Instance, attr: str, depth: int = 0) -> Instance:
        if owner.qualname is None:  # callers resolve the owner first: an unknown class has no attributes
            return Instance(None, origin=owner.origin)
        found = self.project.attr_origins(owner.qualname, attr)
        if found is None:
            got = self._getter(owner, attr, depth)
            if got is None:
                got = self._attribute_alias(owner, attr, depth)
            if got is None and owner.qualname in GENERIC_MODULES:
                got = self._generic_module_attribute(owner, attr, depth)
            if got is None:
                got = self._outside_attribute(owner, attr)
            # unread, it keeps the class of its `self`: a family may still speak for a layer of a
            # class it knows outside the tree
            return got if got is not None else Instance(None, origin=owner.origin)
        where, origins = found
        env = self._env_in(owner, where)
        best: Instance | None = None
        for origin in origins:
            inst = self._from_origin(origin, where, env)
            if best is None or self._rank(inst) < self._rank(best):
                best = inst
        if best is None:
            return Instance(None)
        # How a value typed only `nn.Module` was resolved stays in view down the chain.
        carried = tuple(step for step in owner.chain if step.message.startswith(GENERIC_STEP))
        return Instance(best.qualname, best.config, best.env, (*carried, *best.chain), best.passed, owner.origin)

    def _attribute_alias(self, owner: Instance, attr: str, depth: int) -> Instance | None:
        """`self.<attr> = self.a.b` in the class (or a base), every value it stores there the same
        chain: a layer kept under a second name (`self.head = self.proj`) is the layer the chain
        holds, resolved on the same instance."""
        if depth > 6 or owner.qualname is None:  # (callers resolve the owner first)
            return None
        for ancestor in self.index.mro(owner.qualname):
            class_facts = self.project.class_facts(ancestor)
            if class_facts is None or attr not in class_facts.assigned:
                continue
            values = class_facts.assigned[attr]
            if not all(isinstance(value, ast.Attribute) and _rooted_at_self(value) for value in values) \
                    or len({ast.dump(value) for value in values}) != 1:
                return None
            location = self.index.class_location(ancestor)
            facts = self.project.file_facts(location[0].module) if location else None
            if facts is None:
                return None
            sub = LayerResolver(self.project, facts.module, facts.imports, facts.path, self.config_params)
            scope = FunctionScope(None, ancestor)
            scope.self_name = "self"
            inst = sub.resolve(values[0], scope, depth + 1, this=owner)
            if inst.qualname is None:
                return None
            step = Evidence(f"`self.{attr} = {ast.unparse(values[0])}`", facts.path, values[0].lineno)
            return Instance(inst.qualname, inst.config, inst.env, (step, *inst.chain), inst.passed, owner.origin)
        return None

    def _outside_attribute(self, owner: Instance, attr: str) -> Instance | None:
        """`self.<attr>` built by an ancestor outside the tree that a family's shipped list
        records (transformers' `MistralAttention` builds `k_proj` as `nn.Linear`)."""
        for family in plugins("family"):
            found = optional(family, "family", "outside_attribute")(self.index, owner.qualname, attr)
            if found is not None:
                qualname, step = found
                return Instance(qualname, UNKNOWN, (), (step,), None, owner.origin)
        return None

    def _generic_module_attribute(self, owner: Instance, attr: str, depth: int) -> Instance | None:
        """`attr` of a value typed only `nn.Module` (vLLM's model state: `model: nn.Module`, then
        `self.model.model.embed_tokens`): the class of this file that assigns `self.<attr>` from a
        construction, when exactly one module class of the file does (else None: which model the
        state holds is not in view). The file is where the state and its model are written
        together; a class of another file is never guessed."""
        facts = self.project.file_facts(self.module)
        if facts is None or depth > 6:
            return None
        holders = [qualname for qualname, class_facts in facts.classes.items()
                   if any(origin.kind == "call" for origin in class_facts.attrs.get(attr, ()))
                   and any(base in GENERIC_MODULES for base in self.index.mro(qualname))]
        if len(holders) != 1:
            return None
        inst = self.attribute(Instance(holders[0], origin=holders[0]), attr, depth + 1)
        if not inst.qualname:
            return None
        built = next(origin for origin in facts.classes[holders[0]].attrs[attr] if origin.kind == "call")
        step = Evidence(f"{GENERIC_STEP} `.{attr}`: `{holders[0].rsplit('.', 1)[-1]}` is the only "
                        f"module class of this file that builds `self.{attr}`", built.path, built.line)
        return Instance(inst.qualname, inst.config, inst.env, (step, *inst.chain), inst.passed, owner.origin)

    def _rank(self, inst: Instance) -> tuple:
        # Prefer an origin that names a class, then one a config may reach, then (of origins
        # alike so far) a layer class: `nn.Identity() if c else nn.Linear(...)` is the arm a
        # quantizer can reach, whichever comes first.
        return (inst.qualname is None, inst.config == NONE, inst.config != SET,
                not (inst.passed is not None or self._layer_class(inst.qualname)))

    def _layer_class(self, qualname: str | None) -> bool:
        """A class a quantizer may reach: a torch layer a Hugging Face quantizer replaces (or a
        subclass), a configured quantizable class, or one with a quant root in the project."""
        if not qualname:
            return False
        mro = self.index.mro(qualname)
        return any(optional(family, "family", "layer_kind")(mro) is not None for family in plugins("family")) \
            or self.index.quantizable_verdict(qualname).yes \
            or self.quant_root(qualname) is not None

    def _getter(self, owner: Instance, name: str, depth: int) -> Instance | None:
        got = self.project.getter(owner.qualname, name) if owner.qualname is not None else None
        if got is None:
            return None
        where, expr = got
        class_facts = self.project.class_facts(where)
        location = self.index.class_location(where)  # found when its class facts are
        facts = self.project.file_facts(location[0].module) if class_facts and location else None
        if facts is None:
            return None
        sub = LayerResolver(self.project, facts.module, facts.imports, facts.path, self.config_params)
        scope = FunctionScope(None, where)
        scope.self_name = "self"
        inst = sub.resolve(expr, scope, depth + 1, this=owner)
        if inst.qualname is None:
            return None
        step = Evidence(f"`{name}` returns `{ast.unparse(expr)}`", facts.path, expr.lineno)
        return Instance(inst.qualname, inst.config, inst.env, (step, *inst.chain), inst.passed)

    def dtype_getter(self, expr: ast.AST, scope: FunctionScope) -> tuple[ast.expr, Evidence] | None:
        """`R.name` or `R.name()` where `name` (a name holding `dtype`) is a property (or an
        argument-less method) of R's class returning one of its layers' `.weight.dtype`
        (`context_dtype` returning `self.context_proj.weight.dtype`): (that layer as seen from
        here, `R.context_proj`, and where the getter returns it), else None. A getter named `dtype` is reported where it
        returns (DTL001), so it is not followed to its callers too."""
        from dtype_lint.analysis.flow.recognisers import weight_dtype_source

        if isinstance(expr, ast.Call) and (expr.args or expr.keywords):
            return None
        node = expr.func if isinstance(expr, ast.Call) else expr
        # A getter named for a dtype (`context_dtype`, `_dtype`): `dtype` itself is reported where it returns.
        if not isinstance(node, ast.Attribute) or node.attr in PLAIN_DTYPE_ATTRIBUTES or "dtype" not in node.attr:
            return None
        owner = self.resolve(node.value, scope)
        if not owner.qualname:
            return None
        got = self.project.getter(owner.qualname, node.attr)
        if got is None:
            return None
        where, returned = got
        source = weight_dtype_source(returned, None)
        if source is None or not _rooted_at_self(source.layer):
            return None
        location = self.index.class_location(where)
        facts = self.project.file_facts(location[0].module) if location else None
        if facts is None:
            return None

        layer = _SelfAs(node.value).visit(copy.deepcopy(source.layer))
        ast.copy_location(layer, node)
        return layer, Evidence(f"`{node.attr}` returns `{ast.unparse(returned)}`", facts.path, returned.lineno)

    def stored_dtype(self, expr: ast.AST, scope: FunctionScope) -> tuple[ast.expr, Evidence] | None:
        """`R.name` where R's class (or a base) stores `self.name = self.<layer>.weight.dtype` in a
        method (`self.dtype = self.projector.linear_1.weight.dtype` in `__init__`), and every
        value it stores there is that layer's: (that layer as seen from here, `R.projector.linear_1`,
        and where it is stored), else None. The `@property` form is `dtype_getter`'s; this is
        the same value flow through an attribute, within one class (`self.dtype`) or across
        classes (`self.vision_tower.dtype`, the tower's class resolved from its construction)."""
        if isinstance(expr, ast.Attribute) and expr.attr == "dtype" and isinstance(expr.value, ast.Attribute):
            kept = self._stored(expr.value, scope, weight=True)  # `self.w = self.proj.weight`, read as `R.w.dtype`
            if kept is not None:
                return kept
        if not isinstance(expr, ast.Attribute) or "dtype" not in expr.attr:
            return None
        return self._stored(expr, scope, weight=False)

    def _stored(self, expr: ast.Attribute, scope: FunctionScope, weight: bool) -> tuple[ast.expr, Evidence] | None:
        """`stored_dtype` for `R.name` holding a layer's weight dtype, or (`weight`) the weight itself."""
        from dtype_lint.analysis.flow.recognisers import WeightDtypeSource, weight_dtype_source, weight_expr

        owner = self.resolve(expr.value, scope)
        if not owner.qualname:
            return None
        mro = self.index.mro(owner.qualname)
        if not self._may_store_weight(mro, expr.attr):
            return None
        stored: list[ast.expr] = []
        holder = None
        for ancestor in mro:
            class_facts = self.project.class_facts(ancestor)
            if class_facts is None:
                continue
            if expr.attr in class_facts.getters:
                return None  # a getter: dtype_getter's question
            if expr.attr in class_facts.assigned:
                stored, holder = class_facts.assigned[expr.attr], ancestor
                break
        if weight:
            kept = [weight_expr(value, None) for value in stored]
            sources = [WeightDtypeSource(k[0], k[1]) if k is not None and k[1] in ("attribute", "getattr") else None
                       for k in kept]
        else:
            sources = [weight_dtype_source(value, None) for value in stored]
        # An adapter stores the `base_layer` it is handed as `self.base_layer` (the `adapter` role);
        # with no source there is nothing to ask it, and its modules are not imported.
        for adapter in plugins("adapter") if sources else ():
            sources = [adapter.as_stored_base_layer(s) for s in sources]
        present = [s for s in sources if s is not None]
        if not sources or len(present) != len(sources) or any(not _rooted_at_self(s.layer) for s in present) \
                or len({ast.dump(s.layer) for s in present}) != 1:
            return None
        location = self.index.class_location(holder) if holder else None
        facts = self.project.file_facts(location[0].module) if location else None
        if facts is None:
            return None

        layer = _SelfAs(expr.value).visit(copy.deepcopy(present[0].layer))
        ast.copy_location(layer, expr)
        value = stored[0]
        what = "the weight" if weight else "the storage dtype"
        return layer, Evidence(f"`self.{expr.attr} = {ast.unparse(value)}` stores {what}", facts.path, value.lineno)

    def _may_store_weight(self, mro: list[str], name: str) -> bool:
        """stored_reads.may_store_weight: on vLLM 0.34.0 most casts to `self.<x>.dtype` name a
        layer class that stores no dtype; parsing each such class and its bases to find out was
        a tenth of a cold check."""
        return may_store_weight(self.index, mro, name)

    def _from_origin(self, origin: AttrOrigin, where: str, env: dict[str, str]) -> Instance:
        step = Evidence(origin.how, origin.path, origin.line)
        if origin.kind != "call" or origin.call is None:
            return Instance(origin.type_name, UNKNOWN, (), (step,))
        class_facts = self.project.class_facts(where)
        in_init = origin.method == "__init__"
        loc = self.index.class_location(where)
        facts = self.project.file_facts(loc[0].module) if loc else None
        ctx = _Context(origin.method_params, dict(origin.locals), env if in_init else {},
                       class_facts.param_attrs if class_facts else {}, facts.module if facts else None,
                       facts.imports if facts else None)
        inst = self.construct(origin.call, origin.type_name, ctx)
        extra = {NONE: " without a quantization config", SET: " with a quantization config"}.get(inst.config, "")
        step = Evidence(origin.how + extra, origin.path, origin.line)
        return Instance(inst.qualname, inst.config, inst.env, (step, *inst.chain), inst.passed)

    # ---- step 2: the construction --------------------------------------------------------------
    def construct(self, call: ast.Call, cls: str | None, ctx: _Context) -> Instance:
        """The instance `cls(...)` builds, with the state of its config and of every parameter."""
        init = self.project.init_of(cls) if cls else None
        if init is None:
            config, passed = self._config_without_signature(call, ctx)
            return Instance(cls, config, passed=passed)
        _where, sig = init
        env = {}
        bound = sig.bind(call, self._spread_keys(call, ctx))
        for name, arg in bound.items():
            if arg == "default":
                env[name] = self._default_state(sig, name)
            elif isinstance(arg, str):  # "unknown", the only other word bind() gives
                env[name] = UNKNOWN
            else:
                env[name] = self.state(arg, ctx)
        named = any(not isinstance(bound.get(p, "default"), str) for p in self.config_params) or any(
            kw.arg in self.config_params for kw in call.keywords)
        return Instance(cls, self._config_of(sig, call, env, ctx), tuple(sorted(env.items())),
                        passed=NAMED if named else None)

    def _spread_keys(self, call: ast.Call, ctx: _Context) -> set[str] | None:
        """The keys of every `**mapping` in the call, when each is a dict literal, a local bound to
        one, or a call of a project function whose every `return` is one (sglang's
        `**get_embedding_tp_kwargs()`); None when any is unknown."""
        keys: set[str] = set()
        for keyword in call.keywords:
            if keyword.arg is not None:
                continue
            found = self._dict_keys(keyword.value, ctx)
            if found is None:
                return None
            keys |= found
        return keys

    def _dict_keys(self, expr: ast.expr, ctx: _Context, depth: int = 0) -> set[str] | None:
        if depth > 3:
            return None
        if isinstance(expr, ast.Dict):
            if any(k is None or not (isinstance(k, ast.Constant) and isinstance(k.value, str)) for k in expr.keys):
                return None
            return {k.value for k in expr.keys if isinstance(k, ast.Constant) and isinstance(k.value, str)}  # all
        if isinstance(expr, ast.Call) and dotted(expr.func) == "dict" and not expr.args:
            return None if any(k.arg is None for k in expr.keywords) else \
                {k.arg for k in expr.keywords if k.arg is not None}  # all are (checked)
        if isinstance(expr, ast.Name) and expr.id in ctx.locals:
            return self._dict_keys(ctx.locals[expr.id], ctx, depth + 1)
        if isinstance(expr, ast.Call) and not expr.args and not expr.keywords and (func_name := dotted(expr.func)):
            module = ctx.module if ctx.module is not None else self.module
            imports = ctx.imports if ctx.imports is not None else self.imports
            target = self.index.resolve(module, func_name, imports)
            mod, _, name = target.rpartition(".")
            found = self.project.function(mod, name)
            if found is None:
                return None
            returns = [n.value for n in ast.walk(found[1]) if isinstance(n, ast.Return)]
            if not returns or any(r is None for r in returns):
                return None
            keys: set[str] = set()
            for r in (r for r in returns if r is not None):  # all are (checked above)
                got = self._dict_keys(r, _Context(frozenset()), depth + 1)
                if got is None:
                    return None
                keys |= got
            return keys
        return None

    def _config_of(self, sig: Signature, call: ast.Call, env: dict[str, str], ctx: _Context) -> str:
        """NONE also when the constructor has no config parameter and no **kwargs to carry one."""
        for config_param in self.config_params:
            if sig.has(config_param):
                return env[config_param]
        for keyword in call.keywords:  # a config passed through **kwargs
            if keyword.arg in self.config_params:
                return self.state(keyword.value, ctx)
        return UNKNOWN if sig.varkw or sig.varargs else NONE

    def _config_without_signature(self, call: ast.Call, ctx: _Context) -> tuple[str, ConfigArgument | None]:
        """(state, passed) for a class whose code we cannot see (not in the scanned tree): the
        config keyword decides; vLLM-style layers take `quant_config` sixth at the earliest, so
        fewer positionals mean none, and 6 or more only may hold one (a guess: not `named`)."""
        for keyword in call.keywords:
            if keyword.arg in self.config_params:
                return self.state(keyword.value, ctx), NAMED
        if any(kw.arg is None for kw in call.keywords) or any(isinstance(a, ast.Starred) for a in call.args):
            return UNKNOWN, None
        if len(call.args) < 6:
            return NONE, None
        return UNKNOWN, ConfigArgument(named=False, call=dotted(call.func) or ast.unparse(call.func),
                                       positionals=len(call.args))

    @staticmethod
    def _default_state(sig: Signature, name: str) -> str:
        default = sig.defaults.get(name)
        if default is None:
            return UNKNOWN  # a required parameter the call did not bind: it cannot be called so
        if isinstance(default, ast.Constant) and default.value is None:
            return NONE
        return SET

    def state(self, expr: ast.expr, ctx: _Context, depth: int = 0) -> str:
        """May this argument be a config (SET), is it surely None (NONE), or unknown?"""
        if depth > 6:
            return UNKNOWN
        if isinstance(expr, ast.Constant):
            return NONE if expr.value is None else SET
        if isinstance(expr, ast.IfExp):
            return _merge(self.state(expr.body, ctx, depth + 1), self.state(expr.orelse, ctx, depth + 1))
        if isinstance(expr, ast.BoolOp) and isinstance(expr.op, ast.Or):
            states = [self.state(v, ctx, depth + 1) for v in expr.values]
            return NONE if all(s == NONE for s in states) else (SET if SET in states else UNKNOWN)
        if isinstance(expr, ast.Name):
            if expr.id in ctx.params:
                return ctx.env.get(expr.id, UNKNOWN)
            if expr.id in ctx.locals:
                return self.state(ctx.locals[expr.id], ctx, depth + 1)
            return UNKNOWN
        if isinstance(expr, ast.Attribute) and isinstance(expr.value, ast.Name) and expr.value.id == "self" \
                and expr.attr in ctx.param_attrs:
            return ctx.env.get(ctx.param_attrs[expr.attr], UNKNOWN)
        return SET

    def _env_in(self, inst: Instance, where: str) -> dict[str, str]:
        """The states of `where.__init__`'s parameters for this instance, `where` being its class
        or a base reached through `super().__init__(...)` calls."""
        env = dict(inst.env)
        cur = inst.qualname
        for _ in range(16):
            if cur == where:
                return env
            if cur is None:  # an unresolved instance: no constructor to read
                return {}
            class_facts = self.project.class_facts(cur)
            bases = self.index.bases(cur)
            if not bases:
                return {}
            nxt = bases[0]
            if class_facts is None:
                return {}
            if class_facts.init is None:
                cur = nxt  # inherited __init__: same parameters
                continue
            if class_facts.super_init is None:
                return {}
            target = self.project.init_of(nxt)
            if target is None:
                return {}
            call = class_facts.super_init
            if not (isinstance(call.func.value, ast.Call)):  # `Base.__init__(self, ...)`
                call = ast.Call(call.func, call.args[1:], call.keywords)
            ctx = _Context(frozenset(class_facts.init.positional + class_facts.init.kwonly), {}, env,
                           class_facts.param_attrs)
            new = {}
            for name, arg in target[1].bind(call).items():
                new[name] = (self._default_state(target[1], name) if arg == "default" else
                             UNKNOWN if isinstance(arg, str) else self.state(arg, ctx))  # str: "unknown"
            env, cur = new, nxt
        return {}

    # ---- the verdict ----------------------------------------------------------------------------
    def quantizable(self, inst: Instance, expr_text: str, name_patterns: list[str] | None,
                    need: str = NON_COMPUTE) -> tuple[str, tuple[Evidence, ...]] | None:
        """("high"|"low", evidence) when the layer may hold a repacked weight, else None.
        `need`: the storage that makes the site a finding, NON_COMPUTE (a packed, fp8 or missing
        `weight`: casts, allocations) or ABSENT (no `weight` at all: an unguarded read); when the
        storage model knows the layer's backends and none of them gives it such a storage, None."""
        # An ecosystem's family first (ecosystems/registry.py): Hugging Face quantizers replace torch
        # layers at load time, and no config reaches a constructor. A family's "no" (an empty
        # verdict) is final; None leaves the layer to the storage model below.
        for family in plugins("family"):
            decided = family.verdict(self, inst, expr_text)
            if decided is not None:
                return decided or None
        if inst.config == NONE:
            return None
        if not inst.qualname and need == NON_COMPUTE and expr_text != "self" \
                and (class_name := named_only(inst.origin)) is not None:
            return self._named_only(class_name, expr_text)
        q = inst.qualname
        if q:
            if self.index.not_quantizable(q):
                return None
            root = self.quant_root(q)
            if root is not None:
                root_class, evidence = root
                if self._config_reaching(inst, root_class) == NONE or self._excluded_by_model(inst):
                    return None
                if inst.annotated and self._family_never_quantizes(q):
                    return None
                storage = self.storage_evidence(q, need)
                if storage is None:
                    return self._undispatched(q, inst.chain + evidence)
                return "high", inst.chain + evidence + storage
            if self.index.class_location(q) is not None:
                return None  # a class of the scanned tree outside every quantizable hierarchy
        if inst.config == SET or (inst.passed is not None and inst.config == UNKNOWN):
            storage = self.storage_evidence(q, need) if q else ()
            if storage is None:
                return None
            if inst.config != SET and inst.passed is not None and not inst.passed.named:
                return self._counted_config(inst.passed, inst.chain, storage)
            return "high", inst.chain + (storage or (Evidence(
                "constructed with a quantization config: its quant method may repack `.weight`", "", 0),))
        if name_patterns and not q:
            last = expr_text.rsplit(".", 1)[-1]
            if any(fnmatch.fnmatch(last, p) for p in name_patterns):
                named = (Evidence(f"name `{last}` looks like a projection layer; its class did not resolve", "", 0),)
                for family in plugins("family"):  # the family whose code this is speaks for it (optional role)
                    decided = getattr(family, "named_verdict", lambda *_: None)(self, expr_text, named)
                    if decided is not None:
                        return decided
                return "low", named
        return None

    @property
    def storage_model(self) -> StorageModel:
        model = getattr(self, "_storage_model", None)
        if model is None:
            # The catalogue (and the engine sources it chooses from) only where a storage is
            # computed: a run whose storages all come from the kept answers never imports it.
            from dtype_lint.analysis.storage.catalogue import default_model

            model = self._storage_model = default_model(self.project, self.config_params)
        return model

    def _named_only(self, class_name: str, expr_text: str) -> tuple[str, tuple[Evidence, ...]]:
        """A layer of `self` in a function bound onto the instances of a class known only by its
        name's string (analysis/instance_patches.py), a class this file neither defines nor
        imports: which layer it is, and so which backends reach it, cannot be told. Never fail
        open: low confidence, the reason in the evidence (and, through BACKEND_MARK, in the
        message); no helper is proven on it, so no fix (RuleContext.fixes_for)."""
        attrs = expr_text.split(".", 1)[-1]
        return "low", (Evidence(f"{BACKEND_MARK}{UNKNOWN_BACKENDS}: `self` is an instance of `{class_name}`, "
                                f"matched by its class name only, a class this file neither defines nor imports, "
                                f"so its `{attrs}` is not read here", "", 0),)

    def _counted_config(self, passed: ConfigArgument, chain: tuple[Evidence, ...],
                        storage: tuple[Evidence, ...]) -> tuple[str, tuple[Evidence, ...]]:
        """A class whose code is not read here, built with 6 or more positional arguments and no
        keyword naming a config: whether a config reaches it, and so whether any backend does,
        cannot be told (torch's `cls._FLOAT_CONV_MODULE(...)` takes 9 and no config at all). Never
        fail open, never overstate: low confidence, with what is known in the evidence. Where the
        storage model knows the class's backends, they stay in the evidence (and the message);
        where it does not, BACKEND_MARK says so, and no helper is proven on the layer, so no fix
        (RuleContext.fixes_for)."""
        # No "; " in it: a message splits the backends it names there (verdicts.why_storage).
        told = (f"`{passed.call}(...)` names a class whose code is not read here, called with "
                f"{passed.positionals} positional arguments that may carry a quantization config (no keyword "
                f"names one)")
        if storage:
            return "low", chain + (Evidence(told, "", 0), *storage)
        return "low", chain + (Evidence(f"{BACKEND_MARK}{UNKNOWN_BACKENDS}: {told}", "", 0),)

    def _undispatched(self, qualname: str, chain: tuple[Evidence, ...]):
        """Never fail open: a quantizable layer whose backends the model could not read (not one
        that reads them and finds none that repacks) is reported with low confidence, the
        reason in its evidence (and, through BACKEND_MARK, in its message)."""
        found = self.storage_model.undispatched(qualname)
        if found is None:
            return None
        why, where = found
        return "low", chain + (Evidence(BACKEND_MARK + why, where.path, where.line),)

    def storage_evidence(self, qualname: str, need: str) -> tuple[Evidence, ...] | None:
        """The storages that make a site on an instance of this class a finding, as evidence
        (`()` when the model does not know the class's backends); None when the model knows them
        and none gives such a storage."""
        relevant = self.storage_model.find(qualname, need)
        if relevant is None:
            return ()
        if not relevant:
            return None
        from dtype_lint.analysis.storage.storage_model import storage_evidence  # imported by the model above

        # Narrowed to the backends the project's platforms admit: the evidence says which platform.
        narrowed = self.storage_model.narrowed_by(qualname)
        return storage_evidence(relevant) + ((narrowed,) if narrowed is not None else ())

    def _excluded_by_model(self, inst: Instance) -> bool:
        """The model class the expression starts from admits only some quantization configs
        (`supported_quantization_configs = (QuarkConfig,)`), and none of them handles this layer's
        type: each config's methods test layer types (`isinstance(layer, LinearBase)`), and none of
        those is in the layer's MRO."""
        if not inst.origin or not inst.qualname:
            return False
        for ancestor in self.index.mro(inst.origin):
            if not self.project.may_hold(ancestor, _RESTRICTING):
                continue  # its text never names the attribute: no class-level value of it
            class_facts = self.project.class_facts(ancestor)
            value = class_facts.class_values.get(RESTRICTING_ATTR) if class_facts else None
            if value is None:
                continue
            names = value.elts if isinstance(value, (ast.Tuple, ast.List)) else [value]
            loc = self.index.class_location(ancestor)
            facts = self.project.file_facts(loc[0].module) if loc else None
            if facts is None:
                return False
            layer_mro = set(self.index.mro(inst.qualname))
            for n in names:
                name = dotted(n)
                if not name:
                    return False
                handled: set[str] = set()
                config = self.index.resolve(facts.module, name, facts.imports)
                for config_base in self.index.mro(config):
                    ccf = self.project.class_facts(config_base)
                    if ccf is None and config_base == config:
                        return False  # a config we cannot read: it may handle anything
                    if ccf is not None:
                        handled |= ccf.dispatch
                if handled & layer_mro:
                    return False
            return True
        return False

    def _family_never_quantizes(self, qualname: str) -> bool:
        """A layer known only from an annotation, in a model family's package (the folder under a
        `models` folder: vLLM's `vllm/models/deepseek_v41/`): every construction of that class, or a
        subclass, in the family's own files passes no config. None found: the annotation stands."""
        parts = Path(self.path).parts
        if "models" not in parts[:-1]:
            return False
        i = len(parts) - 2 - parts[:-1][::-1].index("models")
        if i + 1 >= len(parts) - 1:
            return False  # the file sits directly in `models/`: no family folder
        family = Path(*parts[: i + 2])
        # Shared by every file analysed against this index; what the census read (the family's
        # files) counts as read by each of them.
        return self.index.cached_facts(("family census", str(family), qualname),
                                       lambda: self._census(family, qualname))

    def _census(self, family: Path, qualname: str) -> bool:
        found = False
        for module, header in self.index.modules.under(family):
            if not any(c for c in header.classes):
                continue
            facts = self.project.file_facts(module, keep=False)  # read once: not kept (ProjectFacts.file_facts)
            if facts is None:
                continue
            classes = facts.classes
            unparsed = classes.unparsed_text if isinstance(classes, LazyClasses) else None
            may_name, naming = self._may_name(module, header, facts.imports, qualname)
            for class_qualname in classes:
                text = unparsed(class_qualname) if unparsed is not None else None
                # Only the words `may_name` can answer yes for are asked: a set intersection, not a
                # call for each of a class's words (15,400 for vLLM 0.34.0's deepseek_v41 family).
                if text is not None and not any(may_name(word) for word in naming.intersection(
                        _IDENTIFIER.findall(text))):
                    continue  # it names no such class: it constructs none (not parsed, not walked)
                class_facts = classes[class_qualname]
                for origins in class_facts.attrs.values():
                    for origin in origins:
                        if origin.kind != "call" or not origin.type_name or \
                                qualname not in self.index.mro(origin.type_name):
                            continue
                        found = True
                        if self._from_origin(origin, class_facts.qualname, {}).config != NONE:
                            return False
        return found

    def _may_name(self, module: str, header, imports: dict[str, str], qualname: str):
        """word -> can that name, used in `module`, construct `qualname` or a subclass, as
        `QuantizableLayerIndex.resolve` reads it? A class the module defines or imports that is
        one (or an engine's class outside the project that is `qualname` itself); a module it
        imports that holds `qualname` or is the project's (`mod.Head(...)`), or a class with nested
        classes (`Outer.Inner(...)`); a top-level package (a dotted name whose head the module
        does not bind resolves from there). A class whose text holds no such word has no
        construction the census counts: its methods need not be parsed and walked. Only the words
        a class's text holds are resolved (vLLM 0.34.0: 0.2 G of a 29 G cold check).
        Returned with the words it may answer yes for (a superset): those of the module's classes,
        its imports, and the top-level packages; it answers no for any other word."""
        index = self.index
        tops = index.modules.top_names() | {qualname.split(".", 1)[0]}
        naming = frozenset(tops.union(header.classes, imports))
        known: dict[str, bool] = {}

        def may_name(word: str) -> bool:
            verdict = known.get(word)
            if verdict is None:
                if word in header.classes and word not in imports:
                    verdict = qualname in index.mro(f"{module}.{word}")
                elif word in imports:
                    target = index.canonical(imports[word])
                    where = index.class_location(target)
                    verdict = qualname in index.mro(target) or qualname.startswith(f"{target}.") or \
                        (bool(where[0].nested) if where is not None else index.modules.get(target) is not None)
                else:
                    verdict = word in tops
                known[word] = verdict
            return verdict
        return may_name, naming

    def quant_root(self, qualname: str) -> tuple[str, tuple[Evidence, ...]] | None:
        """(the nearest class in the MRO that makes it quantizable, the evidence chain) or None:
        a class whose own code obtains a quant method for itself, or one configuration names."""
        mro = self.index.mro(qualname)
        for i, ancestor in enumerate(mro):
            class_facts = self.project.class_facts(ancestor)
            why = None
            if class_facts is not None and class_facts.quant_root is not None:  # what the code says comes first
                root = class_facts.quant_root
                why = Evidence(f"`{_short(ancestor)}`: {root.message}", root.path, root.line)
            why = why or self.index.configured(ancestor)
            if why is not None:
                chain = [self._subclass_step(mro[j], mro[j + 1]) for j in range(i)] if i else []
                return ancestor, (*chain, why)
        return None

    def _subclass_step(self, sub: str, base: str) -> Evidence:
        loc = self.index.class_location(sub)
        path, line = (loc[0].path, loc[0].classes[loc[1]][1]) if loc else ("", 0)
        return Evidence(f"`{_short(sub)}` subclasses `{_short(base)}`", path, line)

    def _config_reaching(self, inst: Instance, root: str) -> str:
        """The config state at the quant root's constructor: NONE when a class between the
        instance and the root forwards `quant_config=None` (vLLM's GateLinear)."""
        if inst.qualname == root:
            return inst.config
        env = self._env_in(inst, root)
        states = [env[p] for p in self.config_params if p in env]
        if not states and inst.qualname is not None:  # (callers pass a resolved instance)
            return self._forwards_none(inst.qualname, root)
        return states[0] if states else UNKNOWN

    def _forwards_none(self, qualname: str, root: str) -> str:
        """Without construction facts: does any class on the way to the root pass a literal None?"""
        for ancestor in self.index.mro(qualname):
            if ancestor == root:
                return UNKNOWN
            class_facts = self.project.class_facts(ancestor)
            if class_facts is not None and class_facts.super_init is not None:
                for keyword in class_facts.super_init.keywords:
                    if keyword.arg in self.config_params and isinstance(keyword.value, ast.Constant) \
                            and keyword.value.value is None:
                        return NONE
        return UNKNOWN

    def storage_code(self, qualname: str) -> Evidence | None:
        """Evidence that the class is storage-format code (a quant method or weight kernel): one of
        its storage methods takes the layer it owns (`layer`, or a parameter annotated with a
        quantizable layer class)."""
        for ancestor in self.index.mro(qualname):
            if not self.project.may_hold(ancestor, STORAGE_METHOD_DEFS):
                continue
            class_facts: ClassFacts | None = self.project.class_facts(ancestor)
            if class_facts is None:
                continue
            if class_facts.storage_code is not None:
                return class_facts.storage_code
            for method, param, annotated, line in class_facts.storage_params:
                if self.quant_root(annotated) is not None:
                    return Evidence(f"`{method}(self, ..., {param}: {_short(annotated)}, ...)`: storage-format code "
                                    "for the layer it is given", class_facts.path, line)
        return None

    def storage_function(self, fn: ast.FunctionDef | ast.AsyncFunctionDef) -> Evidence | None:
        """Evidence that a module-level function is storage-format code: named after a storage
        method (`apply_<format>_linear`, `process_weights_after_loading_<format>`) and taking the
        layer it owns, as a quant method's method does."""
        if not storage_method_name(fn.name, prefixed=True):
            return None
        for param, ann in layer_params(fn, skip_first=False):
            if param == LAYER_PARAM:
                return Evidence(f"`{fn.name}(..., layer, ...)`: storage-format code for the layer it is given",
                                self.path, fn.lineno)
            annotated = self.index.resolve(self.module, ann_name, self.imports) \
                if (ann_name := annotation_name(ann)) else None
            if annotated and self.quant_root(annotated) is not None:
                return Evidence(f"`{fn.name}(..., {param}: {_short(annotated)}, ...)`: storage-format code for the "
                                "layer it is given", self.path, fn.lineno)
        return None


def _short(qualname: str) -> str:
    return qualname.rsplit(".", 1)[-1]


# `dtype` is reported where it returns; the others are plain attributes in engine code (a layer's
# compute dtype, as its ecosystem names it; a config's), not looked up as getters.


class _SelfAs(ast.NodeTransformer):
    """A copy of a layer expression written in its class (`self.proj`) as seen from a receiver
    (`R.proj`): `self` replaced by `receiver`. One class, not one made per call: a class is a
    reference cycle, and each kept the receiver's tree alive until the next collection."""

    def __init__(self, receiver: ast.expr):
        self.receiver = receiver

    def visit_Name(self, name: ast.Name) -> ast.AST:
        return self.receiver if name.id == "self" else name


def _rooted_at_self(layer: ast.AST) -> bool:
    """`self` or `self.a.b`: a layer of the getter's own object."""
    while isinstance(layer, ast.Attribute):
        layer = layer.value
    return isinstance(layer, ast.Name) and layer.id == "self"


def _slots_at(sequence: list, index: int) -> list:
    """The slots of a filled sequence that may stand at `index`: the one there when every slot
    up to it is counted, else every slot from the first uncounted one on (a loop's fills may be
    any number). A negative index counts from the end the same way."""
    ordered = sequence if index >= 0 else sequence[::-1]
    position = index if index >= 0 else -index - 1
    if any(slot.anywhere for slot in sequence):
        return sequence
    for number, slot in enumerate(ordered):
        if not slot.counted:
            return ordered[number:]
        if number == position:
            return [slot]
    return []


def _literal_index(node: ast.expr) -> int | str | None:
    """`0`, `-1` (a unary minus, to the parser), `"k"`: the literal a subscript names, else None."""
    value = node.operand if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub) else node
    negative = value is not node
    if not isinstance(value, ast.Constant) or isinstance(value.value, bool):
        return None
    if isinstance(value.value, int):
        return -value.value if negative else value.value
    return value.value if isinstance(value.value, str) and not negative else None
