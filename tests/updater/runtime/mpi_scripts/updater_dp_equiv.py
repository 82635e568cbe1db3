"""Data-parallel (2 ranks, average_grads=True) against one process on the combined batch.

Usage: mpiexec -n 2 python updater_dp_equiv.py OUTDIR dp STEPS
       python updater_dp_equiv.py OUTDIR single STEPS
cpu float context. At step k, rank r's batch is the seeded batch (r, k); the single process
trains on the concatenation of the batches (0, k) and (1, k). Step 7 has an inf in rank 1's
batch (so in the combined batch too): both runs must skip it.
Writes OUTDIR/{dp_rank0,dp_rank1,single}.npz: records (steps x 5) and params (steps x P), the
parameters after every step, flattened in sorted name order.
"""

import sys
from pathlib import Path

import nnabla as nn
import numpy as np

sys.path.insert(
    0, str(Path(__file__).resolve().parents[4])
)  # the checkout, for tests.nnabla_models
from tests.nnabla_models import TinyClassifier  # noqa: E402
from updater import DynamicLossScalingUpdater, DynamicScale  # noqa: E402

out_dir, mode, steps = Path(sys.argv[1]), sys.argv[2], int(sys.argv[3])
BATCH, RANKS, INF_STEP = 8, 2, 7
if mode == "dp":
    from updater.runtime.comm import MPICommunicator, abort_on_exception

    abort_on_exception()
    comm = MPICommunicator()
    my_ranks, name = [comm.rank], f"dp_rank{comm.rank}"
else:
    comm, my_ranks, name = None, list(range(RANKS)), "single"

model = TinyClassifier(
    scope="eq",
    batch=BATCH * len(my_ranks),
    in_dim=8,
    hidden=16,
    classes=4,
    seed=0,
    type_config="float",
    solver="momentum",
    lr=0.1,
)
nn.set_default_context(model.ctx)
calls = [0]


def batch(r, k):
    rng = np.random.RandomState(7919 * r + k)
    x = rng.randn(BATCH, model.in_dim)
    if k == INF_STEP and r == 1:
        x[0, 0] = np.inf
    return x, rng.randint(0, model.classes, (BATCH, 1))


def feed():
    parts = [batch(r, calls[0]) for r in my_ranks]
    model.x.d = np.concatenate([x for x, _ in parts])
    model.t.d = np.concatenate([t for _, t in parts])
    calls[0] += 1


updater = DynamicLossScalingUpdater(
    model.solver,
    model.loss,
    feed,
    comm=comm,
    policy=DynamicScale(init_scale=2.0**10, growth_interval=5),
    average_grads=True,
)
names = sorted(model.params)
records = np.zeros((steps, 5))
params = np.zeros((steps, sum(model.params[n].size for n in names)))
for k in range(steps):
    r = updater.update()
    records[k] = (r.step, r.scale, r.attempts, r.update_applied, r.new_scale)
    params[k] = np.concatenate([model.params[n].d.ravel() for n in names])
np.savez(out_dir / f"{name}.npz", records=records, params=params)
