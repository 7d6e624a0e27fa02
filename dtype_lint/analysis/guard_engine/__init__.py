"""guard_engine: see docs/architecture.md."""
