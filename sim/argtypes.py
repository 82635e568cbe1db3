"""argparse types shared by ``dls`` and the nnabla studies' own command lines (below both, so
neither imports the other)."""

from __future__ import annotations

import argparse


def int_at_least(low: int):
    """An argparse type: an int >= ``low``."""

    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            value = None
        if value is None or value < low:
            raise argparse.ArgumentTypeError(f"needs an int >= {low}, got {text!r}")
        return value

    return parse


positive_int = int_at_least(1)
nonnegative_int = int_at_least(0)
