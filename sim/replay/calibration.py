"""The calibration of the commands' predictive interval and its check on held-out real runs.

:func:`calibration_cases` makes the cases :func:`sim.replay.spread.calibration_factor` turns into
:data:`sim.replay.spread.CALIBRATED`: on each shipped model's recordings (batch orders
:data:`sim.traces.real.RECORDINGS`), under the :data:`CALIBRATION_POLICIES`, each recording
alone predicts the exact replay of every other one, a batch order it did not see. The real runs
(batch orders :data:`sim.traces.real.CHECK_ORDERS`, under
:data:`sim.replay.measured.CHECKED_POLICIES`, and, under
:data:`sim.traces.real.HELD_OUT_POLICIES`, the more batch orders
:data:`sim.traces.real.HELD_OUT_ORDERS`; none of them in the calibration: neither their batch
order nor their policies) are held out: :func:`held_out_rows` puts the interval
(:func:`sim.replay.intervals.replay_intervals`) beside each one.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Dict, List, Mapping, Sequence, Union

import numpy as np

from sim.replay.bootstrap import bootstrap_metrics
from sim.replay.intervals import INTERVAL_METRICS, replay_intervals
from sim.replay.measured import CHECKED_POLICIES, MeasuredRun, run_path
from sim.replay.metrics import METRICS
from sim.replay.pool import TracePool
from sim.replay.run import simulate
from sim.traces.real import CHECK_ORDERS, HELD_OUT_ORDERS, HELD_OUT_POLICIES
from updater.policy import DynamicScale, HeadroomScale, StaticScale
from updater.policy.presets import PRESETS
from updater.trace import Trace

CALIBRATION_POLICIES = {
    "dynamic": PRESETS["dynamic"],
    "deepspeed": PRESETS["deepspeed"],
    "DynamicScale(growth_interval=25)": DynamicScale(growth_interval=25),
    "DynamicScale(growth_interval=200, hysteresis=2)": DynamicScale(
        growth_interval=200, hysteresis=2
    ),
    "HeadroomScale(margin=4)": HeadroomScale(margin=4.0),
    "StaticScale(2**14)": StaticScale(scale=2.0**14),
    "StaticScale(2**15)": StaticScale(scale=2.0**15),
}
"""The policies the factor is calibrated under: none of the held-out runs' policies."""


def _unit(metric: str, steps: int) -> float:
    return 1 / steps if METRICS[metric].kind == "share" else 1.0


def _range(values: Sequence[float]) -> float:
    return float(max(values) - min(values))


def calibration_cases(
    recordings: Mapping[str, Sequence[Trace]], seed: int = 0
) -> Dict[str, List[Dict[str, Any]]]:
    """Per metric of :data:`sim.replay.intervals.INTERVAL_METRICS`, one case per model, policy of
    :data:`CALIBRATION_POLICIES` and ordered pair of its recordings (module doc), as
    :func:`sim.replay.spread.calibration_factor` reads them; cases whose every value is 0 (no
    step overflowed: nothing to predict) are left out.

    Args:
        recordings (mapping model -> sequence of Trace): two or more recordings per model.
        seed (int, default 0): seed of the bootstrap.
    """
    out: Dict[str, List[Dict[str, Any]]] = {m: [] for m in INTERVAL_METRICS}
    for model, traces in recordings.items():
        for label, policy in CALIBRATION_POLICIES.items():
            exact = [simulate(policy, t, jitter=0.0, progress=False).metrics for t in traces]
            for i, trace in enumerate(traces):
                drawn = bootstrap_metrics(policy, [trace], INTERVAL_METRICS, seed)
                for j in range(len(traces)):
                    for metric in INTERVAL_METRICS if j != i else ():
                        case = {
                            "model": model,
                            "policy": label,
                            "value": float(exact[i][metric][0]),
                            "target": float(exact[j][metric][0]),
                            "drawn": drawn[metric],
                            "unit": _unit(metric, trace.steps),
                        }
                        if case["value"] or case["target"] or np.any(case["drawn"]):
                            out[metric].append(case)
    return out


def held_out_rows(
    recordings: Mapping[str, Sequence[Trace]],
    runs_dir: Union[str, Path],
    more_orders: Mapping[str, Sequence[int]] = HELD_OUT_ORDERS,
    seed: int = 0,
) -> List[Dict[str, Any]]:
    """The interval beside each held-out real run, from all recordings pooled and from each
    recording alone.

    Args:
        recordings (mapping model -> sequence of Trace): the recordings of each model.
        runs_dir (str or Path): where the real runs are (:func:`sim.replay.measured.run_path`):
            every checked policy's in :data:`sim.traces.real.CHECK_ORDERS`, and those of
            :data:`sim.traces.real.HELD_OUT_POLICIES` in ``more_orders`` too.
        more_orders (mapping model -> sequence of int, default
            :data:`sim.traces.real.HELD_OUT_ORDERS`): the further batch orders of each model
            (``{}``: none).
        seed (int, default 0): seed of the bootstrap.

    Returns:
        list of dict: ``model``, ``policy``, ``order``, ``metric``, ``from`` (which recordings:
        ``"all"`` or the recording's index), ``low``, ``high``, ``width``, ``measured``,
        ``inside``, ``orders_spread`` (the largest minus the smallest of the metric in the
        batch orders known: each recording's exact replay and the real runs') and
        ``runs_spread`` (the same over the real runs alone).
    """
    rows = []
    for model, traces in recordings.items():
        for label, policy in CHECKED_POLICIES.items():
            more = tuple(more_orders.get(model, ())) if label in HELD_OUT_POLICIES else ()
            orders = (*CHECK_ORDERS, *more)
            runs = [MeasuredRun.load(run_path(runs_dir, model, label, k)) for k in orders]
            measured = [r.metrics() for r in runs]
            sources = [("all", TracePool(traces))] + list(enumerate(traces)) * (len(traces) > 1)
            for source, trace in sources:
                intervals = replay_intervals(policy, trace, seed=seed)
                if source == "all":
                    each = {m: intervals[m]["each"] for m in intervals}
                for metric, iv in intervals.items():
                    known = [*each[metric], *(m[metric] for m in measured)]
                    for order, m in zip(orders, measured):
                        rows.append(
                            {
                                "model": model,
                                "policy": label,
                                "order": order,
                                "metric": metric,
                                "from": source,
                                "low": iv["low"],
                                "high": iv["high"],
                                "width": iv["high"] - iv["low"],
                                "measured": float(m[metric]),
                                "inside": iv["low"] <= m[metric] <= iv["high"],
                                "orders_spread": _range(known),
                                "runs_spread": _range([x[metric] for x in measured]),
                            }
                        )
    return rows
