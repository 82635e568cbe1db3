"""argparse types shared by ``dls`` and the nnabla studies' own command lines (below both, so
neither imports the other)."""

from __future__ import annotations

import argparse


def int_at_least(low: int, high: int | None = None):
    """An argparse type: an int >= ``low`` (and <= ``high`` when given)."""
    wanted = f"an int >= {low}" if high is None else f"an int in [{low}, {high}]"

    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            value = None
        if value is None or value < low or (high is not None and value > high):
            raise argparse.ArgumentTypeError(f"needs {wanted}, got {text!r}")
        return value

    return parse


positive_int = int_at_least(1)
seed_int = int_at_least(0, 2**32 - 1)
"""A seed: NumPy's ``RandomState`` takes ints in [0, 2**32 - 1]."""
