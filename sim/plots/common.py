"""What every figure of the simulator shares: new figures, figure files, legends, tick labels.

The figures themselves live by subject: :mod:`sim.plots.trajectories` (scale trajectories),
:mod:`sim.plots.runs` (policy comparisons), :mod:`sim.plots.gradients` (gradient
distributions: histograms by binade, underflow against the loss scale) and
:mod:`sim.plots.layers` (per-layer underflow). Colours, markers and line styles come from
:mod:`sim.plots.style`. A new figure goes into the module of its subject and uses both.

Every figure is a :class:`matplotlib.figure.Figure` built directly: no pyplot and no backend
switch, so importing these modules leaves the user's matplotlib session alone. Each plot
function takes ``ax=None``: it draws on ``ax`` when given, otherwise on a new figure of
``figsize`` inches at :data:`DPI` (:func:`new_axes`), and returns the figure.
:func:`save_figure` writes the format named by the file's extension; :func:`check_figure_path`
checks a path before any work.
"""

from __future__ import annotations

import io
import math
import shutil
from pathlib import Path
from typing import List, Union

import matplotlib as mpl
from matplotlib.backend_bases import FigureCanvasBase
from matplotlib.figure import Figure
from matplotlib.ticker import FuncFormatter

from updater.common.identity import figure_keywords, prove_figure
from updater.common.writing import write_file

DPI = 100
"""Dots per inch of new figures and of :func:`save_figure`."""

_METADATA = {
    "png": {"Software": None},
    "pdf": {"Creator": None, "Producer": None, "CreationDate": None},
    "svg": {"Creator": None, "Date": None},
}
"""No matplotlib version (a rerun writes the same bytes); PDF and SVG get the keywords that
hold their proof (:func:`updater.common.identity.figure_keywords`)."""


# ---------------------------------------------------------------- figure files


def figure_formats() -> List[str]:
    """File extensions :func:`save_figure` accepts: the formats the installed matplotlib
    writes (``pgf`` only when its TeX program is on PATH)."""
    tex = shutil.which(mpl.rcParams["pgf.texsystem"])
    return sorted(f for f in FigureCanvasBase.get_supported_filetypes() if f != "pgf" or tex)


def check_figure_path(path: Union[str, Path]) -> str:
    """Check a figure path before doing the work that makes the figure; return its format.

    Args:
        path (str or Path): output file; its extension (any case) names the format, one of
            :func:`figure_formats` (png, pdf, svg, jpg, ...); its folder must exist.

    Returns:
        str: the format, the extension in lower case without the dot.

    Raises:
        TypeError: ``path`` is not a str or Path.
        ValueError: no extension, one matplotlib cannot write, or a missing folder.

    >>> check_figure_path("traj.PDF")
    'pdf'
    """
    if not isinstance(path, (str, Path)):
        raise TypeError(f"figure path must be a str or Path, got {type(path).__name__}")
    path = Path(path)
    formats = figure_formats()
    fmt = path.suffix[1:].lower()
    if not fmt:
        raise ValueError(
            f"figure path {str(path)!r} has no extension; add one of: {', '.join(formats)}"
        )
    if fmt not in formats:
        raise ValueError(
            f"figure path {str(path)!r}: cannot write {path.suffix!r} files; "
            f"use one of: {', '.join(formats)}"
        )
    if not path.parent.is_dir():
        raise ValueError(f"figure path {str(path)!r}: folder {str(path.parent)!r} does not exist")
    return fmt


