"""NumPy only, below every other layer: float16's limits, argument validation, and the checked
reading of .npz archives and the one writer of files (atomic, never through a link, never
replacing a file it did not write, never an input)."""
