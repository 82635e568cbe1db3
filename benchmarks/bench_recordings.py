"""How many recordings a prediction needs: the skipped steps predicted from k recordings of one
model in different batch orders (k = 1 ... n), their calibrated interval (the one ``dls simulate``
prints: :func:`sim.replay.spread.calibrated_interval`) and whether it holds the real runs of
the checked policies in a batch order no recording used.

Only the models whose steps overflow below 2**15 are measured (on the others every spread is 0
wide and right). The recordings probe overflow thresholds only (no flushing, no per-parameter
histograms): the skipped steps depend on nothing else, and probes leave training unchanged, so a
recording in batch order 0 or 1 has the thresholds of the shipped one (checked: column "same as
shipped"). The real runs are the shipped ones (`--quick`: measured anew, a few steps).
"""

from __future__ import annotations

import argparse
import tempfile
import time
from typing import Dict, List

import numpy as np

MODELS = ("digits_conv_bn", "sequence_lstm")
"""The shipped models whose steps overflow below 2**15."""
EXTRA = 6
"""Recordings beyond the shipped batch orders (``--extra``)."""


def run(quick: bool = False, extra: int = EXTRA, jobs: int = 1) -> Dict[str, List[Dict]]:
    """Record each of :data:`MODELS` in the shipped batch orders and ``extra`` more, then predict
    the checked policies' skipped steps from the first k recordings for every k.

    Returns:
        dict: ``rows`` (model, policy, order of the real run, k, low, high, width, measured,
        inside) and ``recordings`` (model, batch order, steps overflowing at 2**15, same as
        shipped).
    """
    from sim.nnabla_studies.real_traces import QUICK_STEPS, plan_tasks, record_all
    from sim.replay.pool import TracePool
    from sim.replay.predictions import prediction_rows
    from sim.traces.real import CHECK_ORDERS, RECORDINGS, SHIPPED_DIR, trace_path
    from updater import Probes
    from updater.trace import Trace

    first = max(*RECORDINGS, *CHECK_ORDERS) + 1
    orders = (*RECORDINGS, *range(first, first + extra))
    rows, recordings = [], []
    with tempfile.TemporaryDirectory() as tmp:
        record_all(
            tmp,
            plan_tasks(
                QUICK_STEPS if quick else None, models=MODELS, policy_runs=quick, recordings=orders
            ),
            jobs=jobs,
            recorder_options=dict(per_parameter=False),  # overflow probes only
            probes=Probes(overflow=True),
        )
        runs_dir = tmp if quick else SHIPPED_DIR
        for model in MODELS:
            traces = [Trace.load(trace_path(tmp, model, k)) for k in orders]
            for k, trace in zip(orders, traces):
                shipped = None
                if not quick and k in RECORDINGS:
                    theirs = Trace.load(trace_path(SHIPPED_DIR, model, k)).overflow_scale
                    shipped = bool(np.array_equal(trace.overflow_scale, theirs))
                prone = int((trace.overflow_scale <= 2.0**15).sum())
                recordings.append({"model": model, "order": k, "prone": prone, "same": shipped})
            for n in range(1, len(traces) + 1):
                pool = {model: TracePool(traces[:n])}
                for r in prediction_rows(pool, runs_dir):
                    if r["metric"] == "skipped":
                        inside = r["low"] <= r["measured"] <= r["high"]
                        rows.append({**r, "k": n, "width": r["high"] - r["low"], "inside": inside})
    return {"rows": rows, "recordings": recordings}


def needed(rows: List[Dict]) -> List[Dict]:
    """Per model and policy: the fewest recordings whose spread held the real run and stayed
    holding it for every larger k (None: not within the recordings made), and the widths."""
    out = []
    for key in dict.fromkeys((r["model"], r["policy"], r["order"]) for r in rows):
        sub = sorted(
            (r for r in rows if (r["model"], r["policy"], r["order"]) == key), key=lambda r: r["k"]
        )
        held = [r["k"] for i, r in enumerate(sub) if all(s["inside"] for s in sub[i:])]
        out.append(
            {
                "model": key[0],
                "policy": key[1],
                "order": key[2],
                "measured": sub[0]["measured"],
                "needed": held[0] if held else None,
                "widths": [r["width"] for r in sub],
                "spreads": [(r["low"], r["high"]) for r in sub],
            }
        )
    return out


def markdown(result: Dict[str, List[Dict]]) -> str:
    """The result as markdown tables."""
    from sim.tables import markdown_table

    recs = [
        {**r, "same": {True: "yes", False: "no", None: "n/a"}[r["same"]]}
        for r in result["recordings"]
    ]
    summary = []
    for s in needed(result["rows"]):
        spreads = ", ".join(f"{lo:.1f}-{hi:.1f}" for lo, hi in s["spreads"])
        summary.append(
            {
                **s,
                "needed": "not within these" if s["needed"] is None else s["needed"],
                "spreads": spreads,
                "width": f"{s['widths'][0]:.1f} -> {s['widths'][-1]:.1f}",
            }
        )
    return "\n".join(
        [
            markdown_table(
                recs,
                ["model", "order", "prone", "same"],
                ["model", "batch order", "steps overflowing at 2^15 (probed)", "same as shipped"],
            ),
            "",
            "Skipped steps of the real run against the spread predicted from the first k "
            "recordings (the calibrated interval, `sim.replay.spread`; the "
            "recordings in the order of the table above):",
            "",
            markdown_table(
                summary,
                ["model", "policy", "order", "measured", "spreads", "width", "needed"],
                [
                    "model",
                    "policy",
                    "batch order of the real run",
                    "skipped, measured",
                    "spread from k = 1, 2, ... recordings",
                    "width, 1 -> all recordings",
                    "recordings needed (held from then on)",
                ],
            ),
        ]
    )


def main(argv=None) -> None:
    """Print the benchmark as markdown (``--out FILE`` also writes it)."""
    from sim.argtypes import positive_int

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="a few steps per recording")
    parser.add_argument(
        "--extra",
        type=positive_int,
        default=EXTRA,
        help=f"recordings beyond the shipped ones (default {EXTRA})",
    )
    parser.add_argument("--jobs", type=positive_int, default=1, help="recordings made at once")
    parser.add_argument("--out", default=None, help="also write the markdown to this file")
    parser.add_argument(
        "--force", action="store_true", help="replace an --out file dls did not write"
    )
    args = parser.parse_args(argv)
    started = time.time()
    text = markdown(run(args.quick, args.extra, args.jobs))
    print(text)
    if args.out is not None:
        from benchmarks.common import write_markdown

        command = "python -m benchmarks.bench_recordings" + " --quick" * args.quick
        command += f" --extra {args.extra}" * (args.extra != EXTRA)
        command += f" --jobs {args.jobs}" * (args.jobs != 1)
        write_markdown(
            args.out, "Recordings a prediction needs", command, started, text, __doc__, args.force
        )


if __name__ == "__main__":
    main()
