"""nnbench's version: recorded in every result, and the key's part that says which nnbench made it."""

__version__ = "0.1.0"
