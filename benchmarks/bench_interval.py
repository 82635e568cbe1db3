"""The predictive interval of ``dls simulate`` and ``dls tune``: its calibration and how it held
on real runs kept out of it.

Calibration (:mod:`sim.replay.calibration`): on the shipped recordings of the models whose steps
overflow below 2**15 (digits_conv_bn, sequence_lstm; batch orders 0 and 1), under a grid of
policies that are none of the checked ones, each recording alone predicts the other's exact
replay. Held out: the shipped real runs in batch order 2 (under nnabla-legacy, dynamic-fast and
headroom, all four models) and, on digits_conv_bn and sequence_lstm under dynamic-fast and
headroom (the checked policies that skip steps there), more real runs in the batch orders of
`sim.traces.real.HELD_OUT_ORDERS` (`python -m sim.nnabla_studies.held_out`), predicted from both
recordings and from each alone. Beside each width: the spread of the metric across the batch
orders known (the largest minus the smallest of the two recordings' exact replays and every
real run of that model and policy), and across the real runs alone. Neither the calibration's
batch orders nor its policies include a held-out run. Reads only the shipped files; no training.
"""

from __future__ import annotations

import argparse
import time
from typing import Any, Dict, List

import numpy as np

MODELS = ("digits_conv_bn", "sequence_lstm")
"""The shipped models whose steps overflow below 2**15: the calibration's."""


def run(seed: int = 0) -> Dict[str, Any]:
    """Calibrate on the shipped recordings and check on the shipped real runs.

    Returns:
        dict: ``factors`` (metric -> (factor, level) recomputed), ``cases`` (metric -> the
        calibration cases) and ``rows`` (:func:`sim.replay.calibration.held_out_rows`).
    """
    from sim.replay.calibration import calibration_cases, held_out_rows
    from sim.replay.spread import calibration_factor
    from sim.traces.real import MODELS as ALL
    from sim.traces.real import RECORDINGS, SHIPPED_DIR, trace_path
    from updater.trace import Trace

    recordings = {m: [Trace.load(trace_path(SHIPPED_DIR, m, k)) for k in RECORDINGS] for m in ALL}
    cases = calibration_cases({m: recordings[m] for m in MODELS}, seed)
    factors = {metric: calibration_factor(c) for metric, c in cases.items()}
    rows = held_out_rows(recordings, SHIPPED_DIR, seed=seed)
    return {"factors": factors, "cases": cases, "rows": rows}


def _value(metric: str, v: float) -> str:
    return f"{100 * v:.1f}%" if metric != "skipped" else f"{v:g}"


def summary(rows: List[Dict], metric: str, source: str) -> Dict[str, Any]:
    """Coverage and mean widths of the held-out ``rows`` of ``metric`` predicted from
    ``source`` recordings (``"all"`` or ``"one"``: each alone)."""
    sub = [r for r in rows if r["metric"] == metric and (r["from"] == "all") == (source == "all")]
    inside = sum(r["inside"] for r in sub)
    width = float(np.mean([r["width"] for r in sub]))
    spread = float(np.mean([r["orders_spread"] for r in sub]))
    runs = float(np.mean([r["runs_spread"] for r in sub]))
    return {
        "metric": metric,
        "from": "both recordings" if source == "all" else "one recording",
        "inside": f"{inside} of {len(sub)}",
        "share": inside / len(sub),
        "width": _value(metric, width),
        "spread": _value(metric, spread),
        "runs": _value(metric, runs),
        "ratio": "n/a" if spread == 0 else f"{width / spread:.2f}",
        "runs_ratio": "n/a" if runs == 0 else f"{width / runs:.2f}",
    }


def markdown(result: Dict[str, Any]) -> str:
    """The result as markdown."""
    from sim.replay.spread import CALIBRATED
    from sim.tables import markdown_table

    factors = [
        {
            "metric": m,
            "cases": len(result["cases"][m]),
            "factor": f"{f:.3f}",
            "level": f"{level:.0%}",
            "stored": "yes" if (round(f, 3), level) == CALIBRATED[m] else "NO",
        }
        for m, (f, level) in result["factors"].items()
    ]
    rows = result["rows"]
    table = [summary(rows, m, s) for m in result["factors"] for s in ("all", "one")]
    shown = [
        {
            **r,
            "interval": f"{_value(r['metric'], r['low'])}-{_value(r['metric'], r['high'])}",
            "measured": _value(r["metric"], r["measured"]),
            "inside": "yes" if r["inside"] else "NO",
            "orders_spread": _value(r["metric"], r["orders_spread"]),
            "order": r["order"],
        }
        for r in rows
        if r["from"] == "all"
    ]
    cases = [
        {
            **c,
            "metric": m,
            "value": _value(m, c["value"]),
            "target": _value(m, c["target"]),
            "sd": _value(m, float(np.std(c["drawn"], ddof=1))),
        }
        for m, found in result["cases"].items()
        for c in found
    ]
    return "\n".join(
        [
            "Calibration (the factor times the bootstrap's spread; level: the share of the "
            "calibration cases it holds; stored: `sim.replay.spread.CALIBRATED` holds this factor "
            "to three decimals and this level):",
            "",
            markdown_table(
                factors,
                ["metric", "cases", "factor", "level", "stored"],
                ["metric", "cases", "factor", "level", "stored"],
            ),
            "",
            "The calibration cases (one recording's exact replay, the other's, and the "
            "standard deviation over the first one's bootstrapped draws):",
            "",
            markdown_table(
                cases,
                ["model", "policy", "metric", "value", "target", "sd"],
                ["model", "policy", "metric", "one recording", "the other", "bootstrap sd"],
            ),
            "",
            "Held-out real runs (issue 49's goal for skipped steps from both recordings: at "
            "least 90% inside, mean width at most 2x the spread of the real runs' counts; the "
            "spread across batch orders also counts the recordings' exact replays under the "
            "policy, which differ from real runs under it where the policy's own trajectory "
            "moves the thresholds, as the conv net's headroom runs show):",
            "",
            markdown_table(
                table,
                ["metric", "from", "inside", "width", "spread", "ratio", "runs", "runs_ratio"],
                [
                    "metric",
                    "interval from",
                    "real runs inside",
                    "mean width",
                    "mean spread across batch orders",
                    "width / spread",
                    "mean spread of the real runs alone",
                    "width / spread of the real runs",
                ],
            ),
            "",
            "Each held-out run, interval from both recordings:",
            "",
            markdown_table(
                shown,
                [
                    "model",
                    "policy",
                    "order",
                    "metric",
                    "interval",
                    "measured",
                    "inside",
                    "orders_spread",
                ],
                [
                    "model",
                    "policy",
                    "batch order",
                    "metric",
                    "interval",
                    "real run",
                    "inside",
                    "spread across batch orders",
                ],
            ),
        ]
    )


def main(argv=None) -> None:
    """Print the benchmark as markdown (``--out FILE`` also writes it)."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default=None, help="also write the markdown to this file")
    parser.add_argument(
        "--force", action="store_true", help="replace an --out file dls did not write"
    )
    args = parser.parse_args(argv)
    started = time.time()
    text = markdown(run())
    print(text)
    if args.out is not None:
        from benchmarks.common import write_markdown

        write_markdown(
            args.out,
            "The predictive interval: calibration and held-out runs",
            "python -m benchmarks.bench_interval",
            started,
            text,
            __doc__,
            args.force,
        )


if __name__ == "__main__":
    main()
