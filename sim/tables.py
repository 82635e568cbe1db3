"""Numbers and tables as people read them (markdown)."""

from __future__ import annotations

import math
from typing import Any, Dict, Sequence

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
