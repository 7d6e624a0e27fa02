"""The ecosystems dtype-lint knows, and the one place a stage asks for their plug-ins.

An ecosystem is a folder of `dtype_lint/ecosystems/` whose modules each plug into one stage, by role
(the file's name): `layer_attributes` into the foundations (what a layer's attributes mean: the name
of its model dtype), `formats` into the dtypes (the storage formats its backends leave in `.weight`,
rows of dtypes/storage_formats.py's table), `family` into the analysis (which classes are its
layers, what its quantizers leave in `.weight`, its partial guards, its words for messages),
`planner`, `helper` and `template` into the fix stage (a site of the family → edits through its
helper; the helper's text and home; the helper templates), `series`, `series_words`, `regression`,
`proofs`, `stand_ins` and `verify` into the migration and its proofs, `runtime` into the run-time
guard, `rule_words` into the rules' pages. A
stage asks for one role (`plugins("family")`) and talks to what it gets through that role's protocol
(`ROLE_PROTOCOLS`); it never names an ecosystem. The modules are named here as data, as Python's
entry points name plug-ins, and imported when a stage first asks: the pre-commit fast path imports
none but the one a text fact reads (`layer_attributes`, for a file with a function that may be a
helper and reads no `weight`).

Each ecosystem's storage formats, layer attributes, helper templates, message and series words
and run-time quantizer names are plug-ins; vLLM's backends are read from the code or from the
catalogues in `ecosystems/vllm/`; the migration's proofs, the words of its report and of the
helper's regression test are vLLM's `proofs` and `series_words`; the backends the rules' pages,
summaries and messages name are its `rule_words` passages (`filled`). No file outside
`ecosystems/` names an ecosystem's backends (tests/test_ecosystems.py).

Adding an ecosystem: its folder, and its line in `ECOSYSTEMS`.
"""

from __future__ import annotations

import re
from functools import cache
from importlib import import_module
from types import ModuleType
from typing import Any, Callable

# Ecosystem → role → module. Order matters where families overlap: the first that claims wins.
ECOSYSTEMS: dict[str, dict[str, str]] = {
    "hf": {
        "formats": "dtype_lint.ecosystems.hf.formats",
        "family": "dtype_lint.ecosystems.hf.family",
        "planner": "dtype_lint.ecosystems.hf.planner",
        "helper": "dtype_lint.ecosystems.hf.helper",
        "series": "dtype_lint.ecosystems.hf.series",
        "regression": "dtype_lint.ecosystems.hf.regression",
        "verify": "dtype_lint.ecosystems.hf.verify",
        "runtime": "dtype_lint.ecosystems.hf.runtime",
        "series_words": "dtype_lint.ecosystems.hf.series_words",
    },
    # Adapter libraries: the adapters are not quantized, the base layer each wraps is (HF's words).
    "peft": {
        "adapter": "dtype_lint.ecosystems.peft.adapter",
        "helper": "dtype_lint.ecosystems.peft.helper",
    },
    # vLLM-style engines: their formats and words are plug-ins (the rest, #35: see above).
    "vllm": {
        "formats": "dtype_lint.ecosystems.vllm.formats",
        "layer_attributes": "dtype_lint.ecosystems.vllm.layer_attributes",
        "template": "dtype_lint.ecosystems.vllm.template",
        "series_words": "dtype_lint.ecosystems.vllm.series_words",
        "words": "dtype_lint.ecosystems.vllm.words",
        "proofs": "dtype_lint.ecosystems.vllm.proofs",
        "stand_ins": "dtype_lint.ecosystems.vllm.stand_ins",
        "rule_words": "dtype_lint.ecosystems.vllm.rule_words",
    },
    # Models built through module specs (megatron-core's `build_module`), quantized by nvidia-modelopt.
    "megatron": {
        "family": "dtype_lint.ecosystems.megatron.family",
        "planner": "dtype_lint.ecosystems.megatron.planner",
        "helper": "dtype_lint.ecosystems.megatron.helper",
        "words": "dtype_lint.ecosystems.megatron.words",
    },
    # A plain PyTorch project that quantizes its own modules (bitsandbytes, modelopt, torchao, quanto).
    "quantizers": {
        "family": "dtype_lint.ecosystems.quantizers.family",
        "planner": "dtype_lint.ecosystems.quantizers.planner",
        "helper": "dtype_lint.ecosystems.quantizers.helper",
        "words": "dtype_lint.ecosystems.quantizers.words",
    },
    # A project's own layers, no family's backends known: words that name no quantizer. Last, as
    # it speaks for every verdict.
    "generic": {
        "formats": "dtype_lint.ecosystems.generic.formats",
        "template": "dtype_lint.ecosystems.generic.template",
        "words": "dtype_lint.ecosystems.generic.words",
    },
}

