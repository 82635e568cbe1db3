"""What a recording costs with flushing measured on a sample of steps, and what the sampling
does to the predictions.

A recording measures flushing (``Probes(flush=True)``: one float32 pass and three float16
scales, 4 passes) on every k-th recorded step only (``Probes(flush_every=k)``,
:data:`sim.nnabla_studies.real_traces.FLUSH_EVERY`) and probes every step's overflow threshold.
Part 1 records each shipped model (the first steps of its recording: the steps of
``benchmarks.bench_probes``) and counts the recorder's extra passes per recorded step, flush
included, against the goal of at most 2; part 2 counts them over the shipped full recordings
without nnabla (the overflow search replayed, as ``benchmarks.bench_probes`` does, plus 4
passes per sampled step). Part 3 drops the shipped recordings' flush measurements outside every
k-th step and checks the flushed-share predictions against the real runs again
(:mod:`sim.replay.predictions`; the replay interpolates between the sampled steps).
"""

from __future__ import annotations

import argparse
import copy
import tempfile
import time
from pathlib import Path
from typing import Dict

import numpy as np

GOAL = 2.0
"""Most extra recorder passes per recorded step, flush included."""
SAMPLINGS = (1, 8, 16)
"""Every k-th recorded step measured, compared in part 3."""
QUICK_STEPS = 8


def _marked(rows):
    """``rows`` with an "ok" cell: whether their passes meet :data:`GOAL`."""
    return [{**r, "ok": "yes" if r["passes"] <= GOAL else "no"} for r in rows]


def recorded_passes(quick: bool = False) -> list:
    """Part 1: each shipped model recorded with overflow probes and flushing every
    :data:`FLUSH_EVERY` steps; the recorder's passes per recorded step."""
    from benchmarks.bench_probes import STEPS
    from sim.nnabla_studies.real_traces import FLUSH_EVERY, record_model, recording_probes
    from sim.traces.real import MODELS

    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for model in MODELS:
            steps = QUICK_STEPS if quick else STEPS[model]
            options = dict(recorder_options=dict(per_parameter=False))
            options["probes"] = recording_probes(forward_headroom=False)
            start = time.perf_counter()
            row = record_model(model, Path(tmp), steps=steps, **options)
            seconds = time.perf_counter() - start
            rows.append(
                {
                    "model": model,
                    "steps": steps,
                    "k": FLUSH_EVERY,
                    "passes": row["probe_passes"],
                    "seconds": seconds,
                }
            )
    return rows


def replayed_passes(k: int) -> list:
    """Part 2: over the shipped full recordings, the overflow search's passes per recorded step
    (replayed, no nnabla) plus 4 passes on every ``k``-th step."""
    from benchmarks.bench_probes import replayed_passes as search_passes

    rows = []
    for r in search_passes():
        if r["search"] != "from the previous threshold":
            continue
        flush = 4 * len(range(0, r["steps"], k)) / r["steps"]
        rows.append({**r, "k": k, "search_passes": r["passes"], "passes": r["passes"] + flush})
    return rows


def sampled_predictions() -> list:
    """Part 3: the flushed-share predictions from the shipped recordings with flushing kept on
    every k-th step (:data:`SAMPLINGS`), against the real runs."""
    from sim.replay.pool import TracePool
    from sim.replay.predictions import prediction_goals, prediction_rows
    from sim.report.experiments import ReportConfig, load_real_pools, real_traces_dir

    config = ReportConfig()
    pools = load_real_pools(config)
    rows = []
    for k in SAMPLINGS:
        sampled = {m: TracePool([_sampled(t, k) for t in p.traces]) for m, p in pools.items()}
        preds = prediction_rows(sampled, real_traces_dir(config), config.jitter, config.seed)
        flushed = [r for r in preds if r["metric"] == "mean_flushed"]
        goal = next(g for g in prediction_goals(preds) if g["metric"] == "mean_flushed")
        relative = [abs(r["error"]) / max(r["measured"], 1e-12) for r in flushed]
        rows.append(
            {
                "k": k,
                "goal": goal["result"],
                "met": "met" if goal["met"] else "missed",
                "error": 100 * float(np.mean([abs(r["error"]) for r in flushed])),
                "relative": 100 * float(np.median(relative)),
            }
        )
    return rows


def _sampled(trace, k: int):
    """``trace`` with its flush measurements kept on every ``k``-th step only."""
    out = copy.deepcopy(trace)
    drop = np.arange(trace.steps) % k != 0
    out.flush_scales[drop], out.flush_shares[drop] = np.nan, np.nan
    return out


def run(quick: bool = False) -> Dict:
    """The three parts (part 1 with :data:`QUICK_STEPS` steps per model with ``quick``)."""
    from sim.nnabla_studies.real_traces import FLUSH_EVERY

    return {
        "recorded": recorded_passes(quick),
        "replayed": replayed_passes(FLUSH_EVERY),
        "predictions": sampled_predictions(),
    }


def markdown(result: Dict) -> str:
    """The result as markdown."""
    from sim.tables import markdown_table

    worst = max(r["passes"] for r in result["recorded"] + result["replayed"])
    return "\n".join(
        [
            "Recorded (probes and flushing every k-th step), extra recorder passes per "
            "recorded step, flush included:",
            "",
            markdown_table(
                _marked(result["recorded"]),
                ["model", "steps", "k", "passes", "ok", "seconds"],
                [
                    "model",
                    "steps",
                    "flush every k",
                    "extra passes per recorded step",
                    f"<= {GOAL:g}",
                    "seconds (float32 shadow included)",
                ],
            ),
            "",
            "Over the shipped full recordings (the search replayed, no nnabla pass; 4 passes "
            "per sampled step):",
            "",
            markdown_table(
                _marked(result["replayed"]),
                ["model", "steps", "k", "search_passes", "passes", "ok"],
                [
                    "model",
                    "steps",
                    "flush every k",
                    "overflow search",
                    "total extra passes per recorded step",
                    f"<= {GOAL:g}",
                ],
            ),
            "",
            f"Largest total: {worst:.3g} extra passes per recorded step (goal <= {GOAL:g}).",
            "",
            "Flushed-share predictions from the shipped recordings with flushing kept on every "
            "k-th step (k = 1: every step, as recorded), against the 12 checked real runs:",
            "",
            markdown_table(
                result["predictions"],
                ["k", "goal", "met", "error", "relative"],
                [
                    "flush every k",
                    "within 25% or 0.01 points",
                    "goal",
                    "mean |error| (points)",
                    "median relative error (%)",
                ],
            ),
        ]
    )


def main(argv=None) -> None:
    """Print the benchmark as markdown (``--out FILE`` also writes it)."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="a few steps per recording")
    parser.add_argument("--out", default=None, help="also write the markdown to this file")
    parser.add_argument(
        "--force", action="store_true", help="replace an --out file dls did not write"
    )
    args = parser.parse_args(argv)
    started = time.time()
    text = markdown(run(args.quick))
    print(text)
    if args.out is not None:
        from benchmarks.common import write_markdown

        command = "python -m benchmarks.bench_flush_sampling" + " --quick" * args.quick
        write_markdown(
            args.out,
            "Flushing measured on a sample of steps",
            command,
            started,
            text,
            __doc__,
            args.force,
        )


if __name__ == "__main__":
    main()
