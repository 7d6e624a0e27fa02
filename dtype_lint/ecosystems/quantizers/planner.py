"""Fixes of the quantizer family's sites: the Hugging Face planner (ecosystems/hf/planner.py) and
its helper, `get_module_input_dtype(module)`, created in the fixed file's own package. That
helper answers for every storage these quantizers leave (catalogue.py): bitsandbytes 4-bit's
`compute_dtype`; None (keep the activation's dtype) for int8/uint8/fp8 storage and a modelopt
`QTensorWrapper`; the float dtype torchao's and quanto's tensor subclasses report."""

from __future__ import annotations

from dtype_lint.ecosystems.hf.planner import HFPlanner

PLANNER = HFPlanner
