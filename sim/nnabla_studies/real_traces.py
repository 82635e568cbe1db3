"""Record the gradient traces of the real models and their measured runs.

Each model of :mod:`sim.nnabla_studies.models` trains with
:class:`updater.DynamicLossScalingUpdater` under the default policy (``DynamicScale()``: starts
at 2**15) and a :class:`updater.GradientRecorder` that keeps every step, per parameter array too
(``per_parameter=True``, for :mod:`sim.replay.layers`), with each step's overflow threshold
probed and its flushed share measured against float32 at several scales (the updater's
``probes``: :class:`updater.Probes`, :func:`recording_probes`), so the simulator
(``dls simulate --trace FILE``) can replay real gradient distributions next to the synthetic
families. Each model then trains again for real under each policy of
:data:`sim.replay.measured.CHECKED_POLICIES`, measured step by step
(:mod:`sim.nnabla_studies.real_runs`), so that the report can check what the simulator predicts
from the trace (:mod:`sim.replay.predictions`).

Everything is seeded, so the same seed gives the same traces. Run
``python -m sim.nnabla_studies.real_traces`` (sim/traces/data/README.md gives its time) to
record them again into the package's shipped folder (:data:`sim.traces.real.SHIPPED_DIR`:
``sim/traces/data`` in a checkout), or ``--out DIR`` elsewhere; ``--quick`` records a handful of
steps per model in seconds.
"""

from __future__ import annotations

import argparse
import multiprocessing
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path
from typing import Dict, List, Union

from sim.argtypes import positive_int, seed_int
from sim.nnabla_studies.real_runs import measure_run
from sim.replay.measured import CHECKED_POLICIES, RECORDED, run_path
from sim.report.provenance import provenance
from sim.report.tables import in_words, markdown_table
from sim.traces.real import CHECK_ORDERS, MODELS, RECORDINGS, SHIPPED_DIR, trace_path
from updater.common.writing import write_text

DEFAULT_STEPS = {
    "digits_mlp": 2000,
    "digits_conv_bn": 800,
    "sequence_lstm": 1000,
    "sequence_attention": 400,
}
"""Training steps per model of a full recording."""
QUICK_STEPS = 6
"""Training steps per model of a quick recording (``--quick``)."""
FLUSH_EVERY = 8
"""The recordings measure flushing on every 8th recorded step (4 passes each: 0.5 per recorded
step), so that with the overflow search (1.49 passes per recorded step at most, the conv net) a
recording costs at most 2 extra passes per recorded step on every shipped model
(``python -m benchmarks.bench_flush_sampling``)."""


def recording_probes(**changes):
    """The shipped recordings' :class:`updater.Probes`, with ``changes``: overflow probes
    searching from the previous threshold, flushing measured every :data:`FLUSH_EVERY` recorded
    steps, the forward pass's headroom."""
    from updater import Probes

    shipped = dict(overflow=True, flush=True, flush_every=FLUSH_EVERY, forward_headroom=True)
    return Probes(**{**shipped, **changes})


def record_model(
    name: str,
    out_dir: Union[str, Path],
    steps: int | None = None,
    every: int = 1,
    seed: int = 0,
    recorder_options: Dict | None = None,
    order: int = 0,
    probes=None,
) -> Dict:
    """Train model ``name`` in ``cpu:half`` under ``DynamicScale()`` with a per-parameter
    :class:`updater.GradientRecorder`, measured like the checked runs
    (:mod:`sim.nnabla_studies.real_runs`): writes the trace (:func:`sim.traces.real.trace_path`:
    ``<out_dir>/<name>.npz`` in batch order 0) and the measured run
    (``<out_dir>/<name>.recorded.run.npz`` in batch order 0).

    Args:
        name (str): one of :data:`MODELS`.
        out_dir (str or Path): folder of the files (created if missing).
        steps (int or None): training steps (``update()`` calls); :data:`DEFAULT_STEPS` if None.
        every (int, default 1): record every k-th step (the report's predictions need every
            step).
        seed (int, default 0): seed of weights, data and batch order.
        recorder_options (dict or None, default None): :class:`updater.GradientRecorder`
            arguments that replace the defaults (per-parameter histograms).
        order (int, default 0): the batch order (the same weights and data, other batches).
        probes (updater.Probes or None, default None): what the updater measures on each
            recorded step; None: :func:`recording_probes`.

    Returns:
        dict: a table row (model, batch order, steps, recorded, params, final loss, accuracy,
        skipped, final scale, seconds, path, bytes, about, probe passes per recorded step).
    """
    from updater import GradientRecorder
    from updater.policy import DynamicScale

    steps = DEFAULT_STEPS[name] if steps is None else int(steps)
    every = int(every)
    if steps < 1 or every < 1:
        raise ValueError(f"steps and every must be >= 1, got {steps} and {every}")
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    path = trace_path(out_dir, name, order)
    options = {"per_parameter": True, **(recorder_options or {})}
    probes = recording_probes() if probes is None else probes
    with GradientRecorder(path, every=every, name=name, **options) as recorder:
        run = measure_run(name, DynamicScale(), RECORDED, steps, seed, recorder, probes, order)
    run.save(run_path(out_dir, name, RECORDED, order))
    trace = recorder.trace()
    summary = run.summary()
    kept = (
        "model",
        "order",
        "steps",
        "skipped",
        "final_scale",
        "final_loss",
        "accuracy",
        "seconds",
    )
    return {
        **{k: summary[k] for k in kept},
        "recorded": trace.steps,
        "every": every,
        "probe_passes": recorder.probe_passes / trace.steps,
        "params": int((trace.counts.sum(axis=1) + trace.zeros).max()),
        "path": str(path),
        "bytes": path.stat().st_size,
        "about": run.about,
    }


