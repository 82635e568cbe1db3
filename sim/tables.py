"""Numbers and tables as people read them: the project's one table writer.

One writer makes every markdown table of the project (:func:`markdown_table`): cells escaped,
numeric columns right-aligned; :func:`terminal_table` lays the same cells out for a terminal
with tabulate (a small, dependency-free, long-maintained library; rich would bring a console
renderer and Pygments for what plain aligned text does). One format per quantity: shares as
percents to :data:`PERCENT_DIGITS` significant digits (:func:`format_percent`, ``<0.001%`` below
:data:`PERCENT_FLOOR`), scales as ``2^k`` (:func:`format_value`), counts as integers.
"""

from __future__ import annotations

import math
import re
import textwrap
from typing import Any, Dict, Iterable, List, Sequence

import numpy as np

PERCENT_DIGITS = 3
"""Significant digits of every percentage."""

PERCENT_FLOOR = 1e-5
"""Shares below this (0.001%) print as ``<0.001%``."""

HEAD_WIDTH = 16
"""Longest line of a terminal table's head; longer heads wrap onto more lines."""

_NUMERIC = re.compile(r"^[-+<>~]?(\d|\.\d|2\^|inf\b|n/a\b)")


def _is_scale(name: str | None) -> bool:
    return name is None or (
        name == "scale" or name.endswith("_scale") or name.startswith("safe_") or name == "margin"
    )


def format_value(value, digits: int = 3, name: str | None = None) -> str:
    """Format a table cell or a setting as people write it.

    Strings stay as they are, bools print as ``True``/``False``, ints as ints and NaN as
    ``n/a``. A float named as a scale (``scale``, ``*_scale``, ``safe_*``, ``margin``) that is
    a power of two prints as ``2^k``; a factor (``*_factor``) does when ``|k| >= 4``; any
    other float prints as an integer when it is one and else to ``digits`` significant digits,
    so counts (overflows, skipped steps, steps) never print as powers of two. Without a
    ``name`` the value is taken for a scale.

    Args:
        value: the value (str, bool, int, float or NumPy scalar).
        digits (int, default 3): significant digits of non-integral floats.
        name (str, optional): what the value is (a column or setting name).

    >>> format_value(16.0, name="overflows"), format_value(8.0, name="final_scale")
    ('16', '2^3')
    >>> format_value(2.0**-24, name="min_scale"), format_value(0.5, name="backoff_factor")
    ('2^-24', '0.5')
    >>> format_value(2000, name="growth_interval"), format_value(21.59, name="skipped")
    ('2000', '21.6')
    """
    if isinstance(value, str):
        return value
    if isinstance(value, (bool, np.bool_)):
        return str(bool(value))
    if isinstance(value, (int, np.integer)) and (name is None or not _is_scale(name)):
        return str(int(value))
    v = float(value)
    if math.isnan(v):
        return "n/a"
    if math.isinf(v):
        return "inf" if v > 0 else "-inf"
    pow2 = v > 0 and math.frexp(v)[0] == 0.5
    factor = name is not None and name.endswith("_factor")
    if pow2 and (_is_scale(name) or (factor and abs(math.log2(v)) >= 4)):
        return f"2^{int(math.log2(v))}"
    if v == int(v) and abs(v) < 1e15:
        return str(int(v))
    return f"{v:.{digits}g}"


def format_percent(value) -> str:
    """A share in [0, 1] as a percentage to :data:`PERCENT_DIGITS` significant digits,
    ``<0.001%`` between 0 and :data:`PERCENT_FLOOR`; None or NaN print as ``n/a``.

    >>> format_percent(0.6321), format_percent(0.001), format_percent(4.8e-7)
    ('63.2%', '0.100%', '<0.001%')
    >>> format_percent(0.0), format_percent(1.0), format_percent(float("nan"))
    ('0%', '100%', 'n/a')
    """
    if value is None or math.isnan(value):
        return "n/a"
    if value == 0:
        return "0%"
    if abs(value) < PERCENT_FLOOR:
        return "<0.001%" if value > 0 else ">-0.001%"
    return f"{100 * value:#.{PERCENT_DIGITS}g}".rstrip(".") + "%"


