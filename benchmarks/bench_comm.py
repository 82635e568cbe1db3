"""Cost of data-parallel communication per training step: 1, 2 and 4 MPI ranks on this machine.

For each rank count, ``run()`` launches ``mpiexec -n R python bench_comm.py --worker ...``. Every
rank trains the same model with the real :class:`updater.DynamicLossScalingUpdater` on its own
batches, alternating blocks of steps WITH the communicator (gradient all-reduce, averaging, and
the three-element overflow and bad-batch agreement) and WITHOUT it (a purely local step), so
machine noise hits both alike. A thin wrapper around :class:`updater.runtime.comm.MPICommunicator`
times the two kinds of ``all_reduce`` call inside the real steps: the gradient list and the
three-element flag. After training, micro-benchmarks time the flag call with and without the
argument check (``check_arguments``) next to a bare mpi4py ``Allreduce`` of one float32 (the
physical floor). Timings are averaged over ranks; the per-rank files are collected from a
temporary folder.

Note: this machine has 2 cores, so 4 ranks oversubscribe them (2 processes per core): that row
shows what oversubscription costs, not how MPI scales.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from sim.tables import format_percent, markdown_grid

ROOT = Path(__file__).resolve().parents[1]
MODELS = {
    # name: (context, input size, layer sizes, batch per rank, timed steps per block)
    "digits-mlp-half": ("cpu:half", 64, (64, 10), 32, 20),
    "mlp-784-512-512-10-float": ("cpu:float", 784, (512, 512, 10), 64, 5),
}


# ----------------------------------------------------------------------------- worker side


class _TimedComm:
    """Forwards to an MPICommunicator and adds up the seconds spent in each kind of call.

    Before the gradient all-reduce it waits in a barrier, timed apart ("wait"): the time
    until the slowest rank arrives, so "grads" is the all-reduce itself.
    """

    def __init__(self, comm):
        self.comm = comm
        self.rank, self.size, self.local_rank = comm.rank, comm.size, comm.local_rank
        self.reset()

    def reset(self):
        self.seconds = {"wait": 0.0, "grads": 0.0, "flag": 0.0}
        self.calls = {"grads": 0, "flag": 0}

    def all_reduce(self, data, division=False, inplace=False):
        kind = "grads" if isinstance(data, (list, tuple)) or data.size > 3 else "flag"
        if kind == "grads":
            start = time.perf_counter()
            self.comm.barrier()
            self.seconds["wait"] += time.perf_counter() - start
        start = time.perf_counter()
        self.comm.all_reduce(data, division=division, inplace=inplace)
        self.seconds[kind] += time.perf_counter() - start
        self.calls[kind] += 1


def _per_call_seconds(call, repeats):
    start = time.perf_counter()
    for _ in range(repeats):
        call()
    return (time.perf_counter() - start) / repeats


def _worker(out_dir, model_name, blocks):
    import nnabla as nn
    import nnabla.functions as F
    import nnabla.parametric_functions as PF
    import nnabla.solvers as S
    from mpi4py import MPI
    from nnabla.ext_utils import get_extension_context

    from updater import DynamicLossScalingUpdater, DynamicScale
    from updater.runtime.comm import MPICommunicator, abort_on_exception

    abort_on_exception()
    context, in_dim, sizes, batch, block_steps = MODELS[model_name]
    extension, type_config = context.split(":")
    nn.set_default_context(get_extension_context(extension, type_config=type_config))
    comm = MPICommunicator()
    timed = _TimedComm(comm)
    rng = np.random.default_rng(comm.rank)
    x, t = nn.Variable((batch, in_dim)), nn.Variable((batch, 1))
    h = x
    for i, n in enumerate(sizes):
        h = PF.affine(h, n, name=f"fc{i}")
        h = F.relu(h) if i < len(sizes) - 1 else h
    loss = F.mean(F.softmax_cross_entropy(h, t))
    solver = S.Momentum(0.01, 0.9)
    solver.set_parameters(nn.get_parameters())
    n_params = sum(p.size for p in nn.get_parameters().values())

    def feed():
        x.d = rng.standard_normal(x.shape)
        t.d = rng.integers(0, sizes[-1], t.shape)

    def make(communicator):
        policy = DynamicScale(init_scale=2.0**10)
        kwargs = {"comm": communicator, "average_grads": True} if communicator else {}
        return DynamicLossScalingUpdater(solver, loss, feed, policy=policy, **kwargs)

    updaters = {"local": make(None), "comm": make(timed)}
    for updater in updaters.values():  # warm-up (first calls allocate and check arguments)
        for _ in range(3):
            updater.update()
    timed.reset()
    seconds = {"local": 0.0, "comm": 0.0}
    for block in range(blocks):
        order = ("local", "comm") if block % 2 == 0 else ("comm", "local")
        for name in order:
            comm.barrier()
            start = time.perf_counter()
            for _ in range(block_steps):
                updaters[name].update()
            seconds[name] += time.perf_counter() - start
    steps = blocks * block_steps

    flag = nn.NdArray.from_numpy_array(np.ones(3, np.float32))
    raw = np.ones(1, np.float32)
    micro = {}
    for check in (True, False):
        comm.check_arguments = check
        comm.barrier()
        micro[f"flag_check_{check}_s"] = _per_call_seconds(
            lambda: comm.all_reduce(flag, division=False, inplace=True), 500
        )
    comm.barrier()
    micro["raw_allreduce_s"] = _per_call_seconds(
        lambda: comm.mpi_comm.Allreduce(MPI.IN_PLACE, raw, op=MPI.SUM), 500
    )
    result = {
        "rank": comm.rank,
        "ranks": comm.size,
        "params": n_params,
        "steps": steps,
        "step_local_s": seconds["local"] / steps,
        "step_comm_s": seconds["comm"] / steps,
        "wait_s": timed.seconds["wait"] / steps,
        "grads_allreduce_s": timed.seconds["grads"] / steps,
        "flag_allreduce_s": timed.seconds["flag"] / steps,
        "calls_per_step": {k: v / steps for k, v in timed.calls.items()},
        **micro,
    }
    (Path(out_dir) / f"rank{comm.rank}.json").write_text(json.dumps(result))


# ----------------------------------------------------------------------------- driver side


def _mpiexec():
    beside = Path(sys.executable).parent / "mpiexec"
    return str(beside) if beside.exists() else "mpiexec"


def _launch(ranks, model_name, blocks, limit_s=600):
    with tempfile.TemporaryDirectory() as folder:
        cmd = [
            _mpiexec(),
            "-n",
            str(ranks),
            sys.executable,
            str(Path(__file__).resolve()),
            "--worker",
            folder,
            "--model",
            model_name,
            "--blocks",
            str(blocks),
        ]
        path = os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH")) if p)
        env = dict(os.environ, PYTHONPATH=path, OMP_NUM_THREADS="1")
        proc = subprocess.Popen(
            cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env, cwd=ROOT
        )
        try:
            out, _ = proc.communicate(timeout=limit_s)
        except subprocess.TimeoutExpired:
            proc.terminate()  # mpiexec passes SIGTERM on to every rank
            out, _ = proc.communicate()
            raise RuntimeError(f"{' '.join(cmd)} still running after {limit_s} s:\n{out}") from None
        if proc.returncode != 0:
            raise RuntimeError(f"{' '.join(cmd)} failed ({proc.returncode}):\n{out}")
        per_rank = [json.loads((Path(folder) / f"rank{r}.json").read_text()) for r in range(ranks)]
    keys = [k for k, v in per_rank[0].items() if isinstance(v, float)]
    mean = {k: float(np.mean([r[k] for r in per_rank])) for k in keys}
    mean.update(
        ranks=ranks,
        model=model_name,
        params=per_rank[0]["params"],
        steps=per_rank[0]["steps"],
        calls_per_step=per_rank[0]["calls_per_step"],
    )
    mean["comm_overhead"] = mean["step_comm_s"] / mean["step_local_s"]
    mean["wait_share"] = mean["wait_s"] / mean["step_comm_s"]
    mean["grads_share"] = mean["grads_allreduce_s"] / mean["step_comm_s"]
    mean["flag_share"] = mean["flag_allreduce_s"] / mean["step_comm_s"]
    return mean


def run(ranks=(1, 2, 4), models=tuple(MODELS), blocks=6, progress=None) -> dict:
    """Measure every (model, rank count).

    Returns:
        dict: ``rows`` (one dict of timings per model and rank count, seconds per step),
        ``cores`` and ``load_average`` (1-minute load before and after).


    Args:
        ranks (tuple of int, default (1, 2, 4)): rank counts, each >= 1.
        models (tuple of str, default all of ``MODELS``): model names from ``MODELS``.
        blocks (int, default 6): alternating local/comm blocks per run, >= 1.
        progress (callable or None, default None): called with no arguments after each run.
    """
    for r in ranks:
        if isinstance(r, bool) or not isinstance(r, int) or r < 1:
            raise ValueError(f"ranks must hold ints >= 1, got {r!r}")
    unknown = [m for m in models if m not in MODELS]
    if unknown:
        raise ValueError(f"models must be names from {sorted(MODELS)}, got {unknown}")
    if isinstance(blocks, bool) or not isinstance(blocks, int) or blocks < 1:
        raise ValueError(f"blocks must be an int >= 1, got {blocks!r}")
    rows = []
    load_before = os.getloadavg()[0]
    for model_name in models:
        for r in ranks:
            rows.append(_launch(r, model_name, blocks))
            if progress is not None:
                progress()
    return {
        "rows": rows,
        "cores": os.cpu_count(),
        "load_average": (load_before, os.getloadavg()[0]),
    }


def markdown(result: dict) -> str:
    """Render :func:`run`'s result as a markdown table with a short legend."""
    load = result["load_average"]
    heads = [
        "model (params)",
        "ranks",
        "local step",
        "step with comm",
        "comm / local",
        "wait for slowest rank (share)",
        "grad all-reduce (share)",
        "agreement (share)",
        "flag call: checked / unchecked / bare MPI",
    ]
    rows = [
        [
            f"{r['model']} ({r['params']})",
            r["ranks"],
            f"{r['step_local_s'] * 1e3:.2f} ms",
            f"{r['step_comm_s'] * 1e3:.2f} ms",
            f"{r['comm_overhead']:.2f}x",
            f"{r['wait_s'] * 1e3:.3f} ms ({format_percent(r['wait_share'])})",
            f"{r['grads_allreduce_s'] * 1e3:.3f} ms ({format_percent(r['grads_share'])})",
            f"{r['flag_allreduce_s'] * 1e3:.3f} ms ({format_percent(r['flag_share'])})",
            f"{r['flag_check_True_s'] * 1e6:.0f} / {r['flag_check_False_s'] * 1e6:.0f}"
            f" / {r['raw_allreduce_s'] * 1e6:.0f} us",
        ]
        for r in result["rows"]
    ]
    lines = [markdown_grid(heads, rows)]
    lines += [
        "",
        f"Machine: {result['cores']} cores, 1-minute load average {load[0]:.1f} before and "
        f"{load[1]:.1f} after the runs (other work on the machine slows the ranks unevenly); "
        "every rank trains on its own batch (the per-rank "
        "batch is fixed, so the work per rank is the same at every rank count), with "
        "`average_grads=True`. Times are means over ranks. 'local step' is the same updater "
        "without a communicator, timed in alternating blocks with the communicating one "
        "(per step, in ms). Before the gradient all-reduce the benchmark waits in a barrier, "
        "timed apart: 'wait for slowest rank' is load imbalance, not communication. "
        "'grad all-reduce' and 'agreement' are the time spent inside "
        "`MPICommunicator.all_reduce` for the gradient list and for the three-element flag "
        "(non-finite gradients, non-finite loss, bad batch); "
        "shares are of the step with comm. The flag call columns time that call alone "
        "with the argument check on (the default: one extra two-word reduction) and off, next "
        "to a bare mpi4py `Allreduce` of one float32. With more ranks than cores, ranks "
        "wait for each other to be scheduled, which dominates the 4-rank rows.",
    ]
    return "\n".join(lines)


def main(argv=None) -> None:
    """Command line: run the benchmark and print the markdown table (or be one worker)."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ranks", default="1,2,4", help="rank counts (default 1,2,4)")
    parser.add_argument("--blocks", type=int, default=6, help="alternating blocks (default 6)")
    parser.add_argument("--worker", help=argparse.SUPPRESS)
    parser.add_argument("--model", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.worker:
        _worker(args.worker, args.model, args.blocks)
        return
    from tqdm import tqdm

    ranks = tuple(int(r) for r in args.ranks.split(","))
    with tqdm(total=len(ranks) * len(MODELS), desc="mpi runs", disable=None) as bar:
        result = run(ranks, blocks=args.blocks, progress=bar.update)
    print(markdown(result))


if __name__ == "__main__":
    main()