# What a module of each role provides (names its stage reads); tests/test_ecosystems.py checks it.
ROLE_PROTOCOLS: dict[str, tuple[str, ...]] = {
    # FORMATS: the storage formats its backends leave in `.weight` (dtypes/storage_format.py's rows),
    # which dtypes/storage_formats.py assembles into the one table every stage derives from.
    "formats": ("FORMATS",),
    # MODEL_DTYPE_ATTRIBUTES: the attribute names its layers state their model (compute) dtype under.
    "layer_attributes": ("MODEL_DTYPE_ATTRIBUTES",),
    # claims(evidence) -> bool: did this family decide the verdict with this evidence?
    # verdict(resolver, inst, text): the layer's verdict in this family's code (None: not its layer);
    # backend_words(evidence, default): its quantizers' words for a message;
    # narrowed(...): a verdict narrowed by the family's partial guards (applied to the rules that
    # declare `dtype_site`, dtype_lint/core/rule_registry.py). Its optional questions: ROLE_DEFAULTS.
    "family": ("claims", "verdict", "backend_words", "narrowed"),
    # TEMPLATES: template name -> (imports, fp8 test, docstring, body): the input-dtype helper text
    # `--fix` creates for a project's configured helper (`helper_template = "<name>"`).
    "template": ("TEMPLATES",),
    # What the run-time guard (dtype_lint/guard/) recognises its quantizers by in a live model: the
    # quantizer's name by a layer's class name, a prefix of it, its weight's class, its package, a part
    # of its class name; where a layer without `.weight` keeps its storage; the quantizers' own code.
    "runtime": ("QUANTIZER_BY_CLASS_NAME", "QUANTIZER_BY_CLASS_PREFIX", "QUANTIZER_BY_WEIGHT_CLASS_NAME",
                "QUANTIZER_BY_PACKAGE", "QUANTIZER_BY_CLASS_NAME_PART", "NO_WEIGHT_STORAGE_ATTRIBUTES",
                "STORAGE_CODE_FRAGMENTS"),
    # CONVENTIONS (the project conventions it speaks for; None: every other), WHY: a patch series'
    # explanation of the bug class. The one for every other convention also gives the helper patches'
    # words: BACKEND_OF, SHORT_BACKEND, HELPER_FIX_HARM, HELPER_FIX_HISTORY, MODEL_DTYPE_WORDS; the
    # helper's regression test's: TEST_NO_WEIGHT_LAYERS, TEST_STORAGES_NOTE, TEST_FP8_DTYPE; and the
    # migration report's opening: REPORT_WHY.
    "series_words": ("CONVENTIONS", "WHY"),
    # CONVENTIONS (None: every convention), available() -> bool (torch is there), for_changes(helper
    # source, func) -> a patch's proof function, unit_cases(before, after, module, func, cases, package):
    # an input-dtype helper run on real dtypes before and after a patch, release_proof(path, label,
    # before, after, root): the release's own code run before and after a patch to `path`.
    "proofs": ("CONVENTIONS", "available", "for_changes", "unit_cases", "release_proof"),
    # PACKAGE, stand_ins() -> {module: {name: value}}: what a release's code of that package imports
    # that its tree cannot serve here (migrate/release_stubs.py serves the tree's own modules).
    "stand_ins": ("PACKAGE", "stand_ins"),
    # series_patch(result, root, rel) -> a first patch of a series (the ecosystem's own helper added)
    # or None; patch_proof(changes) -> the proof text of a patch, or None.
    "series": ("series_patch", "patch_proof"),
    # CONVENTIONS (the series conventions whose patches it tests); add_tests(patches, first patch,
    # style) -> what it added and ran; readme_section(patches, added) -> the series README's lines.
    "regression": ("CONVENTIONS", "add_tests", "readme_section"),
    # PASSAGES: name -> text, filling a rule page's `{{name}}` slots (reporters/rule_metadata.py) and
    # the rules' examples: the backends a page names to explain the bug class, the model dtype attribute.
    "rule_words": ("PASSAGES",),
    # PLANNER(source, config, project, tree): the planner of the family's sites.
    "planner": ("PLANNER",),
    # owns_fix(finding) -> bool; helper_location(finding, index, root) -> HelperLocation;
    # settle_helper(outcomes, index, root) -> [(path, bytes, expected bytes or None)]; HELPER_LABEL.
    "helper": ("owns_fix", "helper_location", "settle_helper", "HELPER_LABEL"),
    # adapter_verdict(resolver, layer, scope, class_qualname) -> verdict | False | None: a layer read
    # through an adapter's base layer; as_stored_base_layer(source): `self.base_layer` as stored.
    "adapter": ("adapter_verdict", "as_stored_base_layer"),
    # speaks_for(evidence) -> bool; DEFAULT_WORDS: a message's storages where the verdict names no
    # backend (the first ecosystem that speaks for the evidence; a family's own words come first).
    "words": ("speaks_for", "DEFAULT_WORDS"),
}


