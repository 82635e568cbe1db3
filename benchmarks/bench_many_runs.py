"""Benchmark: many runs of one policy at once, end to end against the vectorised core alone.

``dls simulate --steps 10 --runs N`` calls :func:`sim.replay.run.simulate`; its core is
:func:`sim.replay.run._advance`, every run's state one element of an array, given the jitter
factors drawn (each step's gradient sizes and limits it works out from them, row by row). The
two are timed side by side (interleaved rounds, the round of least CPU time kept; CPU time of this
process, user and system, so that other work on the machine does not count: the system part is
mostly page faults of fresh arrays, and it varies from round to round far more than the user
part, which is also shown) for each ``N``: what the end-to-end
call adds to the core is the trace set-up, the jitter's draw, the policies' stacking and the
metrics, and it should grow with ``N`` no faster than the core does (goal: at most
:data:`GOAL` times the core).

Run ``python -m benchmarks.bench_many_runs [--runs N ...]``; it prints a markdown table.
"""

from __future__ import annotations

import argparse
import resource
from typing import Dict

from sim.replay.run import _advance, jitter_factors, simulate
from sim.tables import markdown_grid
from sim.traces.families import make_trace
from updater.policy.presets import PRESETS

GOAL = 2.0
"""Most ``simulate()`` may take, in times the core, at the largest number of runs."""


def run(runs=(200_000, 10_000_000), steps: int = 10, repeats: int = 2) -> Dict:
    """Seconds of ``simulate`` and of the core for each number of ``runs`` (best of
    ``repeats`` interleaved rounds) on the stationary trace of ``steps`` steps."""
    trace = make_trace("stationary", steps=steps, seed=0)
    policy = PRESETS["dynamic"]
    best: Dict[tuple, tuple] = {}
    for _ in range(repeats):
        for n in runs:
            start = _cpu()
            simulate(policy, trace, runs=n, seed=0, jitter=0.25, progress=False)
            _keep(best, (n, "simulate"), start)
            factor = jitter_factors(steps, n, seed=0, jitter=0.25)
            start = _cpu()
            _advance(policy, trace, factor, n, False, "dynamic")
            _keep(best, (n, "core"), start)
            del factor
    seconds = {key: total for key, (total, _) in best.items()}
    user = {key: u for key, (_, u) in best.items()}
    return {"steps": steps, "repeats": repeats, "seconds": seconds, "user": user, "runs": runs}


def _cpu() -> tuple:
    """This process's ``(user, system)`` CPU seconds so far."""
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime, usage.ru_stime


def _keep(best: Dict[tuple, tuple], key: tuple, start) -> None:
    """Keep the round of least CPU time (user and system) as ``(total, user)``."""
    end = _cpu()
    user = end[0] - start[0]
    total = user + end[1] - start[1]
    if key not in best or total < best[key][0]:
        best[key] = (total, user)


def markdown(result: Dict) -> str:
    """The result as a markdown section."""
    rows = []
    for n in result["runs"]:
        full, core = result["seconds"][(n, "simulate")], result["seconds"][(n, "core")]
        rate = n * result["steps"] / full
        core_user = result["user"][(n, "core")]  # read in clock ticks: short ones are 0
        user = f"{result['user'][(n, 'simulate')] / core_user:.1f}x" if core_user > 0.1 else "-"
        rows.append(
            [f"{n:,}", f"{full:.2f}", f"{core:.2f}", f"{full / core:.1f}x", user] + [f"{rate:.3g}"]
        )
    heads = [
        "runs",
        "simulate() (CPU s)",
        "core loop alone (CPU s)",
        "simulate / core",
        "of it user time: simulate / core",
        "policy-steps/s end to end",
    ]
    n = result["runs"][-1]
    ratio = result["seconds"][(n, "simulate")] / result["seconds"][(n, "core")]
    verdict = "met" if ratio <= GOAL else "not met"
    return (
        f"`dynamic` on the stationary trace, {result['steps']} steps, best of "
        f"{result['repeats']} interleaved rounds of CPU time: `simulate()` end to end (as "
        "`dls simulate --runs N` calls it: trace set-up, the jitter drawn, the policy stacked "
        "for N runs, metrics) beside its vectorised core alone (the loop over steps, given the "
        "jitter factors).\n\n"
        + markdown_grid(heads, rows)
        + f"\n\nGoal at {n:,} runs: `simulate()` at most {GOAL:g}x the core; {ratio:.1f}x, "
        f"{verdict}. Per (step, run) the replay holds the jitter factors, the scales and the "
        "overflow flags; the skipped steps, safe scales and flushed shares are worked out a "
        "block of runs at a time for the metrics, and whole only when a result's attribute is "
        "read."
    )


def main(argv=None) -> None:
    """Print the benchmark as markdown."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=10)
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument(
        "--runs", type=int, nargs="+", default=[200_000, 10_000_000], help="run counts to time"
    )
    args = parser.parse_args(argv)
    print(markdown(run(tuple(args.runs), steps=args.steps, repeats=args.repeats)))


if __name__ == "__main__":
    main()
