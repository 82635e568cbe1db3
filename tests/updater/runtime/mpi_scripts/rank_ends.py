"""One rank ends early while the others wait in a collective; the job must end, not hang.

Usage: mpiexec -n N python rank_ends.py OUTDIR MODE
MODE: "exit0" (the last rank calls sys.exit(0)), "raise" (it raises; abort_on_exception is
not called: the communicator installs it), "fewer" (it runs one all_reduce fewer and ends its
script normally) or "together" (every rank ends normally: exit status 0).
"""

import sys
from pathlib import Path

import nnabla as nn
import numpy as np

from updater.runtime.comm import MPICommunicator

out_dir, mode = Path(sys.argv[1]), sys.argv[2]
comm = MPICommunicator(exit_grace=2.0)
grad = nn.NdArray.from_numpy_array(np.ones(8, np.float32))
comm.all_reduce(grad)  # every rank gets here
last = comm.rank == comm.size - 1
if last and mode == "exit0":
    sys.exit(0)
if last and mode == "raise":
    raise RuntimeError("simulated failure on the last rank")
if not (last and mode == "fewer"):
    comm.all_reduce(grad)  # the others wait here for the last rank (unless "together")
(out_dir / f"rank{comm.rank}.finished").write_text("")
