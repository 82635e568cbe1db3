"""The attempts of one iteration, and the retry machinery (mixed into
:class:`updater.DynamicLossScalingUpdater`).

One attempt is ``solver.zero_grad()`` and ``accum_grad`` rounds of feed, forward and
``backward(seed)``, then the all-reduce and the agreed finite check. ``on_overflow="retry"``
recomputes the same batch(es) at the lowered scale: the inputs of each accumulation round are
kept (copied on the device) and written back. The inputs that the forward pass writes (running
statistics, registered or made by hand: :func:`updater.arrays.forward_written`, found from the
graph) move exactly once per batch, retried or not: copied before the batch and put back before
each retry and after a skipped step (``restore_on_skip``, the default), or, with
``restore_on_skip=False`` (nnabla's behaviour: a skipped batch moves them), copied after the
first attempt and restored after the last. A retry happens only when the policy lowered the
seed and the batch was not bad on any worker; otherwise the step is skipped.

A bad batch is bad data, which no scale fixes: an inf/NaN loss, or an inf/NaN in an input of
the graph (its leaves that are not parameters, checked each round on the host, or by the
device check with the gradients). It is skipped, never retried, and the policy takes it as its
third outcome (``bad_batch=True``: the scale does not move).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import List, Sequence

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
from .flat import SavedData
from .gradients import Inspection
from .policy import ScaleState
from .probes import FLUSH_OFFSETS, probe_step


@dataclass
class _Pending:
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


class Attempts:
    """The attempts of one iteration (module doc); state and settings are the updater's."""

    _bad_inputs = frozenset()  # indices of the inputs found inf/NaN this step (host check)

    def _require_backward(self, what: str) -> _Pending:
        if self._pending is None:
            raise RuntimeError(
                f"{what} needs the gradients of backward(): call backward() first "
                "(or update(), which runs backward(), unscale() and step())"
            )
        return self._pending

    def _backward(self, fuse: bool) -> bool:
        """:meth:`backward`; ``fuse`` unscales in the checking pass ("numpy") or measures for
        clipping in the same read ("solver") when the gradients will not be seen scaled."""
        if self._pending is not None:
            raise RuntimeError(
                "backward() was called again before step(): finish the iteration with "
                "step() (or call update(), which runs backward(), unscale() and step())"
            )
        self._step_params = None
        if not self.enabled:
            self._forward_backward(1.0, replay=False)
            if self.comm is not None:
                self._all_reduce()
            self._pending = _Pending(1.0, True, None, None, 1, [], self._state, unscaled=True)
            return True
        attempts, overflow_scale, moved = 0, None, None
        before = self._copy_written("before") if self.restore_on_skip else None
        while True:
            attempts += 1
            seed = self._seed(self._state.scale)
            loss_finite = self._forward_backward(seed, replay=attempts > 1)
            if self.comm is not None:
                self._all_reduce()
            found = self._inspect(seed if fuse else None)
            arrays, finite, absmax, bad = found[:4]
            inputs_ok = found.inputs_finite
            inputs_ok = not self._bad_inputs if inputs_ok is None else inputs_ok
            if not finite and loss_finite is None:
                loss_finite = self._loss_finite(found)
            bad_batch = loss_finite is False or not inputs_ok
            if self.comm is not None:
                finite, bad_loss_anywhere, bad_batch = self._agree(
                    finite, loss_finite is False, bad_batch
                )
                loss_finite = False if bad_loss_anywhere else loss_finite
                if not finite and loss_finite is None:
                    loss_finite = self._loss_finite(found)
            if not finite and absmax is not None:
                absmax = math.inf
            new_state = self.policy.update(
                self._state, finite, absmax if self.policy.needs_grad_absmax else None, bad_batch
            )
            applied = finite and not bad_batch
            retry = (
                not applied
                and not bad_batch
                and self.on_overflow == "retry"
                and attempts <= self.max_retries
                and self._seed(new_state.scale) < seed
            )
            self.overflows += not finite
            if not retry:
                break
            self._state = new_state
            overflow_scale = seed
            if before is not None:  # the retry starts from the statistics before the batch
                before.restore()
            elif moved is None:
                moved = self._copy_written("moved")
        if self.recorder is not None and self.recorder.wants(self.steps):
            seen = False if bad_batch else loss_finite
            self._record(arrays, seed, finite, seen, overflow_scale)
        if before is not None and not applied:  # a skipped step leaves the model as it was
            before.restore()
        if moved is not None:
            moved.restore()
        stays = applied or before is None  # the statistics this step wrote stay
        self._pending = _Pending(
            seed, applied, absmax, loss_finite, attempts, bad, new_state, found.unscaled,
            found.sumsq, bad_batch, self._new_nonfinite_statistics(found) if stays else [],
        )  # fmt: skip
        return applied

    def _record(self, arrays, seed, finite, loss_finite, overflow_scale) -> None:
        """Hand the recorded attempt to the recorder, probing its overflow threshold first when
        the recorder asks for it (:mod:`updater.probes`) and the loss was finite."""
        rec = self.recorder
        over = seed if not finite and loss_finite else overflow_scale
        grads, scale, flush = arrays, seed, None
        if (rec.probe_overflow or rec.measure_flush) and loss_finite is not False:
            known = math.inf if over is None else over
            found = probe_step(self, seed, finite, known, rec.probe_overflow, rec.measure_flush)
            rec.probe_passes += found.passes
            grads, flush = None, found.flush  # host views taken before may be stale
            if rec.probe_overflow:
                over = found.threshold
            if found.finite_grads is not None:
                grads, scale = found.finite_grads, found.finite_seed
        rec.record(
            self.steps,
            grads or self._host_grads(),
            scale,
            loss_finite=loss_finite is not False,
            overflow_scale=over,
            names=list(self._params()),
            flush=None if flush is None else (seed * 2.0 ** np.array(FLUSH_OFFSETS), flush),
        )

    def _reference_grads(self) -> List[np.ndarray]:
        """The step's gradients from a float32 copy of the graph (built on first use; same
        parameters and inputs), at seed 1, as float64 host copies."""
        if self._reference is None:
            from . import amp

            everything = amp.AmpLists(float=amp.function_names())
            self._reference = amp.rewrite(
                self.loss, everything, getattr(self.loss.parent, "context", None)
            )
        self._forward_backward(1.0, replay=True, count=False, loss=self._reference)
        return [np.array(g, np.float64) for g in self._host_grads()]

    def _probe_attempt(self, scale: float) -> bool:
        """One overflow probe: the step's rounds again at ``scale`` (not counted), the
        all-reduce and the check; whether the gradients are finite on every worker."""
        self._forward_backward(self._seed(scale), replay=True, count=False)
        if self.comm is not None:
            self._all_reduce()
        finite = self._inspect().finite
        if self.comm is not None:
            finite = self._agree(finite, False, False)[0]
        return finite

    def _seed(self, scale) -> float:
        """The value ``loss.backward(scale)`` really seeds with (the scale, rounded)."""
        seed = float(self._seed_type(scale))
        if seed == 0:
            raise ValueError(
                f"loss scale {float(scale)!r} rounds to a backward seed of 0 in "
                f"{np.dtype(self._seed_type).name}; the policy {self.policy!r} has no floor: "
                "use one with min_scale >= 2**-24"
            )
        return seed

    def _copy_written(self, slot: str) -> SavedData:
        """A copy of the inputs the forward pass writes (found once; one concatenation), valid
        until the next copy into the same ``slot``."""
        written, graphs = self._written_state()
        return graphs.save(written, slot)

    def _input_leaves(self) -> List[nn.Variable]:
        if self._inputs is None:
            self._inputs = input_leaves(self.loss, self._params())
        return self._inputs

    def _forward_backward(
        self, seed: float, replay: bool, count: bool = True, loss=None
    ) -> bool | None:
        """zero_grad and ``accum_grad`` rounds of ``loss`` (default the updater's); ``replay``
        writes back the kept round inputs; ``count`` adds the rounds to ``passes``."""
        loss = self.loss if loss is None else loss
        rec = self.recorder
        probes = rec is not None and (rec.probe_overflow or rec.measure_flush)
        again = self.on_overflow == "retry" or (probes and self.recorder.wants(self.steps))
        keep = again and self.accum_grad > 1 and self.data_feeder is not None
        if keep and not replay:
            self._round_inputs = []
        read_loss = self.enabled and self.accum_grad > 1
        loss_finite = True if read_loss else None
        check_inputs = count and not replay and self.enabled and self._inputs_on_host()
        if check_inputs:
            self._bad_inputs = set()
        self.solver.zero_grad()
        for r in range(self.accum_grad):
            if not replay:
                if self.data_feeder is not None:
                    self.data_feeder()
                    self.batches += 1
                if keep:
                    self._round_inputs.append([copy_array(v.data) for v in self._input_leaves()])
                if check_inputs:
                    leaves = self._checked_inputs()
                    self._bad_inputs.update(nonfinite_indices([v.data for v in leaves]))
            elif keep:
                for v, saved in zip(self._input_leaves(), self._round_inputs[r]):
                    restore_array(v, saved)
            loss.forward(clear_no_need_grad=self.clear_buffer)
            if read_loss:
                loss_finite = self._loss_finite() and loss_finite
            loss.backward(seed, clear_buffer=self.clear_buffer)
            self.passes += count
        return loss_finite

    def _checked_inputs(self) -> List[nn.Variable]:
        """The inputs checked for bad data: the graph's inputs but ``unchecked_inputs``."""
        skip = {hash(v) for v in self.unchecked_inputs}
        return [v for v in self._input_leaves() if hash(v) not in skip]

    def _inputs_on_host(self) -> bool:
        """Whether the batch's inputs are checked on the host, each round (one pass over
        them); else the device check reads them with the gradients (one round, "solver")."""
        return self.finite_check != "solver" or self.accum_grad > 1

    def _input_names(self) -> List[str]:
        """The inputs that held inf/NaN, named by the function they feed and their shape."""
        leaves = self._checked_inputs()
        if self._inputs_on_host():
            bad = [v for i, v in enumerate(leaves) if i in self._bad_inputs]
        else:  # the device check saw them: read them now (still the step's)
            bad = [leaves[i] for i in nonfinite_indices([v.data for v in leaves])]
        return describe_inputs(self.loss, bad)

    def _loss_finite(self, found: Inspection | None = None) -> bool:
        """Whether the loss is finite: as ``found`` by the device check, else read now."""
        if found is not None and found.loss_finite is not None:
            return found.loss_finite
        return bool(np.isfinite(host_view(self.loss.data)).all())
