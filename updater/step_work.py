"""Per-step gradient work of the updater (mixed into
:class:`updater.DynamicLossScalingUpdater`): the solver's parameters read once per step, the
all-reduce and the workers' agreement, and the finite check of :mod:`updater.gradients`."""

from __future__ import annotations

from typing import Dict, List

import nnabla as nn
import numpy as np

from .arrays import host_view
from .gradients import Inspection, host_grads, inspect_gradients


class GradientWork:
    """The updater's per-step gradient work (module doc)."""

    def _params(self) -> Dict[str, nn.Variable]:
        """The solver's current parameters, read once per step."""
        if self._step_params is None:
            self._step_params = self.solver.get_parameters()
        return self._step_params

    def _reduced_grads(self) -> List[nn.NdArray]:
        return self.grads or [p.grad for p in self._params().values()]

    def _all_reduce(self) -> None:
        self.comm.all_reduce(self._reduced_grads(), division=self.average_grads, inplace=False)

    def _agree(self, local_finite: bool, local_bad_loss: bool, local_bad_batch: bool):
        """Sum a three-element flag over workers: (this worker saw inf/NaN gradients, its loss
        was inf/NaN, its batch was bad). Returns (finite everywhere, a loss was bad somewhere,
        a batch was bad somewhere)."""
        if self._flag is None:
            self._flag = nn.NdArray.from_numpy_array(np.zeros(3, np.float32))
        flags = (0.0 if local_finite else 1.0, float(local_bad_loss), float(local_bad_batch))
        self._flag.cast(np.float32)[...] = flags
        self.comm.all_reduce(self._flag, division=False, inplace=True)
        total = host_view(self._flag)
        return bool(total[0] <= 0), bool(total[1] > 0), bool(total[2] > 0)

    def _host_grads(self) -> List[np.ndarray]:
        return host_grads(self._params())

    def _inspect(self, seed=None) -> Inspection:
        """The finite check; with ``seed``, fused with unscaling by ``1/seed`` ("numpy") and
        with the sum of squares for clipping."""
        absmax_over = self.grads if self.comm is not None and self.grads else None
        return inspect_gradients(
            self.finite_check,
            self.solver,
            self._params,
            self.policy.needs_grad_absmax,
            absmax_over,
            unscale_by=None if seed is None else 1.0 / seed,
            need_sumsq=seed is not None and self.clip_grad_norm is not None,
            flat=self._flat,
            loss=self.loss,
            inputs=() if self._inputs_on_host() else [v.data for v in self._checked_inputs()],
            statistics=self._statistics_on_device(),
        )
