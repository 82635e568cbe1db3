"""What the driver does on a step a :class:`updater.trace.GradientRecorder` records, read once
from the recorder when the collaborators are built: which steps it records, whether their
overflow threshold is probed, their flushing measured, the forward pass's headroom measured."""

from __future__ import annotations

from typing import NamedTuple


class ProbeOptions(NamedTuple):
    """The recorder's instructions to the driver (``GradientRecorder``'s arguments of the same
    meaning, read once by :meth:`of`).

    Attributes:
        recorder (GradientRecorder): the recorder (its ``wants``/``wants_flush`` sample steps).
        overflow (bool): ``probe_overflow``: probe each recorded step's overflow threshold.
        flush (bool): ``measure_flush``: measure flushing against a float32 copy of the graph.
        from_previous (bool): ``probe_from_previous``: start the search at the previous
            probed step's threshold.
        forward_headroom (bool): ``forward_headroom``: measure the forward pass's peak.
    """

    recorder: object
    overflow: bool
    flush: bool
    from_previous: bool
    forward_headroom: bool

    @classmethod
    def of(cls, recorder) -> ProbeOptions:
        """The instructions of ``recorder``."""
        return cls(
            recorder,
            recorder.probe_overflow,
            recorder.measure_flush,
            recorder.probe_from_previous,
            recorder.forward_headroom,
        )

    @property
    def reruns(self) -> bool:
        """Whether a recorded step runs again (overflow probes or flush measurement): its
        rounds' inputs are kept."""
        return self.overflow or self.flush
