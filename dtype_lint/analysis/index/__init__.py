"""index: see docs/architecture.md."""
