"""The package version, in a module of its own so compile/ and doctor/ need not import the package root."""

__version__ = "0.1.0"
