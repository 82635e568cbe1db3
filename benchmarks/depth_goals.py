"""The goals of :mod:`benchmarks.bench_depth` and what the bench resolves: the overheads over the
bare loop, the A/A difference of two names of the same code, and the goals' verdicts with it.

On the CPU "auto" picks the "nnabla" path, so the two run the same code; whatever their times
differ by in one run is the bench's own noise (an A/A comparison). A goal whose margin is
smaller than that difference, or than twice its standard error from the spread of the model
copies, is not resolved by the run, met or not.
"""

from __future__ import annotations

import numpy as np

GOAL_DEPTH = 202
"""At this depth ours "auto" and "solver" cost at most nnabla's updater's overhead times
:data:`GOAL_RATIO`; on the conv net ours ("auto") at most nnabla's overhead plus the
forward-state copy timed alone (issue 42)."""
GOAL_RATIO = 1.25
"""Most of nnabla's updater's overhead that ours may add at :data:`GOAL_DEPTH` (issue 51)."""
GOAL_COPIES = 8
"""Model copies per variant at :data:`GOAL_DEPTH` (fewer elsewhere): its A/A difference stays
within a few percent of nnabla's updater's overhead, so that the goal's margin is resolved."""
GOAL_BLOCKS = 2
"""At :data:`GOAL_DEPTH`, this many times the blocks of interleaved iterations of the other
depths."""


def overheads(seconds) -> dict:
    """Microseconds per step over the bare loop, per variant."""
    return {n: 1e6 * (s - seconds["bare"]) for n, s in seconds.items() if n != "bare"}


def same_code(depth_row) -> bool:
    """Whether "auto" ran the "nnabla" path at this depth (a row of
    :func:`benchmarks.bench_depth.depth_costs`): then the two are an A/A pair."""
    return depth_row["auto"] == "nnabla"


def a_a(depth_row):
    """The A/A pair of a depth: ``("auto" - "nnabla" in us, standard error of that difference
    in us from the spread of the copies, nnabla's updater's overhead in us)``; the error is
    None with a single copy. None when "auto" chose another path."""
    if not same_code(depth_row):
        return None
    cost = overheads(depth_row["seconds"])
    copies = depth_row["per_copy"]
    spread = [np.var(copies[n], ddof=1) / len(copies[n]) for n in ("auto", "nnabla")]
    error = 1e6 * float(np.sqrt(sum(spread))) if len(copies["auto"]) > 1 else None
    return cost["auto"] - cost["nnabla"], error, cost["nnabla's"]


def a_a_text(depth_row) -> str:
    """The A/A pair of a depth in words: the difference as a share of nnabla's updater's
    overhead, with the copies' standard error."""
    pair = a_a(depth_row)
    if pair is None:
        return f'no A/A pair: "auto" chose "{depth_row["auto"]}", not "nnabla"'
    diff, error, theirs = pair
    text = f'"auto" - "nnabla" (the same code) {diff:+.0f} us, {diff / theirs:+.1%} of nnabla\'s'
    if error is not None:
        text += f" (standard error of the difference from the copies {error / theirs:.1%})"
    return text


def resolution(depth_row) -> float | None:
    """What a run resolves at a depth, as a share of nnabla's updater's overhead: the larger of
    its A/A difference and twice that difference's standard error (:func:`a_a`); None without
    an A/A pair."""
    pair = a_a(depth_row)
    if pair is None:
        return None
    diff, error, theirs = pair
    return max(abs(diff), 2 * (error or 0.0)) / theirs


def _ratio_goal(depth_row, path: str) -> str:
    """The goal of ``path`` at :data:`GOAL_DEPTH`, its ratio beside what the run resolves."""
    cost = overheads(depth_row["seconds"])
    theirs = cost["nnabla's"]
    ratio = cost[path] / theirs
    met = "met" if ratio <= GOAL_RATIO else "not met"
    text = (
        f'{GOAL_DEPTH} arrays, "{path}" {cost[path]:+.0f} us against nnabla\'s {theirs:+.0f} us: '
        f"{ratio:.2f}x its overhead (goal at most {GOAL_RATIO:g}x): {met}"
    )
    resolves = resolution(depth_row)
    if resolves is None:
        return text
    margin = abs(ratio - GOAL_RATIO)
    verdict = "resolved" if margin > resolves else "not resolved"
    return f"{text}, {margin:.2f}x from the goal, the run resolving {resolves:.2f}x: {verdict}"


def goals_text(res) -> str:
    """The goals of :data:`GOAL_DEPTH`, each with its numbers, whether this run met it and
    whether its margin is wider than the run's A/A difference; the conv net's goal."""
    parts = []
    if GOAL_DEPTH in res["depth"]:
        parts += [_ratio_goal(res["depth"][GOAL_DEPTH], path) for path in ("auto", "solver")]
    conv = res["conv"]
    cost = overheads(conv["seconds"])
    theirs = cost["nnabla's"]
    copy = conv["checks"]["copy"][0]  # microseconds per update
    limit = theirs + copy
    met = "met" if cost["auto"] <= limit else "not met"
    parts.append(
        f'conv net, "auto" {cost["auto"]:+.0f} us against at most {limit:+.0f} us '
        f"(nnabla's {theirs:+.0f} us plus the copy, {copy:.1f} us): {met}"
    )
    return "Goals at depth (one interleaved run): " + "; ".join(parts) + "."
