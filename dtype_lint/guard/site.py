"""What the guard reports: one `GuardSite` per place in the user's code where the bug happened at
run time, and its kinds, each with the static rule of the same shape."""

from __future__ import annotations

from dtype_lint.core.records import record

ACTIVATION_CAST, BUFFER_ALLOCATION = "activation-cast", "buffer-allocation"
FINFO, MISSING_WEIGHT = "finfo", "missing-weight"
KINDS = (ACTIVATION_CAST, BUFFER_ALLOCATION, FINFO, MISSING_WEIGHT)
# The static rule that reports the same shape (docs/hf.md "Shapes": `torch.finfo(M.weight.dtype)`
# is DTL001's; an unguarded `.weight` read is DTL003's, opt-in). Not a list of rules to keep in
# step with rules/: it maps the guard's own run-time site kinds onto the rule whose finding a
# run-time report stands for, and a new rule reports no run-time kind until the guard learns one.
RULE_BY_KIND = {ACTIVATION_CAST: "DTL001", BUFFER_ALLOCATION: "DTL002", FINFO: "DTL001", MISSING_WEIGHT: "DTL003"}
_KIND_WORDS = {
    ACTIVATION_CAST: "floating activation cast to",
    BUFFER_ALLOCATION: "buffer allocated in",
    FINFO: "finfo/iinfo of",
    MISSING_WEIGHT: "`.weight` read on a layer that has none:",
}


@record(frozen=True)
class GuardSite:
    """One place in the user's code where the bug happened at run time (one per path, line, kind)."""

    path: str
    line: int
    function: str
    kind: str  # one of KINDS
    layer_path: str | None
    layer_class: str | None
    quantizer: str | None  # the quantizer's name, as guard/storage.py's `quantizer_name` gives it
    storage: str | None  # "torch.uint8", or what a layer without `.weight` keeps
    rule: str | None  # the static rule of the same shape
    # Whether `dtype-lint check` reports the rule at this line (None: not asked, or the file could
    # not be checked).
    static_reported: bool | None = None

    @property
    def message(self) -> str:
        layer = self.layer_path or "?"
        if self.layer_class:
            layer += f" ({self.layer_class})"
        where = f"{self.quantizer} layer {layer}" if self.quantizer else f"layer {layer}"
        return f"{_KIND_WORDS.get(self.kind, self.kind)} {self.storage}, the storage of {where}"

    def describe(self) -> str:
        static = {True: "a static run reports it", False: "a static run does not report it",
                  None: "not checked statically"}[self.static_reported]
        return f"{self.path}:{self.line} in {self.function}: {self.message} [{self.rule}; {static}]"
