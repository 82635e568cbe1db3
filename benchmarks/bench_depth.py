"""Updater cost at real depth: how it grows with the number of parameter arrays.

A 64-wide MLP (batch 16, Momentum, cpu:float) with 22 to 302 parameter arrays, and a
convolutional net with BatchNormalization. Each variant trains :data:`COPIES` copies of the model
of its own (one copy's time moves by tens of microseconds with where its memory landed; each
copy builds the variants in an order of its own, so that no variant is always built in the same
place) on the same kind of data; the timed loop alternates every copy of every variant iteration
by iteration, each iteration in a seeded random order (a rotation would keep each variant right
behind the same other one, whose leftovers in the processor's caches would bias it alike in
every round), and reads CPU time (:func:`time.process_time`: other work on the machine does not
count); each cell is the mean over a variant's copies of their medians over interleaved
iterations, minus the bare loop's. At the goal's depth
(:data:`benchmarks.depth_goals.GOAL_DEPTH`) more copies, each timed over more iterations: there
"auto" and "nnabla", the same code on the CPU, differ by the bench's own noise (an A/A pair),
which the section prints as what the run resolves beside the goal's ratio
(:mod:`benchmarks.depth_goals`). The slope per parameter array is a least-squares line through
the four MLP depths. Also, in a separate pass that is not timed: the Python calls per update
inside ``updater/`` (:func:`benchmarks.common.python_calls`, as bench_calls counts them) and
the nnabla functions the device path runs per update
(:func:`updater.driver.flat.device_functions`) at each depth.

Run ``python -m benchmarks.bench_depth [--iters N] [--blocks N] [--copies N] [--goal-copies N]
[--depths ...]``;
it prints the markdown section (``python -m benchmarks.run_all`` writes it to the report).
"""

from __future__ import annotations

import argparse
import time

import numpy as np

from benchmarks.common import interleaved_blocks, python_calls
from benchmarks.depth_goals import (
    GOAL_BLOCKS,
    GOAL_COPIES,
    GOAL_DEPTH,
    a_a,
    a_a_text,
    goals_text,
    overheads,
)
from benchmarks.depth_models import bare, conv_bn, mlp
from sim.tables import markdown_grid

DEPTHS = (22, 102, 202, 302)
"""Parameter arrays of the MLPs: ``n / 2 - 1`` hidden 64-wide layers and the output layer."""
PATHS = ("auto", "numpy", "solver", "nnabla")
"""Our ``finite_check`` settings measured."""
VARIANTS = ("bare", "nnabla's", *PATHS)
COPIES = 3
"""Model copies per variant, each timed in turn: their mean cancels most of one copy's luck."""


def _steps(build, keep_skipped=False, copies=COPIES):
    """One training step per variant and copy, each copy a model of its own: ``({(variant,
    copy): step}, {path: our first copy's updater})``; ``keep_skipped`` adds "auto" with
    ``restore_on_skip=False`` (a skipped step's statistics are not copied). Copy by copy (a
    variant's copies lie apart in memory), each copy building the variants in an order rotated
    by its share of them: where a model lands moves its time by tens of microseconds, and a
    variant always built in the same place would keep that luck in every copy."""
    from nnabla.experimental.mixed_precision_training import (
        DynamicLossScalingUpdater as NnablaUpdater,
    )

    from updater import DynamicLossScalingUpdater

    def ours(**kwargs):
        return lambda: DynamicLossScalingUpdater(*build(), scale=8.0, **kwargs)

    makers = [
        ("bare", lambda: bare(*build())),
        ("nnabla's", lambda: NnablaUpdater(*build(), scale=8.0)),
    ]
    makers += [(path, ours(finite_check=path)) for path in PATHS]
    if keep_skipped:
        makers.append(("auto, restore_on_skip=False", ours(restore_on_skip=False)))
    built = {}
    for copy in range(copies):
        k = copy * len(makers) // copies
        for variant, make in makers[k:] + makers[:k]:
            built[variant, copy] = make()
    steps = {
        (variant, copy): built[variant, copy] if variant == "bare" else built[variant, copy].update
        for copy in range(copies)
        for variant, _ in makers
    }
    return steps, {path: built[path, 0] for path in PATHS}


