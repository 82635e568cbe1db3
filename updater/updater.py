"""The nnabla driver: ``DynamicLossScalingUpdater``, whose ``update()`` runs one whole
mixed-precision training iteration made of three stages a script may also call itself:
``backward()``, ``unscale()``, ``step()``. It keeps the constructor of nnabla's experimental
updater (one import changes) and fixes what that one gets wrong (class doc).

Only this module and its helpers call solver and loss methods: :mod:`updater.attempts` (the
attempts of one iteration and their retries), :mod:`updater.step_work` and
:mod:`updater.gradients` (the solver's gradient work), :mod:`updater.arrays` (reading, unscaling
and copying arrays). The scale dynamics live in :mod:`updater.policy`, shared with the simulator.
"""

from __future__ import annotations

from collections import deque
from typing import List

import nnabla as nn
import numpy as np

from .arguments import (
    check_driver_arguments,
    check_scale,
    check_variables,
    legacy_setting,
    policy_from_arguments,
    with_legacy_setting,
)
from .arrays import seed_dtype
from .attempts import Attempts, _Pending
from .checks import check_bool, check_choice, check_int, check_number, check_positive
from .gradients import apply_update, check_layout, choose_check, grad_sumsq, unscale_grads
from .policy import ScaleState
from .records import COUNTERS, NonFiniteGradientsError, StepRecord
from .statistics import StatisticsCheck
from .step_work import GradientWork
from .updater_state import SavedState


