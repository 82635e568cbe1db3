"""Gradient traces recorded from three real nnabla models trained in ``cpu:half``.

Each model trains with :class:`updater.DynamicLossScalingUpdater` under the default policy
(``DynamicScale()``: starts at 2**15) and a :class:`updater.GradientRecorder` that keeps every
step, per parameter array too (``per_parameter=True``, for :mod:`sim.replay.layers`), so the
simulator
(``dls simulate --trace FILE``) can replay real gradient distributions next to the synthetic
families. Each model then trains again for real under each policy of
:data:`sim.nnabla_studies.real_runs.CHECKED_POLICIES`, measured step by step
(:mod:`sim.nnabla_studies.real_runs`), so that
the report can check what the simulator predicts from the trace (:mod:`sim.replay.predictions`). The
three models differ in kind:

- ``digits_mlp``: the 64-64-10 ReLU MLP of :mod:`sim.nnabla_studies.demo` on scikit-learn's bundled
8x8
  digits, with an ordinary loss (weight 1), momentum SGD;
- ``digits_conv_bn``: a small convolutional net with BatchNormalization on the same digits
  (two 3x3 convolutions, each followed by BatchNormalization and ReLU, max pooling, global
  average pooling, an affine head), momentum SGD over ``nn.get_parameters()`` (the running
  statistics are not solver parameters);
- ``sequence_lstm``: nnabla's ``PF.lstm`` (one layer) reading a random 0/1 sequence and
  classifying how many ones it holds (a counting task, generated with a fixed seed), Adam.

Everything is seeded (weights, data split, batch order, generated sequences), so the same seed
gives the same traces. Run ``python -m sim.nnabla_studies.real_traces --out reports/traces`` (about
8 minutes
on 2 cores); ``--quick`` records a handful of steps per model in seconds.
"""

from __future__ import annotations

import argparse
import contextlib
import math
from pathlib import Path
from typing import Callable, Dict, List, Union

import numpy as np

from sim.cli.checks import nonnegative_int, positive_int
from sim.nnabla_studies.demo import BATCH, _Batches
from sim.report.provenance import current_commit
from sim.report.tables import markdown_table
from updater.files import atomic_write_text

MODELS = ("digits_mlp", "digits_conv_bn", "sequence_lstm")
MODEL_NOTES = {
    "digits_mlp": "real: MLP 64-64-10 on sklearn's 8x8 digits, Momentum, cpu:half",
    "digits_conv_bn": "real: 2 conv + BatchNorm on sklearn's 8x8 digits, Momentum, cpu:half",
    "sequence_lstm": "real: LSTM counting ones in 0/1 sequences, Adam, cpu:half",
}
"""One line per model, for tables."""
DEFAULT_STEPS = {"digits_mlp": 2000, "digits_conv_bn": 800, "sequence_lstm": 1000}
"""Training steps per model of a full recording."""
QUICK_STEPS = 6
SEQ_LEN = 10
SEQ_HIDDEN = 16
SEQ_TEST = 256


def _accuracy(logits: np.ndarray, y: np.ndarray) -> float:
    return float(np.mean(logits.argmax(axis=1) == y))


# ---------------------------------------------------------------- the three models


def _classifier(net, train, test, make_solver, seed: int, data: str, arch: str) -> Dict:
    """A classifier's loss on batches of ``train`` and its accuracy on ``test``.

    ``net(x, training)`` builds the logits; later calls (the evaluation graph, ``training``
    False; ``training_loss()`` in another context) share the first call's parameters by name.
    The solver holds every parameter that needs a gradient (not BatchNormalization's running
    statistics).
    """
    import nnabla as nn
    import nnabla.functions as F

    (x_train, y_train), (x_test, y_test) = train, test
    x = nn.Variable((BATCH, *x_train.shape[1:]))
    t = nn.Variable((BATCH, 1))

    def training_loss():  # in the current context, on the batch in x and t
        return F.mean(F.softmax_cross_entropy(net(x, True), t))

    loss = training_loss()
    x_eval = nn.Variable(x_test.shape)
    y_eval = net(x_eval, False)
    solver = make_solver()
    solver.set_parameters(nn.get_parameters())

    def evaluate():
        x_eval.d = x_test
        y_eval.forward(clear_buffer=True)
        return _accuracy(y_eval.d, y_test)

    return {
        "loss": loss,
        "training_loss": training_loss,
        "solver": solver,
        "feed": _Batches(x, t, x_train, y_train, seed + 1),
        "evaluate": evaluate,
        "data": data,
        "arch": arch,
    }


