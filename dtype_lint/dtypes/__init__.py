"""The abstract interpreter over torch dtypes and the truth-table proof built on it."""
