"""More real runs, held out of everything but the predictive interval's check.

The shipped real runs (:mod:`sim.nnabla_studies.real_traces`) hold one batch order per model and
policy, so the spread of a count across batch orders rests on three values (the two recordings'
exact replays and one real run). This trains the models whose steps overflow again under the
policies that skip on them (:data:`sim.traces.real.HELD_OUT_POLICIES`) in more batch orders
(:data:`sim.traces.real.HELD_OUT_ORDERS`), each exactly as a checked run of ``real_traces``
(same seed, steps and probes: :func:`sim.nnabla_studies.real_traces.record_all`), one at a time,
into ``<model>.order<k>.<policy>.run.npz`` beside the others. ``python -m
benchmarks.bench_interval`` reads them; the calibration never does.

Run ``python -m sim.nnabla_studies.held_out`` (about 12 minutes per batch order on 2 cores;
``--orders 3`` for one); it writes ``held_out.md`` into the folder: the table of every held-out
run there (``--table-only``: that table alone, no training).
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Dict, List, Mapping, Sequence

from sim.argtypes import positive_int
from sim.nnabla_studies.real_traces import DEFAULT_STEPS, RUN_COLUMNS, format_table, record_all
from sim.replay.measured import MeasuredRun, run_path
from sim.report.provenance import provenance
from sim.traces.real import HELD_OUT_ORDERS, HELD_OUT_POLICIES, SHIPPED_DIR
from updater.common.writing import write_text


def held_out_tasks(
    orders: Mapping[str, Sequence[int]] = HELD_OUT_ORDERS, steps: int | None = None
) -> List:
    """The tasks of :func:`sim.nnabla_studies.real_traces.record_all` that make the held-out runs
    of each model in its batch orders ``orders``: ``(model, steps, order, policy)``.

    >>> held_out_tasks({"sequence_lstm": (3,)}, steps=5)
    [('sequence_lstm', 5, 3, 'dynamic-fast'), ('sequence_lstm', 5, 3, 'headroom')]
    """
    return [
        (model, DEFAULT_STEPS[model] if steps is None else steps, order, label)
        for model, ks in orders.items()
        for order in ks
        for label in HELD_OUT_POLICIES
    ]


def held_out_found(folder: Path) -> List[Dict]:
    """The summaries (:meth:`sim.replay.measured.MeasuredRun.summary`) of the held-out runs in
    ``folder``, in the order of :func:`held_out_tasks`."""
    paths = [run_path(folder, m, label, k) for m, _, k, label in held_out_tasks()]
    return [MeasuredRun.load(p).summary() for p in paths if p.exists()]


def held_out_text(rows: List[Dict], command: str, out: Path, trained: bool = True) -> str:
    """``held_out.md``: what the runs are, how they were made, their table (``trained``: by
    ``command``; else ``command`` only listed runs trained before, the same way)."""
    how = (
        f"Trained by `{command}`"
        if trained
        else f"Listed by `{command}` (the runs trained before, each by the task "
        "`python -m sim.nnabla_studies.held_out` runs)"
    )
    return (
        "# Real runs held out for the predictive interval's check\n\n"
        f"{how} with {provenance(out)} (cpu:half, seed 0, one at a time): "
        "the models whose steps overflow below 2**15, again under the checked policies that "
        "skip steps on them, in batch orders no recording and no calibration used, each "
        "measured against a float32 shadow at every step with its overflow thresholds probed, "
        "as the checked runs in sim/traces/data/README.md "
        "(`<model>.order<k>.<policy>.run.npz`). Only `python -m benchmarks.bench_interval` "
        "reads them (reports/interval.md).\n\n" + format_table(rows, RUN_COLUMNS) + "\n"
    )


def main(argv=None) -> int:
    """Train the held-out runs, print their table and write ``held_out.md``."""
    parser = argparse.ArgumentParser(
        prog="python -m sim.nnabla_studies.held_out", description=__doc__.splitlines()[0]
    )
    parser.add_argument("--out", default=None, help="folder (default: the shipped traces)")
    parser.add_argument(
        "--orders", nargs="+", type=int, default=None, help="batch orders (default: each model's)"
    )
    parser.add_argument("--steps", type=positive_int, default=None, help="steps (tests only)")
    parser.add_argument("--table-only", action="store_true", help="write held_out.md only")
    args = parser.parse_args(argv)
    out = SHIPPED_DIR if args.out is None else Path(args.out)
    if not args.table_only:
        orders = {m: args.orders or ks for m, ks in HELD_OUT_ORDERS.items()}
        record_all(out, held_out_tasks(orders, args.steps))
    rows = held_out_found(out)
    print(format_table(rows, RUN_COLUMNS))
    command = "python -m sim.nnabla_studies.held_out" + (
        "" if args.out is None else f" --out {args.out}"
    )
    command += " --table-only" * args.table_only
    write_text(out / "held_out.md", held_out_text(rows, command, out, not args.table_only))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
