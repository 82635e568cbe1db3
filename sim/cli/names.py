"""Names typed on the ``dls`` command line, by the one rule of :mod:`updater.common.names`:
matched case-insensitively, with a "did you mean" when a name is unknown."""

from __future__ import annotations

from typing import Sequence

from updater.common.names import did_you_mean, match_name

__all__ = ["did_you_mean", "match_name", "resolve"]


def resolve(parser, option: str, given: str, choices: Sequence[str], what: str) -> str:
    """The choice ``given`` names (:func:`match_name`), else ``parser.error`` (exit status 2)
    naming the option, the bad name, the closest choices and all of them."""
    name = match_name(given, choices)
    if name is None:
        parser.error(
            f"{option}: unknown {what} {given!r}{did_you_mean(given, choices)}; "
            f"choose from {', '.join(choices)}"
        )
    return name
