"""The nnabla driver: ``DynamicLossScalingUpdater``, whose ``update()`` runs one training
iteration in three stages a script may also call: ``backward()``, ``unscale()``, ``step()``.

It is composed of :class:`Rounds` (an attempt's forward/backward rounds), :class:`GradientWork`
(all-reduce, agreement, the :class:`FiniteCheck` of the path), :class:`ForwardState` (what the
forward pass writes) and :class:`Attempts` (an iteration's attempts), sharing :class:`Counters`.
"""

from __future__ import annotations

from collections import deque
from typing import TYPE_CHECKING, Any, Callable, Dict, List, Sequence

import nnabla as nn
import numpy as np

from ..common.validation import check_bool, check_choice, check_int, check_number, check_positive
from ..policy import ScaleState
from . import saved_state
from .arguments import (
    check_driver_arguments,
    check_scale,
    check_variables,
    legacy_setting,
    policy_from_arguments,
    with_legacy_setting,
)
from .arrays import seed_dtype
from .attempts import Attempts
from .call_order import CallOrder, refuse_init_scale, refuse_new_scale
from .finite_checks import choose_check
from .forward_state import ForwardState
from .gradient_work import GradientWork
from .outside_forward import OutsideForward
from .records import Counters, Monitor, NonFiniteGradientsError, StepRecord
from .rounds import Rounds

if TYPE_CHECKING:  # nnabla's types are named nn.solvers.Solver, nn.monitor.Monitor
    from ..policy.base import Policy
    from ..trace.recorder import GradientRecorder
    from .solver_group import SolverGroup


def _read_only(owner: str, name: str, converted: Callable | None = None) -> property:
    """An attribute that reads ``name`` of the collaborator ``owner``; assignable (the value
    passed through ``converted``) when ``converted`` is given."""

    def write(self, value) -> None:
        setattr(getattr(self, owner), name, converted(value))

    read = lambda self: getattr(getattr(self, owner), name)  # noqa: E731
    return property(read, None if converted is None else write, doc=f"``{owner}.{name}``")


