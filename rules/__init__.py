"""One rule per module. Adding a rule: write the module, list its class here; the test suite
runs its VALID/INVALID examples and `dtype-lint rule CODE` prints its docstring."""

from .dtl001_weight_dtype_cast import WeightDtypeCast
from .dtl002_weight_dtype_allocation import WeightDtypeAllocation

ALL_RULES = (WeightDtypeCast, WeightDtypeAllocation)
RULES_BY_CODE = {r.code: r for r in ALL_RULES}