def _digits_mlp(seed: int) -> Dict:
    import nnabla.solvers as S

    from sim.nnabla_studies.demo import HIDDEN, LEARNING_RATE, MOMENTUM, _mlp, load_data

    x_train, y_train, x_test, y_test = load_data(seed)
    return _classifier(
        lambda x, training: _mlp(x, seed),
        (x_train, y_train),
        (x_test, y_test),
        lambda: S.Momentum(LEARNING_RATE, MOMENTUM),
        seed,
        f"sklearn digits 8x8, {len(x_train)} train / {len(x_test)} test",
        f"MLP 64-{HIDDEN}-10 ReLU, Momentum({LEARNING_RATE}, {MOMENTUM})",
    )


def _conv_bn_net(x, batch_stat: bool, rng_seed: int):
    import nnabla.functions as F
    import nnabla.initializer as I
    import nnabla.parametric_functions as PF

    rng = np.random.RandomState(rng_seed)

    def he(fan_in):
        return I.NormalInitializer(math.sqrt(2.0 / fan_in), rng=rng)

    h = PF.convolution(x, 8, (3, 3), pad=(1, 1), w_init=he(9), name="conv1")
    h = F.relu(PF.batch_normalization(h, batch_stat=batch_stat, name="bn1"))
    h = F.max_pooling(h, (2, 2))  # 8x4x4
    h = PF.convolution(h, 16, (3, 3), pad=(1, 1), w_init=he(8 * 9), name="conv2")
    h = F.relu(PF.batch_normalization(h, batch_stat=batch_stat, name="bn2"))
    h = F.mean(h, axis=(2, 3))  # global average pooling: (B, 16)
    return PF.affine(h, 10, w_init=I.NormalInitializer(math.sqrt(1.0 / 16), rng=rng), name="fc")


def _digits_conv_bn(seed: int) -> Dict:
    import nnabla.solvers as S

    from sim.nnabla_studies.demo import load_data

    x_train, y_train, x_test, y_test = load_data(seed)
    return _classifier(
        lambda x, training: _conv_bn_net(x, training, seed),  # evaluation: running statistics
        (x_train.reshape(-1, 1, 8, 8), y_train),
        (x_test.reshape(-1, 1, 8, 8), y_test),
        lambda: S.Momentum(0.05, 0.9),
        seed,
        f"sklearn digits 8x8 as 1x8x8 images, {len(x_train)} train / {len(x_test)} test",
        "conv3x3(8)-BN-ReLU-maxpool-conv3x3(16)-BN-ReLU-GAP-affine(10), Momentum(0.05, 0.9)",
    )


def make_sequences(n: int, seed: int):
    """Random 0/1 sequences of length :data:`SEQ_LEN` and their count of ones.

    Returns:
        ``(x, y)``: float32 ``(n, SEQ_LEN)`` and int ``(n,)`` in ``[0, SEQ_LEN]``.
    """
    rng = np.random.RandomState(seed)
    x = (rng.rand(n, SEQ_LEN) < rng.rand(n, 1)).astype(np.float32)  # varied densities
    return x, x.sum(axis=1).astype(np.int64)


def _lstm_net(x, seed: int):
    """``x``: (B, T) of 0/1; returns logits (B, T + 1) from the last LSTM output."""
    import nnabla as nn
    import nnabla.functions as F
    import nnabla.initializer as I
    import nnabla.parametric_functions as PF

    b = x.shape[0]
    seq = F.reshape(F.transpose(x, (1, 0)), (SEQ_LEN, b, 1))  # (T, B, 1)
    h0 = nn.Variable.from_numpy_array(np.zeros((1, 1, b, SEQ_HIDDEN), np.float32))
    c0 = nn.Variable.from_numpy_array(np.zeros((1, 1, b, SEQ_HIDDEN), np.float32))
    rng = np.random.RandomState(seed)
    y, _, _ = PF.lstm(seq, h0, c0, rng=rng, name="lstm")
    last = y[SEQ_LEN - 1]  # (B, H)
    w = I.NormalInitializer(math.sqrt(1.0 / SEQ_HIDDEN), rng=rng)
    return PF.affine(last, SEQ_LEN + 1, w_init=w, name="head")


def _sequence_lstm(seed: int) -> Dict:
    import nnabla.solvers as S

    return _classifier(
        lambda x, training: _lstm_net(x, seed),
        make_sequences(4096, seed),
        make_sequences(SEQ_TEST, seed + 1000),
        lambda: S.Adam(0.01),
        seed,
        f"generated 0/1 sequences of length {SEQ_LEN} (seed {seed}), target: count of ones "
        f"({SEQ_LEN + 1} classes), 4096 train / {SEQ_TEST} test",
        f"PF.lstm(hidden {SEQ_HIDDEN}) + affine({SEQ_LEN + 1}) on the last output, Adam(0.01)",
    )


