"""One run, discovery to writing: the pipeline, the per-file analysis, the caches and their seal,
the process pool, the record and memo the pre-commit fast path reads, the baseline. Only the
layers above it (the API, the migration, the front ends) import it (tests/test_layers.py)."""
