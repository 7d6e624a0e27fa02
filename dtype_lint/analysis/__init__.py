"""What the code says: the class index, class facts, layers, recognisers, value flow, helper-shaped
functions, one file's analysis, and the guard engine (dominance, guards, guard_flags, file_guards,
dormant)."""