def copy_medians(steps, iters, blocks, warmup=3, clock=time.process_time, shuffle=0):
    """Seconds per step of each copy of each variant of ``steps`` (``(variant, copy) ->
    step``): ``{variant: [per copy, its median over blocks of
    :func:`benchmarks.common.interleaved_blocks`]}`` (every copy of every variant interleaved,
    each round in an order drawn from the seed ``shuffle``, read by ``clock``)."""
    medians = interleaved_blocks(steps, iters, blocks, warmup, clock, shuffle)
    out: dict = {variant: [] for variant, _ in steps}
    for key in steps:
        out[key[0]].append(float(np.median([m[key] for m in medians])))
    return out


def interleaved(steps, iters, blocks, warmup=3, clock=time.process_time, shuffle=0):
    """Seconds per step of each variant of ``steps``: the mean over its copies of
    :func:`copy_medians`."""
    per_copy = copy_medians(steps, iters, blocks, warmup, clock, shuffle)
    return {v: float(np.mean(times)) for v, times in per_copy.items()}


def calls_per_update(steps, times=5):
    """Python calls inside ``updater/`` per step of each variant's first copy (an untimed pass
    under :func:`sys.setprofile`)."""
    return {v: python_calls(step, times) for (v, copy), step in steps.items() if not copy}


def depth_costs(iters=20, blocks=5, depths=DEPTHS, seed=0, copies=COPIES, goal_copies=GOAL_COPIES):
    """Per depth: seconds per step of each variant (:func:`interleaved`) and of each of its
    copies (:func:`copy_medians`), the copies and blocks timed (at :data:`GOAL_DEPTH`
    ``goal_copies`` copies and :data:`GOAL_BLOCKS` times the blocks), what "auto" chose, the
    Python calls per update inside ``updater/``, and the nnabla functions and host reads of the
    device path per update."""
    import nnabla as nn
    from nnabla.ext_utils import get_extension_context

    from updater.driver.arrays import host_reads
    from updater.driver.flat import device_functions

    nn.set_default_context(get_extension_context("cpu", type_config="float"))
    rng = np.random.default_rng(seed)
    out = {}
    for arrays in depths:
        goal = arrays == GOAL_DEPTH
        n, timed = (goal_copies, GOAL_BLOCKS * blocks) if goal else (copies, blocks)
        nn.clear_parameters()
        steps, ours = _steps(lambda arrays=arrays: mlp(arrays, rng), copies=n)
        per_copy = copy_medians(steps, iters, timed)
        calls = calls_per_update(steps)
        functions, reads = device_functions(), host_reads()
        for _ in range(5):
            ours["solver"].update()
        out[arrays] = {
            "seconds": {v: float(np.mean(times)) for v, times in per_copy.items()},
            "per_copy": per_copy,
            "copies": n,
            "blocks": timed,
            "auto": ours["auto"].finite_check,
            "calls": calls,
            "functions": (device_functions() - functions) / 5,
            "reads": (host_reads() - reads) / 5,
        }
    return out


def conv_costs(blocks=12, iters=15, rounds=7, seed=0, copies=COPIES):
    """Seconds per step of each variant on the convolutional net with BatchNormalization, and
    the host checks' own cost per update: the inputs (bad batches) and the running statistics,
    each one pass over them, timed alone."""
    import nnabla as nn
    from nnabla.ext_utils import get_extension_context

    from updater.driver.arrays import bad_indices

    nn.set_default_context(get_extension_context("cpu", type_config="float"))
    nn.clear_parameters()
    rng = np.random.default_rng(seed)
    steps, ours = _steps(lambda: conv_bn(blocks, rng), keep_skipped=True, copies=copies)
    seconds = interleaved(steps, iters, rounds)
    u = ours["numpy"]
    inputs = [v.data for v in u._rounds.inputs()]
    state = u._forward_state  # as the host paths read them
    checks = {}
    for name, check, arrays in (
        ("inputs", lambda: bad_indices(inputs), inputs),
        ("statistics", lambda: state.new_nonfinite(state.nonfinite_indices(), None), state.written),
        ("copy", lambda: u._forward_state.save("before"), u._forward_state.written),
    ):
        t0 = time.perf_counter()
        for _ in range(1000):
            check()
        checks[name] = (1e3 * (time.perf_counter() - t0), sum(a.size for a in arrays))
    return {
        "arrays": len(u.param_names),
        "seconds": seconds,
        "auto": ours["auto"].finite_check,
        "checks": checks,
        "blocks": blocks,
    }


