"""What overflow probes cost: extra forward/backward passes per recorded step on every shipped
model (the recording code of :mod:`sim.nnabla_studies.real_traces`), the search that starts at
the previous step's threshold against the older one that walks outward from each step's scale,
measured side by side on the same training run (probes leave training unchanged)."""

from __future__ import annotations

import tempfile
import time
from pathlib import Path
from typing import Dict

import numpy as np

STEPS = {"digits_mlp": 200, "digits_conv_bn": 250, "sequence_lstm": 350, "sequence_attention": 20}
"""Training steps per model of a default run (the shipped recordings' first steps; ``--full``:
all of them)."""
QUICK_STEPS = 8
SEARCHES = {"walk from the scale (old)": False, "from the previous threshold": True}


def run(quick: bool = False, steps: Dict[str, int] | None = None) -> Dict:
    """Record each model twice, once per search; return per model and search the passes per
    recorded step, the thresholds found and whether both searches found the same ones.

    Args:
        quick (bool, default False): :data:`QUICK_STEPS` steps per model (a smoke run).
        steps (dict or None): steps per model; default :data:`STEPS`.
    """
    from sim.nnabla_studies.real_traces import record_model, recording_probes
    from sim.traces.real import MODELS
    from updater.trace import Trace

    steps = {m: QUICK_STEPS for m in MODELS} if quick else (steps or STEPS)
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for model, n in steps.items():
            traces = []
            for label, previous in SEARCHES.items():
                options = dict(recorder_options=dict(per_parameter=False))
                options["probes"] = recording_probes(flush=False, from_previous=previous)
                start = time.perf_counter()
                row = record_model(model, Path(tmp) / label, steps=n, **options)
                seconds = time.perf_counter() - start
                trace = Trace.load(row["path"])
                traces.append(trace)
                censored = trace.thresholds.censored
                rows.append(
                    {
                        "model": model,
                        "steps": n,
                        "search": label,
                        "passes": row["probe_passes"],
                        "thresholds": int(np.isfinite(trace.overflow_scale).sum()),
                        "censored": int(censored.sum()),
                        "seconds": seconds,
                    }
                )
            old, new = traces
            same = np.array_equal(old.overflow_scale, new.overflow_scale)
            same &= np.array_equal(old.finite_scale, new.finite_scale)
            for row in rows[-2:]:
                row["same"] = "yes" if same else "no"
    cost = headroom_cost(2, 1) if quick else headroom_cost()
    return {"rows": rows, "headroom": cost, "replayed": replayed_passes()}


class _Scripted:
    """A recorded step replayed for the search: it overflows from ``limit`` on."""

    rounds_per_attempt = 1

    def __init__(self, limit: float):
        self.limit = limit

    def with_gradients(self):
        return []

    def host_grads(self):
        return []

    def probe(self, scale: float) -> bool:
        return scale < self.limit

    def save_forward_state(self, slot):
        return self

    def restore(self):
        pass


def replayed_passes() -> list:
    """Both searches replayed over the shipped full recordings, without nnabla passes: each
    step's seed is the recorded run's scale, its real limit the middle of its probed bracket
    (inf when censored); the passes the searches would have run, per recorded step."""
    from sim.replay.measured import MeasuredRun, run_path
    from sim.traces.real import MODELS, SHIPPED_DIR
    from updater.driver.recording.probes import probe_step
    from updater.trace import Trace

    rows = []
    for model in MODELS:
        trace = Trace.load(SHIPPED_DIR / f"{model}.npz")
        run = MeasuredRun.load(run_path(SHIPPED_DIR, model, "recorded"))
        limits = trace.overflow_scale * 0.75  # inside (S/2, S]
        for label, previous in SEARCHES.items():
            passes, guess = 0, None
            for seed, limit, bad in zip(run.scale, limits, trace.nonfinite):
                if bad:
                    continue
                found = probe_step(
                    _Scripted(limit),
                    float(seed),
                    seed < limit,
                    np.inf,
                    True,
                    False,
                    (1.0, 2.0**15),
                    guess if previous else None,
                )
                passes += found.passes
                t = found.threshold
                guess = t if t < np.inf else (found.finite_scale or None)
            rows.append(
                {
                    "model": model,
                    "steps": trace.steps,
                    "search": label,
                    "passes": passes / trace.steps,
                }
            )
    return rows


