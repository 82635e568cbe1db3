"""End-to-end demo: float16 training on scikit-learn's bundled 8x8 digits, four ways.

The same small MLP (64-64-10, ReLU, momentum SGD) trains on the same batches as

1. ``float32``: nnabla ``cpu:float``, a plain loop;
2. ``float16, no scaling``: ``cpu:half``, a plain loop;
3. ``float16 + nnabla updater``: ``cpu:half`` with
   ``nnabla.experimental.mixed_precision_training.DynamicLossScalingUpdater``;
4. ``float16 + this updater``: ``cpu:half`` with :class:`updater.DynamicLossScalingUpdater`,
   given the same ``scale``/``scaling_factor``/``N`` as nnabla's.

The loss is ``loss_weight * mean cross-entropy`` with ``loss_weight = 2**-19`` by default (as
when a loss is averaged over 2**19 elements or down-weighted in a sum of losses) and the learning
rate is divided by the same weight, so float32 trains exactly as an ordinary run. With a batch of
32 the backward pass then starts from 2**-24 per example, float16's smallest subnormal: without
scaling almost every gradient value flushes to zero and the model does not learn; loss scaling
brings them back. ``loss_weight=2**-18`` shows a partial loss instead (about 85% flushed, a point
or two of accuracy).

"Flushed" is measured directly: every few steps, the same parameters and a fixed probe batch go
through a float32 copy of the graph and through the variant's graph at the variant's current
scale; the share of gradient values that are nonzero in float32 but exactly zero in the variant
is averaged over the probes.
"""

from __future__ import annotations

import math
import time
from pathlib import Path
from typing import Dict, List, Union

import numpy as np

from sim.nnabla_studies.demo_graphs import flushed_share, variant_graphs
from sim.tables import markdown_table, terminal_table, with_percents
from updater.common.float16 import FP16_MAX
from updater.common.validation import check_int, check_positive

LOSS_WEIGHT = 2.0**-19
PLOT_NAME = "train_scale_trajectory.png"

VARIANTS = (
    ("float32", "float32"),
    ("fp16_plain", "float16, no scaling"),
    ("fp16_nnabla", "float16 + nnabla updater"),
    ("fp16_ours", "float16 + this updater"),
)


def load_data(seed: int = 0):
    """Digits scaled to [0, 1], split 80/20 by a seeded permutation.

    Args:
        seed (int, default 0): split seed.

    Returns:
        ``(x_train, y_train, x_test, y_test)`` as float32 / int arrays.
    """
    try:
        from sklearn.datasets import load_digits
    except ImportError as e:
        raise ImportError(
            "the digits demo needs scikit-learn (its bundled 8x8 digits): "
            "pip install 'nnabla-dls[demo]'"
        ) from e

    x, y = load_digits(return_X_y=True)
    x = (x / 16.0).astype(np.float32)
    order = np.random.RandomState(seed).permutation(len(x))
    n_test = len(x) // 5
    test, train = order[:n_test], order[n_test:]
    return x[train], y[train], x[test], y[test]