def slopes(depth):
    """Microseconds per parameter array of each variant's overhead (least squares)."""
    xs = np.array(sorted(depth), float)
    return {
        n: float(np.polyfit(xs, [overheads(depth[a]["seconds"])[n] for a in sorted(depth)], 1)[0])
        for n in VARIANTS[1:]
    }


def run(
    quick=False, iters=None, blocks=None, copies=COPIES, depths=DEPTHS, goal_copies=GOAL_COPIES
):
    """Both measurements; ``quick`` a smoke run (two small depths, a few iterations), ``iters``
    and ``blocks`` (default 20 and 5, conv net 15 and 7) fewer iterations for a reduced run;
    ``copies`` per variant, at :data:`GOAL_DEPTH` ``goal_copies``."""
    if quick:
        return {
            "depth": depth_costs(4, 1, (22, 42), copies=copies, goal_copies=goal_copies),
            "conv": conv_costs(2, 4, 1, copies=copies),
            "copies": copies,
        }
    depth = depth_costs(iters or 20, blocks or 5, depths, copies=copies, goal_copies=goal_copies)
    conv = conv_costs(iters=iters or 15, rounds=blocks or 7, copies=copies)
    return {"depth": depth, "conv": conv, "copies": copies}


def _copies_text(depth) -> str:
    """How many copies each variant's mean is over, and how long they were timed, by depth."""
    counts = {(r["copies"], r["blocks"]) for r in depth.values()}
    least = min(counts)
    text = f"{least[0]} copies of the model"
    for arrays in sorted(depth):
        n, blocks = depth[arrays]["copies"], depth[arrays]["blocks"]
        if (n, blocks) != least:
            text += f" ({n} at {arrays} arrays, over {blocks / least[1]:g}x the iterations)"
    return text


def _cost_table(depth, variants) -> str:
    """The overheads over the bare loop by depth, with the A/A pair ("auto" - "nnabla", the
    same code on the CPU) as a share of nnabla's updater's overhead."""
    rows = []
    for arrays in sorted(depth):
        r = depth[arrays]
        cost = overheads(r["seconds"])
        pair = a_a(r)
        rows.append(
            [arrays, f"{1e3 * r['seconds']['bare']:.2f} ms"]
            + [f"{cost[n]:+.0f}" for n in VARIANTS[1:]]
            + [f"{cost['auto'] / cost[VARIANTS[1]]:.2f}x", r["auto"]]
            + ["-" if pair is None else f"{pair[0] / pair[2]:+.1%}"]
            + [f"{r['functions']:g} / {r['reads']:g}"]
        )
    heads = [
        "parameter arrays",
        "bare step",
        *variants,
        '"auto" / nnabla\'s overhead',
        '"auto" chose',
        'A/A: ("auto" - "nnabla") / nnabla\'s overhead',
        "device path: nnabla functions / host reads per update",
    ]
    return markdown_grid(heads, rows)


def _a_a_paragraph(depth) -> str:
    """What the A/A column means, and the pair at :data:`GOAL_DEPTH` in words."""
    text = (
        'A/A: where "auto" chose "nnabla" (on the CPU), the two run the same code, so their '
        "difference is this run's own noise: a ratio of overheads that differs by less than it "
        "is not resolved."
    )
    if GOAL_DEPTH in depth:
        text += f" At {GOAL_DEPTH} arrays: {a_a_text(depth[GOAL_DEPTH])}."
    return text


