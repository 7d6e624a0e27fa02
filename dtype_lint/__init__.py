"""dtype-lint: storage dtype is not compute dtype."""
__version__ = "0.2.0"