def _no_answer(*args: object, **kwargs: object) -> None:
    return None


def _no_holder(*args: object, **kwargs: object) -> str:
    return ""


# The questions of a role that a module may leave out, each with the answer the registry gives in
# its place: a stage asks them through `optional(...)`, so a family that has nothing to say (no
# torch leaf class of its own, no `nn.Sequential` item) writes nothing rather than a stub.
ROLE_DEFAULTS: dict[str, dict[str, Callable[..., Any]]] = {
    "family": {
        # layer_kind(mro) -> str | None: the torch leaf a quantizer of the family sees in the class.
        "layer_kind": _no_answer,
        # sequential_item(resolver, expr, scope, depth, this): the layer `self.mlp[i]` holds.
        "sequential_item": _no_answer,
        # first_parameter(resolver, inst, depth=0, layer=None, scope=None) -> (holder instance,
        # path) of `next(iter(M.parameters()))`; first_parameter_holder(resolver, layer, scope,
        # text) -> its expression ("" when it cannot be told: no fix).
        "first_parameter": _no_answer,
        "first_parameter_holder": _no_holder,
        # why_not(resolver, inst, text) -> str | None: `explain`'s words for a verdict of False.
        "why_not": _no_answer,
        # class_named(name) -> str | None: the qualified name of a class of the family's libraries
        # known outside the tree by its bare name (a patch that tests `type(m).__name__ == name`).
        "class_named": _no_answer,
        # speaks_for_file(resolver) -> bool: is the file its ecosystem's code (what it imports)? A
        # site no family decided and whose backends cannot be told is then spoken of with its helper.
        "speaks_for_file": _no_answer,
        # outside_attribute(index, qualname, attr) -> (class qualname, Evidence) | None: `self.<attr>`
        # of the class `qualname` where an ancestor outside the tree builds it (a shipped list).
        "outside_attribute": _no_answer,
        # helper_words() -> str: `doctor`'s words for a project whose files it speaks for and where no
        # site needs a helper yet: its ecosystem, and the helper a fix would use ("": none to name).
        "helper_words": _no_holder,
    },
}


def optional(module: ModuleType, role: str, question: str) -> Callable[..., Any]:
    """A plugged module's answer to an optional question of its role, or the registry's default
    where it leaves the question out (ROLE_DEFAULTS)."""
    return getattr(module, question, ROLE_DEFAULTS[role][question])


@cache
def plugins(role: str) -> tuple[ModuleType, ...]:
    """Every ecosystem's module for `role`, in ECOSYSTEMS order, imported on first ask."""
    return tuple(import_module(roles[role]) for roles in ECOSYSTEMS.values() if role in roles)


@cache
def model_dtype_attributes() -> tuple[str, ...]:
    """Every ecosystem's names for a layer's model dtype attribute, in ECOSYSTEMS order: what a
    helper may return where the weight is packed or missing, and what states a compute dtype."""
    return tuple(name for module in plugins("layer_attributes") for name in module.MODEL_DTYPE_ATTRIBUTES)


