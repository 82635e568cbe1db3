"""What nnabla's software float16 costs: seconds per training step in cpu:half against cpu:float.

nnabla's CPU has no float16 arithmetic: its ``cpu:half`` context emulates it in software, so a
step costs many times the same step in ``cpu:float``; this package adds little to either (see the
updater's cost in reports/benchmarks.md). Each model of the documentation is built in both
contexts and trained by ``DynamicLossScalingUpdater.update()``, the two alternated step by step
(``benchmarks.common.interleaved_blocks``) so the machine's load hits both alike; the report
gives the median seconds per step of each and their ratio. A GPU (``cudnn:half``) has float16
arithmetic and is not measured here.
"""

from __future__ import annotations

from typing import Dict, List

import numpy as np

BATCH = 32
MODELS = {
    "guide MLP 64-32-10": ([64, 32, 10], 1.0),
    "digits conv+BN (the shipped recording's model)": (None, 1.0),
    "MLP 784-512-512-10 (the performance page's)": ([784, 512, 512, 10], 0.2),
}
"""Label -> (the MLP's layer sizes, input first, or None for the conv net; the share of
``--steps`` timed): the guide's two-layer MLP (docs/snippets/model.md), the convolutional net
with BatchNormalization whose recording the simulator ships, and the MLP the updater's own
benchmarks time (its cpu:half steps take seconds: fewer are timed)."""


def _updater(sizes, context: str, seed: int = 0):
    """A ``DynamicLossScalingUpdater`` training the model of ``sizes`` (``MODELS``) in
    ``context``, with its own parameters."""
    import nnabla as nn
    import nnabla.functions as F
    import nnabla.solvers as S

    from benchmarks.common import mlp
    from sim.nnabla_studies.models import _conv_bn_net
    from updater import DynamicLossScalingUpdater, get_context

    rng = np.random.default_rng(seed)
    scope = f"bench_half/{sizes}/{context}"
    with nn.context_scope(get_context(context)), nn.parameter_scope(scope):
        shape = (BATCH, sizes[0]) if sizes else (BATCH, 1, 8, 8)
        x, t = nn.Variable(shape), nn.Variable((BATCH, 1))
        logits = mlp(x, sizes[1:], "mlp") if sizes else _conv_bn_net(x, True, seed)
        loss = F.mean(F.softmax_cross_entropy(logits, t))
        solver = S.Momentum(0.01, 0.9)
        solver.set_parameters(nn.get_parameters(grad_only=True))

    def feed():
        x.d = rng.standard_normal(shape)
        t.d = rng.integers(0, 10, t.shape)

    with nn.context_scope(get_context(context)):
        return DynamicLossScalingUpdater(solver, loss, feed)


def run(steps: int = 20, quick: bool = False) -> List[Dict]:
    """Per model, the median seconds per ``update()`` in cpu:float and cpu:half (its share of
    ``steps`` alternated steps each, at least 2, after one of warm-up); ``quick``: the models
    whose share is whole only (a smoke run of a few seconds)."""
    from benchmarks.common import interleaved_blocks

    rows = []
    for label, (sizes, share) in MODELS.items():
        if quick and share < 1:
            continue
        calls = {c: _updater(sizes, c).update for c in ("cpu:float", "cpu:half")}
        (median,) = interleaved_blocks(calls, max(2, round(steps * share)), blocks=1, warmup=1)
        rows.append({"model": label, "float": median["cpu:float"], "half": median["cpu:half"]})
    return rows


def markdown(rows: List[Dict]) -> str:
    from sim.tables import markdown_grid

    cells = [
        [r["model"], f"{r['float'] * 1e3:.2f} ms", f"{r['half']:.3f} s"]
        + [f"{r['half'] / r['float']:.0f}x"]
        for r in rows
    ]
    heads = ["model (batch 32)", "cpu:float per step", "cpu:half per step", "half / float"]
    return markdown_grid(heads, cells)


def _options(parser) -> None:
    parser.add_argument("--steps", type=int, default=20, help="timed steps per model and context")
    parser.add_argument("--quick", action="store_true", help="2 steps, the small models only")


def _text(args) -> str:
    from benchmarks.run_all import machine

    steps = 2 if args.quick else args.steps
    return f"Machine: {machine()}.\n\n" + markdown(run(steps, args.quick))


def _report(args) -> tuple:
    command = "python -m benchmarks.bench_half" + (" --quick" if args.quick else "")
    return "float16 on the CPU: cpu:half against cpu:float", command


def main(argv=None) -> None:
    """Print the benchmark as markdown (``--out FILE`` also writes it)."""
    from benchmarks.common import benchmark_main

    benchmark_main(argv, __doc__, _options, _text, _report)


if __name__ == "__main__":
    main()
