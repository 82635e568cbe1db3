"""One rank raises while the others wait in a collective; the job must end, not hang.

Usage: mpiexec -n N python rank_fails.py OUTDIR
With abort_on_exception() installed, the failing rank's unhandled exception calls MPI_Abort,
which ends every rank and makes mpiexec exit non-zero.
"""

import sys
import time
from pathlib import Path

import nnabla as nn
import numpy as np

from updater.runtime.comm import MPICommunicator, abort_on_exception

out_dir = Path(sys.argv[1])


def note_exception(exc_type, exc, tb):
    """The excepthook abort_on_exception() chains to: print as usual and leave a marker file."""
    sys.__excepthook__(exc_type, exc, tb)
    (out_dir / f"rank{MPI_RANK}.excepthook").write_text(f"{exc_type.__name__}: {exc}")


MPI_RANK = None
sys.excepthook = note_exception
abort_on_exception()
comm = MPICommunicator()
MPI_RANK = comm.rank
grad = nn.NdArray.from_numpy_array(np.ones(8, np.float32))
comm.all_reduce(grad)  # every rank gets here
(out_dir / f"rank{comm.rank}.started").write_text("")
if comm.rank == comm.size - 1:
    time.sleep(0.2)
    raise RuntimeError("simulated failure on the last rank")
comm.all_reduce(grad)  # the others wait here for a rank that never comes
(out_dir / f"rank{comm.rank}.finished").write_text("")
