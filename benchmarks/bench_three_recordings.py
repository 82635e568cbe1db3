"""One shipped model recorded three ways: the same answer from each, or the output says what the
recording cannot tell (issue 49).

The model (``digits_mlp`` unless ``--model``) is trained in ``cpu:half`` from the same weights in
the same batch order three times, each time recorded (``GradientRecorder(every=k)``): under its
default policy ``DynamicScale()`` with the recording guide's ``Probes(overflow=True,
flush=True)``; under ``nnabla-legacy`` (scale 8) with the same probes; under ``nnabla-legacy``
with ``Probes(overflow=True)`` only. Each recording then goes to ``dls tune`` (its choice of
DynamicScale's settings; :func:`sim.replay.tune.tune`) and is replayed under the default and
under ``nnabla-legacy`` (:func:`sim.replay.run.simulate`, jitter 0.25): the signal lost with its
uncertainty, the 5-95% spread of the jittered runs widened by the flush bounds where the replay
went beyond the scales the recording measured flushing at (:mod:`sim.replay.flush_basis`), or
``not measured`` where it measured none. A recording agrees when each policy's figure lies
within a factor of 2 of the default recording's (or both below 0.01 points), their bounds
overlap once widened by that factor (a figure measured at every replayed scale is its own bound;
the jittered runs' spread is the replay's, not a prediction's), and ``dls tune`` chose the same
settings; a recording without flush
probes agrees when it says it cannot tell (``not measured``, ``dls tune``'s "not a confident
ranking") and its bounds hold the measured figures, never a bare 0%. Each training run also
measured its own flushing against a float32 shadow
(:func:`sim.nnabla_studies.real_runs.measure_run`): what the default and nnabla-legacy really
flushed, beside the replays.
"""

from __future__ import annotations

import tempfile
import time
from pathlib import Path
from typing import Dict

import numpy as np

WAYS = ("default", "nnabla-legacy", "nnabla-legacy, Probes(overflow=True) only")
"""The three recordings, by the policy and probes they were made under."""
POLICIES = ("dynamic", "nnabla-legacy")
"""The policies replayed over each recording."""
RUNS, TUNE_RUNS, JITTER = 64, 16, 0.25
FACTOR, FLOOR = 2.0, 1e-4
"""Agreement: within a factor of 2, or both below 0.01 points."""


def _made(way: str):
    """The policy and probes recording ``way`` is made under."""
    from updater import DynamicScale, NnablaLegacy, Probes

    flush = way != WAYS[2]
    return (DynamicScale() if way == WAYS[0] else NnablaLegacy()), Probes(
        overflow=True, flush=flush
    )


def record(model: str, way: str, steps: int, every: int, folder: Path) -> Dict:
    """Train ``model`` under recording ``way`` and record it; the trace's path, the seconds,
    the recorder's passes per recorded step and the run's own measured flushed share."""
    from sim.nnabla_studies.real_runs import measure_run
    from updater import GradientRecorder

    policy, probes = _made(way)
    path = folder / f"{WAYS.index(way)}.npz"
    start = time.perf_counter()
    recorder = GradientRecorder(path, every=every, name=model)
    run = measure_run(model, policy, way, steps, 0, recorder, probes, 0)
    recorder.close()
    recorded = len(range(0, steps, every))
    return {
        "way": way,
        "path": path,
        "seconds": time.perf_counter() - start,
        "passes": recorder.probe_passes / recorded,
        "flushed_run": float(run.summary()["flushed"]),
    }


def replay(trace, policy: str) -> Dict:
    """``policy`` replayed over ``trace``: the signal lost, its bounds, the 5-95% spread of the
    jittered runs widened by the bounds, and what the figure rests on."""
    from sim.cli.evidence import flush_word
    from sim.replay.run import simulate
    from updater.policy.presets import make_policy

    result = simulate(make_policy(policy), trace, runs=RUNS, seed=0, jitter=JITTER)
    row, m = result.summary(), result.metrics
    return {
        "lost": row["signal_lost"],
        "low": row["signal_lost_low"],
        "high": row["signal_lost_high"],
        "spread": (
            float(np.percentile(m["signal_lost_low"], 5)),
            float(np.percentile(m["signal_lost_high"], 95)),
        ),
        "word": flush_word(row),
        "flushed": row["mean_flushed"],
    }


def choice(trace) -> Dict:
    """``dls tune``'s choice on ``trace`` and whether it says its ranking is not confident."""
    from sim.replay.tune import tune

    found = tune({trace.name: trace}, "dynamic", runs=TUNE_RUNS, seed=0, jitter=JITTER)
    confident = not any("not a confident ranking" in n for n in found["notes"])
    return {"line": found["line"], "confident": confident}


