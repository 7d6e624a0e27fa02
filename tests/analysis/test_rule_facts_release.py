"""A file's rule facts die with its analysis, by reference counting alone: a lazily built answer
that refers back to them (FileGuards) made a reference cycle that kept the file's tree, its
candidates and its project facts alive until the cycle collector ran (file_analysis.analyze
calls RuleFacts.release once the rules have run)."""

import gc
import weakref

from dtype_lint.api import check_source
from dtype_lint.rule import RuleFacts
from dtype_lint.run import file_analysis

_GUARDED_CAST = """\
import torch
from vllm.model_executor.layers.linear import ColumnParallelLinear, FusedUnquantizedLinearMethod


class Attn(torch.nn.Module):
    def __init__(self, proj: ColumnParallelLinear):
        super().__init__()
        self.proj = proj

    def forward(self, x):
        if isinstance(self.proj.quant_method, FusedUnquantizedLinearMethod):
            x = x.to(self.proj.weight.dtype)
        return x
"""


def test_the_rule_facts_of_a_file_are_freed_without_the_cycle_collector(monkeypatch):
    made: list[weakref.ref] = []
    built: list[set[str]] = []

    class Recorded(RuleFacts):
        def __init__(self, *args):
            super().__init__(*args)
            made.append(weakref.ref(self))

        def release(self):
            built.append(set(vars(self)))
            super().release()

    monkeypatch.setattr(file_analysis, "RuleFacts", Recorded)
    enabled = gc.isenabled()
    gc.disable()
    try:
        findings = check_source(_GUARDED_CAST, filename="attn.py", settings={"select": ["DTL001", "DTL003"]})
        assert findings == []  # the guard was asked, and proved the layer unquantized
        assert len(made) == 1 and "guards" in built[0]
        assert made[0]() is None
    finally:
        if enabled:
            gc.enable()
