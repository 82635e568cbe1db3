"""What a recording at the guide's probes costs, and what its flush sampling does to the
flushed-share predictions against measurement on every step.

``Probes(overflow=True, flush=True)`` at its defaults measures flushing (one float32 pass and
three float16 scales, 4 passes) on a sample of the recorded steps within 2 extra passes per
recorded step, overflow search included (:mod:`updater.driver.recording.flush_schedule`). Part
1 records the first steps of each shipped model's recording (the steps of
``benchmarks.bench_probes``) in cpu:half twice, at the defaults and with flushing measured on
every step (``flush_every=1``), and counts the recorder's extra passes per recorded step. Part 2
replays the schedule over the shipped full recordings without nnabla (the overflow search
replayed as ``benchmarks.bench_probes`` does, 4 passes per measured step). Part 3 compares the
replayed flushed share (``mean_flushed`` under the recording's own policy and the checked
policies of :mod:`sim.replay.predictions`) from the recording at the defaults, and from the
every-step recording with the schedule applied afresh under other seeds
(:mod:`benchmarks.flush_schedule_replay`; and every 8th step, the shipped recordings' sampling),
with the same replay of the every-step recording: a run is within when it lies within 25% or
0.01 points of it.
"""

from __future__ import annotations

import tempfile
import time
from pathlib import Path
from typing import Dict

import numpy as np

GOAL = 2.0
"""Most extra recorder passes per recorded step at the defaults, flush included."""
WITHIN = 0.9
"""Least share of the checked runs whose flushed share lies within 25% or 0.01 points."""
SEEDS = 10
"""Seeds of the schedule applied afresh to each every-step recording."""
QUICK_STEPS = 8


def _record(model: str, out: Path, steps: int, probes) -> Dict:
    """One recording of ``model`` (per-layer histograms off) and its seconds."""
    from sim.nnabla_studies.real_traces import record_model

    start = time.perf_counter()
    options = dict(per_parameter=False)
    row = record_model(model, out, steps=steps, probes=probes, recorder_options=options)
    return {**row, "seconds": time.perf_counter() - start}


def recorded(tmp: Path, steps: Dict[str, int]) -> list:
    """Part 1: each model recorded at the defaults and with every step measured; the passes
    per recorded step and the steps measured, and the two recordings (for part 3)."""
    from updater import Probes

    kinds = {
        "defaults": Probes(overflow=True, flush=True),
        "every step": Probes(overflow=True, flush=True, flush_every=1),
    }
    rows = []
    for model, n in steps.items():
        for kind, probes in kinds.items():
            row = _record(model, tmp / kind.replace(" ", "_"), n, probes)
            trace = _load(row["path"])
            measured = int((~np.isnan(trace.flush_shares).all(axis=1)).sum())
            rows.append(
                {
                    "model": model,
                    "kind": kind,
                    "steps": n,
                    "measured": measured,
                    "passes": row["probe_passes"],
                    "seconds": row["seconds"],
                    "dir": Path(row["path"]).parent,
                }
            )
    return rows


def _load(path):
    from updater.trace import Trace

    return Trace.load(path)


def replayed() -> list:
    """Part 2: the schedule over the shipped full recordings, search replayed, no nnabla."""
    from benchmarks.flush_schedule_replay import schedule_sampled
    from sim.replay.measured import MeasuredRun, run_path
    from sim.traces.real import MODELS, SHIPPED_DIR

    rows = []
    for model in MODELS:
        trace = _load(SHIPPED_DIR / f"{model}.npz")
        run = MeasuredRun.load(run_path(SHIPPED_DIR, model, "recorded"))
        _, passes, measured = schedule_sampled(trace, run.scale)
        rows.append({"model": model, "steps": trace.steps, "measured": measured, "passes": passes})
    return rows


def predicted(parts: list) -> list:
    """Part 3: per model and sampling, the checked runs whose flushed share lies within 25% or
    0.01 points of the every-step recording's, and the median and largest relative error."""
    from benchmarks.flush_schedule_replay import schedule_sampled
    from sim.replay.measured import CHECKED_POLICIES, MeasuredRun, run_path
    from sim.replay.run import simulate
    from updater.policy import DynamicScale

    policies = {"recorded": DynamicScale(), **CHECKED_POLICIES}

    def flushed(trace):
        return [
            simulate(p, trace, runs=1, jitter=0.0).metrics["mean_flushed"][0]
            for p in policies.values()
        ]

    rows = []
    for model in dict.fromkeys(r["model"] for r in parts):
        where = {r["kind"]: r["dir"] for r in parts if r["model"] == model}
        every = _load(where["every step"] / f"{model}.npz")
        scales = MeasuredRun.load(run_path(where["every step"], model, "recorded")).scale
        same = np.array_equal(
            scales, MeasuredRun.load(run_path(where["defaults"], model, "recorded")).scale
        )
        truth = flushed(every)
        samplings = {
            "defaults, recorded": [_load(where["defaults"] / f"{model}.npz")],
            f"defaults, {SEEDS} seeds on the every-step recording": [
                schedule_sampled(every, scales, seed=s)[0] for s in range(1, SEEDS + 1)
            ],
            "every 8th step": [schedule_sampled(every, scales, every=8)[0]],
        }
        for label, traces in samplings.items():
            errors = [(got - want, want) for t in traces for got, want in zip(flushed(t), truth)]
            rows.append(_accuracy(model, label, errors, same))
    return rows