def headroom_cost(steps: int = 10, repeats: int = 3) -> list:
    """Seconds per recorded step of each shipped model's training with a recorder measuring the
    forward pass's headroom (``Probes(forward_headroom=True)``) and with one that does not,
    interleaved on the same model (best of ``repeats`` blocks of ``steps`` steps each)."""
    import nnabla as nn

    from sim.nnabla_studies.models import half_model
    from sim.traces.real import MODELS
    from updater import DynamicLossScalingUpdater, GradientRecorder, Probes

    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for model in MODELS:
            nn.clear_parameters()
            with half_model(model, 0) as m:
                best, updaters, recorders = {}, {}, []
                for measured in (False, True):
                    rec = GradientRecorder(Path(tmp) / f"{model}{measured}.npz")
                    recorders.append(rec)
                    updaters[measured] = DynamicLossScalingUpdater(
                        m["solver"],
                        m["loss"],
                        m["feed"],
                        recorder=rec,
                        probes=Probes(forward_headroom=measured),
                    )
                for _ in range(repeats):
                    for measured, upd in updaters.items():
                        start = time.perf_counter()
                        for _ in range(steps):
                            upd.update()
                        seconds = (time.perf_counter() - start) / steps
                        best[measured] = min(best.get(measured, np.inf), seconds)
                for rec in recorders:
                    rec.close()
            rows.append(
                {
                    "model": model,
                    "plain": best[False] * 1e3,
                    "measured": best[True] * 1e3,
                    "extra": (best[True] - best[False]) * 1e3,
                    "ratio": best[True] / best[False],
                }
            )
    return rows


def markdown(result: Dict) -> str:
    """The result as a markdown table and the averages."""
    from sim.tables import markdown_table

    columns = ["model", "steps", "search", "passes", "thresholds", "censored", "same", "seconds"]
    titles = [
        "model",
        "steps",
        "search",
        "extra passes per recorded step",
        "finite thresholds",
        "censored steps",
        "same thresholds and brackets",
        "seconds (recording, float32 shadow included)",
    ]
    rows = result["rows"]
    mean = {
        label: np.mean([r["passes"] for r in rows if r["search"] == label]) for label in SEARCHES
    }
    lines = [
        markdown_table(rows, columns, titles),
        "",
        "Mean over the models, extra passes per recorded step: "
        + "; ".join(f"{label} {value:.2f}" for label, value in mean.items())
        + ". Overflow probes only: measuring flushing (`Probes(flush=True)`) costs 4 passes per "
        "measured step (one float32 pass, three float16 scales); at the defaults a sample of the "
        "steps is measured, within 2 extra passes per recorded step with the search "
        "(reports/flush_sampling.md).",
        "",
        "Both searches replayed over the shipped full recordings (no nnabla pass: each step's "
        "seed is the recorded run's scale, its limit inside its probed bracket, censored steps "
        "finite up to 2^15), extra passes per recorded step:",
        "",
        markdown_table(
            result["replayed"],
            ["model", "steps", "search", "passes"],
            ["model", "steps", "search", "extra passes per recorded step"],
        ),
        "",
        "The forward pass's headroom (`Probes(forward_headroom=True)`: every function's outputs "
        "read on the host, BatchNormalization's batch variance computed), milliseconds per "
        "recorded step of training with a recorder (best of interleaved blocks):",
        "",
        markdown_table(
            result["headroom"],
            ["model", "plain", "measured", "extra", "ratio"],
            [
                "model",
                "ms per step, recorder",
                "ms per step, with forward headroom",
                "extra ms per recorded step",
                "ratio",
            ],
        ),
    ]
    return "\n".join(lines)


def _options(parser) -> None:
    parser.add_argument("--quick", action="store_true", help=f"{QUICK_STEPS} steps per model")
    parser.add_argument(
        "--full", action="store_true", help="the shipped recordings' steps (about 30 minutes)"
    )


def _text(args) -> str:
    from sim.nnabla_studies.real_traces import DEFAULT_STEPS

    return markdown(run(args.quick, DEFAULT_STEPS if args.full else None))


def _report(args) -> tuple:
    command = "python -m benchmarks.bench_probes" + (" --full" if args.full else "")
    return "Probe passes per recorded step", command


def main(argv=None) -> None:
    """Print the benchmark as markdown (``--out FILE`` also writes it)."""
    from benchmarks.common import benchmark_main

    benchmark_main(argv, __doc__, _options, _text, _report, about=False)


if __name__ == "__main__":
    main()
