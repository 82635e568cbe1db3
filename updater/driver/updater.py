"""The nnabla driver: ``DynamicLossScalingUpdater``, whose ``update()`` runs one training
iteration in three stages a script may also call: ``backward()``, ``unscale()``, ``step()``.

It is composed of :class:`Rounds` (an attempt's forward/backward rounds), :class:`GradientWork`
(all-reduce, agreement, the :class:`FiniteCheck` of the path), :class:`ForwardState` (what the
forward pass writes) and :class:`Attempts` (an iteration's attempts), sharing :class:`Counters`,
built from the options record (:mod:`updater.driver.options`) by :mod:`updater.driver.assembly`.
"""

from __future__ import annotations

from collections import deque
from operator import attrgetter
from typing import TYPE_CHECKING, Any, Callable, Dict, List, Sequence

import nnabla as nn
import numpy as np

from ..common.validation import check_int
from ..policy import ScaleState
from ..policy.presets import as_policy
from . import saved_state
from .arguments import (
    LEGACY_DEFAULTS,
    check_scale,
    check_seed_holds,
    legacy_setting,
    policy_from_arguments,
    with_legacy_setting,
)
from .arrays import seed_dtype
from .assembly import assemble
from .call_order import CallOrder, answer_habits, refuse_arguments, refuse_new_scale
from .options import OPTIONS, REBUILDS, UpdaterOptions, attach_options
from .outside_forward import OutsideForward
from .records import Counters, NonFiniteGradientsError, StepRecord

if TYPE_CHECKING:  # nnabla's types are named nn.solvers.Solver, nn.monitor.Monitor
    from ..policy.base import Policy
    from .solver_group import SolverGroup


def _counter(name: str) -> property:
    """A read-only attribute: the counter ``name`` (:class:`Counters`)."""
    return property(attrgetter(f"_counters.{name}"), doc=f"The counter {name} (read-only).")