def _accuracy(model: str, sampling: str, errors: list, same: bool) -> Dict:
    """A part-3 row from ``(error, every-step value)`` pairs."""
    from sim.replay.predictions import flushed_within

    ok = [flushed_within(e, want) for e, want in errors]
    relative = [abs(e) / want if want > 0 else 0.0 for e, want in errors]
    return {
        "model": model,
        "sampling": sampling,
        "truth": 100 * float(np.mean([want for _, want in errors])),
        "within": f"{sum(ok)} of {len(ok)}",
        "relative_ok": f"{sum(r <= 0.25 for r in relative)} of {len(ok)}",
        "ok": sum(ok),
        "runs": len(ok),
        "median": 100 * float(np.median(relative)),
        "largest": 100 * float(np.max(relative)),
        "same": "yes" if same else "no",
    }


def run(quick: bool = False, steps: int | None = None) -> Dict:
    """The three parts: part 1 over :data:`benchmarks.bench_probes.STEPS` per model
    (:data:`QUICK_STEPS` with ``quick``; at most ``steps``)."""
    from benchmarks.bench_probes import STEPS

    counts = {m: QUICK_STEPS if quick else min(n, steps or n) for m, n in STEPS.items()}
    with tempfile.TemporaryDirectory() as tmp:
        parts = recorded(Path(tmp), counts)
        accuracy = predicted(parts)
    return {"recorded": parts, "replayed": replayed(), "predictions": accuracy}


def _marked(rows):
    """``rows`` with an "ok" cell: whether their passes meet :data:`GOAL`."""
    return [{**r, "ok": "yes" if r["passes"] <= GOAL else "no"} for r in rows]


def markdown(result: Dict) -> str:
    """The result as markdown."""
    from sim.tables import markdown_table

    defaults = [r for r in result["recorded"] if r["kind"] == "defaults"] + result["replayed"]
    worst = max(r["passes"] for r in defaults)
    sampled = [r for r in result["predictions"] if r["sampling"].startswith("defaults")]
    ok, runs = sum(r["ok"] for r in sampled), sum(r["runs"] for r in sampled)
    met = "met" if worst <= GOAL and ok >= WITHIN * runs else "not met"
    return "\n".join(
        [
            "Recorded in cpu:half (part 1), extra recorder passes per recorded step, flush "
            "included:",
            "",
            markdown_table(
                _marked(result["recorded"]),
                ["model", "kind", "steps", "measured", "passes", "ok", "seconds"],
                [
                    "model",
                    "probes",
                    "steps",
                    "flush measured on",
                    "extra passes per recorded step",
                    f"<= {GOAL:g}",
                    "seconds (float32 shadow included)",
                ],
            ),
            "",
            "The schedule over the shipped full recordings (part 2: the search replayed, 4 "
            "passes per measured step):",
            "",
            markdown_table(
                _marked(result["replayed"]),
                ["model", "steps", "measured", "passes", "ok"],
                [
                    "model",
                    "steps",
                    "flush measured on",
                    "extra passes per recorded step",
                    f"<= {GOAL:g}",
                ],
            ),
            "",
            "Flushed share replayed from the sampled recordings against the every-step "
            "recording (part 3; each run: one policy replayed over one sampled recording):",
            "",
            markdown_table(
                result["predictions"],
                [
                    "model",
                    "sampling",
                    "truth",
                    "within",
                    "relative_ok",
                    "median",
                    "largest",
                    "same",
                ],
                [
                    "model",
                    "sampling",
                    "every step's flushed share (%, mean of the policies)",
                    "within 25% or 0.01 points",
                    "within 25% alone",
                    "median relative error (%)",
                    "largest (%)",
                    "recorded at the defaults: same trajectory as every step",
                ],
            ),
            "",
            f"At the defaults: largest cost {worst:.3g} extra passes per recorded step (goal <= "
            f"{GOAL:g}); flushed share within in {ok} of {runs} runs (goal >= {WITHIN:.0%}): "
            f"{met}.",
        ]
    )


def _options(parser) -> None:
    parser.add_argument("--quick", action="store_true", help="a few steps per recording")
    parser.add_argument("--steps", type=int, default=None, help="at most this many per model")


def _report(args) -> tuple:
    command = "python -m benchmarks.bench_flush_sampling" + " --quick" * args.quick
    command += f" --steps {args.steps}" if args.steps else ""
    return "Flushing measured on a sample of steps", command


def main(argv=None) -> None:
    """Print the benchmark as markdown (``--out FILE`` also writes it)."""
    from benchmarks.common import benchmark_main

    benchmark_main(argv, __doc__, _options, lambda a: markdown(run(a.quick, a.steps)), _report)


if __name__ == "__main__":
    main()
