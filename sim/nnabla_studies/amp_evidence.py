"""Evidence for :mod:`updater.amp`: the same small conv net with BatchNormalization trained on
scikit-learn's bundled 8x8 digits three ways, on the CPU:

1. ``float32``: built under ``cpu:float``; the updater with ``enabled=False``;
2. ``all-half``: built under ``cpu:half`` (every function in float16), with the updater;
3. ``rewrite``: built under ``cpu:float``, rebuilt by :func:`updater.amp.rewrite` with the
   default lists (convolutions, Affine, ReLU, pooling in half; BatchNormalization, the loss
   and its mean in float32), with the updater.

Two input scales: the pixel values as ``load_digits`` returns them (0 to 16), and scaled to
[0, 1] as :func:`sim.nnabla_studies.demo.load_data` gives them. Same seed, initial weights, batches
and steps for every variant. ``python -m sim.nnabla_studies.amp_evidence --out reports/amp.md``.
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path
from typing import Dict, List

import numpy as np

from sim.argtypes import positive_int, seed_int
from sim.nnabla_studies.demo import load_data
from sim.report.provenance import provenance
from sim.tables import markdown_table, with_percents
from updater.common.writing import write_text

INPUT_SCALES = (("0-16", 16.0), ("0-1", 1.0))
VARIANTS = ("float32", "all-half", "rewrite")
STEPS, BATCH, LEARNING_RATE, MOMENTUM = 50, 64, 0.05, 0.9
QUICK = {"steps": 3, "batch": 16, "test_size": 64}


def _net(x, test: bool, seed: int):
    """conv 3x3x16 - BN - ReLU - max pool - conv 3x3x32 - BN - ReLU - max pool - affine 10."""
    import nnabla.functions as F
    import nnabla.initializer as I
    import nnabla.parametric_functions as PF

    rng = np.random.RandomState(seed)

    def init(fan_in):
        return I.NormalInitializer(np.sqrt(2.0 / fan_in), rng=rng)

    h = x
    for i, (maps, fan_in) in enumerate(((16, 9), (32, 144)), 1):
        h = PF.convolution(
            h, maps, (3, 3), pad=(1, 1), with_bias=False, w_init=init(fan_in), name=f"conv{i}"
        )
        h = PF.batch_normalization(h, batch_stat=not test, name=f"bn{i}")
        h = F.max_pooling(F.relu(h), (2, 2))
    return PF.affine(h, 10, w_init=init(64), name="fc")


def train(variant: str, scale: float, steps: int, batch: int, seed: int, test_size=None) -> Dict:
    """Train one variant; returns its row (accuracy, final loss, skipped steps, half share,
    seconds) and the rewritten graph's precision table under ``"table"``."""
    import nnabla as nn
    import nnabla.functions as F
    import nnabla.solvers as S
    from tqdm import tqdm

    from updater import DynamicLossScalingUpdater, amp, get_context

    x_train, y_train, x_test, y_test = load_data(seed)
    x_train = x_train.reshape(-1, 1, 8, 8) * scale
    x_test, y_test = x_test[:test_size].reshape(-1, 1, 8, 8) * scale, y_test[:test_size]
    scope = f"amp_evidence/{variant}"
    with nn.parameter_scope(scope):
        nn.clear_parameters()
        with nn.context_scope(get_context("cpu:half" if variant == "all-half" else "cpu:float")):
            x, t = nn.Variable((batch, 1, 8, 8)), nn.Variable((batch, 1))
            loss = F.mean(F.softmax_cross_entropy(_net(x, False, seed), t))
            x_eval = nn.Variable(x_test.shape)
            logits = _net(x_eval, True, seed)
        if variant == "rewrite":
            loss, logits = amp.rewrite([loss, logits], context=get_context("cpu:half"))
        solver = S.Momentum(LEARNING_RATE, MOMENTUM)
        solver.set_parameters(nn.get_parameters())
    order = np.random.RandomState(seed + 1)

    def feed():
        idx = order.randint(0, len(x_train), batch)
        x.d, t.d = x_train[idx], y_train[idx, None]

    updater = DynamicLossScalingUpdater(
        solver, loss, feed, enabled=variant != "float32", max_consecutive_nonfinite=steps + 1
    )
    losses = []
    start = time.perf_counter()
    for _ in tqdm(range(steps), desc=f"{variant} x{scale:g}", disable=None, leave=False):
        updater.update()
        losses.append(float(loss.d))
    seconds = time.perf_counter() - start
    x_eval.d = x_test
    logits.forward(clear_buffer=True)
    with nn.parameter_scope(scope):
        variances = [v.d for k, v in nn.get_parameters(grad_only=False).items() if "var" in k]
        nn.clear_parameters()
    return {
        "variant": variant,
        "accuracy": float(np.mean(logits.d.argmax(axis=1) == y_test)),
        "final_loss": float(np.mean(losses[-10:])),
        "skipped": updater.skips,
        "stats_finite": bool(all(np.isfinite(v).all() for v in variances)),
        "half_share": amp.half_share(loss),
        "seconds": seconds,
        "table": amp.precision_table(loss),
    }


