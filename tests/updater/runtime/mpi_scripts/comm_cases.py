"""Run MPICommunicator.all_reduce on known inputs; each rank saves inputs and outputs.

Usage: mpiexec -n N python comm_cases.py OUTDIR
Writes OUTDIR/rank{R}.npz with keys "{case}/{i}/in" and "{case}/{i}/out" for every array i of
every case, "{case}/{i}/dtype_after" (the array's dtype after the call, as a string),
"error/{name}" (the exception raised by a bad call) and "meta/size", "meta/local_rank".
The pytest side computes the references from all ranks' inputs.
"""

import sys
from pathlib import Path

import nnabla as nn
import nnabla.functions as F
import nnabla.parametric_functions as PF
import numpy as np
from nnabla.ext_utils import get_extension_context

from updater.runtime.comm import MPICommunicator, abort_on_exception

abort_on_exception()
out_dir = Path(sys.argv[1])
comm = MPICommunicator()
rank, size = comm.rank, comm.size
rng = np.random.default_rng(1000 + rank)


def exact_values(shape, dtype):
    """Multiples of 2**-8 below 8 in magnitude: exact in float16, and sums of up to 2**12 of
    them are exact in float32, so the reference does not depend on the summation order."""
    k = rng.integers(-2047, 2048, size=shape)
    return (k * 2.0**-8).astype(dtype)


def ndarray(values):
    return nn.NdArray.from_numpy_array(np.ascontiguousarray(values))


MIXED = [(np.float16, (4, 4)), (np.float32, (7,)), (np.float16, (1,)), (np.float32, (2, 3, 2))]
EDGE = np.array([65504, -65504, 2.0**-24, 2.0**-14, 0, 1, 2048, 2049], dtype=np.float32)
cases = {}
for division in (False, True):
    tag = "mean" if division else "sum"
    cases[f"f32_single_{tag}"] = ([exact_values((5, 3), np.float32)], division, False)
    cases[f"f16_single_{tag}"] = ([exact_values((5, 3), np.float16)], division, False)
    for inplace in (False, True):
        mode = "inplace" if inplace else "packed"
        arrays = [exact_values(shape, dtype) for dtype, shape in MIXED]
        cases[f"mixed_{mode}_{tag}"] = (arrays, division, inplace)
        cases[f"edge_f16_{mode}_{tag}"] = ([EDGE.astype(np.float16)], division, inplace)
nonfinite = np.zeros(4, np.float32)
if rank == 1:
    nonfinite[0] = np.inf
if rank == size - 1:
    nonfinite[1] = np.nan
cases["nonfinite_f32"] = ([nonfinite], False, False)
cases["nonfinite_f16"] = ([nonfinite.astype(np.float16)], False, True)
cases["flag"] = ([np.array([float(rank % 2)], np.float32)], False, True)
cases["random_f32"] = ([rng.standard_normal(1000).astype(np.float32)], True, False)

results = {}
for name, (values, division, inplace) in cases.items():
    arrays = [ndarray(v) for v in values]
    comm.all_reduce(arrays if len(arrays) > 1 else arrays[0], division=division, inplace=inplace)
    for i, (v, a) in enumerate(zip(values, arrays)):
        results[f"{name}/{i}/in"] = v
        results[f"{name}/{i}/out"] = a.data.copy()
        results[f"{name}/{i}/dtype_after"] = np.array(a.dtype.name)

# An array with no dtype yet (zero() before any use) reads as float32 zeros.
fresh = nn.NdArray((3,))
fresh.zero()
comm.all_reduce([fresh], division=False)
results["fresh/0/in"] = np.zeros(3, np.float32)
results["fresh/0/out"] = fresh.data.copy()
results["fresh/0/dtype_after"] = np.array(fresh.dtype.name)

# An empty list is a no-op (and still checked to be the same on every rank).
comm.all_reduce([])

# Real parameter gradients of a small graph in nnabla's cpu:half context.
nn.set_default_context(get_extension_context("cpu", type_config="half"))
nn.seed(7)
x = nn.Variable((4, 6))
y = F.mean(F.tanh(PF.affine(PF.affine(x, 5, name="fc1"), 3, name="fc2")))
x.d = rng.standard_normal((4, 6))
y.forward()
params = list(nn.get_parameters().values())
for p in params:
    p.grad.zero()
y.backward(8.0)
grads = [p.grad for p in params]
for i, g in enumerate(grads):
    results[f"half_grads/{i}/in"] = g.data.copy()
comm.all_reduce(grads, division=True)
for i, g in enumerate(grads):
    results[f"half_grads/{i}/out"] = g.data.copy()
    results[f"half_grads/{i}/dtype_after"] = np.array(g.dtype.name)


# Bad arguments that are the same on every rank raise the same TypeError on every rank.
def error_of(call):
    try:
        call()
    except Exception as exc:
        return f"{type(exc).__name__}: {exc}"
    return "no error"


bad_calls = {
    "float64": lambda: comm.all_reduce(ndarray(np.ones(3, np.float64))),
    "division": lambda: comm.all_reduce(ndarray(np.ones(3, np.float32)), division=1),
    "numpy": lambda: comm.all_reduce(np.ones(3, np.float32)),
    "comm": lambda: MPICommunicator(comm="world"),
    "check_arguments": lambda: MPICommunicator(check_arguments="yes"),
}
for name, call in bad_calls.items():
    results[f"error/{name}"] = np.array(error_of(call))
comm.all_reduce(ndarray(np.ones(3, np.float32)))  # still usable afterwards

results["meta/size"] = np.array(size)
results["meta/local_rank"] = np.array(comm.local_rank)
np.savez(out_dir / f"rank{rank}.npz", **results)