BUILDERS: Dict[str, Callable[[int], Dict]] = {
    "digits_mlp": _digits_mlp,
    "digits_conv_bn": _digits_conv_bn,
    "sequence_lstm": _sequence_lstm,
}


# ---------------------------------------------------------------- recording


@contextlib.contextmanager
def half_model(name: str, seed: int):
    """Model ``name`` (a dict of :func:`_classifier`) built in ``cpu:half`` under its own
    parameter scope, with nnabla seeded by ``seed``; its parameters are cleared before and after.
    The block runs in the ``cpu:half`` context."""
    import nnabla as nn

    from updater import get_context

    if name not in BUILDERS:
        raise ValueError(f"unknown model {name!r}; choose from {', '.join(MODELS)}")
    nn.seed(seed)
    with nn.parameter_scope(f"dls_real_traces/{name}"):
        nn.clear_parameters()
        try:
            with nn.context_scope(get_context("cpu:half")):
                yield BUILDERS[name](seed)
        finally:
            nn.clear_parameters()


def record_model(
    name: str,
    out_dir: Union[str, Path],
    steps: int | None = None,
    every: int = 1,
    seed: int = 0,
) -> Dict:
    """Train model ``name`` in ``cpu:half`` under ``DynamicScale()`` with a per-parameter
    :class:`updater.GradientRecorder`, measured like the checked runs
    (:mod:`sim.nnabla_studies.real_runs`):
    writes the trace ``<out_dir>/<name>.npz`` and the measured run
    ``<out_dir>/<name>.recorded.run.npz``.

    Args:
        name (str): one of :data:`MODELS`.
        out_dir (str or Path): folder of the files (created if missing).
        steps (int or None): training steps (``update()`` calls); :data:`DEFAULT_STEPS` if None.
        every (int, default 1): record every k-th step (the report's predictions need every
            step).
        seed (int, default 0): seed of weights, data and batch order.

    Returns:
        dict: a table row (model, steps, recorded, params, final loss, accuracy, skipped, final
        scale, seconds, path, bytes, about).
    """
    from sim.nnabla_studies.real_runs import RECORDED, measure_run, run_path
    from updater import GradientRecorder
    from updater.policy import DynamicScale

    steps = DEFAULT_STEPS[name] if steps is None else int(steps)
    every = int(every)
    if steps < 1 or every < 1:
        raise ValueError(f"steps and every must be >= 1, got {steps} and {every}")
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    path = out_dir / f"{name}.npz"
    with GradientRecorder(path, every=every, name=name, per_parameter=True) as recorder:
        run = measure_run(name, DynamicScale(), RECORDED, steps, seed, recorder=recorder)
    run.save(run_path(out_dir, name, RECORDED))
    trace = recorder.trace()
    summary = run.summary()
    kept = ("model", "steps", "skipped", "final_scale", "final_loss", "accuracy", "seconds")
    return {
        **{k: summary[k] for k in kept},
        "recorded": trace.steps,
        "every": every,
        "params": int((trace.counts.sum(axis=1) + trace.zeros).max()),
        "path": str(path),
        "bytes": path.stat().st_size,
        "about": run.about,
    }


def record_all(
    out_dir: Union[str, Path],
    steps: int | None = None,
    quick: bool = False,
    seed: int = 0,
    models=MODELS,
    policy_runs: bool = True,
) -> Dict[str, List[Dict]]:
    """Record a trace of each model into ``out_dir`` and, with ``policy_runs``, its real runs
    under :data:`sim.nnabla_studies.real_runs.CHECKED_POLICIES` (same steps and seed).

    Args:
        out_dir (str or Path): folder of the ``.npz`` files.
        steps (int or None): training steps of every model; per-model defaults
            (:data:`DEFAULT_STEPS`) if None, :data:`QUICK_STEPS` with ``quick``.
        quick (bool, default False): a few steps (seconds; for tests and smoke runs).
        seed (int, default 0): seed of every model.
        models (sequence of str): which models (default all of :data:`MODELS`).
        policy_runs (bool, default True): also train under the checked policies.

    Returns:
        dict: ``traces`` (rows of :func:`record_model`) and ``runs`` (one row per measured run:
        model, policy, steps, skipped, final scale, accuracy, seconds, path).
    """
    from sim.nnabla_studies.real_runs import CHECKED_POLICIES, measure_run, run_path

    traces, runs = [], []
    for name in models:
        n = (QUICK_STEPS if quick else DEFAULT_STEPS[name]) if steps is None else steps
        traces.append(record_model(name, out_dir, steps=n, seed=seed))
        for label, policy in CHECKED_POLICIES.items() if policy_runs else ():
            run = measure_run(name, policy, label, n, seed=seed)
            path = run.save(run_path(out_dir, name, label))
            runs.append({**run.summary(), "path": str(path)})
    return {"traces": traces, "runs": runs}


