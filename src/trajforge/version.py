"""The package version (one place; `trajforge --version` and `trajforge.__version__` read it)."""

__version__ = "0.1.0"