class DynamicLossScalingUpdater:
    """Run one mixed-precision training iteration per :meth:`update` call, with loss scaling.

    ``update()``: ``solver.zero_grad()``; ``accum_grad`` rounds of ``data_feeder()``,
    ``loss.forward()``, ``loss.backward(seed)``; with ``comm``, the all-reduce and the workers'
    agreement; the finite check; if finite: unscale in float32 by ``1/seed`` (the seed is the
    scale rounded to the loss's precision, so unscaling is exact), clip, weight decay,
    ``solver.update()``; the policy's advance. Each step's verdict (applied, overflow or bad
    batch) follows one rule (:func:`updater.driver.records.verdict`); ``on_overflow="retry"``
    recomputes the same batches at the lowered scale (:mod:`updater.driver.attempts`). The
    solver's parameters are read again at every step that needs them. Keywords other than those
    below raise ``TypeError``; PyTorch's ``init_scale=``, ``growth_interval=``,
    ``growth_factor=``, ``backoff_factor=`` name ``policy=DynamicScale(...)``.

    Args:
        {options}
        scale (float or None, default None): legacy initial scale, in [min_scale, max_scale];
            None: 8.0 if ``scaling_factor`` or ``N`` is given.
        scaling_factor (float or None, default None): legacy growth multiplier and backoff
            divisor, > 1; None: 2.0 if ``scale`` or ``N`` is given.
        N (int or None, default None): legacy finite steps before growth, a whole number
            >= 1; None: 2000.
        policy (policy, str or None, default None): the scaling policy (from
            :mod:`updater.policy`, or a name :func:`updater.make_policy` takes: ``"dynamic"``);
            then none of the legacy trio nor ``min_scale``/``max_scale`` may be given. None:
            ``DynamicScale()``, or nnabla's trio as a ``DynamicScale`` with nnabla's meaning.
        min_scale (float or None, default None): floor of the built policy, >= 2**-24; 1.0.
        max_scale (float or None, default None): cap of the built policy; None: the largest
            power of two the seed holds (2**15 for a float16 loss, 2**127 in float32); above
            that (also in ``policy=``): ValueError.

    Attributes:
        options: ``solver``, ``loss``, ``data_feeder``, ``clear_buffer``, ``accum_grad``,
            ``weight_decay``, ``comm``, ``grads`` and every option above, as nnabla's updater
            has them: assignable (checked, as in the constructor), taking effect at the next
            ``update()``/``backward()``; held in one record
            (:class:`updater.driver.options.UpdaterOptions`).
        scale, scaling_factor, N: as nnabla's, assignable (checked; the last two replace the
            policy, ``AttributeError`` for policies without them).
        policy: the policy, assignable.
        steps (int): the counters, read-only, as are ``updates_applied``, ``overflows``,
            ``skips``, ``consecutive_nonfinite``, ``batches``, ``passes``, ``nonfinite_losses``
            and ``nonfinite_statistics`` (:class:`~updater.driver.records.Counters`).
        history (collections.deque of StepRecord): the last ``history`` records; its length
            is set by the constructor.
        finite_check (str): the path chosen ("numpy", "solver" or "nnabla").

    Raises:
        TypeError / ValueError: for any bad argument, naming it and the accepted range.
    """

    def __init__(
        self,
        solver: nn.solvers.Solver | SolverGroup,
        loss: nn.Variable,
        data_feeder: Callable[[], Any] | None = None,
        scale: float | None = None,
        scaling_factor: float | None = None,
        N: int | None = None,
        clear_buffer: bool = True,
        accum_grad: int = 1,
        weight_decay: float | None = None,
        comm: Any = None,
        grads: Sequence[nn.NdArray] | None = None,
        *,
        policy: Policy | str | None = None,
        min_scale: float | None = None,
        max_scale: float | None = None,
        **options,
    ) -> None:
        """Not split: nnabla's updater's arguments in its order, the policy's three;
        ``**options`` takes the rest, the fields of :class:`UpdaterOptions` (listed by the
        signature :func:`updater.driver.options.attach_options` makes)."""
        refused = {k: v for k, v in options.items() if k not in OPTIONS}
        refuse_arguments(refused, [*OPTIONS, *LEGACY_DEFAULTS, "policy", "min_scale", "max_scale"])
        nnabla_order = {"solver": solver, "loss": loss, "data_feeder": data_feeder}
        nnabla_order.update(clear_buffer=clear_buffer, accum_grad=accum_grad, comm=comm)
        nnabla_order.update(weight_decay=weight_decay, grads=grads)
        self._options = options = UpdaterOptions(**nnabla_order, **options)
        self._policy = policy_from_arguments(
            policy, scale, scaling_factor, N, min_scale, max_scale, seed_dtype(loss)
        )
        self._history = deque(maxlen=options.history)
        self._state: ScaleState = self._policy.init()
        self._counters = Counters()
        self._order = CallOrder()
        self._agreed = False  # the ranks compared their settings (on the first step)
        self._outside: OutsideForward | None = None
        self._assemble()

    def _assemble(self) -> None:
        """Build the collaborators (:func:`updater.driver.assembly.assemble`), again after an
        option they are built from or the policy was assigned; the counters, the scale state,
        the call order and the watch of the loss's graph stay."""
        self._stale = False
        parts = assemble(self._options, self._policy, self._counters)
        self._seed_type, self._monitor, self._work = parts[:3]
        self._forward_state, self._rounds, self._attempts = parts[3:]
        loss = self._options.loss
        if self._outside is None or self._outside.loss is not loss:  # reads the options live
            self._outside = OutsideForward(loss, self, lambda: self._forward_state.given)

    def _set_option(self, name: str, value) -> None:
        """Assign an option (checked); the collaborators built from it are built again at the
        next ``update()``/``backward()``."""
        options = self._options.replaced(**{name: value})
        if name == "loss":
            check_seed_holds(self._policy, seed_dtype(options.loss))
        if name == "comm":
            self._agreed = False  # the ranks compare their settings again over the new one
        self._options = options
        self._stale = self._stale or name in REBUILDS

    steps = _counter("steps")
    updates_applied = _counter("updates_applied")
    overflows = _counter("overflows")
    skips = _counter("skips")
    consecutive_nonfinite = _counter("consecutive_nonfinite")
    batches = _counter("batches")
    passes = _counter("passes")
    nonfinite_losses = _counter("nonfinite_losses")
    nonfinite_statistics = _counter("nonfinite_statistics")

    @property
    def policy(self) -> Policy:
        """The scaling policy; assignable (the collaborators follow at the next step)."""
        return self._policy

    @policy.setter
    def policy(self, value) -> None:
        self._policy = as_policy(value)
        self._stale = True

    @property
    def finite_check(self) -> str:
        """The finite check path in use: "numpy", "solver" or "nnabla"; assignable as the
        argument ("auto" too)."""
        self._build()
        return self._work.check.name

    @finite_check.setter
    def finite_check(self, value) -> None:
        self._set_option("finite_check", value)

    @property
    def history(self):
        """The last records (a deque; its length is the argument ``history``)."""
        return self._history

    @history.setter
    def history(self, value) -> None:
        raise AttributeError(
            f"history holds the last records and cannot be replaced (got {value!r}): its "
            "length is the constructor's argument, DynamicLossScalingUpdater(..., history=N)"
        )

    @property
    def scale(self) -> float:
        """The loss scale the next ``update()`` starts from (the seed is its rounding); 1.0
        when ``enabled=False``."""
        return float(self._state.scale) if self._options.enabled else 1.0

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
            RuntimeError: called right after ``step()`` on the batch ``step()`` trained
                (no data feeder), or after a forward pass of the loss run outside the updater
                (:meth:`backward`).
        """
        refuse_new_scale(new_scale)
        self._order.start_update(self._rounds.inputs())
        self._backward(by_update=True)
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
        return self._backward(by_update=False)

    def _build(self) -> None:
        """Build the collaborators again when an option they are built from was assigned."""
        if self._stale:
            self._assemble()

    def _backward(self, by_update: bool) -> bool:
        """:meth:`backward`; ``by_update``: called by ``update()``, which unscales in the
        checking pass (or measures for clipping in the same read) when the recorder does not
        want this step's scaled gradients (:meth:`updater.driver.attempts.Attempts.run`)."""
        self._order.start()
        self._build()
        o = self._options
        self._outside.check()
        self._work.new_step()
        if not self._agreed:
            self._agreed = True
            saved_state.agree_settings(self, o.comm)
        if not o.enabled:
            pending = self._attempts.unscaled_run(self._state)
        else:
            pending = self._attempts.run(self._policy, self._state, self.steps, by_update)
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
        o = self._options
        if finite:
            self._work.apply(pending.sumsq, o.weight_decay)
        self._state = pending.new_state
        hand_fed = by_step and o.data_feeder is None
        self._order.end(self._rounds.inputs() if hand_fed else None)
        step = self.steps
        record = StepRecord(
            step=step,
            scale=pending.seed,
            update_applied=finite,
            new_scale=float(self._state.scale) if o.enabled else 1.0,
            grad_absmax=pending.absmax,
            loss_finite=pending.loss_finite,
            attempts=pending.attempts,
            bad_batch=pending.bad_batch,
        )
        counters = self._counters
        counters.count_step(finite)
        self._history.append(record)
        if self._monitor is not None:
            self._monitor.add(step, record.scale, counters.skips)
        self._forward_state.report(pending.statistics, step)
        if counters.consecutive_nonfinite >= o.max_consecutive_nonfinite:
            raise NonFiniteGradientsError.after(
                record,
                pending.bad,
                counters.consecutive_nonfinite,
                o.max_consecutive_nonfinite,
                self._rounds.bad_input_names() if pending.bad_batch else (),
            )
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
            f"finite_check={self._work.check.name!r})"
        )


attach_options(DynamicLossScalingUpdater)
answer_habits(DynamicLossScalingUpdater)
