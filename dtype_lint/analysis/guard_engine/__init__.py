"""The guard engine: the dominance walk, the guard vocabulary and flags, dormant and never-run code."""
