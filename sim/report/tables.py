"""Numbers, settings and tables as people read them (markdown), and notes on cells that
could not be measured."""

from __future__ import annotations

import math
from typing import Any, Dict, Iterable, List, Sequence

import numpy as np


def format_value(value, digits: int = 3, name: str | None = None) -> str:
    """Format a table cell or a setting as people write it.

    Strings stay as they are, bools print as ``True``/``False``, ints as ints and NaN as
    ``n/a``. A float named as a scale (``scale``, ``*_scale``, ``*_factor``, ``safe_*``,
    ``margin``) that is a power of two ``2**k`` with ``|k| >= 4`` prints as ``2^k``; any other
    float prints as an integer when it is one and else to ``digits`` significant digits, so
    counts (overflows, skipped steps, steps) never print as powers of two. Without a ``name``
    the value is taken for a scale.

    Args:
        value: the value (str, bool, int, float or NumPy scalar).
        digits (int, default 3): significant digits of non-integral floats.
        name (str, optional): what the value is (a column or setting name).

    >>> format_value(16.0, name="overflows"), format_value(16.0, name="final_scale")
    ('16', '2^4')
    >>> format_value(2.0**-24, name="min_scale"), format_value(0.5, name="backoff_factor")
    ('2^-24', '0.5')
    >>> format_value(2000, name="growth_interval"), format_value(21.59, name="skipped")
    ('2000', '21.6')
    """
    if isinstance(value, str):
        return value
    if isinstance(value, (bool, np.bool_)):
        return str(bool(value))
    if isinstance(value, (int, np.integer)):
        return str(int(value))
    v = float(value)
    if math.isnan(v):
        return "n/a"
    if math.isinf(v):
        return "inf" if v > 0 else "-inf"
    scale = name is None or (
        name == "scale"
        or name.endswith(("_scale", "_factor"))
        or name.startswith("safe_")
        or name == "margin"
    )
    if scale and v > 0 and math.frexp(v)[0] == 0.5 and abs(math.log2(v)) >= 4:
        return f"2^{int(math.log2(v))}"
    if v == int(v) and abs(v) < 1e15:
        return str(int(v))
    return f"{v:.{digits}g}"


def format_percent(value, digits: int = 3) -> str:
    """A share in [0, 1] as a percentage to ``digits`` significant digits; None or NaN print
    as ``n/a``.

    >>> format_percent(0.6321), format_percent(0.6321, digits=4), format_percent(float("nan"))
    ('63.2%', '63.21%', 'n/a')
    """
    if value is None or math.isnan(value):
        return "n/a"
    return f"{100 * value:.{digits}g}%"


def with_percents(
    rows: Iterable[Dict[str, Any]], columns: Iterable[str], digits: int = 3
) -> List[Dict[str, Any]]:
    """Copies of ``rows`` whose numeric ``columns`` (shares) are percentage strings
    (:func:`format_percent`); other cells and missing columns stay as they are."""
    columns = list(columns)
    out = []
    for row in rows:
        row = dict(row)
        for c in columns:
            if c in row and isinstance(row[c], (float, int, np.floating, np.integer)):
                row[c] = format_percent(row[c], digits)
        out.append(row)
    return out


def markdown_table(rows: Sequence[Dict[str, Any]], columns: Sequence[str], headers=None) -> str:
    """A markdown table of ``rows`` (dicts) restricted to ``columns``.

    Cells go through :func:`format_value` with the column as ``name``: scale columns show
    powers of two as ``2^k``, counts show as integers.

    >>> print(markdown_table([{"skipped": 16.0, "final_scale": 16.0}], ["skipped", "final_scale"]))
    | skipped | final_scale |
    |---|---|
    | 16 | 2^4 |
    """
    headers = list(headers or columns)
    lines = ["| " + " | ".join(headers) + " |", "|" + "---|" * len(headers)]
    for row in rows:
        cells = (format_value(row.get(c, ""), name=c) for c in columns)
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def describe_policy(name: str, policy, swept: Sequence[str] = ()) -> str:
    """``dynamic = DynamicScale(init_scale=2^15, ...)``, values as people write them.

    Args:
        name (str): the preset or class name the policy was made from.
        policy: the policy (its ``settings()`` are listed).
        swept (sequence of str, default ()): settings shown as ``<grid>`` (a sweep's axes).

    >>> from updater.policy.presets import make_policy
    >>> describe_policy("static", make_policy("static", scale=2.0**10))
    'static = StaticScale(scale=2^10)'
    """
    cls = type(policy).__name__
    parts = [
        f"{k}=<grid>" if k in swept else f"{k}={format_value(v, name=k)}"
        for k, v in policy.settings().items()
    ]
    head = cls if name == cls else f"{name} = {cls}"
    return f"{head}({', '.join(parts)})"


def na_notes(rows: List[Dict[str, object]]) -> List[str]:
    """One line for each metric some row could not measure (``n/a``), saying why."""
    notes = []
    if any(r["mean_flushed"] != r["mean_flushed"] for r in rows):
        notes.append(
            "mean_flushed n/a: every step of every run was skipped (overflow or bad batch), so "
            "no applied step had values to flush; signal_lost counts those steps as lost."
        )
    if any(r["steps_to_safe"] != r["steps_to_safe"] for r in rows):
        notes.append(
            "steps_to_safe n/a: no run came within a factor 2 of the safe scale (never_safe)."
        )
    return notes


def share_table(rows, columns: Dict[str, str], shares: Sequence[str] = ()) -> str:
    """A markdown table of ``rows`` with ``columns`` (name -> head); ``shares`` as percents."""
    return markdown_table(with_percents(rows, shares), list(columns), list(columns.values()))


def find_row(rows: Sequence[Dict[str, Any]], **match) -> Dict[str, Any]:
    """The first row whose values equal ``match``; ``KeyError`` naming it when none does."""
    for r in rows:
        if all(r[k] == v for k, v in match.items()):
            return r
    raise KeyError(f"no row with {match}")