def _train_variant(key, data, steps, seed, progress, probe_every, loss_weight, contexts) -> Dict:
    """Train one variant (:data:`VARIANTS`) for ``steps`` steps; its row of the table, with its
    scale trajectory and skipped steps."""
    import nnabla as nn
    from tqdm import tqdm

    g = variant_graphs(key, data, seed, loss_weight, contexts)
    x_test, y_test = data[2], data[3]
    solver, loss, feed, updater, scope = g.solver, g.loss, g.feed, g.updater, g.scope

    def current_scale():
        return 1.0 if updater is None else float(updater.scale)

    scales, skipped_at, flushed = [], [], []
    seconds = 0.0
    label = dict(VARIANTS)[key]
    if hasattr(progress, "bar"):  # a stage reporter (dls train's): bars only on a terminal
        step_loop = progress.bar(range(steps), steps, label)
    else:
        step_loop = tqdm(range(steps), desc=f"{label:26s}", disable=not progress, leave=True)
    for step in step_loop:
        if step % probe_every == 0:
            flushed.append(flushed_share(g, key, current_scale()))
        calls_before = feed.calls
        start = time.perf_counter()
        if updater is None:
            feed()
            solver.zero_grad()
            loss.forward(clear_no_need_grad=True)
            loss.backward(1.0, clear_buffer=True)
            solver.update()
        else:
            record = updater.update()
        seconds += time.perf_counter() - start
        if key == "fp16_ours" and not record.update_applied:
            skipped_at.append(step)
        elif key == "fp16_nnabla" and feed.calls - calls_before > 1:
            skipped_at.append(step)
        scales.append(current_scale())

    g.x_eval.d = x_test
    g.y_eval.forward(clear_buffer=True)
    accuracy = float(np.mean(g.y_eval.d.argmax(axis=1) == y_test))
    if key == "fp16_ours":
        skipped = updater.skips
    elif key == "fp16_nnabla":
        skipped = feed.calls - steps  # each overflow dropped one batch and re-fed another
    else:
        skipped = 0  # plain loops never skip (they apply whatever they computed)
    with nn.parameter_scope(scope):
        nn.clear_parameters()
    return {
        "variant": label,
        "test_accuracy": accuracy,
        "skipped_steps": int(skipped),
        "batches": int(feed.calls),
        "seconds": seconds,
        "flushed_share": float(np.mean(flushed)) if flushed else float("nan"),
        "final_scale": current_scale(),
        "_scales": scales,
        "_skipped_at": skipped_at,
    }


def plot_scale_trajectories(
    rows: List[Dict], path: Union[str, Path, None], ax=None, overwrite: bool = False
):
    """Draw log2(loss scale) against step for the rows that have a scale trajectory.

    Args:
        rows (list of dict): rows from :func:`run_comparison` run in this process (they carry
            ``_scales`` and ``_skipped_at``).
        path (str or Path or None): PNG to write; None writes nothing.
        ax (matplotlib Axes or None, default None): draw into this axes; a new figure if None.
        overwrite (bool, default False): replace a file at ``path`` dls did not write.

    Returns:
        matplotlib.figure.Figure: the figure drawn (built directly: no pyplot, no backend
        switch).
    """
    from matplotlib.ticker import MultipleLocator

    from sim.plots.common import log2_ticks, new_axes, save_figure
    from sim.plots.style import OVERFLOW, POLICY_LOOKS

    fig, ax = new_axes(ax, (8, 4.5))
    looks = {
        "float16 + nnabla updater": POLICY_LOOKS["nnabla-legacy"],
        "float16 + this updater": POLICY_LOOKS["dynamic"],
    }
    for row in rows:
        if row["variant"] not in looks:
            continue
        look = looks[row["variant"]]
        log2 = np.log2(np.asarray(row["_scales"], dtype=np.float64))
        steps = np.arange(1, len(log2) + 1)
        ax.step(
            steps, log2, where="post", color=look.color, ls=look.ls, lw=1.6, label=row["variant"]
        )
        if row["_skipped_at"]:
            at = np.asarray(row["_skipped_at"])
            what = "batch dropped, new one fed" if "nnabla" in row["variant"] else "step skipped"
            ax.plot(
                at + 1,
                log2[at],
                OVERFLOW.marker,
                color=look.color,
                ms=7,
                mfc="none",
                label=f"overflow, {row['variant']} ({what})",
            )
    top = math.log2(FP16_MAX)  # 15.9993: on this axis it sits on 16, so the label says so
    ax.axhline(top, color="0.4", linewidth=1, linestyle=":")
    ax.text(
        0.01,
        top - 0.08,
        f"float16 max 65504 = $2^{{{top:.4f}}}$ ($2^{{16}}$ is inf)",
        transform=ax.get_yaxis_transform(),
        color="0.3",
        fontsize=8,
        va="top",
    )
    ax.yaxis.set_major_locator(MultipleLocator(1))
    ax.yaxis.set_major_formatter(log2_ticks())
    ax.set_xlabel("training step (update() call, 1 = first)")
    ax.set_ylabel("loss scale after the step")
    ax.set_title("Loss scale while training on 8x8 digits in cpu:half")
    ax.legend(loc="lower right", fontsize=8)
    ax.grid(True, alpha=0.3)
    if path is not None:
        save_figure(fig, path, overwrite=overwrite)
    return fig