TRACE_COLUMNS = {
    "model": "model",
    "steps": "steps",
    "recorded": "recorded steps",
    "params": "parameters",
    "final_loss": "final loss",
    "accuracy": "test accuracy",
    "skipped": "skipped",
    "final_scale": "final scale",
    "seconds": "seconds",
    "kib": "KiB",
}
RUN_COLUMNS = {
    "model": "model",
    "policy": "policy",
    "steps": "steps",
    "skipped": "skipped",
    "final_scale": "final scale",
    "accuracy": "test accuracy",
    "seconds": "seconds",
}


def format_table(rows: List[Dict], columns: Dict[str, str] = TRACE_COLUMNS) -> str:
    """Rows of :func:`record_all` (``traces``, or ``runs`` with :data:`RUN_COLUMNS`) as a
    markdown table."""
    rows = [{**r, "kib": r["bytes"] / 1024} if "bytes" in r else r for r in rows]
    return markdown_table(rows, list(columns), list(columns.values()))


def main(argv=None) -> int:
    from sim.nnabla_studies.real_runs import CHECKED_POLICIES

    checked = ", ".join(CHECKED_POLICIES)
    parser = argparse.ArgumentParser(
        prog="python -m sim.nnabla_studies.real_traces",
        description="Train three small real nnabla models (digits MLP, digits conv+BN, LSTM "
        "on a generated counting task) in cpu:half with DynamicLossScalingUpdater and the "
        "default DynamicScale(), recording a gradient trace of every step with "
        "GradientRecorder (OUT/<model>.npz), then train each again for real under each "
        f"checked policy ({checked}), measured against a float32 shadow of the model at every "
        "step (OUT/<model>.<policy>.run.npz): the report (dls report) checks the simulator's "
        "predictions from the traces against these runs. A full run takes about 8 minutes on "
        "2 cores (nnabla's cpu:half is software float16); --quick takes seconds. Replay a "
        "trace with: dls simulate --trace OUT/<model>.npz",
    )
    parser.add_argument(
        "--out", default="reports/traces", help="output folder (default %(default)s)"
    )
    parser.add_argument(
        "--steps",
        type=positive_int,
        default=None,
        help="training steps of every model (default: per model, "
        f"{', '.join(f'{k} {v}' for k, v in DEFAULT_STEPS.items())})",
    )
    parser.add_argument("--quick", action="store_true", help=f"{QUICK_STEPS} steps per model")
    parser.add_argument("--seed", type=nonnegative_int, default=0, help="seed (default 0)")
    parser.add_argument("--models", nargs="+", choices=MODELS, default=list(MODELS))
    parser.add_argument(
        "--traces-only", action="store_true", help="record the traces, not the checked runs"
    )
    args = parser.parse_args(argv)
    done = record_all(args.out, steps=args.steps, quick=args.quick, seed=args.seed,
                      models=args.models, policy_runs=not args.traces_only)  # fmt: skip
    table = format_table(done["traces"])
    runs = format_table(done["runs"], RUN_COLUMNS) if done["runs"] else ""
    print(table)
    print(runs)
    lines = [f"{r['path']}: {r['about']}" for r in done["traces"]]
    print("\n".join(lines))
    if not args.quick:
        text = (
            "# Gradient traces of real nnabla models\n\n"
            f"Recorded by `python -m sim.nnabla_studies.real_traces --out {args.out}` at commit "
            f"{current_commit(args.out)} (cpu:half, DynamicScale(), seed {args.seed}; every step "
            "recorded, with per-parameter histograms, and measured against a float32 shadow of "
            "the model: `<model>.recorded.run.npz`). Replay one with "
            "`dls simulate --trace <file>`.\n\n"
            + table
            + "\n\n"
            + "\n".join(f"- {line}" for line in lines)
            + "\n"
        )
        if runs:
            text += (
                "\nThe same models trained again for real under the checked policies, measured "
                "against a float32 shadow at every step (`<model>.<policy>.run.npz`, read by "
                "`dls report` to check the simulator's predictions):\n\n" + runs + "\n"
            )
        atomic_write_text(Path(args.out) / "README.md", text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
