"""The library's version (also ``coder_proto._version.__version__``)."""

__version__ = "0.1.0"
