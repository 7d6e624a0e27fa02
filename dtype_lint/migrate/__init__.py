"""A tree-wide migration: the run and its report, the patch series, the executable proofs."""
