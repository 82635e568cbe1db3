"""Names a user types (a policy's name in Python, anything on the ``dls`` command line):
matched case-insensitively, and a "did you mean" from :mod:`difflib` (the standard library's
closest-match rule) when a name is unknown.

One rule for every name: policies, subcommands, options, trace families and shipped traces.
And one rule for showing a name the user chose (a file's path) in a terminal line or an
exception message: :func:`shown`.
"""

from __future__ import annotations

import difflib
import os
from typing import Sequence, Union


def shown(name: Union[str, bytes, os.PathLike]) -> str:
    r"""``name`` (a path, or any name a user chose) as a terminal line or a message shows it:
    each byte the file system's encoding cannot decode as ``?`` (as a text file holds it),
    each control character (an ESC sequence, a newline, a bidirectional override) escaped
    as Python writes it (``\x1b``, ``\n``, ``\u202e``); anything else as it is.

    >>> shown("run\x1b[2J.npz"), shown(os.fsdecode(b"g\xff.npz")), shown("caf\u00e9")
    ('run\\x1b[2J.npz', 'g?.npz', 'café')
    """
    text = os.fsdecode(os.fspath(name))
    if text.isprintable():
        return text
    return "".join(
        c if c.isprintable() else "?" if "\udc80" <= c <= "\udcff" else repr(c)[1:-1] for c in text
    )


def match_name(given: str, choices: Sequence[str]) -> str | None:
    """The choice ``given`` names: itself, else the one choice equal to it ignoring case, else
    None.

    >>> match_name("Dynamic", ["dynamic", "DynamicScale"]), match_name("x", ["dynamic"])
    ('dynamic', None)
    """
    if given in choices:
        return given
    folded = [c for c in choices if c.lower() == given.lower()]
    return folded[0] if len(folded) == 1 else None


def did_you_mean(given: str, choices: Sequence[str]) -> str:
    """`` (did you mean 'x'?)`` naming the closest choices (:func:`difflib.get_close_matches`,
    ignoring case), or ``""`` when none is close.

    >>> did_you_mean("simulat", ["simulate", "sweep"]), did_you_mean("zzz", ["sweep"])
    (" (did you mean 'simulate'?)", '')
    """
    lower = {c.lower(): c for c in choices}
    close = difflib.get_close_matches(given.lower(), list(lower), n=3, cutoff=0.6)
    if not close:
        return ""
    return f" (did you mean {' or '.join(repr(lower[c]) for c in close)}?)"


def unexpected_keyword(owner: str, given: str, accepted: Sequence[str]) -> TypeError:
    """The ``TypeError`` for a keyword argument ``owner`` does not take, naming the closest of
    the ``accepted`` names (as :func:`did_you_mean`).

    >>> print(unexpected_keyword("Policy", "scal", ["scale"]))
    Policy got an unexpected keyword argument 'scal' (did you mean 'scale'?)
    """
    return TypeError(
        f"{owner} got an unexpected keyword argument {given!r}{did_you_mean(given, accepted)}"
    )