def plan_tasks(
    steps: int | None = None,
    quick: bool = False,
    models=MODELS,
    policy_runs: bool = True,
    recordings=RECORDINGS,
    check_orders=CHECK_ORDERS,
) -> List[tuple]:
    """What :func:`record_all` trains: ``(model, steps, batch order, label)``, a recording of
    each model in each batch order of ``recordings`` (``label`` None) and, with
    ``policy_runs``, its real runs under :data:`sim.replay.measured.CHECKED_POLICIES` (``label``
    their name) in each batch order of ``check_orders`` (same steps and seed; orders that were
    not recorded, so the check holds the predictions to training they did not see).

    Args:
        steps (int or None): training steps of every model; per-model defaults
            (:data:`DEFAULT_STEPS`) if None, :data:`QUICK_STEPS` with ``quick``.
        quick (bool, default False): a few steps (seconds; for tests and smoke runs).
        models (sequence of str): which models (default all of :data:`MODELS`).
        policy_runs (bool, default True): also train under the checked policies.
        recordings, check_orders (sequences of int): the batch orders recorded and checked
            (:data:`sim.traces.real.RECORDINGS`, :data:`sim.traces.real.CHECK_ORDERS`).
    """
    tasks = []
    for name in models:
        n = (QUICK_STEPS if quick else DEFAULT_STEPS[name]) if steps is None else steps
        tasks += [(name, n, order, None) for order in recordings]
        if policy_runs:
            tasks += [
                (name, n, order, label) for order in check_orders for label in CHECKED_POLICIES
            ]
    return tasks


def record_all(
    out_dir: Union[str, Path],
    tasks: List[tuple] | None = None,
    seed: int = 0,
    jobs: int = 1,
    recorder_options: Dict | None = None,
    probes=None,
) -> Dict[str, List[Dict]]:
    """Train the ``tasks`` into ``out_dir``: the traces recorded and the real runs measured.

    Args:
        out_dir (str or Path): folder of the ``.npz`` files.
        tasks (list or None, default None): :func:`plan_tasks`'s; None: its defaults (every
            model, recorded and checked).
        seed (int, default 0): seed of every model.
        jobs (int, default 1): recordings and runs trained at once, each in a process of its own
            (the results do not depend on it; the seconds do, on a machine with fewer cores).
        recorder_options (dict or None), probes (updater.Probes or None):
            :func:`record_model`'s, for every recording.

    Returns:
        dict: ``traces`` (rows of :func:`record_model`) and ``runs`` (one row per measured run:
        model, policy, batch order, steps, skipped, final scale, accuracy, seconds, path).
    """
    tasks = plan_tasks() if tasks is None else tasks
    args = [(task, str(out_dir), seed, recorder_options, probes) for task in tasks]
    if jobs == 1:
        rows = [_train(*a) for a in args]
    else:
        context = multiprocessing.get_context("spawn")  # no nnabla state shared with a fork
        with ProcessPoolExecutor(jobs, mp_context=context) as pool:
            rows = list(pool.map(_train, *zip(*args)))
    return {
        "traces": [r for r, t in zip(rows, tasks) if t[3] is None],
        "runs": [r for r, t in zip(rows, tasks) if t[3] is not None],
    }


def _train(task, out_dir: str, seed: int, recorder_options: Dict | None, probes) -> Dict:
    """One task of :func:`record_all`: a recording (``label`` None) or a checked run (its
    overflow thresholds probed); its row."""
    from updater import Probes

    name, steps, order, label = task
    if label is None:
        options = dict(recorder_options=recorder_options, order=order, probes=probes)
        return record_model(name, out_dir, steps, seed=seed, **options)
    policy, thresholds = CHECKED_POLICIES[label], Probes(overflow=True)
    run = measure_run(name, policy, label, steps, seed, probes=thresholds, order=order)
    path = run.save(run_path(out_dir, name, label, order))
    return {**run.summary(), "path": str(path)}


