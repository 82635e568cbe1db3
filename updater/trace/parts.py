"""A trace written in parts while it is recorded: each part is a :class:`updater.trace.Trace`
file in the folder ``<trace path>.parts``, written atomically; merging them (in order) gives the
trace, written atomically to its path, and then the parts are removed. NumPy only."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import List, Union

import numpy as np

from .format import NBINS, Trace


def parts_dir(path: Union[str, Path]) -> Path:
    """The folder of the parts of the trace at ``path``."""
    return Path(f"{path}.parts")


def part_files(path: Union[str, Path]) -> List[Path]:
    """The part files of the trace at ``path``, in recording order (none: empty)."""
    return sorted(parts_dir(path).glob("part-*.npz"))


def write_part(path: Union[str, Path], index: int, trace: Trace) -> Path:
    """Write ``trace`` as part number ``index`` of the trace at ``path``."""
    folder = parts_dir(path)
    folder.mkdir(exist_ok=True)
    return trace.save(folder / f"part-{index:08d}.npz")


def concat_traces(traces: List[Trace], name: str) -> Trace:
    """The steps of ``traces`` one after the other: per-layer columns aligned by name (a layer
    absent from a part has zero counts there), flush measurements NaN where a part has none,
    probed only if every part is."""
    per_layer = {}
    if traces[0].has_layers:
        names = list(dict.fromkeys(n for t in traces for n in t.layer_names))
        shaped = []
        for t in traces:
            columns = [names.index(n) for n in t.layer_names]
            c = np.zeros((t.steps, len(names), NBINS), np.int64)
            z, a = np.zeros((t.steps, len(names)), np.int64), np.zeros((t.steps, len(names)))
            c[:, columns], z[:, columns], a[:, columns] = (
                t.layer_counts,
                t.layer_zeros,
                t.layer_absmax,
            )
            shaped.append((c, z, a))
        per_layer = dict(
            layer_names=tuple(names),
            **{k: np.concatenate([s[i] for s in shaped]) for i, k in
               enumerate(("layer_counts", "layer_zeros", "layer_absmax"))},
        )  # fmt: skip
    measured = [t for t in traces if t.has_flush]
    if measured:
        width = measured[0].flush_scales.shape[1]
        for key in ("flush_scales", "flush_shares"):
            per_layer[key] = np.concatenate(
                [getattr(t, key) if t.has_flush else np.full((t.steps, width), np.nan)
                 for t in traces]
            )  # fmt: skip
    if any(t.has_forward for t in traces):
        per_layer["forward_peak"] = np.concatenate(
            [t.forward_peak if t.has_forward else np.full(t.steps, np.nan) for t in traces]
        )
        per_layer["forward_where"] = tuple(
            w for t in traces for w in (t.forward_where if t.has_forward else ("",) * t.steps)
        )
    return Trace(
        np.concatenate([t.counts for t in traces]),
        np.concatenate([t.zeros for t in traces]),
        np.concatenate([t.absmax for t in traces]),
        np.concatenate([t.nonfinite for t in traces]),
        name,
        np.concatenate([t.overflow_scale for t in traces]),
        overflow_probed=all(t.overflow_probed for t in traces),
        finite_scale=np.concatenate([t.finite_scale for t in traces]),
        **per_layer,
    )


def merge_parts(path: Union[str, Path], name: str | None = None) -> Path:
    """Write the trace at ``path`` from its parts, then remove them; return ``path``.

    Raises:
        FileNotFoundError: ``path`` has no parts.
    """
    files = part_files(path)
    if not files:
        raise FileNotFoundError(f"{parts_dir(path)} holds no trace parts to merge")
    traces = [Trace.load(f) for f in files]
    merged = concat_traces(traces, traces[0].name if name is None else name).save(path)
    shutil.rmtree(parts_dir(path))
    return merged
