"""Traces by the names ``dls --trace`` takes, for Python too: a synthetic family's name, a
shipped recording's name (both in any case), or a trace file's path."""

from __future__ import annotations

from pathlib import Path
from typing import Union

from sim.traces.families import FAMILIES, make_trace
from sim.traces.real import SHIPPED_RECORDINGS, shipped_trace
from updater.common.names import did_you_mean, match_name
from updater.trace import Trace


def family_name(spec: str):
    """The trace family ``spec`` names (case-insensitive), or None.

    >>> family_name("Spikes"), family_name("run.npz")
    ('spikes', None)
    """
    return match_name(spec, list(FAMILIES))


def trace_file(spec: Union[str, Path]) -> Path:
    """The file ``spec`` names: a shipped recording (its name in any case, when no such file
    exists here), or the path itself."""
    names = SHIPPED_RECORDINGS
    text = str(spec)
    model = match_name(text, names) if text in names or not Path(text).exists() else None
    return Path(spec) if model is None else shipped_trace(model)


def named_trace(
    spec: Union[str, Path, Trace], steps: int = 10000, seed: int = 0, max_bytes=None
) -> Trace:
    """The trace ``spec`` names, as ``dls --trace`` reads it: a :class:`Trace` as it is, a
    family's (``"spikes"``; ``steps`` and ``seed`` make it), a shipped recording's
    (``"digits_conv_bn"``, ``"digits_conv_bn.order1"``) or the file at a path
    (:meth:`Trace.load`, ``max_bytes`` as there).

    Raises:
        ValueError: a name that is neither a family, a shipped recording nor an existing or
            ``.npz`` path, naming the closest names.

    >>> named_trace("Spikes", steps=20).steps, named_trace("digits_mlp").name
    (20, 'digits_mlp')
    """
    if isinstance(spec, Trace):
        return spec
    family = family_name(str(spec))
    if family is not None:
        return make_trace(family, steps=steps, seed=seed)
    return Trace.load(recorded_trace_file(spec), max_bytes=max_bytes)


def recorded_trace_file(spec: Union[str, Path]) -> Path:
    """:func:`trace_file`, or ``ValueError`` when ``spec`` is no family, shipped recording,
    existing path or ``.npz`` name (naming the closest names)."""
    path = trace_file(spec)
    if not path.exists() and path.suffix != ".npz":
        raise ValueError(
            f"trace must be a family ({', '.join(FAMILIES)}), a shipped real trace "
            f"({', '.join(SHIPPED_RECORDINGS)}) or an .npz trace file, got {str(spec)!r}"
            + did_you_mean(str(spec), [*FAMILIES, *SHIPPED_RECORDINGS])
        )
    return path