TRACE_COLUMNS = {
    "model": "model",
    "order": "batch order",
    "steps": "steps",
    "recorded": "recorded steps",
    "params": "parameters",
    "final_loss": "final loss",
    "accuracy": "test accuracy",
    "skipped": "skipped",
    "final_scale": "final scale",
    "probe_passes": "probe passes per recorded step",
    "seconds": "seconds",
    "kib": "KiB",
}
RUN_COLUMNS = {
    "model": "model",
    "policy": "policy",
    "order": "batch order",
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


def _parser() -> argparse.ArgumentParser:
    """The command line of ``python -m sim.nnabla_studies.real_traces``."""
    checked = ", ".join(CHECKED_POLICIES)
    parser = argparse.ArgumentParser(
        prog="python -m sim.nnabla_studies.real_traces",
        description="Train four small real nnabla models (digits MLP, digits conv+BN, LSTM "
        "on a generated counting task, self-attention reversing token sequences) in cpu:half "
        "with DynamicLossScalingUpdater and the default DynamicScale(), recording a gradient "
        "trace of every step with GradientRecorder, overflow thresholds probed and flushing "
        f"measured on every {FLUSH_EVERY}th recorded step (OUT/<model>.npz, and "
        "OUT/<model>.order<k>.npz in other batch orders), then "
        f"train each again for real under each checked policy ({checked}) in a batch order "
        "not recorded, measured against a float32 shadow of the model at every step "
        "(OUT/<model>.order<k>.<policy>.run.npz): the report (dls report) checks the simulator's "
        "predictions from the traces against these runs. A full run takes minutes on "
        "2 cores (nnabla's cpu:half is software float16); --quick takes seconds. Replay a "
        "trace with: dls simulate --trace OUT/<model>.npz (the shipped ones: --trace <model>)",
    )
    parser.add_argument(
        "--out",
        default=None,
        help="output folder (default: the package's shipped traces, sim/traces/data, which "
        "dls report reads)",
    )
    parser.add_argument(
        "--steps",
        type=positive_int,
        default=None,
        help="training steps of every model (default: per model, "
        f"{', '.join(f'{k} {v}' for k, v in DEFAULT_STEPS.items())})",
    )
    parser.add_argument("--quick", action="store_true", help=f"{QUICK_STEPS} steps per model")
    parser.add_argument("--seed", type=seed_int, default=0, help="seed (default 0)")
    parser.add_argument("--models", nargs="+", choices=MODELS, default=list(MODELS))
    parser.add_argument(
        "--traces-only", action="store_true", help="record the traces, not the checked runs"
    )
    parser.add_argument(
        "--jobs",
        type=positive_int,
        default=1,
        help="recordings and runs trained at once, in processes of their own (default 1; the "
        "files do not depend on it)",
    )
    return parser


def _readme(args, out: Path, done: dict, table: str, runs: str) -> str:
    """The README.md of the traces folder: how they were recorded, the tables, each file."""
    lines = [f"{Path(r['path']).name}: {r['about']}" for r in done["traces"]]
    command = "python -m sim.nnabla_studies.real_traces" + (
        "" if args.out is None else f" --out {args.out}"
    )
    command += f" --jobs {args.jobs}" * (args.jobs != 1)
    text = (
        "# Gradient traces of real nnabla models\n\n"
        f"Recorded by `{command}` with "
        f"{provenance(out)} (cpu:half, DynamicScale(), seed {args.seed}, "
        f"{args.jobs} at once). Each model is recorded {len(RECORDINGS)} times, in batch "
        f"orders {in_words(RECORDINGS)}: the same weights and data, other batches "
        "(`<model>.npz`, then `<model>.order<k>.npz`). Every step is recorded, with "
        "per-parameter histograms, overflow thresholds probed, flushing measured on every "
        f"{FLUSH_EVERY}th recorded step (the replay interpolates between them) and the "
        "forward pass's float16 headroom, and measured against a float32 shadow of the "
        "model (`<model>[.order<k>].recorded.run.npz`). Replay one with "
        "`dls simulate --trace <file>` (the shipped ones also by name: "
        "`dls simulate --trace digits_mlp`), or several recordings of one model as one "
        "pool: `dls simulate --trace A --trace B`.\n\n"
        + table
        + "\n\n"
        + "\n".join(f"- {line}" for line in lines)
        + "\n"
    )
    if runs:
        text += (
            "\nThe same models trained again for real under the checked policies in batch "
            f"order {in_words(CHECK_ORDERS)}, which no recording used, measured against a "
            "float32 shadow at every step, overflow thresholds probed "
            "(`<model>.order<k>.<policy>.run.npz`, read by `dls report` to check the "
            "simulator's predictions):\n\n" + runs + "\n"
        )
    return text


def main(argv=None) -> int:
    """Record the traces and the checked runs, print their tables and (unless ``--quick``)
    write the folder's README.md."""
    args = _parser().parse_args(argv)
    out = SHIPPED_DIR if args.out is None else Path(args.out)
    planned = plan_tasks(args.steps, args.quick, args.models, policy_runs=not args.traces_only)
    done = record_all(out, planned, seed=args.seed, jobs=args.jobs)
    table = format_table(done["traces"])
    runs = format_table(done["runs"], RUN_COLUMNS) if done["runs"] else ""
    print(table)
    print(runs)
    print("\n".join(f"{r['path']}: {r['about']}" for r in done["traces"]))
    if not args.quick:
        write_text(out / "README.md", _readme(args, out, done, table, runs))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