def default_plugin(role: str) -> ModuleType:
    """The module of `role` that speaks for every convention no other claims (`CONVENTIONS` None)."""
    return next(module for module in plugins(role) if module.CONVENTIONS is None)


@cache
def passages() -> dict[str, str]:
    """Every ecosystem's passages for the rules' pages and messages (the `rule_words` role), by name;
    where two ecosystems give one name, the first in ECOSYSTEMS order."""
    found: dict[str, str] = {}
    for module in plugins("rule_words"):
        for name, text in module.PASSAGES.items():
            found.setdefault(name, text)
    return found


@cache
def _slot() -> re.Pattern[str]:
    """A slot in a rule's page, summary or message: `{{name}}`, filled with the passage of that
    name; compiled on first use (most summaries hold none)."""
    return re.compile(r"\{\{([\w.]+)\}\}")


def filled(text: str) -> str:
    """`text` with each `{{name}}` replaced by the first ecosystem's passage of that name; a slot no
    ecosystem fills is an error (a page or a summary must not ship with a hole). Here, in the core
    layer, so that whatever renders a rule's declarations (the rule registry's README table, the
    reports, `dtype-lint rule`) fills them the one way."""
    if "{{" not in text:
        return text  # most summaries: no passage module imported for them
    known = passages()

    def passage(match: re.Match) -> str:
        if match.group(1) not in known:
            raise KeyError(f"no ecosystem fills the rule page's slot {{{{{match.group(1)}}}}}")
        return known[match.group(1)]

    return _slot().sub(passage, text)


def plugin(ecosystem: str, role: str) -> ModuleType:
    """One ecosystem's module for `role`."""
    return import_module(ECOSYSTEMS[ecosystem][role])


def ecosystem_of(module: ModuleType) -> str:
    """The ecosystem a plugged module belongs to."""
    return next(name for name, roles in ECOSYSTEMS.items() if module.__name__ in roles.values())


def family_of(evidence) -> ModuleType | None:
    """The family that decided a verdict from its evidence, or None where the storage model
    decided it from the backends it read (the code in the tree, or a shipped catalogue)."""
    return next((family for family in plugins("family") if family.claims(evidence)), None)


def default_words(evidence) -> str:
    """The storages a message names where the verdict's evidence names no backend: the words of
    the ecosystem whose layer it is (vLLM's repacks only for a vLLM-style engine's layer)."""
    return next(words.DEFAULT_WORDS for words in plugins("words") if words.speaks_for(evidence))


def planner_of(family: ModuleType):
    """The planner class for a family's sites."""
    return plugin(ecosystem_of(family), "planner").PLANNER


def fallback_family(resolver) -> ModuleType | None:
    """The family whose helper a message names for a site of `resolver`'s file that no family
    decided and whose backends cannot be told (no fix: the suggestion only): the first family
    that speaks for the file (its optional `speaks_for_file`), or None for the configured helper.
    The caller asks only where no `helper` is set and the file is not written on the preset's
    layers (RuleContext.fixes_for)."""
    return next((family for family in plugins("family")
                 if optional(family, "family", "speaks_for_file")(resolver)), None)


def project_family(resolvers) -> tuple[ModuleType, int] | None:
    """The family whose helper `doctor` names for a project where no site needs a helper: the one
    `fallback_family` gives for the most of its files (`resolvers`: one view of each file, with
    what `speaks_for_file` reads), with how many files; None where no family speaks for any file
    or none has words for its helper."""
    counts: dict[ModuleType, int] = {}
    for resolver in resolvers:
        family = fallback_family(resolver)
        if family is not None and optional(family, "family", "helper_words")():
            counts[family] = counts.get(family, 0) + 1
    if not counts:
        return None
    order = plugins("family")
    family = max(sorted(counts, key=order.index), key=lambda f: counts[f])  # a tie: ECOSYSTEMS order
    return family, counts[family]


def helper_of(finding) -> ModuleType | None:
    """The ecosystem helper a finding's fix routes through, or None for the project's configured
    (or inferred) helper."""
    return next((helper for helper in plugins("helper") if helper.owns_fix(finding)), None)
