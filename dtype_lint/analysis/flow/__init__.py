"""flow: see docs/architecture.md."""