def save_figure(
    fig: Figure, path: Union[str, Path], dpi: int = DPI, overwrite: bool = False
) -> Path:
    """Write ``fig`` in the format of ``path``'s extension (see :func:`check_figure_path`)
    with :func:`updater.common.writing.write_file` (atomic, never through a link; a file dls
    did not write is replaced only with ``overwrite=True``).

    PNG, PDF and SVG files carry no matplotlib version, so a rerun writes the same PNG bytes,
    and prove that dls wrote them (a digest of their bytes in a PNG text chunk, PDF and SVG
    keywords: :mod:`updater.common.identity`); a figure replaces only a figure of its format
    that proves so.

    Args:
        fig (Figure): the figure.
        path (str or Path): output file, e.g. ``traj.png``, ``traj.pdf``, ``traj.svg``.
        dpi (int, default 100): dots per inch; a raster image is ``figsize * dpi`` pixels.
        overwrite (bool, default False): replace a file dls did not write.
    """
    fmt = check_figure_path(path)
    meta = _METADATA.get(fmt)
    if fmt in ("pdf", "svg"):
        meta = {**meta, "Keywords": figure_keywords(fmt)}

    def write(f) -> None:
        drawn = io.BytesIO()
        fig.savefig(drawn, dpi=dpi, format=fmt, metadata=meta)
        f.write(prove_figure(drawn.getvalue(), fmt))

    return write_file(path, write, overwrite, kind=fmt)


# ---------------------------------------------------------------- new figures, legends


def new_axes(ax, figsize):
    """``(figure, axes)`` to draw on: ``ax`` and its figure when given, otherwise a new
    constrained-layout figure of ``figsize`` inches at :data:`DPI` with one axes."""
    if ax is not None:
        return ax.figure, ax
    fig = Figure(figsize=figsize, dpi=DPI, layout="constrained")
    return fig, fig.add_subplot()


def literal(name: str) -> str:
    r"""``name`` (a trace's, a layer's, a run's: anything a user chose) as figure text shows it
    literally: each ``$`` escaped, so no name starts mathtext (a trace named ``$x^{$`` is drawn
    as it is, not parsed).

    >>> literal("$x^{$")
    '\\$x^{\\$'
    """
    return str(name).replace("$", r"\$")


def legend_note(ax, text: str) -> None:
    """Add a legend line without a symbol."""
    ax.plot([], [], " ", label=text)


def legend_right(ax, **kw):
    """The axes' legend, right of the axes, top-aligned."""
    return ax.legend(
        loc="upper left", bbox_to_anchor=(1.01, 1.0), borderaxespad=0, fontsize="small", **kw
    )


# ---------------------------------------------------------------- powers of two in labels


def is_pow2(x: float) -> bool:
    """True when ``x`` is a finite power of two ``2**k`` (any integer ``k``)."""
    return x > 0 and math.isfinite(x) and math.log2(x) == int(math.log2(x))


def pow2_label(x: float) -> str:
    """``2^k`` (mathtext) for a power of two, else ``%g``.

    >>> pow2_label(2.0**-24), pow2_label(3.0)
    ('$2^{-24}$', '3')
    """
    return f"$2^{{{int(math.log2(x))}}}$" if is_pow2(x) else f"{x:g}"


def log2_ticks() -> FuncFormatter:
    """Tick labels ``2^k`` for an axis whose data are the exponents ``k``."""
    return FuncFormatter(lambda v, _: f"$2^{{{v:.0f}}}$")


def percent_ticks() -> FuncFormatter:
    """Tick labels in percent for an axis of shares (0.01 -> ``1%``), as the tables print them.

    >>> percent_ticks()(0.01, 0), percent_ticks()(1e-6, 0), percent_ticks()(1e-8, 0)
    ('1%', '0.0001%', '$10^{-6}$%')
    """

    def label(v, _):
        percent = v * 100
        if 0 < percent < 5e-5:  # below 0.0001%: a power of ten
            return f"$10^{{{math.log10(percent):.0f}}}$%"
        return f"{percent:.10g}%"

    return FuncFormatter(label)


def log10_share_ticks() -> FuncFormatter:
    """Tick labels ``10^k`` for a log axis of shares; ticks above 1 stay blank."""
    return FuncFormatter(lambda v, _: "" if v > 1.0 else f"$10^{{{math.log10(v):.0f}}}$")
