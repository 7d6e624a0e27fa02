"""The family role of the megatron ecosystem (dtype_lint/ecosystems/registry.py): a layer built
through `build_module(spec, ...)` is the class its spec names (specs.py), and where that class is
one of megatron-core's linears nvidia-modelopt quantizes, `mtq.compress` may have packed its
weight (modelopt_catalogue.py).

Verdicts:
- some spec of the tree names a class modelopt reaches: ("high", evidence), the last step a
  `ModeloptEvidence` with the formats and their storages;
- every spec names a class modelopt does not reach (a norm, a layer with its own `forward`):
  False, no finding;
- no spec it reaches, and some value cannot be read (a spec computed by a call, a dataclass no
  file of the tree builds): ("low", evidence) with the reason, as the storage model reports a layer
  whose backends it cannot read (`CodeBackends.undispatched`): never a silent pass.
"""

from __future__ import annotations

from dtype_lint.analysis.storage.verdicts import BACKEND_MARK, UNKNOWN_BACKENDS
from dtype_lint.core.findings import Evidence
from dtype_lint.ecosystems.hf.family import StorageEvidence, narrowed_after_build, words_after_reason
from dtype_lint.ecosystems.megatron.modelopt_catalogue import (
    COMPRESS_EVIDENCE,
    KNOWN_PACKAGE,
    PLUGIN,
    RELEASE,
    TORCH_LINEAR_EVIDENCE,
    compressed_storages,
    registered_line,
)
from dtype_lint.ecosystems.megatron.specs import build_site, is_built_by_spec

# Every verdict of this family carries this in an evidence message: what `doctor`, the words role
# and a finding read back from the cache know it by.
FAMILY_EVIDENCE = "built from a module spec (`build_module`)"
REACHED, NOT_REACHED, UNKNOWN = "reached", "not reached", "unknown"


class ModeloptEvidence(StorageEvidence):
    """The modelopt formats that can pack the layer's weight and the storage each leaves:
    `uint8 under modelopt NVFP4/INT4 (AWQ), int8 under modelopt INT8`."""

    FORMAT_PREFIX = "modelopt "


storage_phrase = ModeloptEvidence.phrase


def modelopt_reach(resolver, qualname: str) -> tuple[str, str]:
    """(REACHED | NOT_REACHED | UNKNOWN, why) for a class a spec names. modelopt's registry takes a
    registered class and its subclasses that keep its `forward` (modelopt_catalogue.py)."""
    for ancestor in resolver.index.mro(qualname):
        line, short = registered_line(ancestor), ancestor.rsplit(".", 1)[-1]
        if line is not None:
            where = f"{PLUGIN}:{line}" if line else TORCH_LINEAR_EVIDENCE
            via = "" if ancestor == qualname else f" (a subclass of `{short}` keeping its `forward`)"
            return REACHED, f"modelopt registers `{short}` for quantization ({where}, {RELEASE}){via}"
        class_facts = resolver.project.class_facts(ancestor)
        if class_facts is not None and "forward" in class_facts.methods:
            return NOT_REACHED, f"`{short}` has its own `forward`: modelopt's registry does not take it"
        if class_facts is None and resolver.index.class_location(ancestor) is None:
            if ancestor.startswith((KNOWN_PACKAGE, "torch.")):
                return NOT_REACHED, f"modelopt does not register `{ancestor}` ({RELEASE})"
            return UNKNOWN, f"`{ancestor}` is not in the tree"
    return NOT_REACHED, f"no class modelopt registers is among `{qualname}`'s bases"


def verdict(resolver, inst, expr_text: str):
    """None: not a layer built through `build_module`. False: no spec gives it a class modelopt
    reaches. Else ("high" | "low", evidence)."""
    if not is_built_by_spec(inst.qualname):
        return None
    site = build_site(resolver, inst, expr_text)
    if site is None:
        return None
    chain = tuple(Evidence(e.message.replace(" without a quantization config", ""), e.path, e.line) for e in inst.chain)
    built = Evidence(f"`{site.attribute}` is {FAMILY_EVIDENCE}: `{site.spec_text}`", site.path, site.line)
    reached: list[Evidence] = []
    unknown = [site.unknown] if site.unknown else []
    for spec_class in site.classes:
        if spec_class.qualname is None:
            continue
        state, why = modelopt_reach(resolver, spec_class.qualname)
        if state == REACHED:
            reached.append(Evidence(f"a spec names `{spec_class.written}`: {why}", spec_class.path, spec_class.line))
        elif state == UNKNOWN:
            unknown.append(why)
    if reached:
        storages = compressed_storages()
        packed = ModeloptEvidence(f"`mtq.compress` (real quantization) leaves {storage_phrase(storages)} "
                                  f"({COMPRESS_EVIDENCE})", "", 0, storages)
        return "high", (*chain, built, *reached[:3], packed)
    if not unknown:
        return False
    # Low confidence, the reason first; the storages it would have if its spec names a linear
    # modelopt reaches, so that the message names them and the fix (whose helper answers for every
    # layer, packed or not) is this family's.
    reason = f"{UNKNOWN_BACKENDS}: which class its spec builds is not known here ({'; '.join(unknown)})"
    storages = compressed_storages()
    maybe = ModeloptEvidence(f"if its spec names a linear modelopt quantizes, `mtq.compress` leaves "
                             f"{storage_phrase(storages)}", "", 0, storages)
    return "low", (*chain, built, Evidence(BACKEND_MARK + reason, site.path, site.line), maybe)


def why_not(resolver, inst, expr_text: str) -> str | None:
    """`explain`'s words for a layer this family leaves alone: the classes its specs name, and why
    modelopt does not reach them."""
    site = build_site(resolver, inst, expr_text) if is_built_by_spec(inst.qualname) else None
    if site is None:
        return None
    whys = [f"`{spec_class.written}`: {modelopt_reach(resolver, spec_class.qualname)[1]}"
            for spec_class in site.classes if spec_class.qualname is not None]
    return (f"its specs name {'; '.join(dict.fromkeys(whys))}: modelopt ({RELEASE}) quantizes none of them"
            if whys else "no spec of the tree gives it a layer")


def modelopt_storages(evidence) -> ModeloptEvidence | None:
    return ModeloptEvidence.first_in(evidence)


def narrowed(verdict, site, fn, parents, layer, aliases, path: str, vllm_guard_proves, assigns=None, cls=None):
    """The verdict after the checks that dominate the site; `mtq.compress` runs on a built model."""
    return narrowed_after_build(ModeloptEvidence, verdict, site, fn, parents, layer, aliases, path,
                                vllm_guard_proves, cls)


# ---- the family protocol (ecosystems/registry.py) ----------------------------------------------


def claims(evidence) -> bool:
    """Did this family decide the verdict (modelopt's storages in its evidence)?"""
    return modelopt_storages(evidence) is not None


def backend_words(evidence, default: str) -> str:
    """modelopt's storages; after the reason where the spec could not be read."""
    return words_after_reason(ModeloptEvidence, evidence, default, "if it is a linear modelopt quantizes")
