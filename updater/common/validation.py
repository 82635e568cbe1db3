"""Argument checks, one rule for the whole package.

A value of the wrong type raises ``TypeError``; a value of the right type outside its range
raises ``ValueError``. Both messages name the argument, the value and what is accepted, e.g.
``ValueError("growth_interval must be an int >= 1, got 0")``. NumPy scalars count as their
Python kinds; ``bool`` is never a number. Whole floats (``2000.0``) are accepted where an int
is asked for (nnabla scripts pass them) and come back as ``int``.

>>> check_int("N", 2000.0, low=1)
2000
>>> check_positive("scale", -1.0)
Traceback (most recent call last):
...
ValueError: scale must be a finite number > 0, got -1.0
"""

from __future__ import annotations

import math
import numbers
from typing import Sequence

import numpy as np


def is_real(value) -> bool:
    """True for ints and floats (NumPy's too), False for bools and everything else."""
    return isinstance(value, numbers.Real) and not isinstance(value, (bool, np.bool_))


def _fmt(x) -> str:
    """A bound as people write it: 0 not 0.0, 0.5 as 0.5."""
    return repr(int(x)) if float(x).is_integer() and abs(x) < 2**53 else repr(float(x))


def _range_text(low, high, low_open: bool = False) -> str:
    if high is None or high == math.inf:
        return f"> {_fmt(low)}" if low_open else f">= {_fmt(low)}"
    if low is None or low == -math.inf:
        return f"<= {_fmt(high)}"
    return f"in {'(' if low_open else '['}{_fmt(low)}, {_fmt(high)}]"


def check_bool(name: str, value) -> bool:
    """``value`` as a bool; ``TypeError`` unless it is True or False."""
    if not isinstance(value, (bool, np.bool_)):
        raise TypeError(f"{name} must be a bool, got {value!r}")
    return bool(value)


def check_int(
    name: str, value, low: int | None = None, high: int | None = None, *, none_ok: bool = False
):
    """``value`` as an int in ``[low, high]`` (either bound may be None); None passes through
    when ``none_ok``.

    Ints and whole floats are accepted; a float with a fraction raises ``ValueError``.
    """
    kind = "an int " + (_range_text(low, high) if low is not None or high is not None else "")
    kind = kind.rstrip() + (" or None" if none_ok else "")
    if value is None and none_ok:
        return None
    if not is_real(value):
        raise TypeError(f"{name} must be {kind}, got {value!r} ({type(value).__name__})")
    if not isinstance(value, numbers.Integral):
        if not (math.isfinite(value) and float(value).is_integer()):
            raise ValueError(f"{name} must be {kind}, got {value!r} (not a whole number)")
        value = int(value)
    if (low is not None and value < low) or (high is not None and value > high):
        raise ValueError(f"{name} must be {kind}, got {value!r}")
    return int(value)


def check_number(
    name: str,
    value,
    low: float = -math.inf,
    high: float = math.inf,
    *,
    low_open: bool = False,
    none_ok: bool = False,
    hint: str = "",
):
    """``value`` as a finite float in ``[low, high]`` (``(low, high]`` with ``low_open``);
    None passes through when ``none_ok``.

    ``hint`` is appended to the ``ValueError`` message (e.g. ``"; did you mean 0.5?"``).
    """
    bounded = low != -math.inf or high != math.inf
    kind = "a finite number" + (" " + _range_text(low, high, low_open) if bounded else "")
    kind += " or None" if none_ok else ""
    if value is None and none_ok:
        return None
    if not is_real(value):
        raise TypeError(f"{name} must be {kind}, got {value!r} ({type(value).__name__})")
    v = float(value)
    below = v <= low if low_open else v < low
    if not math.isfinite(v) or below or v > high:
        raise ValueError(f"{name} must be {kind}, got {value!r}{hint}")
    return v


def check_positive(name: str, value, *, none_ok: bool = False, hint: str = ""):
    """``value`` as a finite float > 0 (None passes through when ``none_ok``)."""
    return check_number(name, value, 0.0, low_open=True, none_ok=none_ok, hint=hint)


def check_instance(name: str, value, cls: type):
    """``value`` if it is a ``cls``; ``TypeError`` naming the class otherwise."""
    if not isinstance(value, cls):
        raise TypeError(
            f"{name} must be an instance of {cls.__module__}.{cls.__qualname__}, got "
            f"{type(value).__name__}"
        )
    return value


def check_choice(name: str, value, choices: Sequence[str]) -> str:
    """``value`` if it is one of the strings ``choices``."""
    accepted = ", ".join(repr(c) for c in choices)
    if not isinstance(value, str):
        raise TypeError(f"{name} must be one of {accepted}, got {value!r}")
    if value not in choices:
        raise ValueError(f"{name} must be one of {accepted}, got {value!r}")
    return value
