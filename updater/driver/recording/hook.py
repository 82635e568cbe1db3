"""The recording hook the driver calls on a step its recorder records: before each attempt, the
forward pass's hook (:mod:`.forward_peak`); after the attempts, the probes (:mod:`.probes`,
against the float32 reference graph for flushing) and the hand-over to the recorder. It is what
the probes rerun (:class:`updater.driver.recording.probes.Rerun`): the step's rounds again at
another scale, not counted, checked on this worker alone (no collective)."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Dict, List

import nnabla as nn
import numpy as np

from ...trace.measured import MeasuredStep
from ..arrays import backward_seed
from ..flat import SavedData
from ..function_roles import unregistered_functions
from ..probe_options import probes_of
from .flush_schedule import flush_schedule
from .forward_peak import ForwardPeak
from .probes import probe_bounds, probe_step


@dataclass(frozen=True, kw_only=True)
class Attempted:
    """How the attempts of a recorded step ended.

    Attributes:
        seed (float): the last attempt's backward seed.
        finite (bool): its gradients were finite (agreed across workers).
        good_batch (bool): the verdict was not "bad batch".
        overflow_scale (float or None): the seed of the last earlier attempt that overflowed
            (a retry), None when there was none.
        arrays (list of numpy arrays or None): host views of its gradients the check read.
    """

    seed: float
    finite: bool
    good_batch: bool
    overflow_scale: float | None
    arrays: list | None


@dataclass(frozen=True, kw_only=True)
class Wanted:
    """What a recorded step needs of its attempts (:meth:`Recording.wanted`).

    Attributes:
        replays (bool): its rounds run again (probes): each round's inputs are kept.
        forward_peak (ForwardPeak or None): the forward pass's ``function_post_hook``
            (``forward_headroom``), reset before each attempt (the recorded attempt is the
            last); None: no hook.
    """

    replays: bool
    forward_peak: ForwardPeak | None


def _check_copyable(loss) -> None:
    """``ValueError`` when the float32 copy of the graph that ``Probes(flush=True)`` runs cannot
    be made: a function nnabla's registry lacks (a ``PythonFunction``) has no maker to copy."""
    unknown = unregistered_functions(loss)
    if unknown:
        raise ValueError(
            "Probes(flush=True): the updater measures flushing on a float32 copy "
            f"of the graph (updater.amp.rewrite), which cannot copy {', '.join(unknown)} (not "
            "one of nnabla's registered functions); record with Probes(flush=False)"
        )