def with_percents(rows: Iterable[Dict[str, Any]], columns: Iterable[str]) -> List[Dict[str, Any]]:
    """Copies of ``rows`` whose numeric ``columns`` (shares) are percentage strings
    (:func:`format_percent`); other cells and missing columns stay as they are."""
    columns = list(columns)
    out = []
    for row in rows:
        row = dict(row)
        for c in columns:
            if c in row and isinstance(row[c], (float, int, np.floating, np.integer)):
                row[c] = format_percent(row[c])
        out.append(row)
    return out


class Code(str):
    """A cell shown as code (a name from a trace or a model): :func:`markdown_table` writes it
    as a code span that no backtick inside can close (HTML in it stays text)."""


def escape_cell(text: str) -> str:
    r"""A markdown table cell: ``|`` escaped as ``\|``, the ``<`` that would open an HTML tag or
    comment as ``&lt;``, line breaks as spaces (backticks stay: the tables' authors write code
    spans); a :class:`Code` cell (a name from data) as a code span no backtick in it can close.

    >>> escape_cell("mean |error|"), escape_cell("<img src=x>"), escape_cell("<0.001%")
    ('mean \\|error\\|', '&lt;img src=x>', '<0.001%')
    >>> escape_cell(Code("w`<b>"))
    '``w`<b>``'
    """
    flat = " ".join(str(text).split())
    if isinstance(text, Code):
        fence = "`" * (max((len(run) for run in re.findall("`+", flat)), default=0) + 1)
        pad = " " if flat.startswith("`") or flat.endswith("`") else ""
        return f"{fence}{pad}{flat}{pad}{fence}".replace("|", "\\|")
    flat = flat.replace("\\|", "|").replace("|", "\\|")
    return re.sub(r"<(?=[A-Za-z/!?])", "&lt;", flat)


def markdown_table(
    rows: Sequence[Dict[str, Any]], columns: Sequence[str], headers=None, align=None
) -> str:
    """The markdown table of ``rows`` (dicts) restricted to ``columns``: the project's one
    table writer.

    Cells go through :func:`format_value` with the column as ``name`` (scale columns show
    powers of two as ``2^k``, counts show as integers) and :func:`escape_cell`. A column whose
    cells all start like a number (``12``, ``2^4``, ``<0.001%``, ``n/a``) is right-aligned.

    Args:
        rows (sequence of dict): one per table row; a missing key is an empty cell.
        columns (sequence of str): the keys shown, in order.
        headers (sequence of str, optional): the header cells; default ``columns``.
        align (str, optional): one of ``l``/``r`` per column; default as above.

    >>> print(markdown_table([{"skipped": 16.0, "final_scale": 16.0, "k": "a|b"}],
    ...                      ["skipped", "final_scale", "k"]))
    | skipped | final_scale | k |
    |---:|---:|---|
    | 16 | 2^4 | a\\|b |
    """
    headers = [escape_cell(h) for h in (headers or columns)]
    body, align = _cells(rows, columns, headers, align)
    body = [[escape_cell(cell) for cell in cells] for cells in body]
    lines = ["| " + " | ".join(headers) + " |", "|" + "".join(_RULE[a] for a in align)]
    lines.extend("| " + " | ".join(cells) + " |" for cells in body)
    return "\n".join(lines)


_RULE = {"l": "---|", "r": "---:|"}


