"""The attempts of one iteration, and the retry machinery, for
:class:`updater.DynamicLossScalingUpdater`.

One attempt is ``solver.zero_grad()`` and ``accum_grad`` rounds of feed, forward and
``backward(seed)``, then the all-reduce and the agreed finite check. ``on_overflow="retry"``
recomputes the same batch(es) at the lowered scale: the inputs of each accumulation round are
kept (copied on the device) and written back. The inputs that the forward pass writes (running
statistics, registered or made by hand: :func:`updater.driver.function_roles.state_inputs`,
found from the graph) move exactly once per batch, retried or not: copied before the batch and
put back before each retry and after a skipped step (``restore_on_skip``, the default), or, with
``restore_on_skip=False`` (nnabla's behaviour: a skipped batch moves them), copied after the first
attempt and restored after the last. A retry happens only when the policy lowered the seed and the
batch was not bad on any worker; otherwise the step is skipped. An attempt that raises (a
feeder that fails in a later accumulation round) puts them back too, with ``restore_on_skip``.

Each attempt ends in one verdict (:func:`updater.driver.records.verdict`, the same on every
path and every ``accum_grad``): applied when the gradients are finite, whatever the loss (an
inf/NaN loss is then counted in ``nonfinite_losses`` and warned about once); a bad batch when
they are not and the loss or an input is bad (bad data, which no scale fixes: skipped, never
retried, and the policy takes it as its third outcome, ``bad_batch=True``: the scale does not
move); an overflow otherwise.
"""

from __future__ import annotations

import logging
import math
from dataclasses import dataclass, field
from typing import Dict, List, Sequence

import nnabla as nn
import numpy as np

from ..policy import ScaleState
from .forward_peak import ForwardPeak
from .function_roles import unregistered_functions
from .probes import FLUSH_OFFSETS, probe_bounds, probe_step
from .records import APPLIED, BAD_BATCH, OVERFLOW, verdict

logger = logging.getLogger(__name__)


@dataclass
class Pending:
    """An iteration between :meth:`DynamicLossScalingUpdater.backward` and ``step()``."""

    seed: float
    finite: bool
    absmax: float | None
    loss_finite: bool | None
    attempts: int
    bad: Sequence[str]  # names of the parameters with non-finite gradients
    new_state: ScaleState
    unscaled: bool = False
    sumsq: float | None = None  # of the unscaled gradients, measured by update()'s fused pass
    bad_batch: bool = False  # an inf/NaN loss or input on some worker
    statistics: list = field(default_factory=list)  # running statistics newly inf/NaN
    state: ScaleState | None = None  # the state the last attempt started from


def _check_copyable(loss) -> None:
    """``ValueError`` when the float32 copy of the graph that ``measure_flush`` runs cannot be
    made: a function nnabla's registry lacks (a ``PythonFunction``) has no maker to copy."""
    unknown = unregistered_functions(loss)
    if unknown:
        raise ValueError(
            "recorder with measure_flush=True: the updater measures flushing on a float32 copy "
            f"of the graph (updater.amp.rewrite), which cannot copy {', '.join(unknown)} (not "
            "one of nnabla's registered functions); record with measure_flush=False"
        )


