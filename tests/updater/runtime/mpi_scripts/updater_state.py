"""Data-parallel training where one rank's forward pass makes BatchNormalization's running
variance inf while every gradient stays finite (issue 48, finding 8).

Usage: mpiexec -n N python updater_state.py OUTDIR CHECK
TinyBNClassifier on cpu:half, grads=None, averaged, scale 2**10, ``finite_check=CHECK``; at step
SHIFTED rank 1 adds 100 to its batch (fc1's outputs near 100: float16's sum of their squares
overflows). Every rank must take that step as a bad batch (skipped, scale kept) and put its own
running statistics back. Writes OUTDIR/rank{R}.npz: records (steps x 5: step, scale,
update_applied, new_scale, bad_batch), the running statistics before and after step SHIFTED
(``state_before``, ``state_after``) and at the end (``state_end``), and the trained parameters
(``param/...``).
"""

import sys
from pathlib import Path

import numpy as np

sys.path.insert(
    0, str(Path(__file__).resolve().parents[4])
)  # the checkout, for tests.nnabla_models
from tests.nnabla_models import TinyBNClassifier  # noqa: E402
from updater import DynamicLossScalingUpdater, DynamicScale, MPICommunicator  # noqa: E402
from updater.runtime.comm import abort_on_exception  # noqa: E402

abort_on_exception()
out_dir, check = Path(sys.argv[1]), sys.argv[2]
STEPS, SHIFTED = 6, 3
comm = MPICommunicator()
model = TinyBNClassifier(scope="dp_state", seed=0)
calls = [0]


def feed():
    k = calls[0]
    rng = np.random.RandomState(7919 * comm.rank + k)
    shift = 100.0 if comm.rank == 1 and k == SHIFTED else 0.0
    model.x.d = rng.randn(model.batch, model.in_dim) + shift
    model.t.d = rng.randint(0, model.classes, (model.batch, 1))
    calls[0] += 1


def state():
    return np.concatenate([p.d.ravel() for p in model.params.values() if not p.need_grad])


policy = DynamicScale(init_scale=2.0**10, growth_interval=1000)
updater = DynamicLossScalingUpdater(
    model.solver, model.loss, feed, comm=comm, average_grads=True, policy=policy, finite_check=check
)
records = np.zeros((STEPS, 5))
for k in range(STEPS):
    if k == SHIFTED:
        before = state()
    r = updater.update()
    if k == SHIFTED:
        after = state()
    records[k] = (r.step, r.scale, r.update_applied, r.new_scale, r.bad_batch)
params = {f"param/{k}": p.d.copy() for k, p in model.params.items() if p.need_grad}
np.savez(
    out_dir / f"rank{comm.rank}.npz",
    records=records,
    state_before=before,
    state_after=after,
    state_end=state(),
    **params,
)
