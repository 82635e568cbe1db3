"""The report's tables: policies described, notes on cells that could not be measured, summary
tables for the terminal, and the formats and table writer of :mod:`sim.tables`, which every
table goes through."""

from __future__ import annotations

from typing import Any, Dict, List, Sequence

from sim.replay.metrics import METRICS, SHARES, head, legend
from sim.tables import (
    escape_cell,
    format_percent,
    format_value,
    markdown_table,
    terminal_table,
    terminal_text,
    with_percents,
)

__all__ = [
    "describe_policy",
    "escape_cell",
    "find_row",
    "format_percent",
    "format_value",
    "markdown_table",
    "na_notes",
    "share_table",
    "summary_table",
    "with_percents",
]


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
            f"{head('mean_flushed')} n/a: every step of every run was skipped (overflow or bad "
            f"batch), so no applied step had values to flush; {head('signal_lost')} counts "
            "those steps as lost."
        )
    if any(r["steps_to_safe"] != r["steps_to_safe"] for r in rows):
        notes.append(
            f"{head('steps_to_safe')} n/a: no run came within a factor 2 of the safe scale "
            f"({head('never_safe')})."
        )
    return notes


def summary_table(
    rows: Sequence[Dict[str, Any]], columns: Sequence[str], with_legend: bool = True
) -> str:
    """Summary rows as a terminal table: each column under its one name
    (:func:`sim.replay.metrics.head`, as in the report), shares in percent, and (unless
    ``with_legend`` is False) the legend (:func:`sim.replay.metrics.legend`) underneath,
    wrapped to 100 characters."""
    table = terminal_table(with_percents(rows, SHARES), columns, [head(c) for c in columns])
    if not with_legend or not any(c in METRICS for c in columns):
        return table
    return table + "\n" + terminal_text(legend(columns), first="legend: ")


def share_table(rows, columns: Dict[str, str], shares: Sequence[str] = ()) -> str:
    """A markdown table of ``rows`` with ``columns`` (name -> head); ``shares`` as percents."""
    return markdown_table(with_percents(rows, shares), list(columns), list(columns.values()))


def find_row(rows: Sequence[Dict[str, Any]], **match) -> Dict[str, Any]:
    """The first row whose values equal ``match``; ``KeyError`` naming it when none does."""
    for r in rows:
        if all(r[k] == v for k, v in match.items()):
            return r
    raise KeyError(f"no row with {match}")


def in_words(items) -> str:
    """Items joined as words: ``0``, ``0 and 1``, ``0, 1 and 2``.

    >>> in_words([0]), in_words([0, 1]), in_words([0, 1, 2])
    ('0', '0 and 1', '0, 1 and 2')
    """
    words = [str(i) for i in items]
    return words[0] if len(words) == 1 else ", ".join(words[:-1]) + " and " + words[-1]
