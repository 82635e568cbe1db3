"""The figures' own style, in one place: a colour-blind-safe palette (Okabe and Ito, 2008) and a
look (colour, marker, line style) for every policy, loss scale and event, so that no figure
tells two things apart by colour alone.

- A policy of :data:`updater.policy.presets.PRESETS` has a fixed look (:data:`POLICY_LOOKS`); any
  other label gets :func:`nth_look` by its position.
- A loss scale ``2**k`` has a fixed colour (:func:`scale_look`); within a figure its line style
  follows its position, so the scales of one figure differ by line style too.
- Events: :data:`OVERFLOW`, :data:`BAD_BATCH`; the safe band is :data:`BAND_COLOR`.
- :data:`SMOOTHING_SHARE`: the one smoothing rule of the trajectory figures.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Dict, Tuple, Union

OKABE_ITO: Dict[str, str] = {
    "blue": "#0072B2",
    "vermillion": "#D55E00",
    "green": "#009E73",
    "orange": "#E69F00",
    "purple": "#CC79A7",
    "sky": "#56B4E9",
    "yellow": "#F0E442",
    "black": "#000000",
}
"""The Okabe-Ito palette, safe for the common colour-vision deficiencies."""

PALETTE: Tuple[str, ...] = tuple(OKABE_ITO.values())
"""The palette in the order figures use it."""

MARKERS = ("o", "s", "^", "D", "v", "P", "X", "*")
"""Markers in the order figures use them."""

LINE_STYLES = ("-", "--", ":", "-.", (0, (5, 1, 1, 1)), (0, (1, 1)))
"""Line styles in the order figures use them."""

BAND_COLOR = "0.82"
"""The safe band of the trajectory figures: grey, under every line."""

SMOOTHING_SHARE = 0.01
"""Trajectory figures smooth a jumpy line by a rolling median over this share of the run."""


@dataclass(frozen=True)
class Look:
    """How one thing is drawn: colour, marker and line style."""

    color: str
    marker: str
    ls: Union[str, tuple]

    def line(self, **kw) -> dict:
        """Keyword arguments of ``ax.plot`` for a line with hollow markers."""
        return {"color": self.color, "ls": self.ls, "marker": self.marker, "mfc": "none", **kw}


POLICY_LOOKS: Dict[str, Look] = {
    "nnabla-legacy": Look(OKABE_ITO["vermillion"], "s", "--"),
    "pytorch": Look(OKABE_ITO["sky"], "^", ":"),
    "deepspeed": Look(OKABE_ITO["orange"], "D", "-."),
    "dynamic": Look(OKABE_ITO["blue"], "o", "-"),
    "headroom": Look(OKABE_ITO["green"], "v", LINE_STYLES[4]),
    "static": Look(OKABE_ITO["purple"], "P", LINE_STYLES[5]),
}
"""The fixed look of each preset, the same in every figure."""

OVERFLOW = Look(OKABE_ITO["vermillion"], "v", "none")
"""Overflow (a skipped step): a vermillion down triangle."""

BAD_BATCH = Look(OKABE_ITO["black"], "x", "none")
"""A bad batch (skipped at any scale): a black cross."""


def nth_look(i: int) -> Look:
    """The ``i``-th look: palette colour, marker and line style all change with ``i``."""
    return Look(PALETTE[i % len(PALETTE)], MARKERS[i % len(MARKERS)], LINE_STYLES[i % 6])


def policy_look(label: str, i: int = 0) -> Look:
    """The look of policy ``label``: its fixed one when it has one, else :func:`nth_look`."""
    return POLICY_LOOKS.get(label, nth_look(i))


def scale_look(k: int, i: int = 0) -> Look:
    """The look of loss scale ``2**k``, the ``i``-th scale of its figure: the colour is fixed
    by ``k`` (the same scale, the same colour in every figure), the line style by ``i``.

    >>> scale_look(15).color == scale_look(15, 2).color, scale_look(3, 0).ls, scale_look(3, 1).ls
    (True, '-', '--')
    """
    return Look(PALETTE[k % len(PALETTE)], MARKERS[i % len(MARKERS)], LINE_STYLES[i % 4])