class Attempts:
    """Runs the attempts of one iteration (module doc).

    Args:
        rounds (Rounds): the forward/backward rounds of an attempt.
        work (GradientWork): the all-reduce, the agreement and the finite check.
        forward_state (ForwardState): copies of the state the forward pass writes.
        counters (Counters): ``overflows`` moves here.
        seed_type (type): the loss's precision (``np.float16`` or ``np.float32``).
        on_overflow (str): "skip" or "retry".
        max_retries (int): retries per iteration in "retry" mode.
        restore_on_skip (bool): a skipped step puts back what its forward pass wrote.
        recorder (GradientRecorder or None): records the steps it wants.
    """

    def __init__(
        self, rounds, work, forward_state, counters, seed_type, on_overflow: str,
        max_retries: int, restore_on_skip: bool, recorder,
    ):  # fmt: skip
        self.rounds = rounds
        self.work = work
        self.forward_state = forward_state
        self.counters = counters
        self.seed_type = seed_type
        self.on_overflow = on_overflow
        self.max_retries = max_retries
        self.restore_on_skip = restore_on_skip
        self.recorder = recorder
        self._policy = None  # the policy of the iteration running (for probe bounds)
        self._reference = None  # float32 copy of the graph, for a recorder measuring flushing
        self._probe_guess = None  # where the last probed step's threshold was (None: nowhere)
        self._forward_peak = ForwardPeak()  # for a recorder measuring the forward's headroom
        self._logged_bad_state = False  # a forward pass wrote inf/NaN state (logged once)
        if recorder is not None and recorder.measure_flush:
            _check_copyable(rounds.loss)

    def seed(self, scale, policy) -> float:
        """The value ``loss.backward(scale)`` really seeds with (the scale, rounded)."""
        seed = float(self.seed_type(scale))
        if seed == 0:
            raise ValueError(
                f"loss scale {float(scale)!r} rounds to a backward seed of 0 in "
                f"{np.dtype(self.seed_type).name}; the policy {policy!r} has no floor: "
                "use one with min_scale >= 2**-24"
            )
        return seed

    def _replays(self, step: int) -> bool:
        """Whether this step's rounds may run again (a retry, or probes): keep their inputs."""
        rec = self.recorder
        probes = rec is not None and (rec.probe_overflow or rec.measure_flush)
        return self.on_overflow == "retry" or (probes and rec.wants(step))

    def unscaled_run(self, state: ScaleState) -> Pending:
        """One attempt at seed 1 without any check (loss scaling off)."""
        self.rounds.run(1.0)
        self.work.all_reduce()
        return Pending(1.0, True, None, None, 1, [], state, unscaled=True, state=state)

    def _inspect(self, unscale_by=None, need_sumsq=False):
        """The finite check of the gradients, with the inputs and statistics the device check
        reads (the same graph for attempts and probes)."""
        inputs, ranged = self.rounds.device_checked()
        return self.work.inspect(
            self._policy.needs_grad_absmax,
            unscale_by,
            need_sumsq,
            inputs,
            self.forward_state.device_checked(),
            ranged,
        )

    def run(self, policy, state: ScaleState, step: int, fuse: bool, need_sumsq: bool) -> Pending:
        """The attempts of iteration ``step`` from ``state`` under ``policy``; ``fuse`` unscales
        in the checking pass ("numpy") or measures for clipping in the same read ("solver")
        when the gradients will not be seen scaled, ``need_sumsq`` (with ``fuse``) measures
        the sum of squares for clipping. The failed attempts' policy advances are in the
        returned ``new_state``."""
        self._policy = policy
        rounds, work = self.rounds, self.work
        keep = self._replays(step)
        rec = self.recorder
        peak = self._forward_peak
        hook = peak if rec is not None and rec.forward_headroom and rec.wants(step) else None
        attempts, overflow_scale, moved = 0, None, None
        before = self.forward_state.save("before") if self.restore_on_skip else None
        try:
            while True:
                attempts += 1
                seed = self.seed(state.scale, policy)
                peak.reset()  # the recorded attempt is the last
                loss_finite = rounds.run(seed, replay=attempts > 1, keep=keep, hook=hook)
                work.all_reduce()
                found = self._inspect(1.0 / seed if fuse else None, fuse and need_sumsq)
                arrays, finite, absmax, bad = found[:4]
                if loss_finite is None:  # the device check read it
                    loss_finite = found.loss_finite
                inputs_ok = found.inputs_finite
                if inputs_ok is None:  # checked on the host, read only when the verdict needs it
                    inputs_ok = finite or rounds.inputs_finite
                state_ok = finite or not (loss_finite and inputs_ok) or self._state_ok(found, step)
                if work.comm is not None:  # a worker's bad state counts as its bad input
                    finite, bad_loss, bad_input = work.agree(
                        finite, not loss_finite, not (inputs_ok and state_ok)
                    )
                    loss_finite, inputs_ok, state_ok = not bad_loss, not bad_input, True
                outcome = verdict(finite, loss_finite, inputs_ok, state_ok)
                applied, bad_batch = outcome == APPLIED, outcome == BAD_BATCH
                if not finite and absmax is not None:
                    absmax = math.inf
                new_state = policy.update(
                    state, finite, absmax if policy.needs_grad_absmax else None, bad_batch
                )
                retry = (
                    outcome == OVERFLOW
                    and self.on_overflow == "retry"
                    and attempts <= self.max_retries
                    and self.seed(new_state.scale, policy) < seed
                )
                self.counters.overflows += not finite
                if not retry:
                    break
                state = new_state
                overflow_scale = seed
                if before is not None:  # the retry starts from the statistics before the batch
                    before.restore()
                elif moved is None:
                    moved = self.forward_state.save("moved")
        except BaseException:  # a feeder or forward that raised: the batches fed so far leave
            if before is not None:  # no trace in the statistics (restore_on_skip)
                before.restore()
            raise
        if self.recorder is not None and self.recorder.wants(step):
            forward = (peak.peak, peak.where) if hook is not None else None
            self._record(step, arrays, seed, finite, not bad_batch, overflow_scale, forward)
        if applied and not loss_finite:
            self._count_nonfinite_loss(step)
        if before is not None and not applied:  # a skipped step leaves the model as it was
            before.restore()
        if moved is not None:
            moved.restore()
        stays = applied or before is None  # the statistics this step wrote stay
        return Pending(
            seed, applied, absmax, loss_finite, attempts, bad, new_state, found.unscaled,
            found.sumsq, bad_batch, self.forward_state.new_nonfinite(found) if stays else [],
            state,
        )  # fmt: skip

    def _state_ok(self, found, step: int) -> bool:
        """Whether this attempt's forward pass left every state value finite that was finite
        before it; else it is a bad batch, logged the first time with the functions that wrote
        the values."""
        made = self.forward_state.new_nonfinite_forward(found)
        if made and not self._logged_bad_state:
            self._logged_bad_state = True
            logger.warning(
                "step %d: the forward pass wrote inf/NaN into %s from inputs in range: a bad "
                "batch (skipped, not retried, the scale kept; the state is put back with "
                "restore_on_skip); a float16 batch overflows BatchNormalization's variance: "
                "updater.amp.rewrite(loss) computes it in float32 (logged once)",
                step,
                ", ".join(self.forward_state.describe(made)),
            )
        return not made

    def _count_nonfinite_loss(self, step: int) -> None:
        """Count an applied step whose loss was inf/NaN; warn about the first."""
        self.counters.nonfinite_losses += 1
        if self.counters.nonfinite_losses == 1:
            logger.warning(
                "the loss was inf/NaN at step %d while every gradient was finite: the step was "
                "applied (as nnabla's own loop does); a loss computed in float16 overflows (a "
                "mean of large per-sample losses) or takes log of a value <= 0: "
                "updater.amp.rewrite(loss) computes the loss in float32 (counted in "
                "nonfinite_losses; warned once)",
                step,
            )

    def _record(self, step, arrays, seed, finite, good_batch, overflow_scale, forward) -> None:
        """Hand the recorded attempt to the recorder, probing its overflow threshold first when
        the recorder asks for it (:mod:`updater.driver.probes`) and the batch was not bad."""
        rec = self.recorder
        over = seed if not finite and good_batch else overflow_scale
        grads, scale, flush, finite_scale = arrays, seed, None, None
        flush_due = rec.wants_flush(step)
        if (rec.probe_overflow or flush_due) and good_batch:
            known = math.inf if over is None else over
            bounds = probe_bounds(self._policy, self.seed_type)
            guess = self._probe_guess if rec.probe_from_previous else None
            found = probe_step(
                self, seed, finite, known, rec.probe_overflow, flush_due, bounds, guess
            )
            rec.probe_passes += found.passes
            if rec.probe_overflow:  # a censored step's guess: the scale it was finite at
                t = found.threshold
                self._probe_guess = t if t < math.inf else (found.finite_scale or None)
            grads, flush = None, found.flush  # host views taken before may be stale
            if rec.probe_overflow:
                over, finite_scale = found.threshold, found.finite_scale
            if found.finite_grads is not None:
                grads, scale = found.finite_grads, found.finite_seed
        rec.record(
            step,
            grads or self.host_grads(),
            scale,
            loss_finite=good_batch,
            overflow_scale=over,
            names=list(self.params()),
            flush=None if flush is None else (seed * 2.0 ** np.array(FLUSH_OFFSETS), flush),
            finite_scale=finite_scale,
            forward_peak=forward,
        )

    # ------------------------------------------ what the probes use (updater.driver.probes.Rerun)

    @property
    def rounds_per_attempt(self) -> int:
        """Forward/backward rounds per attempt."""
        return self.rounds.accum_grad

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

    def save_forward_state(self, slot: str):
        """A copy of the state the forward pass writes."""
        return self.forward_state.save(slot)

    def reference_grads(self) -> List[np.ndarray]:
        """The step's gradients from a float32 copy of the graph (built on first use; same
        parameters and inputs), at seed 1, as float64 host copies."""
        if self._reference is None:
            from .. import amp

            loss = self.rounds.loss
            everything = amp.AmpLists(float=amp.function_names())
            self._reference = amp.rewrite(loss, everything, getattr(loss.parent, "context", None))
        self.rounds.run(1.0, replay=True, keep=True, count=False, loss=self._reference)
        return [np.array(g, np.float64) for g in self.host_grads()]

    def probe(self, scale: float) -> bool:
        """One overflow probe: the step's rounds again at ``scale`` (not counted) and the
        check; whether this worker's own gradients are finite (no collective: a recorder on one
        worker leaves the others' steps as they are)."""
        self.rounds.run(self.seed(scale, self._policy), replay=True, keep=True, count=False)
        return self._inspect().finite