def _cells(rows, columns, headers, align):
    """The cells of ``rows`` (:func:`format_value` per column) and each column's alignment:
    ``r`` where every cell starts like a number, unless ``align`` says otherwise."""
    if len(headers) != len(columns):
        raise ValueError(f"headers must hold {len(columns)} cells, got {len(headers)}")
    body = [[format_value(row.get(c, ""), name=c) for c in columns] for row in rows]
    if align is None:
        align = "".join(
            "r" if body and all(_NUMERIC.match(r[i]) for r in body if r[i]) else "l"
            for i in range(len(columns))
        )
    if len(align) != len(columns) or set(align) - set("lr"):
        raise ValueError(f"align must hold one of 'l', 'r' per column, got {align!r}")
    return body, align


TERMINAL_WIDTH = 100
"""Widest line the terminal outputs print (tables, legends, notes, the policy line)."""


def terminal_text(text: str, first: str = "") -> str:
    """``first + text`` wrapped to :data:`TERMINAL_WIDTH`, later lines indented two spaces; a
    word is never cut.

    >>> print(terminal_text("a b", first="x: "))
    x: a b
    """
    return textwrap.fill(
        text,
        width=TERMINAL_WIDTH,
        initial_indent=first,
        subsequent_indent="  ",
        break_long_words=False,
        break_on_hyphens=False,
    )


def terminal_table(
    rows: Sequence[Dict[str, Any]], columns: Sequence[str], headers=None, width=TERMINAL_WIDTH
) -> str:
    """:func:`markdown_table`'s cells and alignment as plain aligned text for a terminal
    (tabulate's ``simple`` format: no markdown pipes), at most ``width`` characters wide: heads
    wrap to their column's cells, and a table still too wide is cut into blocks of columns, its
    leading text columns (the row's names) repeated in each.

    >>> print(terminal_table([{"skipped": 16.0, "final_scale": 16.0}], ["skipped", "final_scale"]))
      skipped    final_scale
    ---------  -------------
           16            2^4
    """
    from tabulate import tabulate

    headers = list(headers or columns)
    body, align = _cells(rows, columns, headers, None)
    wraps = [_head_wrap(h, [r[i] for r in body]) for i, h in enumerate(headers)]

    def lay_out(block):
        return tabulate(
            [[r[i] for i in block] for r in body],
            headers=[headers[i] for i in block],
            tablefmt="simple",
            colalign=["right" if align[i] == "r" else "left" for i in block],
            disable_numparse=True,
            maxheadercolwidths=[wraps[i] for i in block],
        )

    lead = [0] + [i for i in range(1, len(align)) if "r" not in align[1 : i + 1]]
    blocks = [lead]  # column indices per block, the leading text columns in each
    for i in range(len(lead), len(headers)):
        wider = blocks[-1] + [i]
        if len(blocks[-1]) > len(lead) and max(map(len, lay_out(wider).splitlines())) > width:
            wider = lead + [i]
            blocks.append(wider)
        blocks[-1] = wider
    return "\n\n".join(lay_out(block) for block in blocks)


def _head_wrap(head: str, cells: Sequence[str]) -> int:
    """Width a head wraps to: its column's widest cell, at least its longest word, at most
    :data:`HEAD_WIDTH` unless the cells are wider."""
    cell = max((len(c) for c in cells), default=0)
    word = max((len(w) for w in head.split()), default=1)
    return min(max(cell, word), max(HEAD_WIDTH, cell))


def markdown_grid(headers: Sequence[str], rows: Iterable[Sequence[Any]], align=None) -> str:
    """:func:`markdown_table` of rows given as sequences of cells, one per header.

    >>> print(markdown_grid(["variant", "time"], [["copy", "1.5 ms"]]))
    | variant | time |
    |---|---:|
    | copy | 1.5 ms |
    """
    keys = [f"#{i}" for i in range(len(headers))]
    dicts = []
    for cells in rows:
        cells = list(cells)
        if len(cells) != len(keys):
            raise ValueError(f"a row must hold {len(keys)} cells, got {len(cells)}: {cells!r}")
        dicts.append(dict(zip(keys, cells)))
    return markdown_table(dicts, keys, list(headers), align)
