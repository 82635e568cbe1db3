"""Benchmark: simulator policy-steps per second, vectorized against a per-run Python loop.

Variants run interleaved in rounds (a, b, c, d, a, b, c, d, ...) on the same trace and the best
round is kept for each, so background load hits all of them alike:

a. ``sim.replay.run`` inner loop: ``runs`` runs advance together (state arrays of
   shape ``(runs,)``);
b. the same plus trace set-up and all metrics (``sim.replay.run.simulate``, end to end);
c. the per-step Python loop: each run alone with scalar states (``sim.replay.run.simulate_scalar``),
   on ``scalar_runs`` runs (its rate per policy-step does not depend on how many);
d. the physical reference: per step, one ``numpy.copyto`` of a float64 array of ``runs``
   elements (the least a vectorized step can do: one call touching the run axis).

Run ``python -m benchmarks.bench_sim``; it prints a markdown table. ``run()`` returns a dict.
"""

from __future__ import annotations

import argparse
import platform
import time
from typing import Dict

import numpy as np

from sim.replay.run import _advance, jitter_factors, simulate, simulate_scalar
from sim.tables import markdown_grid
from sim.traces.families import make_trace
from updater.policy.presets import PRESETS

GOAL_RATE = 1e7
"""Policy-steps per second wanted with 1000 runs advancing together."""
GOAL_RATIO = 20.0
"""Wanted speed-up of the vectorized loop over the per-run scalar loop."""


def _best(seconds: Dict[str, float], key: str, start: float) -> None:
    elapsed = time.perf_counter() - start
    seconds[key] = min(seconds.get(key, float("inf")), elapsed)


def _copy_loop(steps: int, runs: int) -> None:
    src = np.ones(runs)
    dst = np.empty(runs)
    for _ in range(steps):
        np.copyto(dst, src)


def run(
    runs: int = 1000,
    steps: int = 2000,
    scalar_runs: int = 5,
    repeats: int = 3,
    policies=("dynamic", "headroom"),
) -> Dict:
    """Measure the variants for each preset in ``policies``; return rates and ratios.

    Args:
        runs (int, default 1000): runs advanced together.
        steps (int, default 2000): steps of the stationary trace.
        scalar_runs (int, default 5): runs of the per-run scalar loop.
        repeats (int, default 3): interleaved rounds (best kept).
        policies (sequence of str, default ("dynamic", "headroom")): presets to time.
    """
    trace = make_trace("stationary", steps=steps, seed=0)
    factor = jitter_factors(steps, runs, seed=0, jitter=0.25)
    out: Dict = {
        "machine": f"{platform.machine()}, {platform.processor() or 'cpu'}, "
        f"Python {platform.python_version()}, NumPy {np.__version__}",
        "runs": runs,
        "steps": steps,
        "scalar_runs": scalar_runs,
        "repeats": repeats,
        "policies": {},
    }
    seconds: Dict[str, float] = {}
    for _ in range(repeats):
        for name in policies:
            policy = PRESETS[name]
            start = time.perf_counter()
            _advance(policy, trace, factor, runs, False, name)
            _best(seconds, f"{name}/loop", start)
            start = time.perf_counter()
            simulate(policy, trace, runs=runs, seed=0, jitter=0.25, progress=False)
            _best(seconds, f"{name}/simulate", start)
            start = time.perf_counter()
            simulate_scalar(policy, trace, runs=scalar_runs, seed=0, jitter=0.25)
            _best(seconds, f"{name}/scalar", start)
        start = time.perf_counter()
        _copy_loop(steps, runs)
        _best(seconds, "copy", start)
    copy_rate = steps * runs / seconds["copy"]
    out["copy_rate"] = copy_rate
    out["copy_us_per_step"] = 1e6 * seconds["copy"] / steps
    for name in policies:
        loop = steps * runs / seconds[f"{name}/loop"]
        full = steps * runs / seconds[f"{name}/simulate"]
        scalar = steps * scalar_runs / seconds[f"{name}/scalar"]
        out["policies"][name] = {
            "loop_rate": loop,
            "simulate_rate": full,
            "scalar_rate": scalar,
            "speedup_loop": loop / scalar,
            "speedup_simulate": full / scalar,
            "loop_us_per_step": 1e6 * seconds[f"{name}/loop"] / steps,
            "loop_vs_copy": seconds[f"{name}/loop"] / seconds["copy"],
            "goal_rate_met": loop >= GOAL_RATE,
            "goal_ratio_met": loop / scalar >= GOAL_RATIO,
        }
    return out


def markdown(result: Dict) -> str:
    """The result as a markdown section."""
    runs, steps = result["runs"], result["steps"]
    lines = [
        f"Simulator, {runs} runs x {steps} steps of the stationary trace, best of "
        f"{result['repeats']} interleaved rounds ({result['machine']}). Goals: >= "
        f"{GOAL_RATE:.0e} policy-steps/s with {runs} runs together, >= {GOAL_RATIO:g}x the "
        "per-run scalar loop.",
        "",
    ]
    rows = []
    for name, r in result["policies"].items():
        met = "rate " + ("yes" if r["goal_rate_met"] else "NO")
        met += ", ratio " + ("yes" if r["goal_ratio_met"] else "NO")
        rows.append(
            [
                name,
                f"{r['loop_rate']:.3g}",
                f"{r['simulate_rate']:.3g}",
                f"{r['scalar_rate']:.3g}",
                f"{r['speedup_loop']:.0f}x",
                f"{r['loop_us_per_step']:.1f}",
                f"{r['loop_vs_copy']:.1f}x",
                met,
            ]
        )
    heads = [
        "policy",
        "vectorized loop (policy-steps/s)",
        "simulate() with metrics (policy-steps/s)",
        "scalar loop (policy-steps/s)",
        "speed-up (loop / scalar)",
        "loop us/step",
        "loop / copy-per-step",
        "goals met",
    ]
    lines.append(markdown_grid(heads, rows))
    lines += [
        "",
        f"Physical reference: one `numpy.copyto` of {runs} float64 per step takes "
        f"{result['copy_us_per_step']:.2f} us ({result['copy_rate']:.3g} element-steps/s); a "
        "policy step is a dozen or more such NumPy calls, so Python call overhead per step, "
        "not memory traffic, limits the vectorized loop.",
    ]
    return "\n".join(lines)


def main(argv=None) -> None:
    """Print the benchmark as markdown."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=1000)
    parser.add_argument("--steps", type=int, default=2000)
    parser.add_argument("--scalar-runs", type=int, default=5)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args(argv)
    print(markdown(run(args.runs, args.steps, args.scalar_runs, args.repeats)))


if __name__ == "__main__":
    main()