class Recording:
    """The hook of the options ``recorder`` and ``probes`` (module doc); it leaves the recorder
    as the user made it, handing it one value per recorded step.

    Args:
        options (LiveOptions): reads ``recorder`` and ``probes`` (which it is built with)
            (:func:`updater.driver.probe_options.probes_of`).
        reads (StepReads): the step's rounds (:class:`Rounds`, run again by the probes), the
            state the forward pass writes (:class:`ForwardState`, copied) and what the check
            reads besides the gradients.
        work (GradientWork): the gradients and the check.
        seed_type (type): the loss's precision (``np.float16`` or ``np.float32``).
    """

    def __init__(self, options, reads, work, seed_type):
        self.recorder = options.record.recorder
        self.probes = probes_of(self.recorder, options.record.probes)
        self._reruns = self.probes.reruns  # asked per recorded step: answered once
        self.reads = reads
        self.rounds = reads.rounds
        self.work = work
        self.forward_state = reads.forward_state
        self.seed_type = seed_type
        self._policy = None  # the policy of the step recorded (for probe bounds and seeds)
        self._reference = None  # float32 copy of the graph, for flush measurement
        self._probe_guess = None  # where the last probed step's threshold was (None: nowhere)
        self._forward_peak = ForwardPeak()
        peak = self._forward_peak if self.probes.forward_headroom else None
        self._wanted = Wanted(replays=self._reruns, forward_peak=peak)
        self._flush = flush_schedule(self.probes, self.rounds_per_attempt)
        if self.probes.flush:
            _check_copyable(self.rounds.loss)

    def wanted(self, step: int) -> Wanted | None:
        """What ``update()`` call ``step`` needs for its recording (:class:`Wanted`, the same
        value for every recorded step of this build), or None when it is not recorded: one
        question to the recorder per step."""
        return self._wanted if self.recorder.wants(step) else None

    def after(self, step: int, policy, attempt: Attempted) -> None:
        """After the attempts of recorded step ``step`` under ``policy``: probe its overflow
        threshold and flushing when the recorder asks (and the batch was not bad), then hand
        the step to the recorder as one value (:class:`~updater.trace.measured.MeasuredStep`:
        what the probes measured, by the trace group that holds it)."""
        self._policy = policy
        probes = self.probes
        seed, good_batch = attempt.seed, attempt.good_batch
        over = seed if not attempt.finite and good_batch else attempt.overflow_scale
        grads, scale, finite_scale, passes, measured = attempt.arrays, seed, 0.0, 0, {}
        if self._reruns and good_batch:
            found = self._probe(attempt, over, step // self.recorder.every)
            passes, grads = found.passes, None  # host views taken before may be stale
            if found.flush is not None:
                measured["flush"] = (found.flush_scales, found.flush)
            if probes.overflow:
                over, finite_scale = found.threshold, found.finite_scale
            if found.finite_grads is not None:
                grads, scale = found.finite_grads, found.finite_seed
        if probes.forward_headroom:
            measured["forward"] = (self._forward_peak.peak, self._forward_peak.where)
        measured_step = MeasuredStep(
            step=step,
            grads=grads or self.host_grads(),
            scale=scale,
            bad_batch=not good_batch,
            overflow_scale=math.inf if over is None else over,
            finite_scale=finite_scale,
            names=list(self.params()),
            overflow_probed=probes.overflow,
            probe_passes=passes,
            measured=measured,
        )
        self.recorder.record_step(measured_step)

    def _probe(self, attempt: Attempted, over: float | None, recorded: int):
        """The probes of recorded step number ``recorded``
        (:func:`updater.driver.recording.probes.probe_step`), its flushing measured when the
        schedule says so after the search; the next step's search starts where this one's
        threshold was."""
        known = math.inf if over is None else over
        bounds = probe_bounds(self._policy, self.seed_type)
        guess = self._probe_guess if self.probes.from_previous else None
        overflow, schedule = self.probes.overflow, self._flush
        due = schedule is not None and (lambda passes: schedule.due(recorded, passes))
        found = probe_step(self, attempt.seed, attempt.finite, known, overflow, due, bounds, guess)
        if found.flush_passes:
            schedule.spent(found.flush_passes)
        if overflow:  # a censored step's guess: the scale it was finite at
            t = found.threshold
            self._probe_guess = t if t < math.inf else (found.finite_scale or None)
        return found

    # ------------------------------------- what the probes rerun (updater.driver.recording.probes)

    @property
    def rounds_per_attempt(self) -> int:
        """Forward/backward rounds per attempt."""
        return self.rounds.options.record.accum_grad

    def params(self) -> Dict[str, nn.Variable]:
        """The solver's parameters."""
        return self.work.params()

    def with_gradients(self) -> List[nn.Variable]:
        """The Variables whose gradients a step leaves: the solver's parameters and the inputs
        with ``need_grad``."""
        inputs = [v for v in self.rounds.inputs() if v.need_grad]
        return [*self.params().values(), *inputs]

    def host_grads(self) -> List[np.ndarray]:
        """Host views of the gradients."""
        return self.work.host_grads()

    def save_forward_state(self, slot: str) -> SavedData | None:
        """A copy of the state the forward pass writes; None when the graph writes none
        (:attr:`StepReads.stateful <updater.driver.gradient_work.StepReads.stateful>`, found
        once per build: a loss or ``forward_state`` assigned builds again)."""
        return self.forward_state.save(slot) if self.reads.plan().stateful else None

    def reference_grads(self) -> List[np.ndarray]:
        """The step's gradients from a float32 copy of the graph (built on first use; same
        parameters and inputs), at seed 1, as float64 host copies."""
        if self._reference is None:
            from ...amp import AmpLists, function_names, rewrite

            loss = self.rounds.loss
            everything = AmpLists(float=function_names())
            self._reference = rewrite(loss, everything, getattr(loss.parent, "context", None))
        self.rounds.run(1.0, replay=True, keep=True, count=False, loss=self._reference)
        return [np.array(g, np.float64) for g in self.host_grads()]

    def probe(self, scale: float) -> bool:
        """One overflow probe: the step's rounds again at ``scale`` (not counted) and the
        check; whether this worker's own gradients are finite (no collective: a recorder on one
        worker leaves the others' steps as they are)."""
        seed = backward_seed(scale, self.seed_type, self._policy)
        self.rounds.run(seed, replay=True, keep=True, count=False)
        reads = self.reads.plan()
        return self.work.facts(reads, self._policy.needs_grad_absmax).finite
