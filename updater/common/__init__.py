"""NumPy only, below every other layer: float16's limits, argument validation, and the checked
reading and atomic writing of files."""
