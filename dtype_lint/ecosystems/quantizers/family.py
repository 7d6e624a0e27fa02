"""The family role of the generic quantizer ecosystem (dtype_lint/ecosystems/registry.py): an
`nn.Linear` (or subclass) a project's own module builds is quantizable when the project applies a
quantizer that packs `.weight` to a model that contains that module (applications.py), through
the constructions the index follows (`self.blocks = nn.ModuleList([Block(...) ...])`).

Verdicts (None leaves the layer to the other families and the storage model):
- a model containing the layer's module is handed to bitsandbytes or `mtq.compress`: ("high",
  evidence), the last step a `QuantizerEvidence` with the storages each leaves;
- only torchao, optimum-quanto or modelopt's fake quantization reach it: None (they leave a
  float `.dtype`: a cast to it is harmless);
- the project applies a packing quantizer to a model this analysis cannot tell (an attribute, a
  model a function returns), in the layer's own package: ("low", evidence) with the reason, as the
  storage model reports a layer whose backends it cannot read.
"""

from __future__ import annotations

from dtype_lint.analysis.storage.verdicts import BACKEND_MARK, UNKNOWN_BACKENDS
from dtype_lint.core.findings import Evidence
from dtype_lint.ecosystems.hf.family import (
    LINEAR,
    LINEAR_SUBCLASS,
    StorageEvidence,
    built_within,
    layer_kind,
    narrowed_after_build,
    words_after_reason,
)
from dtype_lint.ecosystems.quantizers.applications import Application, applications

# Every verdict of this family carries this in an evidence message (words.py, `doctor`, the cache).
FAMILY_EVIDENCE = "in a module the project quantizes"
# The layers these quantizers replace: bitsandbytes swaps and `replace_with_bnb_linear` take
# `nn.Linear`; modelopt's registry takes `nn.Linear` and subclasses keeping its `forward`.
_KINDS = frozenset({LINEAR, LINEAR_SUBCLASS})


class QuantizerEvidence(StorageEvidence):
    """The quantizers' storages for the layer: `uint8 under bitsandbytes 4-bit, int8 under ...`."""


storage_phrase = QuantizerEvidence.phrase


def contained(resolver, model: str) -> frozenset[str]:
    """The classes of the tree a model class builds, transitively (its own and its ancestors'
    attributes' constructions, every class called inside them: `nn.ModuleList([Block(...)])`):
    the walk the Hugging Face family shares (`built_within`)."""
    return resolver.index.cached_facts(("quantizer containment", model),
                                       lambda: frozenset(built_within(resolver, model)))


def _reached_model(resolver, application: Application, owner: str) -> str | None:
    """The model the application quantizes that builds the module class `owner` (or a subclass
    of it), or None."""
    for model in application.classes:
        inside = contained(resolver, model)
        if owner in inside or any(owner in resolver.index.mro(built) for built in inside):
            return model
    return None


def verdict(resolver, inst, expr_text: str):
    """None: not this family's layer. Else ("high" | "low", evidence)."""
    owner = inst.origin
    if not inst.qualname or not owner or expr_text == "self" or \
            layer_kind(resolver.index.mro(inst.qualname)) not in _KINDS:
        return None
    found = applications(resolver)
    if not found:
        return None
    packing = [application for application in found if application.quantizer.storages]
    reaching = [(application, model) for application in packing
                if (model := _reached_model(resolver, application, owner)) is not None]
    chain = tuple(Evidence(e.message.replace(" without a quantization config", ""), e.path, e.line) for e in inst.chain)
    short = owner.rsplit(".", 1)[-1]
    if reaching:
        storages = tuple(dict.fromkeys(storage for application, _ in reaching
                                       for storage in application.quantizer.storages))
        steps = tuple(Evidence(f"`{short}` is {FAMILY_EVIDENCE}: `{application.call_text}(...)` applies "
                               f"{application.quantizer.name} to `{model.rsplit('.', 1)[-1]}`, "
                               f"which builds it; `.weight` becomes {application.quantizer.leaves}",
                               application.path, application.line) for application, model in reaching[:3])
        return "high", (*chain, *steps, QuantizerEvidence(storage_phrase(storages), "", 0, storages))
    package = owner.split(".", 1)[0]
    unknown = [application for application in packing if application.unknown and application.package == package]
    if not unknown:
        return None
    first = unknown[0]
    storages = tuple(dict.fromkeys(storage for application in unknown for storage in application.quantizer.storages))
    reason = (f"{UNKNOWN_BACKENDS}: `{first.call_text}(...)` applies {first.quantizer.name} to a model "
              f"not known here ({first.unknown}); `{short}` may be {FAMILY_EVIDENCE}")
    return "low", (*chain, Evidence(BACKEND_MARK + reason, first.path, first.line),
                   QuantizerEvidence(f"if that model builds `{short}`: {storage_phrase(storages)}", "", 0, storages))


def quantizer_storages(evidence) -> QuantizerEvidence | None:
    return QuantizerEvidence.first_in(evidence)


def narrowed(verdict, site, fn, parents, layer, aliases, path: str, vllm_guard_proves, assigns=None, cls=None):
    """The verdict after the checks that dominate the site; the model is quantized after it is built."""
    return narrowed_after_build(QuantizerEvidence, verdict, site, fn, parents, layer, aliases, path,
                                vllm_guard_proves, cls)


# ---- the family protocol (ecosystems/registry.py) ----------------------------------------------


def claims(evidence) -> bool:
    """Did this family decide the verdict (its quantizers' storages in the evidence)?"""
    return quantizer_storages(evidence) is not None


def backend_words(evidence, default: str) -> str:
    """The quantizers' storages; after the reason where the model could not be told."""
    return words_after_reason(QuantizerEvidence, evidence, default, "if so")
