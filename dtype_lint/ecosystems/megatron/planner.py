"""Fixes of the megatron family's sites: routed through `get_layer_compute_dtype(layer)`
(helper.py), imported from the fixed file's own package.

The forms are the Hugging Face planner's (ecosystems/hf/planner.py: statement, expression, alias,
the guarded form that drops the storage tests), with this family's helper and home. The helper
never returns None, so a plain cast needs no `is not None` arm: its dtype argument becomes the
helper's call (`x.to(get_layer_compute_dtype(self.out_proj))`).
"""

from __future__ import annotations

from dtype_lint.core.findings import Edit
from dtype_lint.ecosystems.hf.planner import HFPlanner, sibling_spelling
from dtype_lint.ecosystems.megatron.helper import HELPER_NAME, default_helper_module


class MegatronPlanner(HFPlanner):
    def __init__(self, source, config, project, tree):
        super().__init__(source, config, project, tree)
        # `helper` names this helper's home only when it names this helper (another family's
        # pinned helper would not answer for a modelopt-packed layer).
        module, _, func = (config.helper or "").partition(":")
        self.module = module if module and func == HELPER_NAME else default_helper_module(source.module, source.path)
        self.func = HELPER_NAME
        self.spelled = sibling_spelling(source.module, source.path, self.module, tree)

    def _statement(self, site, stmt):
        return None  # the expression form below casts as well, without a variable

    def _expression(self, site):
        layer = self.src.segment(site.wds.layer)
        arg_start, arg_end = self.src.node_offsets(site.arg)
        return self._fix(f"cast to `{self.func}(...)`, the layer's compute dtype",
                         [Edit(arg_start, arg_end, self.helper_call(layer, self.flag_default))]), ""


PLANNER = MegatronPlanner