def markdown(res):
    depth, conv = res["depth"], res["conv"]
    variants = ["nnabla's updater", *(f'ours "{p}"' for p in PATHS)]
    lines = [
        "Cost per update over a bare `zero_grad/forward/backward/update` loop, in microseconds "
        "of CPU time (64-wide MLP, batch 16, Momentum, cpu:float; each variant the mean over "
        f"{_copies_text(depth)}, each building the variants in its own order, of their "
        "medians over iterations that run every copy of every variant in a random order):",
        "",
        _cost_table(depth, variants),
        "",
        _a_a_paragraph(depth),
        "",
        "Python calls per step inside `updater/` (`sys.setprofile`, a separate pass, not "
        "timed; the bare loop and nnabla's updater call none of ours, and `updater`'s moved "
        "module paths no longer answer nnabla's per-step import tries):",
        "",
        markdown_grid(
            ["parameter arrays", "bare step", *variants],
            [
                [arrays, *(f"{depth[arrays]['calls'][n]:g}" for n in VARIANTS)]
                for arrays in sorted(depth)
            ],
        ),
    ]
    lines.append("")
    if len(depth) > 1:  # a line needs two depths at least
        slope = slopes(depth)
        lines += [
            "Slope per parameter array (least squares over the depths above), microseconds:",
            "",
            markdown_grid(variants, [[f"{slope[n]:.2f}" for n in VARIANTS[1:]]]),
            "",
        ]
    cost = overheads(conv["seconds"])
    sec = conv["seconds"]
    restore = sec["auto"] / sec["auto, restore_on_skip=False"]
    (t_in, n_in), (t_st, n_st) = conv["checks"]["inputs"], conv["checks"]["statistics"]
    t_copy = conv["checks"]["copy"][0]
    lines += [
        f"Convolutional net with BatchNormalization ({conv['arrays']} parameter arrays, "
        f"{conv['blocks']} blocks of 3x3 convolution, BatchNormalization and ReLU on 8x8x16, "
        f"batch 16): bare step {1e3 * sec['bare']:.2f} ms; over it: "
        + ", ".join(f"{n} {cost[n]:+.0f} us" for n in VARIANTS[1:])
        + f' ("auto" chose "{conv["auto"]}"). Copying the {2 * conv["blocks"]} running '
        "statistics before each step so that a skipped step can put them back "
        f"(`restore_on_skip`, the default) costs {restore:.3f}x a step without the copy "
        f"(goal under 1.01x); the copy timed alone takes {t_copy:.1f} us per update, "
        f"{1e-6 * t_copy / sec['bare']:.2%} of the bare step. The host checks, timed alone: "
        "the inputs "
        f"({n_in:,} values) {t_in:.1f} us per update, the running statistics ({n_st:,} values) "
        f"{t_st:.1f} us; the device path reads both in its one graph.",
        "",
        goals_text(res),
    ]
    return "\n".join(lines)


def main(argv=None) -> None:
    """Print the section as markdown (``--iters`` and ``--blocks`` for a reduced run)."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="a smoke run: two small depths")
    parser.add_argument("--iters", type=int, help="iterations per block (default 20, conv 15)")
    parser.add_argument("--blocks", type=int, help="blocks (default 5, conv net 7)")
    parser.add_argument("--copies", type=int, default=COPIES, help="model copies per variant")
    parser.add_argument(
        "--goal-copies",
        type=int,
        default=GOAL_COPIES,
        help=f"model copies per variant at {GOAL_DEPTH} arrays",
    )
    parser.add_argument("--depths", type=int, nargs="+", default=list(DEPTHS))
    args = parser.parse_args(argv)
    depths = tuple(args.depths)
    res = run(args.quick, args.iters, args.blocks, args.copies, depths, args.goal_copies)
    print(markdown(res))


if __name__ == "__main__":
    main()
