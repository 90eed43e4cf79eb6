"""fuserc: a compiler and runtime for tensor programs sharded over many GPUs."""

__version__ = "0.1.0"
