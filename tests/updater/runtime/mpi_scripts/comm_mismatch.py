"""Call all_reduce with arguments that differ between ranks; every rank must raise.

Usage: mpiexec -n N python comm_mismatch.py OUTDIR MODE
MODE is one of: shape, count, dtype, flag, type. The last rank passes something different.
Each rank writes the exception type and message to OUTDIR/rank{R}.txt and re-raises, so the
job exits non-zero. No abort hook here: every rank raises by itself, and none hangs.
"""

import sys
from pathlib import Path

import nnabla as nn
import numpy as np

from updater.runtime.comm import MPICommunicator

out_dir, mode = Path(sys.argv[1]), sys.argv[2]
comm = MPICommunicator()
odd = comm.rank == comm.size - 1


def arr(shape, dtype=np.float32):
    return nn.NdArray.from_numpy_array(np.ones(shape, dtype))


# A first, matching call: afterwards the communicator is in its steady state.
comm.all_reduce([arr((2, 3)), arr((4,), np.float16)])

data, division = [arr((2, 3)), arr((4,), np.float16)], False
if odd and mode == "shape":
    data = [arr((3, 2)), arr((4,), np.float16)]
elif odd and mode == "count":
    data = data + [arr((1,))]
elif odd and mode == "dtype":
    data = [arr((2, 3)), arr((4,), np.float32)]
elif odd and mode == "flag":
    division = True
elif odd and mode == "type":
    data = [np.ones((2, 3), np.float32), arr((4,), np.float16)]
try:
    comm.all_reduce(data, division=division)
except Exception as exc:
    (out_dir / f"rank{comm.rank}.txt").write_text(f"{type(exc).__name__}: {exc}")
    raise
(out_dir / f"rank{comm.rank}.txt").write_text("no error")
