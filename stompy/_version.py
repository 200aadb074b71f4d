"""The version of stompy, in one place (the package, the CLI and the traces read it)."""

__version__ = "0.1.0"
