"""Issue 50, class 7: the last rank builds the updater, then ends before its first update; the
others' first update waits in the settings check for it. The job must end, not hang.

Usage: mpiexec -n N python rank_ends_before_update.py OUTDIR GRACE
Writes OUTDIR/rank{R}.started once the updater is built, OUTDIR/rank{R}.finished after the first
update (never, when a rank ended before it).
"""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[4]))  # the checkout, for tests
from tests.nnabla_models import TinyClassifier  # noqa: E402
from updater import DynamicLossScalingUpdater, MPICommunicator  # noqa: E402

out_dir, grace = Path(sys.argv[1]), float(sys.argv[2])
comm = MPICommunicator(exit_grace=grace)
model = TinyClassifier(scope="ends", batch=4, in_dim=4, hidden=8, classes=2, seed=0)
updater = DynamicLossScalingUpdater(model.solver, model.loss, model.feeder(), comm=comm)
(out_dir / f"rank{comm.rank}.started").write_text("")
if comm.rank == comm.size - 1:
    sys.exit(0)  # e.g. its data loader found nothing to train on
updater.update()
(out_dir / f"rank{comm.rank}.finished").write_text("")
