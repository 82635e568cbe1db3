"""Ranks that build their updaters with different settings must refuse to start.

Usage: mpiexec -n N python rank_settings.py OUTDIR MODE
MODE: "growth_interval" (the last rank's policy has another growth_interval), "accum_grad"
(the last rank accumulates 2 rounds) or "same" (every rank alike: trains 3 steps, exit 0).
Each rank writes OUTDIR/rank{R}.steps with the steps it applied.
"""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[4]))  # the checkout, for tests
from tests.nnabla_models import TinyClassifier  # noqa: E402
from updater import DynamicLossScalingUpdater, DynamicScale, MPICommunicator  # noqa: E402

out_dir, mode = Path(sys.argv[1]), sys.argv[2]
comm = MPICommunicator()
odd = comm.rank == comm.size - 1
model = TinyClassifier("ranks")
policy = DynamicScale(growth_interval=500 if odd and mode == "growth_interval" else 2000)
accum = 2 if odd and mode == "accum_grad" else 1
upd = DynamicLossScalingUpdater(
    model.solver, model.loss, model.feeder(), policy=policy, accum_grad=accum, comm=comm
)
for _ in range(3):
    upd.update()
(out_dir / f"rank{comm.rank}.steps").write_text(str(upd.updates_applied))
