"""Data-parallel training where a parameter joins the solver after the updater was built.

Usage: mpiexec -n N python updater_new_params.py OUTDIR
The graph is TinyClassifier's loss plus sum(extra * c), with c different on every rank. The
solver starts without ``extra``; after 2 steps ``solver.set_parameters({extra}, reset=False)``
adds it. With grads=None the updater must all-reduce ``extra``'s gradient too, or the ranks
train different values of it. Writes OUTDIR/rank{R}.npz with every parameter's final values.
"""

import sys
from pathlib import Path

import nnabla as nn
import nnabla.functions as F
import nnabla.initializer as I
import numpy as np

sys.path.insert(
    0, str(Path(__file__).resolve().parents[4])
)  # the checkout, for tests.nnabla_models
from tests.nnabla_models import TinyClassifier  # noqa: E402
from updater import DynamicLossScalingUpdater, MPICommunicator, StaticScale  # noqa: E402
from updater.runtime.comm import abort_on_exception  # noqa: E402

abort_on_exception()
out_dir = Path(sys.argv[1])
comm = MPICommunicator()
model = TinyClassifier(scope="np", seed=0, solver="sgd", lr=0.1)
with nn.context_scope(model.ctx), nn.parameter_scope("np"):
    c = nn.Variable((3,))
    extra = nn.parameter.get_parameter_or_create("extra", (3,), I.ConstantInitializer(0.5))
    loss = model.loss + F.sum(extra * c)
calls = [0]


def feed():
    rng = np.random.RandomState(7919 * comm.rank + calls[0])
    model.x.d = rng.randn(model.batch, model.in_dim)
    model.t.d = rng.randint(0, model.classes, (model.batch, 1))
    c.d = rng.randn(3)
    calls[0] += 1


updater = DynamicLossScalingUpdater(
    model.solver, loss, feed, comm=comm, average_grads=True, policy=StaticScale(2.0**8)
)
for k in range(6):
    if k == 2:
        model.solver.set_parameters({"np/extra": extra}, reset=False)
    assert updater.update().update_applied
params = {name: p.d.copy() for name, p in model.solver.get_parameters().items()}
assert "np/extra" in params and not np.all(params["np/extra"] == 0.5)
np.savez(out_dir / f"rank{comm.rank}.npz", **params)
