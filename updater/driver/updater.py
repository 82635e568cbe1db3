"""The nnabla driver: ``DynamicLossScalingUpdater``, whose ``update()`` runs one training
iteration in three stages a script may also call: ``backward()``, ``unscale()``, ``step()``.

It is composed of :class:`Rounds` (an attempt's forward/backward rounds), :class:`GradientWork`
(all-reduce, agreement, the :class:`FiniteCheck` of the path), :class:`ForwardState` (what the
forward pass writes) and :class:`Attempts` (an iteration's attempts), built by
:mod:`updater.driver.assembly`, sharing :class:`Counters`, the live options and the plan of an
iteration (:class:`~updater.driver.attempts.StepPlan`, made again when an option is assigned)."""

from __future__ import annotations

import dataclasses
from collections import deque
from typing import TYPE_CHECKING, Any, Callable, Deque, Dict, List, Sequence

import nnabla as nn
import numpy as np

from ..policy import ScaleState
from ..policy.presets import as_policy
from . import saved_state
from .arguments import check_scale, check_seed_holds, legacy_property, policy_from_arguments
from .arrays import seed_dtype
from .assembly import assemble, path_changed, plan_step
from .attributes import DEFAULT, UpdaterAttributes, attach_options
from .call_order import CallOrder, answer_habits, refuse_new_scale, refuse_unknown_keywords
from .options import OPTIONS, REBUILDS, LiveOptions, UpdaterOptions
from .outside_forward import OutsideForward
from .records import Counters, NonFiniteGradientsError, StepRecord

if TYPE_CHECKING:  # nnabla's types are named nn.solvers.Solver, nn.monitor.Monitor
    from ..policy.base import Policy
    from ..trace.recorder import GradientRecorder
    from .attempts import Pending, StepPlan
    from .probe_options import Probes
    from .solver_group import SolverGroup


