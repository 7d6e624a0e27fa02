"""storage: see docs/architecture.md."""
