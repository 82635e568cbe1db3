"""The gradient work of one step: the solver's parameters read once per step, the all-reduce and
the workers' agreement, the attempt's facts (the finite check of :mod:`updater.driver.checks`
with what :class:`StepReads` plans it to read besides the gradients), the unscaling, and clip ->
weight decay -> ``solver.update()``."""

from __future__ import annotations

import math
import warnings
from typing import Dict, List, Set

import nnabla as nn
import numpy as np

from .arrays import graph_leaves, host_view
from .checks import Ask, Extras, FiniteCheck, HostReads, StepFacts, host_grads
from .checks.base import NO_EXTRAS
from .options import LiveOptions
from .solver_group import SolverGroup


class GradientWork:
    """The solver's gradients in one step.

    Args:
        options (LiveOptions): reads, at each use, ``solver``, ``comm`` (all-reduces the
            gradients and the agreement flag), ``grads`` (the gradients to all-reduce; empty:
            every gradient), ``average_grads`` (all-reduce with ``division=True``) and
            ``clip_grad_norm``.
        check (FiniteCheck): the finite check chosen for the run.
    """

    def __init__(self, options: LiveOptions, check: FiniteCheck):
        self.options = options
        self.check = check
        self._params: Dict[str, nn.Variable] | None = None
        self._flag: nn.NdArray | None = None  # three-element agreement flag, made on first use
        self._reach_checked = False  # warned if no parameter is in the loss's graph
        self._ask: Ask | None = None  # the last request (:meth:`facts`)

    def new_step(self) -> None:
        """Forget the parameters read (the next :meth:`params` reads them again)."""
        self._params = None

    def params(self) -> Dict[str, nn.Variable]:
        """The solver's current parameters, read once per step (a :class:`SolverGroup`'s as its
        ``zero_grad()`` read them); on the first step, a warning when none is in the loss's
        graph (:func:`warn_if_unreached`)."""
        if self._params is None:
            solver = self.options.record.solver
            read = getattr(solver, "parameters_at_zero_grad", solver.get_parameters)
            self._params = read()
            if not self._reach_checked:  # once per solver and loss: they rebuild this object
                self._reach_checked = True
                warn_if_unreached(solver, self._params, self.options.record.loss)
        return self._params

    def all_reduce(self) -> None:
        """All-reduce :attr:`grads` (or every parameter gradient) when there is a ``comm``."""
        o = self.options.record
        if o.comm is not None:
            reduced = o.grads or [p.grad for p in self.params().values()]
            o.comm.all_reduce(reduced, division=o.average_grads, inplace=False)

    def agree(self, local_finite: bool, local_bad_loss: bool, local_bad_batch: bool):
        """Sum a three-element flag over workers: (this worker saw inf/NaN gradients, its loss
        was inf/NaN, its batch was bad). Returns (finite everywhere, a loss was bad somewhere,
        a batch was bad somewhere)."""
        flag = self._flag
        if flag is None:
            flag = self._flag = nn.NdArray.from_numpy_array(np.zeros(3, np.float32))
        flags = (0.0 if local_finite else 1.0, float(local_bad_loss), float(local_bad_batch))
        flag.cast(np.float32)[...] = flags
        self.options.record.comm.all_reduce(flag, division=False, inplace=True)
        total = host_view(flag)
        return bool(total[0] <= 0), bool(total[1] > 0), bool(total[2] > 0)

    def host_grads(self) -> List[np.ndarray]:
        """Host views of every gradient (:func:`updater.driver.checks.host_grads`)."""
        return host_grads(self.params())

    def facts(
        self,
        reads: StepReads,
        need_absmax: bool,
        unscale_by: float | None = None,
        need_sumsq: bool = False,
    ) -> StepFacts:
        """The attempt's facts, one record from one call: the finite check
        (:meth:`FiniteCheck.facts`, :class:`Ask`; |g| max over the reduced gradients when only
        some are reduced) with what ``reads`` (planned: :meth:`StepReads.plan`) has it read
        besides the gradients and read on the host for it."""
        o = self.options.record
        absmax_over = o.grads if o.comm is not None and o.grads else ()
        asked = (need_absmax, absmax_over, unscale_by, need_sumsq)
        ask = self._ask  # the last one, asked again while the scale stays
        if ask is None or asked != ask:
            ask = self._ask = Ask(
                need_absmax=need_absmax,
                absmax_over=absmax_over,
                unscale_by=unscale_by,
                need_sumsq=need_sumsq,
            )
        extras = reads.extras() if reads.with_gradients else NO_EXTRAS
        host = reads.host
        assert host is not None  # planned before any attempt
        return self.check.facts(self.params, ask, extras, host)

    def unscale(self, pending) -> None:
        """Multiply every gradient by ``1/seed`` of the iteration ``pending``
        (:class:`~updater.driver.attempts.Pending`) once, when they are finite, and mark it
        unscaled."""
        if not pending.unscaled and pending.finite:
            self.check.unscale(self.params, 1.0 / pending.seed)
        pending.unscaled = True

    def apply(self, sumsq: float | None, weight_decay) -> None:
        """On unscaled gradients: clip their global L2 norm to the option ``clip_grad_norm`` with
        ``solver.scale_grad`` when it is not None (``sumsq``: their sum of squares if measured
        already, else measured now), apply ``weight_decay``, then ``solver.update()``."""
        o = self.options.record
        solver, clip_grad_norm = o.solver, o.clip_grad_norm
        if clip_grad_norm is not None:
            norm = math.sqrt(self.check.sumsq(self.params) if sumsq is None else sumsq)
            if norm > clip_grad_norm:
                solver.scale_grad(clip_grad_norm / norm)
        if weight_decay is not None:
            solver.weight_decay(weight_decay)
        solver.update()


