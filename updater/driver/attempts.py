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
path and every ``accum_grad``): a bad batch when its forward pass made state inf/NaN that was
finite before the batch, whatever the gradients (with ``restore_on_skip``; without it, only when
they are not finite); else applied when the gradients are finite, whatever the loss (an inf/NaN
loss is then counted in ``nonfinite_losses`` and warned about once); a bad batch when they are
not and the loss or an input is bad (bad data, which no scale fixes: skipped, never retried, and
the policy takes it as its third outcome, ``bad_batch=True``: the scale does not move); an
overflow otherwise. The state is checked once per attempt, before the verdict
(:meth:`ForwardState.inspect`), and that check is the one a step whose state stays reports; a
graph that writes no state (:attr:`StepReads.stateful`) has none copied, checked or reported.
The facts the verdict reads come from one call per attempt (:meth:`GradientWork.facts`, a
:class:`~updater.driver.checks.base.StepFacts`).
"""

from __future__ import annotations

import logging
import math
from dataclasses import dataclass, field
from typing import Sequence

from ..policy import ScaleState
from .arrays import backward_seed
from .checks import StepFacts
from .forward_state import StateCheck
from .options import LiveOptions
from .recording.hook import Attempted
from .records import APPLIED, BAD_BATCH, OVERFLOW, verdict

logger = logging.getLogger(__name__)


@dataclass(kw_only=True)
class Pending:
    """An iteration between :meth:`DynamicLossScalingUpdater.backward` and ``step()`` (built by
    keyword)."""

    seed: float
    finite: bool
    absmax: float | None
    loss_finite: bool | None
    attempts: int
    bad: Sequence[str]  # names of the parameters with non-finite gradients
    new_state: ScaleState
    state: ScaleState  # the state the last attempt started from
    unscaled: bool = False
    sumsq: float | None = None  # of the unscaled gradients, measured by update()'s fused pass
    bad_batch: bool = False  # an inf/NaN loss or input on some worker
    statistics: list = field(default_factory=list)  # running statistics newly inf/NaN


@dataclass(frozen=True, kw_only=True)
class StepPlan:
    """What an iteration does in one configuration, decided once from the options and the policy
    (:func:`updater.driver.assembly.plan_step`), again after any option or the policy is
    assigned; the bookkeeping a configuration never needs is then not run.

    Attributes:
        watch_outside (bool): a forward pass run outside the updater can be seen
            (:func:`updater.driver.outside_forward.watches`): the watch runs around each step.
        retry (bool): ``on_overflow="retry"``: an attempt's inputs are kept for a retry.
        clip (bool): ``clip_grad_norm`` is set: the fused pass also sums the squares.
    """

    watch_outside: bool
    retry: bool
    clip: bool


@dataclass(frozen=True, kw_only=True)
class Judged:
    """An attempt judged (:meth:`Attempts._attempt`), on the facts agreed across workers.

    Attributes:
        found (StepFacts): the attempt's facts (:meth:`GradientWork.facts`).
        finite (bool): the gradients are finite.
        loss_finite (bool): the loss is finite.
        outcome (str): the verdict (:func:`updater.driver.records.verdict`).
        absmax (float or None): the largest |gradient| (inf when not finite); None: not asked.
        new_state (ScaleState): the policy's state after the attempt.
        checked (StateCheck or None): the state's check, when the verdict read it.
    """

    found: StepFacts
    finite: bool
    loss_finite: bool
    outcome: str
    absmax: float | None
    new_state: ScaleState
    checked: StateCheck | None


class Attempts:
    """Runs the attempts of one iteration (module doc).

    Args:
        options (LiveOptions): reads, at each use, ``on_overflow`` ("skip" or "retry"),
            ``max_retries`` (retries per iteration in "retry" mode), ``restore_on_skip`` (a
            skipped step puts back what its forward pass wrote), ``clip_grad_norm`` and
            ``comm``.
        reads (StepReads): the forward/backward rounds of an attempt (:class:`Rounds`), the
            state the forward pass writes (:class:`ForwardState`: copied, checked, reported
            only when the graph writes some) and what the check reads besides the gradients.
        work (GradientWork): the all-reduce, the agreement and the finite check.
        counters (Counters): ``overflows`` and ``nonfinite_losses`` move here.
        seed_type (type): the loss's precision (``np.float16`` or ``np.float32``).
        recording (Recording or None, default None): the hook of the option ``recorder``,
            asked once per step what it needs (:meth:`Recording.wanted`), called after the
            attempts of a step it records.
    """

    def __init__(self, options: LiveOptions, reads, work, counters, seed_type, recording=None):
        self.options = options
        self.reads = reads
        self.rounds = reads.rounds
        self.work = work
        self.forward_state = reads.forward_state
        self.counters = counters
        self.seed_type = seed_type
        self.recording = recording
        self._logged_bad_state = False  # a forward pass wrote inf/NaN state (logged once)
        self._last_seed: tuple = (None, 0.0)  # the last scale seeded, its seed (:meth:`_seed`)

    def unscaled_run(self, state: ScaleState) -> Pending:
        """One attempt at seed 1 without any check (loss scaling off)."""
        self.rounds.run(1.0)
        self.work.all_reduce()
        return Pending(
            seed=1.0,
            finite=True,
            absmax=None,
            loss_finite=None,
            attempts=1,
            bad=[],
            new_state=state,
            unscaled=True,
            state=state,
        )

    def run(self, plan: StepPlan, policy, state: ScaleState, step: int, by_update: bool) -> Pending:
        """The attempts of iteration ``step`` from ``state`` under ``policy``, as ``plan``
        plans them; ``by_update``: called by ``update()``, which, when the recorder does not
        want this step's scaled gradients, unscales in the checking pass ("numpy") or measures
        for clipping in the same read ("solver"). The failed attempts' policy advances are in
        the returned ``new_state``."""
        reads = self.reads if self.reads.host is not None else self.reads.plan()
        if not (plan.retry or reads.stateful or self.recording is not None):
            return self._once(policy, state, step, by_update, by_update and plan.clip)
        o, recording = self.options.record, self.recording
        wanted = None if recording is None else recording.wanted(step)
        recorded = wanted is not None
        fuse = by_update and not recorded
        sumsq = fuse and plan.clip
        keep = plan.retry or (wanted is not None and wanted.replays)
        hook = None if wanted is None else wanted.forward_peak
        attempts, overflow_scale, moved = 0, None, None
        stateful = reads.stateful
        saves = o.restore_on_skip and stateful  # else nothing to copy
        before = self.forward_state.save("before") if saves else None
        try:
            while True:
                attempts += 1
                if hook is not None:  # the recorded attempt is the last
                    hook.reset()
                seed = self._seed(state.scale, policy)
                self.rounds.run(seed, replay=attempts > 1, keep=keep, hook=hook)
                tried = self._attempt(policy, state, step, seed, fuse, sumsq, before)
                overflow = tried.outcome == OVERFLOW
                if not (overflow and plan.retry and self._retries(tried, seed, policy, attempts)):
                    break  # one attempt unless "retry" retries an overflow
                state, overflow_scale = tried.new_state, seed
                moved = self._before_retry(before, moved, stateful)
        except BaseException:  # a feeder or forward that raised: the batches fed so far leave
            if before is not None:  # no trace in the statistics (restore_on_skip)
                before.restore()
            raise
        applied = tried.outcome == APPLIED
        if recorded:
            self._hand_over(step, policy, seed, tried, overflow_scale)
        if moved is not None or before is not None and not applied:
            _put_back(before if not applied else None, moved)
        stays = stateful and (applied or before is None)  # the statistics this step wrote stay
        statistics = self._new_statistics(tried, moved is not None) if stays else []
        return self._pending(step, seed, tried, state, attempts, statistics)

    def _once(self, policy, state: ScaleState, step: int, fuse: bool, sumsq: bool) -> Pending:
        """:meth:`run` planned for one attempt: no retry, no recorder, no state the forward
        pass writes (nothing kept, copied, put back or reported)."""
        seed = self._seed(state.scale, policy)
        self.rounds.run(seed)
        tried = self._attempt(policy, state, step, seed, fuse, sumsq, None)
        return self._pending(step, seed, tried, state, 1, [])

    def _pending(self, step, seed, tried: Judged, state, attempts: int, statistics) -> Pending:
        """The iteration ``step`` whose last attempt, the ``attempts``-th, at ``seed`` from
        ``state``, was judged ``tried``; ``statistics``: the running statistics newly inf/NaN.
        An applied step whose loss was inf/NaN is counted here."""
        found, outcome = tried.found, tried.outcome
        if outcome == APPLIED and not tried.loss_finite:
            self._count_nonfinite_loss(step)
        return Pending(
            seed=seed,
            finite=outcome == APPLIED,
            absmax=tried.absmax,
            loss_finite=tried.loss_finite,
            attempts=attempts,
            bad=found.bad,
            new_state=tried.new_state,
            unscaled=found.unscaled,
            sumsq=found.sumsq,
            bad_batch=outcome == BAD_BATCH,
            statistics=statistics,
            state=state,
        )

    def _before_retry(self, before, moved, stateful: bool):
        """Before a retry, the state the forward pass writes: put back to ``before`` the batch
        (``restore_on_skip``), else copied as the first attempt ``moved`` it (once). Returns the
        copy of the moved state (None: none)."""
        if before is not None:  # the retry starts from the statistics before the batch
            before.restore()
        elif moved is None and stateful:
            moved = self.forward_state.save("moved")
        return moved

    def _new_statistics(self, tried: Judged, put_back: bool) -> list:
        """The statistics inf/NaN after the step and not reported before: as the last attempt's
        facts found them, or, ``put_back`` to the first attempt's, read again."""
        state = self.forward_state
        if put_back:
            return state.new_nonfinite(state.nonfinite_indices(), None)
        return state.new_nonfinite(tried.found.statistics, tried.checked)

    def _hand_over(self, step: int, policy, seed: float, tried: Judged, overflow_scale) -> None:
        """The attempts of a recorded step to the recording hook: the last at ``seed`` judged
        ``tried``; ``overflow_scale``: the seed of the last earlier one that overflowed, or None."""
        done = Attempted(
            seed=seed,
            finite=tried.finite,
            good_batch=tried.outcome != BAD_BATCH,
            overflow_scale=overflow_scale,
            arrays=tried.found.arrays,
        )
        self.recording.after(step, policy, done)

    def _attempt(self, policy, state, step, seed, fuse, need_sumsq, before) -> Judged:
        """After an attempt's rounds: the all-reduce, the attempt's facts (one call,
        :meth:`GradientWork.facts`; the check fused with unscaling by ``1/seed`` with
        ``fuse``), agreed across workers, the verdict and the policy's advance
        (:class:`Judged`), an attempt whose gradients were not finite counted in
        ``overflows``; ``before``: the copy of the state taken before the batch
        (``restore_on_skip``), else None."""
        work, comm = self.work, self.options.record.comm
        if comm is not None:
            work.all_reduce()
        unscale_by = 1.0 / seed if fuse else None
        found = work.facts(self.reads, policy.needs_grad_absmax, unscale_by, need_sumsq)
        finite, absmax = found.finite, found.absmax
        loss_finite, inputs_ok = found.loss_finite, found.inputs_in_range
        checked = None
        if self.reads.stateful:  # the state's check
            checked = self._check_state(found, finite, loss_finite and inputs_ok, before, step)
        state_ok = checked is None or not checked.made
        # across workers: a worker's batch bad whatever the agreed gradients (state it made
        # inf/NaN, or a bad input with its own gradients not finite) is bad for all
        if comm is not None:
            finite, bad_loss, bad_batch = work.agree(
                finite, not loss_finite, not (state_ok and (finite or inputs_ok))
            )
            loss_finite, inputs_ok, state_ok = not bad_loss, True, not bad_batch
        outcome = verdict(finite, loss_finite, inputs_ok, state_ok)
        self.counters.overflows += not finite
        if not finite and absmax is not None:
            absmax = math.inf
        measured = absmax if policy.needs_grad_absmax else None
        new_state = policy.update(state, finite, measured, outcome == BAD_BATCH)
        return Judged(
            found=found,
            finite=finite,
            loss_finite=loss_finite,
            outcome=outcome,
            absmax=absmax,
            new_state=new_state,
            checked=checked,
        )

    def _seed(self, scale, policy) -> float:
        """The backward seed of ``scale`` (:func:`updater.driver.arrays.backward_seed`), kept
        for the next attempt while the scale stays (one pair: a policy may visit any number of
        scales)."""
        last, seed = self._last_seed
        if last != scale:
            seed = backward_seed(scale, self.seed_type, policy)
            self._last_seed = (scale, seed)
        return seed

    def _retries(self, tried: Judged, seed: float, policy, attempts: int) -> bool:
        """Whether attempt number ``attempts`` at ``seed``, an overflow judged ``tried`` in
        "retry" mode (:attr:`StepPlan.retry`), is retried: within ``max_retries``, when the
        policy lowered the seed."""
        return (
            attempts <= self.options.record.max_retries
            and self._seed(tried.new_state.scale, policy) < seed
        )

    def _check_state(self, found, finite: bool, batch_ok: bool, before, step: int):
        """The state's check (:meth:`ForwardState.inspect`) when the verdict reads it, else
        None: with ``restore_on_skip`` (``before`` given) whatever the gradients, unless the
        batch is bad already (gradients not finite and not ``batch_ok``: its loss or an input
        was bad); without, only for an overflow (``restore_on_skip=False`` applies a step whose
        gradients are finite and reports the state after it). What the forward pass made
        inf/NaN is logged the first time, with the functions that wrote it."""
        if finite and before is None or not (finite or batch_ok):
            return None
        checked = self.forward_state.inspect(found, before)
        if checked.made and not self._logged_bad_state:
            self._logged_bad_state = True
            logger.warning(
                "step %d: the forward pass wrote inf/NaN into %s, finite before the batch: a "
                "bad batch (skipped, not retried, the scale kept; with restore_on_skip, "
                "whatever its gradients, and the state put back); a float16 batch overflows "
                "BatchNormalization's variance: updater.amp.rewrite(loss) computes it in "
                "float32 (logged once)",
                step,
                ", ".join(self.forward_state.describe(checked.made)),
            )
        return checked

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


def _put_back(before, moved) -> None:
    """After the attempts: the state copied ``before`` the batch (a skipped step leaves the
    model as it was), then the state a retry ``moved`` (None: nothing to put back)."""
    if before is not None:
        before.restore()
    if moved is not None:
        moved.restore()
