"""Several recordings of one model replayed as one: training's own randomness in the spread.

One recording is one sample of training: another batch order gives other overflowing steps,
which the per-step jitter (a trajectory's noise) does not model. A :class:`TracePool` holds
recordings of one model (traces of one name and one length); :func:`simulate_pooled` draws the
runs across them (run ``r`` replays recording ``r mod n``), so the spread includes the
differences between recordings. ``dls simulate/sweep/tune`` pool the ``--trace`` files that
share a name (:func:`pool_by_name`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import List, Sequence

import numpy as np

from sim.replay.result import RunResult
from sim.replay.run import simulate_many
from updater.trace import Trace


@dataclass
class TracePool:
    """Recordings of one model.

    Attributes:
        traces (list of Trace): at least one, all of one name, one step count and one
            ``every``.
    """

    traces: List[Trace]

    def __post_init__(self):
        self.traces = list(self.traces)
        if not self.traces:
            raise ValueError("a trace pool needs at least one trace, got none")
        names = {t.name for t in self.traces}
        lengths = {(t.steps, t.every) for t in self.traces}
        if len(names) != 1 or len(lengths) != 1:
            raise ValueError(
                "a trace pool holds recordings of one model: traces of one name, one step "
                f"count and one every, got names {sorted(names)} and (steps, every) "
                f"{sorted(lengths)}"
            )

    @property
    def name(self) -> str:
        """The model's name, with the number of recordings when more than one."""
        n = len(self.traces)
        return self.traces[0].name + (f" ({n} recordings)" if n > 1 else "")

    @property
    def steps(self) -> int:
        """Recorded steps of every recording."""
        return self.traces[0].steps

    @property
    def training_steps(self) -> int:
        """Training steps of every recording (:attr:`updater.trace.Trace.training_steps`)."""
        return self.traces[0].training_steps


NAME_RULE = (
    "recordings pool by their trace name, GradientRecorder(name=...), which defaults to the "
    "file's stem"
)
"""The pooling rule in words, for the commands' messages."""


def pool_by_name(traces: Sequence[Trace]) -> list:
    """The traces with recordings of one name gathered into a :class:`TracePool` (in the order
    of each name's first trace); a name with one trace stays that trace."""
    groups: dict = {}
    for t in traces:
        groups.setdefault(t.name, []).append(t)
    return [g[0] if len(g) == 1 else TracePool(g) for g in groups.values()]


def simulate_pooled(
    policies, trace, runs: int = 1, seed: int = 0, jitter: float = 0.25, labels=None, progress=None
) -> List[RunResult]:
    """:func:`sim.replay.run.simulate_many` over a trace or a :class:`TracePool`.

    Over a pool of ``n`` recordings, recording ``i`` replays runs ``i, i + n, ...`` with jitter
    seed ``seed + i``; each policy's result holds all ``runs`` runs (those of recording 0
    first), named after the pool.

    Args:
        policies, runs, seed, jitter, labels, progress: as in :func:`simulate_many`; with a pool
            ``runs`` must be at least the number of recordings.
        trace (Trace or TracePool): what to replay.
    """
    if isinstance(trace, Trace):
        return simulate_many(policies, trace, runs, seed, jitter, labels, progress)
    n = len(trace.traces)
    if runs < n:
        raise ValueError(
            f"runs must be at least the number of pooled recordings ({n}) to draw from each, "
            f"got {runs}"
        )
    parts = [
        simulate_many(policies, t, len(range(i, runs, n)), seed + i, jitter, labels, progress)
        for i, t in enumerate(trace.traces)
    ]
    return [_joined([p[k] for p in parts], trace.name) for k in range(len(parts[0]))]


def _joined(results: List[RunResult], name: str) -> RunResult:
    """The runs of ``results`` (one policy over recordings of one length) as one result."""
    first = results[0]
    scale, overflow = (
        np.concatenate([getattr(r, f) for r in results], axis=1) for f in ("scale", "overflow")
    )
    metrics = {k: np.concatenate([r.metrics[k] for r in results]) for k in first.metrics}
    edges = np.cumsum([0] + [r.runs for r in results]).tolist()
    parts = [(r.source, slice(a, b)) for r, a, b in zip(results, edges, edges[1:])]
    return RunResult(first.label, first.policy, name, scale, overflow, metrics, _Joined(parts))


class _Joined:
    """The :attr:`~sim.replay.result.RunResult.source` of joined results: each part's source
    over its columns, concatenated."""

    def __init__(self, parts: list):
        self.parts = parts  # (source, columns of the joined result)

    def __call__(self, name: str, scale: np.ndarray, overflow: np.ndarray) -> np.ndarray:
        arrays = [source(name, scale[:, c], overflow[:, c]) for source, c in self.parts]
        return np.concatenate(arrays, axis=1)