def run_comparison(
    steps: int = 600,
    seed: int = 0,
    out_dir: Union[str, Path, None] = "reports",
    progress: bool = True,
    probe_every: int | None = None,
    loss_weight: float = LOSS_WEIGHT,
    overwrite: bool = False,
) -> List[Dict]:
    """Train the digits MLP four ways and return one row per variant.

    Args:
        steps (int, default 600): training steps (``update()`` calls) per variant, >= 1;
            600 takes about a minute on two CPU cores (cpu:half is emulated and slow).
        seed (int, default 0): seed for the split, the initial weights and the batch order.
        out_dir (str or Path or None, default "reports"): folder for the scale-trajectory PNG
            (``train_scale_trajectory.png``; created if missing); None writes nothing.
        progress (bool or reporter, default True): show tqdm progress bars; or a stage
            reporter with ``start``/``stage``/``bar`` (``dls train``'s: named stages, status
            lines when stderr is not a terminal).
        probe_every (int or None, default None): steps between flushed-gradient probes, >= 1;
            None means ``max(1, steps // 30)``.
        loss_weight (float, default 2**-19): multiplier of the loss (the learning rate is
            divided by it), finite and > 0.
        overwrite (bool, default False): replace a PNG at the plot's path that dls did not
            write (:func:`updater.common.writing.write_file`).

    Returns:
        list of dict, one per variant with keys ``variant`` (str), ``test_accuracy`` (0..1),
        ``skipped_steps``, ``batches`` (data batches consumed), ``seconds`` (training time,
        probes and evaluation excluded), ``flushed_share`` (mean share of gradient values
        nonzero in float32 but zero in the variant), ``final_scale``; plus ``_scales`` and
        ``_skipped_at`` (per-step trajectory, for plotting).
    """
    steps = check_int("steps", steps, 1)
    seed = check_int("seed", seed, 0, 2**32 - 1)  # NumPy's RandomState takes no more
    probe_every = check_int("probe_every", probe_every, 1, none_ok=True) or max(1, steps // 30)
    loss_weight = check_positive("loss_weight", loss_weight)
    if out_dir is not None:  # a bad output folder fails now, not after the training
        Path(out_dir).mkdir(parents=True, exist_ok=True)
    data = load_data(seed)
    if hasattr(progress, "stage"):  # a stage reporter (dls train's): one stage per variant
        progress.start(len(VARIANTS))
    from updater import get_context

    contexts = {kind: get_context(kind) for kind in ("cpu:half", "cpu:float")}  # logged once
    rows = []
    for key, label in VARIANTS:
        if hasattr(progress, "stage"):
            progress.stage(f"{label}: {steps} steps")
        rows.append(
            _train_variant(
                key, data, steps, seed, progress, probe_every, float(loss_weight), contexts
            )
        )
    if out_dir is not None:
        out = Path(out_dir)
        out.mkdir(parents=True, exist_ok=True)
        plot_scale_trajectories(rows, out / PLOT_NAME, overwrite=overwrite)
    return rows


TABLE_COLUMNS = {
    "variant": "variant",
    "test_accuracy": "test accuracy",
    "skipped_steps": "skipped steps",
    "batches": "batches consumed",
    "seconds": "time (s)",
    "flushed_share": "gradients flushed to zero",
    "final_scale": "final scale",
}
"""The columns of :func:`format_table` and their headers."""


TABLE_LEGEND = (
    "legend: test accuracy = share of the test set classified right, %; gradients flushed to "
    "zero = share of gradient values nonzero in float32 but zero in the variant, %; time (s) = "
    "wall time of the training steps on this machine (terminal only, not in train.md)"
)
"""The legend line under the terminal table."""


def format_table(rows: List[Dict], terminal: bool = False) -> str:
    """Render rows from :func:`run_comparison` as a markdown table (:mod:`sim.tables`), or for
    a terminal (with the wall times and :data:`TABLE_LEGEND`); markdown leaves the wall times
    out, so a rerun writes the same file."""
    columns = {k: v for k, v in TABLE_COLUMNS.items() if terminal or k != "seconds"}
    cells = [
        {**r, "seconds": f"{r['seconds']:.1f}"}
        for r in with_percents(rows, ["test_accuracy", "flushed_share"])
    ]
    if terminal:
        return terminal_table(cells, list(columns), list(columns.values())) + "\n" + TABLE_LEGEND
    return markdown_table(cells, list(columns), list(columns.values()))
