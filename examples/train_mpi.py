"""Data-parallel float16 training of a small MLP on scikit-learn's bundled 8x8 digits.

Every rank builds the same model (same seeded initial weights), trains on its own shard of
the training set, and calls the same :class:`updater.DynamicLossScalingUpdater` with a
communicator: gradients are averaged over the ranks (``average_grads=True``) and the ranks
agree on overflow, so they apply identical updates and identical scale changes.

CPU workers (MPICH from the ``mpi`` extra, this project's ``MPICommunicator``)::

    mpiexec -n 4 python examples/train_mpi.py --steps 200

GPU workers (nnabla-ext-cuda's NCCL communicator, launched with the MPI that
nnabla-ext-cuda was built against)::

    mpirun -n 4 python examples/train_mpi.py --context cudnn

Rank 0 prints the test accuracy, whether all ranks ended with bit-identical parameters
(CPU path), and a summary of the loss-scale trajectory.
"""

from __future__ import annotations

import argparse
import hashlib
import math
import sys

import numpy as np


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--steps", type=int, default=200, help="updates (default 200)")
    parser.add_argument("--batch", type=int, default=32, help="batch size per rank (default 32)")
    parser.add_argument("--lr", type=float, default=0.05, help="momentum SGD learning rate")
    parser.add_argument(
        "--context",
        default="cpu:half",
        help="nnabla context: cpu:half (default; MPI workers) or cudnn (GPU workers, NCCL)",
    )
    parser.add_argument("--seed", type=int, default=0, help="seed of weights and data split")
    args = parser.parse_args(argv)
    if args.steps < 1 or args.batch < 1 or not args.lr > 0:
        parser.error("--steps and --batch must be >= 1 and --lr > 0")
    return args


def make_communicator(kind):
    """Return ``(comm, ctx)``: MPICommunicator on CPUs, nnabla's NCCL communicator on GPUs."""
    from updater import get_context

    if kind.split(":")[0].split("-")[0] == "cpu":
        from updater.runtime.comm import MPICommunicator, abort_on_exception

        comm = MPICommunicator()
        abort_on_exception(comm)  # an exception on one rank ends the job instead of a hang
        return comm, get_context(kind)
    import nnabla.communicators as C

    ctx = get_context(kind)
    comm = C.MultiProcessDataParallelCommunicator(ctx)
    comm.init()
    return comm, get_context(kind, device_id=comm.local_rank)


def load_digits_split(seed):
    """Digits scaled to [0, 1]; a seeded 80/20 train/test split, the same on every rank."""
    from sklearn.datasets import load_digits

    x, y = load_digits(return_X_y=True)
    x = (x / 16.0).astype(np.float32)
    order = np.random.RandomState(seed).permutation(len(x))
    n_test = len(x) // 5
    return x[order[n_test:]], y[order[n_test:]], x[order[:n_test]], y[order[:n_test]]


def mlp(x, seed):
    import nnabla.functions as F
    import nnabla.initializer as I
    import nnabla.parametric_functions as PF

    rng = np.random.RandomState(seed)
    w1 = I.NormalInitializer(math.sqrt(2.0 / x.shape[1]), rng=rng)
    w2 = I.NormalInitializer(math.sqrt(1.0 / 64), rng=rng)
    h = F.relu(PF.affine(x, 64, w_init=w1, name="fc1"))
    return PF.affine(h, 10, w_init=w2, name="fc2")


def main(argv=None):
    args = parse_args(argv)
    import nnabla as nn
    import nnabla.functions as F
    import nnabla.solvers as S
    from tqdm import tqdm

    from updater import DynamicLossScalingUpdater, DynamicScale

    comm, ctx = make_communicator(args.context)
    nn.set_default_context(ctx)
    x_train, y_train, x_test, y_test = load_digits_split(args.seed)
    x_shard, y_shard = x_train[comm.rank :: comm.size], y_train[comm.rank :: comm.size]

    x = nn.Variable((args.batch, 64))
    t = nn.Variable((args.batch, 1))
    loss = F.mean(F.softmax_cross_entropy(mlp(x, args.seed), t))
    x_eval = nn.Variable((len(x_test), 64))
    y_eval = mlp(x_eval, args.seed)  # same parameters (same names)
    solver = S.Momentum(args.lr, 0.9)
    solver.set_parameters(nn.get_parameters())

    rng = np.random.RandomState(1000 + comm.rank)  # each rank shuffles its own shard

    def feed():
        idx = rng.randint(0, len(x_shard), args.batch)
        x.d, t.d = x_shard[idx], y_shard[idx, None]

    updater = DynamicLossScalingUpdater(
        solver,
        loss,
        feed,
        comm=comm,
        average_grads=True,
        policy=DynamicScale(init_scale=2.0**12, growth_interval=50),
    )
    records = []
    show = comm.rank == 0 and sys.stderr.isatty()
    for _ in tqdm(range(args.steps), desc="training", disable=not show):
        records.append(updater.update())

    identical = None
    if hasattr(comm, "mpi_comm"):  # MPICommunicator: compare every rank's parameter bits
        digest = hashlib.blake2b(digest_size=16)
        for p in nn.get_parameters().values():
            digest.update(p.d.tobytes())
        identical = len(set(comm.mpi_comm.allgather(digest.hexdigest()))) == 1
    if comm.rank != 0:
        return 0
    x_eval.d = x_test
    y_eval.forward(clear_buffer=True)
    accuracy = float(np.mean(y_eval.d.argmax(axis=1) == y_test))
    changes = [(r.step, r.new_scale) for r in records if r.new_scale != r.scale]
    print(f"ranks: {comm.size}, steps: {args.steps}, global batch: {args.batch * comm.size}")
    print(f"context: {args.context}; test accuracy: {accuracy:.4f}")
    if identical is not None:
        print(f"parameters bit-identical on all ranks: {identical}")
    print(
        f"loss scale: {records[0].scale:g} -> {records[-1].new_scale:g}; "
        f"grew {sum(r.new_scale > r.scale for r in records)} times, "
        f"backed off {sum(r.new_scale < r.scale for r in records)} times, "
        f"skipped steps: {sum(not r.update_applied for r in records)}"
    )
    print("scale changes (step: new scale): " + ", ".join(f"{s}: {v:g}" for s, v in changes))
    return 0


if __name__ == "__main__":
    sys.exit(main())