class DynamicLossScalingUpdater:
    """Run one mixed-precision training iteration per :meth:`update` call, with loss scaling.

    ``update()``: ``solver.zero_grad()``; ``accum_grad`` rounds of ``data_feeder()``,
    ``loss.forward()``, ``loss.backward(seed)``; with ``comm``, the all-reduce and the workers'
    agreement; the finite check; if finite: unscale in float32 by ``1/seed`` (the seed is the
    scale rounded to the loss's precision, so unscaling is exact), clip, weight decay,
    ``solver.update()``; the policy's advance. Each step's verdict (applied, overflow or bad
    batch) follows one rule (:func:`updater.driver.records.verdict`); ``on_overflow="retry"``
    recomputes the same batches at the lowered scale (:mod:`updater.driver.attempts`). The
    solver's parameters are read again at every step that needs them.

    Args:
        solver (nnabla.solvers.Solver): solver with parameters already set.
        loss (nnabla.Variable): scalar loss (one element).
        data_feeder (callable or None, default None): called before each forward.
        scale (float or None, default None): legacy initial scale, in [min_scale, max_scale];
            None: 8.0 if ``scaling_factor`` or ``N`` is given.
        scaling_factor (float or None, default None): legacy growth multiplier and backoff
            divisor, > 1; None: 2.0 if ``scale`` or ``N`` is given.
        N (int or None, default None): legacy finite steps before growth, a whole number
            >= 1; None: 2000.
        clear_buffer (bool, default True): free buffers in forward/backward.
        accum_grad (int, default 1): forward/backward rounds per update, >= 1.
        weight_decay (float or None, default None): ``solver.weight_decay`` after unscaling,
            >= 0.
        comm (nnabla communicator or None, default None): has ``all_reduce(data, division,
            inplace)``: nnabla's or :class:`updater.runtime.comm.MPICommunicator`.
        grads (list of nnabla.NdArray or None, default None): gradients to all-reduce; empty
            or None: every current parameter gradient of the solver.
        policy (policy, str or None, default None): the scaling policy (from
            :mod:`updater.policy`, or a name :func:`updater.make_policy` takes: ``"dynamic"``);
            then none of the legacy trio nor ``min_scale``/``max_scale`` may be given. None:
            ``DynamicScale()``, or nnabla's trio as a ``DynamicScale`` with nnabla's meaning.
        min_scale (float or None, default None): floor of the built policy, >= 2**-24; 1.0.
        max_scale (float or None, default None): cap of the built policy; None: the largest
            power of two the seed holds (2**15 for a float16 loss, 2**127 in float32); above
            that (also in ``policy=``): ValueError.
        on_overflow (str, default "skip"): "skip", or "retry" the same batch at the lowered
            scale.
        max_retries (int, default 8): retries per ``update()`` in "retry" mode, >= 0.
        max_consecutive_nonfinite (int, default 32): ``update()`` calls in a row without an
            update after which :class:`NonFiniteGradientsError` is raised, >= 1.
        clip_grad_norm (float or None, default None): clip the global L2 norm of the unscaled
            gradients to this, > 0.
        average_grads (bool, default False): all-reduce with ``division=True``.
        history (int, default 0): keep the last ``history`` records in ``self.history``, >= 0.
        monitor (nnabla.monitor.Monitor or None, default None): writes ``loss_scale`` and
            ``skipped_steps`` each step.
        recorder (GradientRecorder or None, default None): records gradient histograms.
        finite_check (str, default "auto"): the inf/NaN check's path
            (:mod:`updater.driver.finite_checks`): "numpy" (host views), "solver" (one graph
            on the gradients' device, one host read), "nnabla" (``check_inf_or_nan_grad()``),
            or "auto" ("solver" off the CPU; on the CPU "numpy" or "nnabla" by model size and
            what the steps read). All decide exactly as ``solver.check_inf_or_nan_grad()``.
        enabled (bool, default True): False turns loss scaling off (as PyTorch's
            ``GradScaler(enabled=False)``): seed 1, no check, every step applied.
        restore_on_skip (bool, default True): a skipped step puts back the state its passes
            wrote (:func:`updater.driver.written.forward_written`, and ``forward_state``); False
            keeps it moved, as nnabla's updater does.
        unchecked_inputs (list of nnabla.Variable, default ()): inputs that may hold inf on
            purpose (a -inf attention mask), left out of the bad-data check; each must feed the
            graph of ``loss`` (else ``ValueError``).
        forward_state (list of nnabla.Variable, default ()): Variables that a function of
            yours (a ``PythonFunction``) writes in its forward pass: kept and put back as the
            state found in the graph, never checked as data; no function's outputs.
        init_scale: not accepted (``TypeError`` naming ``scale=`` and ``policy=``).
        on_nonfinite_statistics (str, default "warn"): a running statistic that became
            inf/NaN is reported once: "warn" logs it, "raise" raises
            :class:`updater.driver.forward_state.NonFiniteStatisticsError` from ``step()``.

    Attributes:
        scale, scaling_factor, N: as nnabla's, assignable (checked; the last two replace the
            policy, ``AttributeError`` for policies without them).
        grads (list of nnabla.NdArray): the gradients given to all-reduce (``[]``: all).
        steps (int): the counters, read-only, as are ``updates_applied``, ``overflows``,
            ``skips``, ``consecutive_nonfinite``, ``batches``, ``passes``, ``nonfinite_losses``
            and ``nonfinite_statistics`` (:class:`~updater.driver.records.Counters`).
        history (collections.deque of StepRecord): the last ``history`` records.
        finite_check (str): the path chosen ("numpy", "solver" or "nnabla").
        options: the other options read back as read-only attributes of the same name,
            but ``data_feeder``, which may be replaced.

    Raises:
        TypeError / ValueError: for any bad argument, naming it and the accepted range.
    """

    def __init__(
        self, solver: nn.solvers.Solver | SolverGroup, loss: nn.Variable,
        data_feeder: Callable[[], Any] | None = None, scale: float | None = None,
        scaling_factor: float | None = None, N: int | None = None, clear_buffer: bool = True,
        accum_grad: int = 1, weight_decay: float | None = None, comm: Any = None,
        grads: Sequence[nn.NdArray] | None = None, *, policy: Policy | str | None = None,
        min_scale: float | None = None, max_scale: float | None = None, on_overflow: str = "skip",
        max_retries: int = 8, max_consecutive_nonfinite: int = 32,
        clip_grad_norm: float | None = None, average_grads: bool = False, history: int = 0,
        monitor: nn.monitor.Monitor | None = None, recorder: GradientRecorder | None = None,
        finite_check: str = "auto", enabled: bool = True, restore_on_skip: bool = True,
        unchecked_inputs: Sequence[nn.Variable] = (), on_nonfinite_statistics: str = "warn",
        forward_state: Sequence[nn.Variable] = (), init_scale: None = None,
    ) -> None:  # fmt: skip
        refuse_init_scale(init_scale)
        check_driver_arguments(solver, loss, data_feeder, comm, grads, monitor, recorder)
        seed_type = seed_dtype(loss)
        policy = policy_from_arguments(policy, scale, scaling_factor, N, min_scale, max_scale,
                                       seed_type)  # fmt: skip
        check_choice("on_overflow", on_overflow, ("skip", "retry"))
        check_choice("finite_check", finite_check, ("auto", "numpy", "solver", "nnabla"))
        check_choice("on_nonfinite_statistics", on_nonfinite_statistics, ("warn", "raise"))
        self.solver, self.loss, self.policy = solver, loss, policy
        self.weight_decay = check_number("weight_decay", weight_decay, 0.0, none_ok=True)
        self.clip_grad_norm = check_positive("clip_grad_norm", clip_grad_norm, none_ok=True)
        self.max_consecutive_nonfinite = check_int("max_consecutive_nonfinite",
                                                   max_consecutive_nonfinite, 1)  # fmt: skip
        self.history = deque(maxlen=check_int("history", history, 0))
        self._seed_type = seed_type
        self._state: ScaleState = policy.init()
        self._enabled = check_bool("enabled", enabled)
        self._counters = Counters()
        self._monitor = None if monitor is None else Monitor(monitor)
        reads = policy.needs_grad_absmax or clip_grad_norm is not None or recorder is not None
        sizes = [p.size for p in solver.get_parameters().values()]
        check = choose_check(finite_check, not reads, sizes, solver, loss)
        self._work = GradientWork(
            solver, check, comm, list(grads or []), check_bool("average_grads", average_grads)
        )
        given = check_variables("forward_state", forward_state, leaves=True)
        state = ForwardState(loss, check.checks_extras, on_nonfinite_statistics, self._counters,
                             given)  # fmt: skip
        self._forward_state = state
        self._rounds = Rounds(
            solver, loss, data_feeder, check_int("accum_grad", accum_grad, 1),
            check_bool("clear_buffer", clear_buffer), self._enabled, self._work.params,
            check_variables("unchecked_inputs", unchecked_inputs, inputs_of=loss),
            check.checks_extras, self._counters, lambda: state.written,
        )  # fmt: skip
        self._attempts = Attempts(
            self._rounds, self._work, self._forward_state, self._counters, seed_type,
            on_overflow, check_int("max_retries", max_retries, 0),
            check_bool("restore_on_skip", restore_on_skip), recorder,
        )  # fmt: skip
        self._order = CallOrder()
        self._outside = OutsideForward(loss, self._rounds, lambda: state.written)

    steps = _read_only("_counters", "steps")
    updates_applied = _read_only("_counters", "updates_applied")
    overflows = _read_only("_counters", "overflows")
    skips = _read_only("_counters", "skips")
    consecutive_nonfinite = _read_only("_counters", "consecutive_nonfinite")
    batches = _read_only("_counters", "batches")
    passes = _read_only("_counters", "passes")
    nonfinite_losses = _read_only("_counters", "nonfinite_losses")
    nonfinite_statistics = _read_only("_counters", "nonfinite_statistics")
    accum_grad = _read_only("_rounds", "accum_grad")
    clear_buffer = _read_only("_rounds", "clear_buffer")
    unchecked_inputs = _read_only("_rounds", "unchecked_inputs")
    comm = _read_only("_work", "comm")
    average_grads = _read_only("_work", "average_grads")
    on_overflow = _read_only("_attempts", "on_overflow")
    max_retries = _read_only("_attempts", "max_retries")
    restore_on_skip = _read_only("_attempts", "restore_on_skip")
    recorder = _read_only("_attempts", "recorder")
    on_nonfinite_statistics = _read_only("_forward_state", "on_nonfinite_statistics")
    forward_state = _read_only("_forward_state", "given")
    enabled = _read_only("_rounds", "enabled")

    data_feeder = _read_only("_rounds", "data_feeder", lambda value: value)
    grads = _read_only("_work", "grads", lambda value: list(value or []))  # as nnabla's

    @property
    def finite_check(self) -> str:
        """The finite check path in use: "numpy", "solver" or "nnabla"."""
        return self._work.check.name

    @property
    def scale(self) -> float:
        """The loss scale the next ``update()`` starts from (the seed is its rounding); 1.0
        when ``enabled=False``."""
        return float(self._state.scale) if self._enabled else 1.0

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
        return list(self.solver.get_parameters())

    @property
    def scale_state(self) -> ScaleState:
        """The policy state (scale, good_steps, hysteresis_left)."""
        return self._state

    def get_scale(self) -> float:
        """:attr:`scale` (the name of PyTorch's ``GradScaler.get_scale()``)."""
        return self.scale

    def update(self, new_scale: None = None) -> StepRecord:
        """Run one whole training iteration, on the next batch: ``backward(); unscale(); return
        step()`` (the same records and the same parameters, bit for bit), with the finite check
        fused into the unscaling pass (and, with ``clip_grad_norm``, the sum of squares too),
        except on steps the recorder records. Not PyTorch's ``GradScaler.update()``: after
        ``step()`` the iteration is over (:mod:`updater.driver.call_order`); ``new_scale`` is
        refused (``TypeError``): assign :attr:`scale` instead.

        Raises:
            NonFiniteGradientsError: when ``max_consecutive_nonfinite`` consecutive calls
                applied no update (parameters and solver state untouched by them).
            RuntimeError: called right after ``step()`` in two iterations in a row, or after a
                forward pass of the loss run outside the updater (:meth:`backward`).
        """
        refuse_new_scale(new_scale)
        self._order.start_update()
        self._backward(fuse=self.recorder is None or not self.recorder.wants(self.steps))
        self.unscale()
        return self._step(by_step=False)

    def backward(self) -> bool:
        """First stage: zero_grad, ``accum_grad`` rounds of feed, forward and
        ``backward(seed)``, the all-reduce, the agreed finite check, and the retries (their
        failed attempts advance the policy). The gradients stay scaled; the final attempt's
        policy advance waits for :meth:`step`.

        Returns:
            bool: whether the (final attempt's) gradients are finite on every worker.

        Raises:
            RuntimeError: ``backward()`` was already called and :meth:`step` was not; or the
                loss's forward pass ran outside the updater since its last step in a graph
                whose forward writes state (:mod:`updater.driver.outside_forward`).
        """
        return self._backward(fuse=False)

    def _backward(self, fuse: bool) -> bool:
        """:meth:`backward`; ``fuse`` unscales in the checking pass or measures for clipping in
        the same read when the gradients will not be seen scaled."""
        self._order.start()
        self._outside.check()
        self._work.new_step(lambda: saved_state.rank_settings(self))
        if not self._enabled:
            pending = self._attempts.unscaled_run(self._state)
        else:
            need_sumsq = self.clip_grad_norm is not None
            pending = self._attempts.run(self.policy, self._state, self.steps, fuse, need_sumsq)
            self._state = pending.state  # the failed attempts advanced the policy
        self._order.pending = pending
        self._outside.after_step()
        return pending.finite

    def unscale(self) -> None:
        """Second stage: multiply every gradient by ``1/seed`` in float32 (bit for bit as
        ``solver.scale_grad(1/seed)``). Does nothing when called again or after non-finite
        gradients.

        Raises:
            RuntimeError: called before :meth:`backward`.
        """
        pending = self._order.require("unscale()")
        if not pending.unscaled and pending.finite:
            self._work.unscale(1.0 / pending.seed)
        pending.unscaled = True

    def step(self) -> StepRecord:
        """Last stage: :meth:`unscale` if not done; if finite, clipping, weight decay and
        ``solver.update()`` (on the gradients as they are, changed by hand or not); the policy's
        advance; counters, history, monitor.

        Returns:
            StepRecord: what the iteration did.

        Raises:
            RuntimeError: called before :meth:`backward`.
            NonFiniteGradientsError: when ``max_consecutive_nonfinite`` consecutive iterations
                applied no update.
        """
        return self._step(by_step=True)

    def _step(self, by_step: bool) -> StepRecord:
        """:meth:`step`; ``by_step``: called as ``step()``, not by ``update()``."""
        pending = self._order.require("step()")
        self.unscale()
        finite = pending.finite
        if finite:
            self._work.apply(pending.sumsq, self.clip_grad_norm, self.weight_decay)
        self._state = pending.new_state
        self._order.end(by_step)
        step = self.steps
        record = StepRecord(
            step=step, scale=pending.seed, update_applied=finite,
            new_scale=float(self._state.scale) if self._enabled else 1.0,
            grad_absmax=pending.absmax, loss_finite=pending.loss_finite,
            attempts=pending.attempts, bad_batch=pending.bad_batch,
        )  # fmt: skip
        counters = self._counters
        counters.count_step(finite)
        self.history.append(record)
        if self._monitor is not None:
            self._monitor.add(step, record.scale, counters.skips)
        self._forward_state.report(pending.statistics, step)
        if counters.consecutive_nonfinite >= self.max_consecutive_nonfinite:
            raise NonFiniteGradientsError.after(
                record, pending.bad, counters.consecutive_nonfinite,
                self.max_consecutive_nonfinite,
                self._rounds.bad_input_names() if pending.bad_batch else (),
            )  # fmt: skip
        return record

    def state_dict(self) -> Dict[str, Any]:
        """The updater's state as JSON-serialisable data: format version, policy, scale state
        and counters (:func:`updater.driver.saved_state.state_dict`); not the history."""
        return saved_state.state_dict(self.policy, self._state, self._counters)

    def load_state_dict(self, state: Dict[str, Any]) -> None:
        """Restore policy, scale state and counters from :meth:`state_dict` output, all checked
        before anything changes (:func:`updater.driver.saved_state.loaded_state`: ``KeyError``,
        ``ValueError`` naming the problem). The saved policy replaces the current one (a
        warning is logged when they differ)."""
        self.policy, self._state = saved_state.loaded_state(
            state, self._seed_type, self.policy, self._counters
        )

    def __repr__(self) -> str:
        return (
            f"DynamicLossScalingUpdater(scale={self.scale!r}, policy={self.policy!r}, "
            f"steps={self.steps}, updates_applied={self.updates_applied}, skips={self.skips}, "
            f"finite_check={self.finite_check!r})"
        )