def agrees(row: Dict, reference: Dict) -> str:
    """Whether recording ``row`` gives ``reference``'s answer (module doc), in words."""
    if row is reference:
        return "reference"
    if any(row[p]["word"] == "not measured" for p in POLICIES):
        holds = all(row[p]["low"] <= reference[p]["lost"] <= row[p]["high"] for p in POLICIES)
        said = holds and not row["tune"]["confident"]
        return "yes: says 'not measured'" if said else "no"
    same = row["tune"]["line"] == reference["tune"]["line"]
    for p in POLICIES:
        a, b = row[p], reference[p]
        near = max(a["lost"], b["lost"]) <= FACTOR * min(a["lost"], b["lost"])
        near = near or max(a["lost"], b["lost"]) < FLOOR
        overlap = a["low"] <= b["high"] * FACTOR and b["low"] <= a["high"] * FACTOR
        overlap = overlap or max(a["high"], b["high"]) < FLOOR
        same = same and near and overlap
    return "yes" if same else "no"


def run(quick: bool = False, model: str = "digits_mlp", steps: int = 600, every: int = 4) -> Dict:
    """The three recordings of ``model`` (``steps`` training steps, every ``every``-th recorded;
    ``quick``: 40 steps, every 2nd), their replays and ``dls tune``'s choices."""
    from updater.trace import Trace

    steps, every = (40, 2) if quick else (steps, every)
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for way in WAYS:
            row = record(model, way, steps, every, Path(tmp))
            trace = Trace.load(row["path"])
            row.update({p: replay(trace, p) for p in POLICIES}, tune=choice(trace))
            rows.append(row)
    for row in rows:
        row["agrees"] = agrees(row, rows[0])
    return {"model": model, "steps": steps, "every": every, "rows": rows}


def _lost(r: Dict) -> str:
    """A replay's signal lost with its uncertainty, as text."""
    from sim.tables import format_percent as pct

    if r["word"] == "not measured":
        return f"not measured (>= {pct(r['low'])})"
    bounds = "" if r["low"] == r["high"] else f"; bounds {pct(r['low'])}-{pct(r['high'])}"
    return f"{pct(r['lost'])} (5-95%: {pct(r['spread'][0])}-{pct(r['spread'][1])}{bounds})"


def _own(r: Dict) -> str:
    """The flushed share (applied steps) replayed under the recording's own policy."""
    from sim.tables import format_percent as pct

    own = r["dynamic" if r["way"] == WAYS[0] else "nnabla-legacy"]
    return "not measured" if own["word"] == "not measured" else pct(own["flushed"])


def markdown(result: Dict) -> str:
    """The result as markdown."""
    from sim.tables import format_percent as pct
    from sim.tables import markdown_table

    rows = [
        {
            "way": r["way"],
            "choice": r["tune"]["line"].split("policy=", 1)[1][:-1]
            + ("" if r["tune"]["confident"] else "; not a confident ranking"),
            "default": _lost(r["dynamic"]),
            "legacy": _lost(r["nnabla-legacy"]),
            "agrees": r["agrees"],
        }
        for r in result["rows"]
    ]
    runs = [
        {
            "way": r["way"],
            "flushed_run": pct(r["flushed_run"]),
            "flushed_replay": _own(r),
            "passes": f"{r['passes']:.3g}",
            "seconds": f"{r['seconds']:.0f}",
        }
        for r in result["rows"]
    ]
    heads = ["recording", "dls tune's choice", "signal lost, default", "signal lost, nnabla-legacy"]
    return "\n".join(
        [
            f"`{result['model']}`, {result['steps']} training steps, one in {result['every']} "
            f"recorded; replays: {RUNS} runs, jitter {JITTER}; `dls tune`: {TUNE_RUNS} runs.",
            "",
            markdown_table(
                rows,
                ["way", "choice", "default", "legacy", "agrees"],
                [*heads, "agrees with the default's recording"],
            ),
            "",
            "Each recording's own training run, measured against its float32 shadow (the "
            "flushed share of applied steps that policy really had), and the recorder's cost:",
            "",
            markdown_table(
                runs,
                ["way", "flushed_run", "flushed_replay", "passes", "seconds"],
                [
                    "recording",
                    "flushed in the run itself",
                    "flushed, its policy replayed on its recording",
                    "extra passes per recorded step",
                    "seconds (shadow included)",
                ],
            ),
        ]
    )


def _options(parser) -> None:
    parser.add_argument("--quick", action="store_true", help="40 steps, a smoke run")
    parser.add_argument("--model", default="digits_mlp", help="a shipped model's name")
    parser.add_argument("--steps", type=int, default=600, help="training steps (default 600)")
    parser.add_argument("--every", type=int, default=4, help="record every k-th step (4)")


def _report(args) -> tuple:
    given = " --quick" if args.quick else ""
    if not args.quick:
        given = f" --model {args.model} --steps {args.steps} --every {args.every}"
    command = "python -m benchmarks.bench_three_recordings" + given
    return "One model recorded three ways", command


def main(argv=None) -> None:
    """Print the benchmark as markdown (``--out FILE`` also writes it)."""
    from benchmarks.common import benchmark_main

    def make_text(args) -> str:
        return markdown(run(args.quick, args.model, args.steps, args.every))

    benchmark_main(argv, __doc__, _options, make_text, _report)


if __name__ == "__main__":
    main()
