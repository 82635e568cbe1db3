"""Data-parallel training with the real updater on cpu:half; overflows injected on one rank.

Usage: mpiexec -n N python updater_agree.py OUTDIR MODE STEPS
MODE "all": grads=None (every gradient is all-reduced). An inf goes into ONE rank's input at
    the steps in INF_STEPS (the rank rotates), and ONE rank's loss weight is 1e4 at the steps in
    SPIKE_STEPS (its gradients overflow float16).
MODE "partial": grads = the fc2 gradients only. The inf in the input makes only fc1/W's gradient
    non-finite (tanh saturates, so the loss stays finite), and fc1/W is not reduced: only the
    one-element agreement reduction tells the other ranks to skip.
Writes OUTDIR/rank{R}.npz: records (steps x 6: step, scale, attempts, update_applied,
new_scale, bad_batch), local_finite (steps: this rank's gradients all finite after update(),
i.e. after the all-reduce of ``grads``), injected (steps: this rank's data was bad or its loss
weight 1e4), bad_data (steps: this rank's input held an inf), and the parameters.
"""

import sys
from pathlib import Path

import nnabla as nn
import numpy as np

sys.path.insert(
    0, str(Path(__file__).resolve().parents[4])
)  # the checkout, for tests.nnabla_models
from tests.nnabla_models import TinyClassifier  # noqa: E402
from updater import DynamicLossScalingUpdater, DynamicScale, MPICommunicator  # noqa: E402
from updater.runtime.comm import abort_on_exception  # noqa: E402

abort_on_exception()
out_dir, mode, steps = Path(sys.argv[1]), sys.argv[2], int(sys.argv[3])
comm = MPICommunicator()
rank, size = comm.rank, comm.size


def inf_rank(k):
    """Rank whose input gets an inf at step k, or None."""
    return (k // 37) % size if k % 37 == 5 else None


def spike_rank(k):
    """Rank whose loss weight is 1e4 at step k, or None (only in mode "all")."""
    return (k // 53 + 1) % size if mode == "all" and k % 53 == 20 else None


model = TinyClassifier(scope="dp", batch=8, in_dim=8, hidden=16, classes=4, seed=0, lr=0.05)
nn.set_default_context(model.ctx)
injected = np.zeros(steps, bool)
bad_data = np.zeros(steps, bool)
calls = [0]


def feed():
    k = calls[0]
    rng = np.random.RandomState(7919 * rank + k)
    x = rng.randn(model.batch, model.in_dim)
    if inf_rank(k) == rank:
        x[0, 0] = np.inf
    model.x.d = x
    model.t.d = rng.randint(0, model.classes, (model.batch, 1))
    model.weight.d = 1e4 if spike_rank(k) == rank else 1.0
    injected[k] = inf_rank(k) == rank or spike_rank(k) == rank
    bad_data[k] = inf_rank(k) == rank
    calls[0] += 1


grads = None
if mode == "partial":
    grads = [p.grad for name, p in model.params.items() if name.startswith("fc2/")]
policy = DynamicScale(init_scale=2.0**12, growth_interval=8, max_scale=2.0**15, hysteresis=1)
updater = DynamicLossScalingUpdater(
    model.solver, model.loss, feed, comm=comm, grads=grads, policy=policy
)
records = np.zeros((steps, 6))
local_finite = np.zeros(steps, bool)
for k in range(steps):
    r = updater.update()
    records[k] = (r.step, r.scale, r.attempts, r.update_applied, r.new_scale, r.bad_batch)
    local_finite[k] = all(np.isfinite(p.grad.get_data("r")).all() for p in model.params.values())
params = {f"param/{k}": p.data.get_data("r").copy() for k, p in model.params.items()}
np.savez(
    out_dir / f"rank{rank}.npz",
    records=records,
    local_finite=local_finite,
    injected=injected,
    bad_data=bad_data,
    **params,
)
