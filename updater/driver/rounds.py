"""The rounds of one attempt: ``solver.zero_grad()``, then ``accum_grad`` rounds of feed, forward
and ``backward(seed)``; the inputs of each round kept for a replay at another scale (a retry, a
probe), and checked for inf/NaN on the host (bad data)."""

from __future__ import annotations

from typing import Callable, Dict, List

import nnabla as nn
import numpy as np

from .arrays import (
    copy_array,
    describe_inputs,
    host_view,
    input_leaves,
    nonfinite_indices,
    restore_array,
)


class Rounds:
    """Runs the rounds of an attempt.

    Args:
        solver (nnabla.solvers.Solver): zeroes the gradients.
        loss (nnabla.Variable): the loss.
        data_feeder (callable or None): called before each forward of a new batch.
        accum_grad (int): rounds per attempt.
        clear_buffer (bool): free buffers in forward/backward.
        enabled (bool): loss scaling on (else no loss or input is read).
        params (callable): returns the solver's parameters (to tell inputs from parameters).
        unchecked_inputs (list of Variable): inputs left out of the bad-data check.
        device_checks_inputs (bool): the device check reads the inputs with the gradients
            (used when there is one round).
        counters (Counters): ``batches`` and ``passes`` move here.
        state (callable or None, default None): returns the Variables the step writes
            (:class:`ForwardState`'s), which are state, not inputs: never checked nor replayed.
    """

    def __init__(
        self, solver, loss, data_feeder, accum_grad: int, clear_buffer: bool, enabled: bool,
        params: Callable[[], Dict[str, nn.Variable]], unchecked_inputs: list,
        device_checks_inputs: bool, counters, state: Callable[[], list] | None = None,
    ):  # fmt: skip
        self.solver = solver
        self.loss = loss
        self.data_feeder = data_feeder
        self.accum_grad = accum_grad
        self.clear_buffer = clear_buffer
        self.enabled = enabled
        self._params = params
        self.unchecked_inputs = unchecked_inputs
        self.device_checks_inputs = device_checks_inputs
        self.counters = counters
        self._state = state
        self._inputs: List[nn.Variable] | None = None  # graph inputs, found on first use
        self._kept: List[List[nn.NdArray]] = []  # per round, for a replay
        self._bad_inputs = frozenset()  # indices of the inputs found inf/NaN (host check)

    @property
    def inputs_on_host(self) -> bool:
        """Whether the batch's inputs are checked on the host, each round (one pass over
        them); else the device check reads them with the gradients (one round)."""
        return not self.device_checks_inputs or self.accum_grad > 1

    @property
    def inputs_finite(self) -> bool:
        """No checked input held inf/NaN in the last rounds checked on the host."""
        return not self._bad_inputs

    def inputs(self) -> List[nn.Variable]:
        """The graph's inputs: its leaves that are neither parameters nor state (found once)."""
        if self._inputs is None:
            state = self._state() if self._state is not None else ()
            self._inputs = input_leaves(self.loss, self._params(), state)
        return self._inputs

    def checked_inputs(self) -> List[nn.Variable]:
        """The inputs checked for bad data: the graph's inputs but ``unchecked_inputs``."""
        skip = {hash(v) for v in self.unchecked_inputs}
        return [v for v in self.inputs() if hash(v) not in skip]

    def device_checked(self) -> List[nn.NdArray]:
        """The inputs for the device check to read (none when checked on the host)."""
        return [] if self.inputs_on_host else [v.data for v in self.checked_inputs()]

    def run(
        self, seed: float, replay: bool = False, keep: bool = False, count: bool = True, loss=None
    ) -> bool | None:
        """zero_grad and ``accum_grad`` rounds of ``loss`` (default the updater's) seeded with
        ``seed``. ``keep``: keep each round's inputs (``replay`` writes them back instead of
        calling the feeder); ``count``: add the rounds to ``passes`` and check the inputs.
        Returns whether every round's loss was finite when read (``accum_grad > 1``), else
        None."""
        loss = self.loss if loss is None else loss
        keep = keep and self.accum_grad > 1 and self.data_feeder is not None
        if keep and not replay:
            self._kept = []
        read_loss = self.enabled and self.accum_grad > 1
        loss_finite = True if read_loss else None
        check_inputs = count and not replay and self.enabled and self.inputs_on_host
        if check_inputs:
            self._bad_inputs = set()
        self.solver.zero_grad()
        for r in range(self.accum_grad):
            if not replay:
                if self.data_feeder is not None:
                    self.data_feeder()
                    self.counters.batches += 1
                if keep:
                    self._kept.append([copy_array(v.data) for v in self.inputs()])
                if check_inputs:
                    leaves = self.checked_inputs()
                    self._bad_inputs.update(nonfinite_indices([v.data for v in leaves]))
            elif keep:
                for v, saved in zip(self.inputs(), self._kept[r]):
                    restore_array(v, saved)
            loss.forward(clear_no_need_grad=self.clear_buffer)
            if read_loss:
                loss_finite = self.loss_finite() and loss_finite
            loss.backward(seed, clear_buffer=self.clear_buffer)
            self.counters.passes += count
        return loss_finite

    def loss_finite(self, found=None) -> bool:
        """Whether the loss is finite: as ``found`` by the device check, else read now."""
        if found is not None and found.loss_finite is not None:
            return found.loss_finite
        return bool(np.isfinite(host_view(self.loss.data)).all())

    def bad_input_names(self) -> List[str]:
        """The inputs that held inf/NaN, named by the function they feed and their shape."""
        leaves = self.checked_inputs()
        if self.inputs_on_host:
            bad = [v for i, v in enumerate(leaves) if i in self._bad_inputs]
        else:  # the device check saw them: read them now (still the step's)
            bad = [leaves[i] for i in nonfinite_indices([v.data for v in leaves])]
        return describe_inputs(self.loss, bad)
