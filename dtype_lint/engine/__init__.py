"""The run: discovery, reading and prefiltering, the cache, suppressions, the baseline, the one writer."""
