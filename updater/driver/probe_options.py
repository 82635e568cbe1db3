"""What the driver measures on a step a :class:`updater.trace.GradientRecorder` records: the
updater's option ``probes``, a :class:`Probes` record (overflow thresholds, flushing, the
forward pass's headroom). The recorder only stores what it is handed."""

from __future__ import annotations

from dataclasses import dataclass

from ..common.validation import check_bool, check_instance, check_int, check_positive
from ..trace.deprecated_probes import NEW_PROBES_SPELLING


@dataclass(frozen=True)
class Probes:
    """The updater's option ``probes``: what it measures, besides the gradients, on each step
    its ``recorder`` records (all off by default; training is left exactly as without them,
    :mod:`updater.driver.recording`). Each field is checked when made (``TypeError`` or
    ``ValueError`` naming it, the value and the range).

    Args:
        overflow (bool, default False): probe each recorded step's overflow threshold: run
            its forward and backward again on the same batch at other powers of two of the
            scale, within the policy's bounds, and record the smallest at which the backward
            pass overflows (and the largest at which it was finite).
        flush (bool, default False): measure the flushed share of a sample of recorded steps
            at several scales against a float32 copy of the graph (4 passes per measured step;
            the replay interpolates between them).
        flush_every (int or None, default None): with ``flush``, measure every this many
            recorded steps (>= 1; 1: every step; the first is measured); None: a random
            sample within ``pass_budget``, each step with a chance independent of it
            (:mod:`updater.driver.recording.flush_schedule`).
        from_previous (bool, default True): start each step's overflow search at the previous
            probed step's threshold; False walks outward from the step's own scale (the older
            search: the same thresholds, more passes).
        forward_headroom (bool, default False): record each recorded step's largest |value|
            or accumulated magnitude of the float16 forward pass relative to 65504, and the
            function (for BatchNormalization, its float16 sums of x and x^2 over a channel; no
            extra pass).
        pass_budget (float, default 2.0): with ``flush`` and ``flush_every`` None, the extra
            forward/backward passes per recorded step the probes may run, overflow search
            included (> 0; a step is measured only once the steps so far leave the passes
            for it; ``benchmarks.bench_flush_sampling`` checks the flushed share it gives).

    >>> Probes(overflow=True).reruns, Probes(flush=True).reruns
    (True, True)
    """

    overflow: bool = False
    flush: bool = False
    flush_every: int | None = None
    from_previous: bool = True
    forward_headroom: bool = False
    pass_budget: float = 2.0

    def __post_init__(self) -> None:
        checked = {
            "overflow": check_bool("overflow", self.overflow),
            "flush": check_bool("flush", self.flush),
            "flush_every": check_int("flush_every", self.flush_every, 1, none_ok=True),
            "pass_budget": check_positive("pass_budget", self.pass_budget),
            "from_previous": check_bool("from_previous", self.from_previous),
            "forward_headroom": check_bool("forward_headroom", self.forward_headroom),
        }
        for name, value in checked.items():
            object.__setattr__(self, name, value)

    @property
    def reruns(self) -> bool:
        """Whether a recorded step runs again (overflow probes or flush measurement): its
        rounds' inputs are kept."""
        return self.overflow or self.flush


def probes_of(recorder, probes: Probes | None) -> Probes:
    """The probes of steps ``recorder`` records: ``probes``; without it, those given to the
    recorder in the deprecated spelling (``GradientRecorder(probe_overflow=True, ...)``, kept
    for one release); else none.

    Raises:
        ValueError: both spellings were given.
    """
    deprecated = getattr(recorder, "_deprecated_probes", None)
    if deprecated is not None and probes is not None:
        raise ValueError(
            f"probes={probes!r} given to the updater and probe options given to its recorder "
            f"{recorder!r}: give them once, as {NEW_PROBES_SPELLING}"
        )
    if probes is not None:
        return probes
    return Probes(**deprecated) if deprecated is not None else Probes()


def check_probes(name: str, value, recorder) -> Probes | None:
    """``value``, the updater's option ``probes`` beside the option ``recorder``, checked.

    Raises:
        TypeError: ``value`` is neither a :class:`Probes` nor None.
        ValueError: probes without a recorder, or given twice (:func:`probes_of`).
    """
    if value is None:
        return None
    check_instance(name, value, Probes)
    if recorder is None:
        raise ValueError(
            f"{name}={value!r} without a recorder: the probes measure the steps a recorder "
            f"records; pass recorder=GradientRecorder(...) too, or {name}=None"
        )
    return probes_of(recorder, value)
