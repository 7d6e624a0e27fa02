"""What the code says, in four sub-packages: `index/` (the class index and class facts),
`storage/` (the storage model, layers, platforms, catalogues), `guard_engine/` (dominance, guards,
flags, dormant paths) and `flow/` (recognisers, value flow, callers); with the function walk,
helper-shaped functions and compiled code beside them."""
