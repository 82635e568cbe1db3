"""One rank ends early while the others wait in a collective; the job must end, not hang.

Usage: mpiexec -n N python rank_ends.py OUTDIR MODE GRACE
MODE: "exit0" (the last rank calls sys.exit(0)), "raise" (it raises; abort_on_exception is
not called: the communicator installs it), "fewer" (it runs one all_reduce fewer and ends its
script normally), "barrier" (it calls sys.exit(0) and the others wait in ``comm.barrier()``),
"together" (every rank ends normally: exit status 0), "busy" (the last rank calls sys.exit(0)
while the others work 3 s more and end without a collective: exit status 0) or "evaluate"
(the last rank ends its script after training; the others evaluate outside any collective for
GRACE + 2 s, then save ``rank{r}.saved``: exit status 0, examples/train_mpi.py's pattern).
"""

import sys
import time
from pathlib import Path

import nnabla as nn
import numpy as np

from updater.runtime.comm import MPICommunicator

out_dir, mode, grace = Path(sys.argv[1]), sys.argv[2], float(sys.argv[3])
comm = MPICommunicator(exit_grace=grace)
grad = nn.NdArray.from_numpy_array(np.ones(8, np.float32))
comm.all_reduce(grad)  # every rank gets here
last = comm.rank == comm.size - 1
if last and mode in ("exit0", "busy", "barrier"):
    sys.exit(0)
if last and mode == "raise":
    raise RuntimeError("simulated failure on the last rank")
if mode == "busy":
    time.sleep(3)  # e.g. rank 0 evaluating after training
elif mode == "evaluate" and not last:
    until = time.monotonic() + grace + 2  # past the grace: computing, in no collective
    weights = np.ones((64, 64), np.float32)
    while time.monotonic() < until:
        weights = np.tanh(weights @ weights / 64)
    np.save(out_dir / f"rank{comm.rank}.saved.npy", weights)
elif mode == "barrier":
    comm.barrier()  # the others wait here for the last rank, which ended
elif mode not in ("together", "evaluate") and not (last and mode == "fewer"):
    comm.all_reduce(grad)  # the others wait here for the last rank
(out_dir / f"rank{comm.rank}.finished").write_text("")
