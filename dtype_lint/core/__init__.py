"""The foundations every stage reads: source text and safe reading and writing, parse trees and
reduced regions, facts read from text alone, the prefilter, suppressions, discovery and module
names, findings, the configuration and the project's style. Imports nothing above it
(tests/test_layers.py)."""
