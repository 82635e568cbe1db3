"""Checkpoints with several ranks (issue 52): one rank saves, then every rank (or rank 0 alone)
loads into a fresh updater and trains on.

Usage: mpiexec -n N python checkpoint_ranks.py OUTDIR SAVE LOAD
SAVE: "rank0" (rank 0 saves) or "every" (every rank saves the same path, 20 times at once).
LOAD: "every" (every rank loads) or "rank0" (rank 0 alone loads). Every rank trains 3 steps,
saves as SAVE says, builds a new updater, loads as LOAD says, trains 2 more steps and writes
OUTDIR/rank{R}.steps (its new updater's steps) and OUTDIR/rank{R}.npz (its parameters).
"""

import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[4]))  # the checkout, for tests
from tests.nnabla_models import TinyClassifier, param_values  # noqa: E402
from updater import (  # noqa: E402
    DynamicLossScalingUpdater,
    MPICommunicator,
    load_checkpoint,
    save_checkpoint,
)

out_dir, save, load = Path(sys.argv[1]), sys.argv[2], sys.argv[3]
comm = MPICommunicator()
model = TinyClassifier("ckpt_ranks")


def new_updater():
    feed = model.feeder(seed=1 + comm.rank)
    return DynamicLossScalingUpdater(model.solver, model.loss, feed, comm=comm, average_grads=True)


upd = new_updater()
for _ in range(3):
    upd.update()
path = out_dir / "run.ckpt.npz"
for _ in range(20 if save == "every" else 1 if comm.rank == 0 else 0):
    save_checkpoint(path, upd)
comm.barrier()
upd = new_updater()
if load == "every" or comm.rank == 0:
    load_checkpoint(path, upd)
for _ in range(2):
    upd.update()
(out_dir / f"rank{comm.rank}.steps").write_text(str(upd.steps))
np.savez(out_dir / f"rank{comm.rank}.npz", **param_values(model.params))