class DynamicLossScalingUpdater(UpdaterAttributes):
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

    def __init__(  # noqa: PLR0913 (tests/test_layout.py: PUBLIC_SIGNATURES)
        self,
        solver: nn.solvers.Solver | SolverGroup,
        loss: nn.Variable,
        data_feeder: Callable[[], object] | None = DEFAULT,
        scale: float | None = None,
        scaling_factor: float | None = None,
        N: int | None = None,
        clear_buffer: bool = DEFAULT,
        accum_grad: int = DEFAULT,
        weight_decay: float | None = DEFAULT,
        comm: Any = DEFAULT,
        grads: Sequence[nn.NdArray] | None = DEFAULT,
        *,
        policy: Policy | str | None = None,
        min_scale: float | None = None,
        max_scale: float | None = None,
        on_overflow: str = DEFAULT,
        max_retries: int = DEFAULT,
        max_consecutive_nonfinite: int = DEFAULT,
        clip_grad_norm: float | None = DEFAULT,
        average_grads: bool = DEFAULT,
        history: int = DEFAULT,
        monitor: nn.monitor.Monitor | None = DEFAULT,
        recorder: GradientRecorder | None = DEFAULT,
        probes: Probes | None = DEFAULT,
        finite_check: str = DEFAULT,
        enabled: bool = DEFAULT,
        restore_on_skip: bool = DEFAULT,
        unchecked_inputs: Sequence[nn.Variable] = DEFAULT,
        on_nonfinite_statistics: str = DEFAULT,
        forward_state: Sequence[nn.Variable] = DEFAULT,
    ) -> None:
        """nnabla's updater's arguments in its order, then the policy's three and the other
        options, keyword-only, typed for static tools; ``DEFAULT``: the record's
        (:func:`updater.driver.attributes.attach_options`)."""
        given = locals()  # every option is a parameter (tests/updater/driver/test_typed.py)
        options = UpdaterOptions(**{name: given[name] for name in OPTIONS})
        self._live = LiveOptions(options)
        self._policy = policy_from_arguments(
            policy, scale, scaling_factor, N, min_scale, max_scale, seed_dtype(loss)
        )
        self._history: Deque[StepRecord] = deque(maxlen=options.history)
        self._state: ScaleState = self._policy.init()
        self._counters = Counters()
        self._order = CallOrder()
        self._agreed = False  # the ranks compared their settings (on the first step)
        self._outside = OutsideForward(loss, self._live)  # a watch of the loss's graph
        self._plan: StepPlan = plan_step(options)  # made again when an option is assigned
        self._assemble()

    def _assemble(self) -> None:
        """Build the collaborators (:func:`updater.driver.assembly.assemble`), again when
        :meth:`_set_option` or the policy asks; the counters, the scale state, the call order
        and the watch of the loss's graph stay."""
        self._stale = False
        p = assemble(self._live, self._policy, self._counters)
        self._seed_type, self._monitor, self._work = p.seed_type, p.monitor, p.work
        self._forward_state, self._rounds, self._attempts = p.forward_state, p.rounds, p.attempts
        loss = self._live.record.loss
        if self._outside.loss is not loss:  # it reads the options live
            self._outside = OutsideForward(loss, self._live)

    def _set_option(self, name: str, value) -> None:
        """Assign an option (checked) and plan the iteration again: the collaborators read it at
        their next use; they are built again at the next ``update()``/``backward()`` when it
        chooses a structure (:data:`updater.driver.options.REBUILDS`) or changes the finite
        check's path."""
        options = self._live.record.replaced(**{name: value})
        if name == "loss":
            check_seed_holds(self._policy, seed_dtype(options.loss))
        if name == "comm":
            self._agreed = False  # the ranks compare their settings again over the new one
        self._live.record = options
        self._plan = plan_step(options)
        rebuild = name in REBUILDS or path_changed(self._live, self._policy, self._work)
        self._stale = self._stale or rebuild

    @property
    def policy(self) -> Policy:
        """The scaling policy; assignable (the collaborators follow at the next step)."""
        return self._policy

    @policy.setter
    def policy(self, value) -> None:
        self._policy = as_policy(value)
        self._stale = self._stale or path_changed(self._live, self._policy, self._work)

    @property
    def finite_check(self) -> str:
        """The finite check path in use: "numpy", "solver" or "nnabla"; assignable as the
        argument ("auto" too)."""
        if self._stale:  # an option or the policy changed the path
            self._assemble()
        return self._work.check.name

    @finite_check.setter
    def finite_check(self, value) -> None:
        self._set_option("finite_check", value)

    @property
    def history(self) -> Deque[StepRecord]:
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
        when ``enabled=False``. Assignable within the policy's bounds (a ``StaticScale``: its
        own scale only), else ``ValueError``."""
        return float(self._state.scale) if self._live.record.enabled else 1.0

    @scale.setter
    def scale(self, value) -> None:
        self._state = self._state._replace(scale=np.float64(check_scale(self.policy, value)))

    scaling_factor = legacy_property(
        "scaling_factor", float, "Growth multiplier (and backoff divisor) of the policy."
    )
    N = legacy_property("N", int, "Consecutive finite steps before the policy grows the scale.")

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
        if new_scale is not None:
            refuse_new_scale(new_scale)
        if self._order.pending is not None or self._order.left is not None:  # else no check
            self._order.start_update(self._rounds.inputs)
        pending = self._backward(by_update=True)
        self._work.unscale(pending)
        return self._step(pending, by_step=False)

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
        self._order.start()
        return self._backward(by_update=False).finite

    def _backward(self, by_update: bool) -> Pending:
        """:meth:`backward` once the call order allowed it, as planned; ``by_update``: called
        by ``update()``, which unscales in the checking pass or measures for clipping in the
        same read (:meth:`updater.driver.attempts.Attempts.run`)."""
        if self._stale:
            self._assemble()
        o, plan, outside = self._live.record, self._plan, self._outside
        if outside.watched:
            outside.check()
        self._work.new_step()
        if not self._agreed:
            self._agreed = True
            saved_state.agree_settings(self, o.comm)
        if not o.enabled:
            pending = self._attempts.unscaled_run(self._state)
        else:
            pending = self._attempts.run(plan, self._policy, self._state, self.steps, by_update)
            self._state = pending.state  # the failed attempts advanced the policy
        self._order.pending = pending
        if plan.watch_outside or outside.watched:  # else after_step would watch nothing
            outside.after_step()
        return pending

    def unscale(self) -> None:
        """Second stage: multiply every gradient by ``1/seed`` in float32 (bit for bit as
        ``solver.scale_grad(1/seed)``). Does nothing when called again or after non-finite
        gradients.

        Raises:
            RuntimeError: called before :meth:`backward`.
        """
        self._work.unscale(self._order.require("unscale()"))

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
        pending = self._order.require("step()")
        self._work.unscale(pending)
        return self._step(pending, by_step=True)

    def _step(self, pending: Pending, by_step: bool) -> StepRecord:
        """:meth:`step` of the iteration ``pending``, unscaled; ``by_step``: called as
        ``step()``, not by ``update()``."""
        finite = pending.finite
        o = self._live.record
        step = self.steps
        record = StepRecord(  # before solver.update(): Python right after it runs slower
            step=step,
            scale=pending.seed,
            update_applied=finite,
            new_scale=float(pending.new_state.scale) if o.enabled else 1.0,
            grad_absmax=pending.absmax,
            loss_finite=pending.loss_finite,
            attempts=pending.attempts,
            bad_batch=pending.bad_batch,
        )
        if finite:
            self._work.apply(pending.sumsq, o.weight_decay)
        self._state = pending.new_state
        if by_step:
            self._order.end(self._rounds.inputs() if o.data_feeder is None else None)
        else:  # update() took what the last step() left when it started
            self._order.pending = None
        counters = self._counters
        counters.count_step(finite)
        self._history.append(record)
        if self._monitor is not None:
            self._monitor.add(step, record.scale, counters.skips)
        if pending.statistics:
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

    def __copy__(self) -> DynamicLossScalingUpdater:
        """``copy.copy(updater)``: an independent updater, as nnabla's shallow copy is: the same
        options (solver, loss, data feeder, ...: shared, as nnabla's copy shares them), its own
        scale state, counters, history, pending iteration and collaborators."""
        new = object.__new__(type(self))
        new.__dict__.update(self.__dict__)
        new._live = LiveOptions(self._live.record)  # an option assigned to one is its own
        new._counters = dataclasses.replace(self._counters)
        new._history = deque(self._history, maxlen=self._history.maxlen)
        new._order = self._order.copied()
        new._outside = OutsideForward(new._live.record.loss, new._live)  # the copy's own
        new._assemble()
        return new

    def __repr__(self) -> str:
        return (
            f"DynamicLossScalingUpdater(scale={self.scale!r}, policy={self.policy!r}, "
            f"steps={self.steps}, updates_applied={self.updates_applied}, skips={self.skips}, "
            f"finite_check={self._work.check.name!r})"
        )


attach_options(DynamicLossScalingUpdater)
refuse_unknown_keywords(DynamicLossScalingUpdater)
answer_habits(DynamicLossScalingUpdater)