class StepReads:
    """What an attempt's facts read besides the gradients, planned once per build: from
    ``rounds`` (:class:`Rounds`: the loss and the inputs) and ``forward_state``
    (:class:`ForwardState`: the statistics), what the ``check``'s path reads with the gradients
    and what the host reads for it (:class:`HostReads`), made by :meth:`plan` on first use,
    when the state the graph writes is found (:attr:`stateful`).

    Attributes:
        with_gradients (bool): the path reads the loss, the inputs or the statistics with the
            gradients (:meth:`extras`); else it reads nothing but the gradients.
        host (HostReads or None): the host's reads, None until :meth:`plan`.
        stateful (bool): the graph writes state (set by :meth:`plan`): without, no statistic
            is copied, checked or reported.
    """

    def __init__(self, rounds, forward_state, check: FiniteCheck):
        self.rounds = rounds
        self.forward_state = forward_state
        self.with_gradients = check.reads_statistics or not rounds.batch_on_host
        self.host: HostReads | None = None
        self.stateful = False

    def plan(self) -> StepReads:
        """Find the state (once) and make :attr:`host`; returns itself."""
        if self.host is None:
            state, rounds = self.forward_state, self.rounds
            self.stateful = bool(state.written)
            self.host = HostReads(
                loss_finite=rounds.host_loss_finite,
                inputs_finite=rounds.host_inputs_finite,
                nonfinite_statistics=state.nonfinite_indices if self.stateful else None,
            )
        return self

    def extras(self) -> Extras:
        """What the path reads with the gradients (:meth:`Rounds.extras`)."""
        return self.rounds.extras(self.forward_state.checked_with_gradients())


def trained_leaves(loss) -> Set[int]:
    """Hashes of the leaves of the graph of ``loss`` that it reads with ``need_grad`` (where its
    backward pass writes a gradient; ``fix_parameters=True`` layers read theirs without)."""
    found: Set[int] = set()
    loss.visit(
        lambda f: found.update(hash(v) for v in f.inputs if v.parent is None and v.need_grad)
    )
    return found


def warn_if_unreached(solver, params: Dict[str, nn.Variable], loss) -> None:
    """A ``UserWarning`` when no gradient of ``loss`` reaches any of the solver's parameters
    ``params`` (or, for a :class:`SolverGroup`, any of a member's): every step would be applied
    and move nothing. One per solver so reached: none of them is a leaf of the loss's graph, or
    the graph reads them all without ``need_grad`` (layers built with ``fix_parameters=True``)."""
    members = [("the solver's {n} parameters", params)]
    if isinstance(solver, SolverGroup):
        members = [
            (f"the {{n}} parameters of the SolverGroup's solvers[{i}]", s.get_parameters())
            for i, s in enumerate(solver.solvers)
        ]
    leaves, trained = {hash(v) for v in graph_leaves(loss)}, trained_leaves(loss)
    for who, held in members:
        keys = {hash(v) for v in held.values()}
        if not held or keys & trained:
            continue
        names = ", ".join(list(held)[:3]) + (", ..." if len(held) > 3 else "")
        if keys & leaves:
            why = (
                "gets a gradient from the loss: its graph reads them with need_grad=False (layers "
                "built with fix_parameters=True), so update() would apply steps that move nothing. "
                "Build the layers to train without fix_parameters=True"
            )
        else:
            why = (
                "is in the graph of the loss: update() would apply steps that move nothing the "
                "loss uses. Give the updater the solver whose parameters the loss was built from "
                "(solver.set_parameters with the scope that built the loss)"
            )
        warnings.warn(
            f"none of {who.format(n=len(held))} ({names}) {why}",
            UserWarning,
            stacklevel=4,
        )
