"""Ranks that build their updaters with different settings must refuse to start; what only
observes (a recorder, probing or not) may differ.

Usage: mpiexec -n N python rank_settings.py OUTDIR MODE
MODE: "growth_interval" (the last rank's policy has another growth_interval), "accum_grad"
(the last rank accumulates 2 rounds), "lr" (the last rank's Momentum has lr 0.02, the others
0.01), "adam" (the last rank's solver is Adam), "recorder" (rank 0 records a trace, no probes),
"probing" (rank 0 records with overflow probes and flush measurement; every rank checks on the
"numpy" path) or "same" (every rank
alike). Every rank trains 3 steps (each on its own data) and writes OUTDIR/rank{R}.steps with
the steps it applied and OUTDIR/rank{R}.npz with its parameters.
"""

import sys
from pathlib import Path

import nnabla.solvers as S
import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[4]))  # the checkout, for tests
from tests.nnabla_models import TinyClassifier, param_values  # noqa: E402
from updater import (  # noqa: E402
    DynamicLossScalingUpdater,
    DynamicScale,
    GradientRecorder,
    MPICommunicator,
    Probes,
)

out_dir, mode = Path(sys.argv[1]), sys.argv[2]
comm = MPICommunicator()
odd = comm.rank == comm.size - 1
model = TinyClassifier("ranks", lr=0.02 if odd and mode == "lr" else 0.01)
if odd and mode == "adam":
    model.solver = S.Adam(0.01)
    model.solver.set_parameters(model.params)
policy = DynamicScale(growth_interval=500 if odd and mode == "growth_interval" else 2000)
accum = 2 if odd and mode == "accum_grad" else 1
recorder, probes = None, None
if comm.rank == 0 and mode in ("recorder", "probing"):
    probing = mode == "probing"
    trace = out_dir / "trace.npz"
    recorder = GradientRecorder(trace)
    probes = Probes(overflow=probing, flush=probing)
upd = DynamicLossScalingUpdater(
    model.solver,
    model.loss,
    model.feeder(seed=1 + comm.rank),
    policy=policy,
    accum_grad=accum,
    comm=comm,
    recorder=recorder,
    probes=probes,
    finite_check="numpy" if mode == "probing" else "auto",  # one path: only the probes differ
)
for _ in range(3):
    upd.update()
if recorder is not None:
    recorder.close()
    assert recorder.probe_passes > 0 or mode == "recorder"
(out_dir / f"rank{comm.rank}.steps").write_text(str(upd.updates_applied))
np.savez(out_dir / f"rank{comm.rank}.npz", **param_values(model.params))