class DynamicLossScalingUpdater(Attempts, GradientWork, SavedState, StatisticsCheck):
    """Run one mixed-precision training iteration per :meth:`update` call, with loss scaling.

    ``update()``: ``solver.zero_grad()``; ``accum_grad`` times ``data_feeder()``,
    ``loss.forward(clear_no_need_grad=clear_buffer)``, ``loss.backward(seed,
    clear_buffer=clear_buffer)``; with ``comm``: all-reduce the gradients, then agree across
    workers on "finite"; finite check; if finite: unscale by ``1/seed``, clip, weight decay,
    ``solver.update()``; advance the policy; return a :class:`StepRecord`. The seed is the scale
    rounded to the precision of the loss's last function (float16 in half mode, else float32),
    which is the value the backward pass really multiplies by, so unscaling is exact. Unscaled
    gradients are float32, also in half mode (as ``solver.scale_grad`` leaves them, and nnabla's
    solvers read them so), so true gradients below float16's range are kept.

    Cost per ``update()``: ``finite_check`` below; a ``recorder`` reads every gradient to the
    host on the steps it records.

    The policy: ``policy=`` if given. Else, with none of ``scale``, ``scaling_factor``, ``N``
    given, the recommended ``DynamicScale()`` (bounded by ``min_scale``/``max_scale``). Else
    nnabla's trio, with nnabla's defaults (8.0, 2.0, 2000) for the ones not given, maps to
    ``DynamicScale(init_scale=scale, growth_factor=scaling_factor,
    backoff_factor=1/scaling_factor, growth_interval=N, min_scale, max_scale, hysteresis=1)``:
    the scale grows on the ``N``-th consecutive finite step (nnabla's grew after N+2, then
    every N+1) and is divided by ``scaling_factor`` on every overflow.

    The solver's parameters are read again (``get_parameters``) at every step that needs them
    (the "numpy" and "solver" checks, all-reduce with ``grads`` empty, |g| max, clipping, the
    recorder, error messages), so parameters added with ``solver.set_parameters(...,
    reset=False)`` are followed; "nnabla"'s C++ loops follow them by themselves.

    ``on_overflow="retry"`` recomputes the same batch(es) at the lowered scale, moving
    BatchNormalization's running statistics once per batch (:mod:`updater.attempts`).

    Args:
        solver (nnabla.solvers.Solver): solver with parameters already set.
        loss (nnabla.Variable): scalar loss (one element).
        data_feeder (callable or None, default None): called with no arguments before each
            forward; None does nothing.
        scale (float or None, default None): initial loss scale of the legacy mapping, in
            [min_scale, max_scale]; None: 8.0 if ``scaling_factor`` or ``N`` is given.
        scaling_factor (float or None, default None): growth multiplier and backoff divisor of
            the legacy mapping, > 1; None: 2.0 if ``scale`` or ``N`` is given.
        N (int or None, default None): consecutive finite steps before growth in the legacy
            mapping, a whole number >= 1 (``2000.0`` is accepted); None: 2000.
        clear_buffer (bool, default True): free buffers in forward/backward.
        accum_grad (int, default 1): forward/backward rounds per update, >= 1.
        weight_decay (float or None, default None): decay passed to ``solver.weight_decay``
            after unscaling, >= 0.
        comm (nnabla communicator or None, default None): object with
            ``all_reduce(data, division=False, inplace=False)``, e.g. nnabla's
            ``MultiProcessDataParallelCommunicator`` or :class:`updater.comm.MPICommunicator`.
        grads (list of nnabla.NdArray or None, default None): gradients to all-reduce; empty
            (or None) with ``comm`` means every current parameter gradient of the solver.
        policy (policy from :mod:`updater.policy` or None, default None): the scaling policy;
            then none of the legacy trio nor ``min_scale``/``max_scale`` may be given.
        min_scale (float or None, default None): floor of the built policy, >= 2**-24; 1.0.
        max_scale (float or None, default None): cap of the built policy; None: the largest
            power of two the backward seed holds, 2**15 for a loss computed in half (float16
            seed, max 65504), 2**127 in float32. Above that (also in ``policy=``): ValueError.
        on_overflow (str, default "skip"): "skip" skips the step; "retry" recomputes the same
            batch at the lowered scale (see above).
        max_retries (int, default 8): retries per ``update()`` in "retry" mode, >= 0; after them
            the step is skipped.
        max_consecutive_nonfinite (int, default 32): consecutive ``update()`` calls that applied
            no update after which :class:`NonFiniteGradientsError` is raised, >= 1 (32 covers
            the 15 halvings from 2**15 to 1 and then some).
        clip_grad_norm (float or None, default None): clip the global L2 norm of the unscaled
            gradients to this value, > 0.
        average_grads (bool, default False): all-reduce with ``division=True`` (mean instead of
            sum).
        history (int, default 0): keep the last ``history`` :class:`StepRecord` in
            ``self.history`` (0 keeps none), >= 0.
        monitor (nnabla.monitor.Monitor or None, default None): writes the ``loss_scale`` used
            and the ``skipped_steps`` so far, each step.
        recorder (GradientRecorder or None, default None): records gradient histograms.
        finite_check (str, default "auto"): "numpy" (host views: with at most 8 arrays or
            2**15 values per array on average, an exact check of each array fused with its
            unscaling multiply; else one exact check of all gradients concatenated by one
            nnabla function, then ``scale_grad``), "solver" (one nnabla graph over all
            gradients concatenated on their device, a fixed number of functions whatever the
            number of arrays, read back in one host read), "nnabla"
            (``check_inf_or_nan_grad()`` and ``scale_grad``; the gradients are read to the
            host only for |g| max, clipping or the names of non-finite parameters), or "auto"
            (off the CPU "solver"; on CPU contexts, when neither |g| max, clipping nor a
            recorder is used, "numpy" for models of at least 2**15 values in few or large
            arrays and "nnabla" otherwise, else "numpy": :func:`updater.gradients.choose_check`).
            All decide exactly as ``solver.check_inf_or_nan_grad()``.
        enabled (bool, default True): False turns loss scaling off (as PyTorch's
            ``GradScaler(enabled=False)``): the backward pass is seeded with 1, no finite
            check runs, every step is applied and the policy never moves; for float32 runs of
            the same script. Records still come back (scale 1.0).
        restore_on_skip (bool, default True): a skipped step puts back what its forward pass
            wrote (running statistics: :func:`updater.arrays.forward_written`), copied before it;
            False keeps them moved by the skipped batch, as nnabla's updater does.
        unchecked_inputs (list of nnabla.Variable, default ()): inputs of the graph that may
            hold inf on purpose (e.g. a -inf attention mask) and are not checked for bad data.
        on_nonfinite_statistics (str, default "warn"): a running statistic that became inf/NaN
            after a step is reported once: "warn" logs a warning naming it and the step,
            "raise" raises :class:`updater.statistics.NonFiniteStatisticsError` from ``step()``
            (the step applied); both count it in ``nonfinite_statistics``.

    Attributes:
        scale (float): the scale the next step starts from; assigning it (as nnabla scripts do
            when resuming) checks it against the policy's bounds.
        scaling_factor, N: the policy's growth factor and growth interval (``DynamicScale``:
            ``growth_factor``/``growth_interval``; assigning replaces the policy, the backoff
            becoming ``1/scaling_factor``); ``AttributeError`` for policies without them.
        grads (list of nnabla.NdArray): the gradients given to all-reduce (``[]``: all).
        steps, updates_applied, skips (int): ``update()`` calls, calls that applied an update,
            calls that applied none.
        overflows (int): non-finite attempts (retries included).
        consecutive_nonfinite (int): ``update()`` calls since the last applied update.
        batches, passes (int): ``data_feeder`` calls and forward/backward rounds run.
        history (collections.deque of StepRecord): the last ``history`` records.
        nonfinite_statistics (int): running statistics found inf/NaN after a step, each once.

    Raises:
        TypeError / ValueError: for any bad argument, naming it and the accepted range.
    """

    def __init__(
        self,
        solver,
        loss,
        data_feeder=None,
        scale=None,
        scaling_factor=None,
        N=None,
        clear_buffer=True,
        accum_grad=1,
        weight_decay=None,
        comm=None,
        grads=None,
        *,
        policy=None,
        min_scale=None,
        max_scale=None,
        on_overflow="skip",
        max_retries=8,
        max_consecutive_nonfinite=32,
        clip_grad_norm=None,
        average_grads=False,
        history=0,
        monitor=None,
        recorder=None,
        finite_check="auto",
        enabled=True,
        restore_on_skip=True,
        unchecked_inputs=(),
        on_nonfinite_statistics="warn",
    ):
        check_driver_arguments(solver, loss, data_feeder, comm, grads, monitor, recorder)
        self._seed_type = seed_dtype(loss)
        policy = policy_from_arguments(
            policy, scale, scaling_factor, N, min_scale, max_scale, self._seed_type
        )
        check_choice("on_overflow", on_overflow, ("skip", "retry"))
        check_choice("finite_check", finite_check, ("auto", "numpy", "solver", "nnabla"))
        check_choice("on_nonfinite_statistics", on_nonfinite_statistics, ("warn", "raise"))
        self.unchecked_inputs = check_variables("unchecked_inputs", unchecked_inputs)
        self.on_nonfinite_statistics = on_nonfinite_statistics

        self.solver = solver
        self.loss = loss
        self.data_feeder = data_feeder
        self.clear_buffer = check_bool("clear_buffer", clear_buffer)
        self.accum_grad = check_int("accum_grad", accum_grad, 1)
        self.weight_decay = check_number("weight_decay", weight_decay, 0.0, none_ok=True)
        self.comm = comm
        self.grads = list(grads or [])
        self.policy = policy
        self.on_overflow = on_overflow
        self.max_retries = check_int("max_retries", max_retries, 0)
        self.max_consecutive_nonfinite = check_int(
            "max_consecutive_nonfinite", max_consecutive_nonfinite, 1
        )
        self.clip_grad_norm = check_positive("clip_grad_norm", clip_grad_norm, none_ok=True)
        self.average_grads = check_bool("average_grads", average_grads)
        self.history = deque(maxlen=check_int("history", history, 0))
        self.recorder = recorder
        self.enabled = check_bool("enabled", enabled)
        self.restore_on_skip = check_bool("restore_on_skip", restore_on_skip)
        self._state: ScaleState = policy.init()
        for name in COUNTERS:
            setattr(self, name, 0)
        self._monitor_series = None
        if monitor is not None:
            from nnabla.monitor import MonitorSeries

            self._monitor_series = (
                MonitorSeries("loss_scale", monitor, interval=1, verbose=False),
                MonitorSeries("skipped_steps", monitor, interval=1, verbose=False),
            )
        self._step_params = None  # the solver's parameters, read once per step when needed
        reads = policy.needs_grad_absmax or clip_grad_norm is not None or recorder is not None
        sizes = [p.size for p in self._params().values()]
        self.finite_check = choose_check(finite_check, not reads, sum(sizes), len(sizes))
        self._by_array, self._flat = check_layout(self.finite_check, sizes, loss)
        self._flag = None  # three-element agreement flag, made on first use
        self._inputs = None  # graph inputs (non-parameter leaves), found on first use
        self._written = None  # (inputs the forward pass writes, their FlatGraphs): on first use
        self._reference = None  # float32 copy of the graph, for a recorder measuring flushing
        self._round_inputs: List[List[nn.NdArray]] = []  # per round, for "retry"
        self._pending: _Pending | None = None  # set by backward(), cleared by step()

    # ------------------------------------------------------------ public state

    @property
    def scale(self) -> float:
        """The loss scale the next ``update()`` starts from (the seed is its rounding); 1.0
        when ``enabled=False``."""
        return float(self._state.scale) if self.enabled else 1.0

    @scale.setter
    def scale(self, value) -> None:
        self._state = self._state._replace(scale=np.float64(check_scale(self.policy, value)))

    @property
    def scaling_factor(self) -> float:
        """Growth multiplier (and backoff divisor) of the policy."""
        return float(legacy_setting(self.policy, "scaling_factor"))

    @scaling_factor.setter
    def scaling_factor(self, value) -> None:
        self.policy = with_legacy_setting(self.policy, "scaling_factor", value)

    @property
    def N(self) -> int:
        """Consecutive finite steps before the policy grows the scale."""
        return int(legacy_setting(self.policy, "N"))

    @N.setter
    def N(self, value) -> None:
        self.policy = with_legacy_setting(self.policy, "N", check_int("N", value, 1))

    @property
    def param_names(self) -> List[str]:
        """Names of the solver's current parameters."""
        return list(self._params())

    @property
    def scale_state(self) -> ScaleState:
        """The policy state (scale, good_steps, hysteresis_left)."""
        return self._state

    # ------------------------------------------------------------ the iteration

    def update(self) -> StepRecord:
        """Run one iteration: ``backward(); unscale(); return step()`` (the same records and the
        same parameters, bit for bit), with the finite check fused into the unscaling pass (and,
        with ``clip_grad_norm``, the sum of squares too), except on steps the recorder records.

        Raises:
            NonFiniteGradientsError: when ``max_consecutive_nonfinite`` consecutive calls
                applied no update (parameters and solver state untouched by them).
        """
        self._backward(fuse=self.recorder is None or not self.recorder.wants(self.steps))
        self.unscale()
        return self.step()

    def backward(self) -> bool:
        """First stage: ``solver.zero_grad()``, then ``accum_grad`` rounds of feed, forward and
        ``backward(seed)``; with ``comm`` the all-reduce; the agreed finite check. With
        ``on_overflow="retry"`` the retries happen here (the failed attempts advance the
        policy, as in :meth:`update`). The gradients stay scaled; the policy's advance for the
        final attempt waits for :meth:`step`.

        Returns:
            bool: whether the (final attempt's) gradients are finite on every worker.

        Raises:
            RuntimeError: ``backward()`` was already called and :meth:`step` was not.
        """
        return self._backward(fuse=False)

    def unscale(self) -> None:
        """Second stage: multiply every gradient by ``1/seed``, so each holds its true value in
        float32 (as ``solver.scale_grad(1/seed)`` does, bit for bit: NumPy on the "numpy"
        path, that call on "solver"). A second call does nothing; after non-finite gradients it
        does nothing either (no update will be applied).

        Raises:
            RuntimeError: called before :meth:`backward`.
        """
        pending = self._require_backward("unscale()")
        if not pending.unscaled and pending.finite:
            factor = 1.0 / pending.seed
            unscale_grads(self.finite_check, self.solver, self._params, factor, self._by_array)
        pending.unscaled = True

    def step(self) -> StepRecord:
        """Last stage: :meth:`unscale` if not done yet; if the gradients are finite, the
        configured clipping and weight decay, then ``solver.update()``; the policy's advance;
        counters, history, monitor. Gradients changed by hand after :meth:`unscale` are applied
        as they are.

        Returns:
            StepRecord: what the iteration did.

        Raises:
            RuntimeError: called before :meth:`backward`.
            NonFiniteGradientsError: when ``max_consecutive_nonfinite`` consecutive iterations
                applied no update.
        """
        pending = self._require_backward("step()")
        self.unscale()
        finite = pending.finite
        if finite:
            sumsq = pending.sumsq
            if self.clip_grad_norm is not None and sumsq is None:
                sumsq = grad_sumsq(self.finite_check, self._params(), self._flat)
            apply_update(self.solver, sumsq, self.clip_grad_norm, self.weight_decay)
        self._state = pending.new_state
        self._pending = None
        step = self.steps
        record = StepRecord(
            step=step,
            scale=pending.seed,
            update_applied=finite,
            new_scale=float(self._state.scale) if self.enabled else 1.0,
            grad_absmax=pending.absmax,
            loss_finite=pending.loss_finite,
            attempts=pending.attempts,
            bad_batch=pending.bad_batch,
        )
        self.steps += 1
        self.updates_applied += finite
        self.skips += not finite
        self.consecutive_nonfinite = 0 if finite else self.consecutive_nonfinite + 1
        self.history.append(record)
        if self._monitor_series is not None:
            self._monitor_series[0].add(step, record.scale)
            self._monitor_series[1].add(step, self.skips)
        self._report_statistics(pending.statistics, step)
        if self.consecutive_nonfinite >= self.max_consecutive_nonfinite:
            raise NonFiniteGradientsError.after(
                record, pending.bad, self.consecutive_nonfinite, self.max_consecutive_nonfinite,
                self._input_names() if pending.bad_batch else (),
            )  # fmt: skip
        return record