def run(steps: int = STEPS, batch: int = BATCH, seed: int = 0, test_size=None) -> List[Dict]:
    """Every variant at every input scale; one row each (with ``"inputs"``)."""
    return [
        {"inputs": name, **train(variant, scale, steps, batch, seed, test_size)}
        for name, scale in INPUT_SCALES
        for variant in VARIANTS
    ]


TABLE_COLUMNS = {
    "inputs": "inputs",
    "variant": "variant",
    "accuracy": "test accuracy",
    "final_loss": "final loss",
    "skipped": "skipped steps",
    "stats_finite": "BN running statistics finite",
    "half_share": "multiply-adds in half",
    "seconds": "training time (s)",
}
"""The columns of :func:`format_table` and their headers."""


def format_table(rows: List[Dict]) -> str:
    """The rows of :func:`run` as a markdown table (:mod:`sim.tables`)."""
    cells = [
        {
            **r,
            "final_loss": f"{r['final_loss']:.4f}",
            "stats_finite": "yes" if r["stats_finite"] else "no",
            "seconds": f"{r['seconds']:.1f}",
        }
        for r in with_percents(rows, ["accuracy", "half_share"])
    ]
    return markdown_table(cells, list(TABLE_COLUMNS), list(TABLE_COLUMNS.values()))


def format_report(rows: List[Dict], command: str, made_with: str, settings: str) -> str:
    rewrite = next(r for r in rows if r["variant"] == "rewrite")
    return f"""# Mixed-precision rewrite (updater.amp) against all-half and float32

Generated by `{command}` with {made_with}: {settings}

- Model: two 3x3 convolutions (16 and 32 maps, no bias), each followed by BatchNormalization,
  ReLU and 2x2 max pooling, then an affine layer to 10 classes; mean softmax cross-entropy;
  Momentum({LEARNING_RATE}, {MOMENTUM}). Data: scikit-learn's bundled 8x8 digits (1438
  training, 359 test images), with the pixel values as `load_digits` returns them (0-16) or
  scaled to [0, 1]. The same seed gives every variant the same initial weights and batches.
- `float32`: built under `cpu:float`, the updater with `enabled=False`. `all-half`: built under
  `cpu:half` (nnabla's `type_config="half"`: every function in float16). `rewrite`: built under
  `cpu:float`, then `updater.amp.rewrite` with the default lists. Both half variants train with
  `DynamicLossScalingUpdater` (default `DynamicScale()`), allowed to skip every step
  (`max_consecutive_nonfinite=steps+1`).
- Final loss: mean training loss of the last 10 steps. Test accuracy: the test graph
  (BatchNormalization with its running statistics) in the training graph's precision; one
  seed, so a point of accuracy is 3 to 4 of the 359 test images.

{format_table(rows)}

nnabla's CPU half kernels are software float16 and accumulate sums in float16: on this CPU the
rewrite is not faster, and the time column is wall time on a shared 2-core machine, not a
benchmark. The multiply-adds in half are the work a GPU would run on its float16 units. The
CUDA and cuDNN contexts were not run here (no GPU).

The rewritten training graph (`updater.amp.precision_table`):

{rewrite["table"]}
"""


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m sim.nnabla_studies.amp_evidence",
        description="Train a small conv net with BatchNormalization on scikit-learn's 8x8 "
        "digits three ways on the CPU (float32; all-half: cpu:half everywhere; rewrite: "
        "updater.amp.rewrite of the float32 graph), at two input scales (the 0-16 pixel "
        "values and [0, 1]), and write a markdown report. About 3 minutes on 2 cores "
        "(cpu:half is software float16); --quick takes seconds.",
    )
    parser.add_argument("--out", default="reports/amp.md", help="report (default %(default)s)")
    parser.add_argument("--steps", type=positive_int, default=STEPS, help="default %(default)s")
    parser.add_argument("--batch", type=positive_int, default=BATCH, help="default %(default)s")
    parser.add_argument("--seed", type=seed_int, default=0, help="default %(default)s")
    parser.add_argument(
        "--force", action="store_true", help="replace an --out file dls did not write"
    )
    parser.add_argument(
        "--quick",
        action="store_true",
        help=f"{QUICK['steps']} steps, batch {QUICK['batch']}, {QUICK['test_size']} test images",
    )
    args = parser.parse_args(argv)
    size = None
    if args.quick:
        args.steps, args.batch, size = QUICK["steps"], QUICK["batch"], QUICK["test_size"]
    rows = run(args.steps, args.batch, args.seed, size)
    print(format_table(rows))
    command = "python -m sim.nnabla_studies.amp_evidence --out " + str(args.out)
    command += " --quick" if args.quick else f" --steps {args.steps} --batch {args.batch}"
    settings = f"{args.steps} steps of batch {args.batch}, seed {args.seed}" + (
        f", the first {size} test images." if size else "."
    )
    text = format_report(rows, command + f" --seed {args.seed}", provenance(args.out), settings)
    write_text(Path(args.out), text, overwrite=args.force)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
