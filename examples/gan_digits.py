"""GAN-style float16 training: two losses, two solvers, one loss-scaling updater per loss.

A tiny generator G (16-d Gaussian noise -> 64 ReLU -> 64 pixels, sigmoid: an 8x8 image in
[0, 1]) and discriminator D (64 pixels -> 32 leaky ReLU -> 1 logit) train against each other on
scikit-learn's bundled 8x8 digits (scaled to [0, 1]) in nnabla's ``cpu:half`` context (real
float16 arithmetic), with Adam (beta1 0.5) for each. Each iteration is one D step, then one G
step::

    python examples/gan_digits.py --steps 400 --seed 0
    python examples/gan_digits.py --policy headroom   # also prints each loss's |grad| max

Why one ``DynamicLossScalingUpdater`` per loss, each with its own scale, and not a shared one:

- There is no single loss to scale. D's loss and G's loss are minimised by different solvers
  over disjoint parameters; summing them into one loss over one solver would be wrong for a
  GAN (D would also descend G's loss). Each updater checks, unscales and applies exactly the
  gradients of its own solver's parameters.
- Their gradients differ in size and overflow at different times. D's reach its weights
  straight from its loss; G's come back through D's input Jacobian and G's own layers. With
  ``--policy headroom`` on this example (seed 0, 300 steps) the median unscaled largest
  |gradient| was about 0.5 for D and 0.11 for G, so D has a quarter of G's float16 headroom.
  With the default policy (seed 0, 400 steps) D's updater overflowed once, at step 54, and
  halved its scale to 2**14; G's stayed at 2**15 and never skipped. A shared scale would have
  to sit below the smaller headroom of the two at every step.
- An overflow skips only its own loss's step. When D's backward overflows, D's step is
  skipped and D's scale halves, while G still updates that iteration at its own unchanged
  scale. A shared scale would have to skip both steps to keep them in step with each other.

How the two graphs share parameters (as nnabla's DCGAN example does):

- D's loss sees the fake images through ``fake.get_unlinked_variable(need_grad=False)``: the
  same buffer, cut from G's graph, so D's backward never reaches G's parameters. D's data
  feeder draws the noise and runs ``fake.forward()`` itself, because G's step, which ran
  last, freed and reused that buffer (``clear_buffer=True``).
- G's loss is built through D (``D(G(z))``, D's parameters shared by name), so G's backward
  also *accumulates* gradients, at G's scale, into D's parameters. They are never applied:
  G's solver holds only G's parameters (G's updater checks, unscales and steps only those), and
  D's next ``update()`` starts with ``solver_d.zero_grad()``, which discards them, even
  inf/NaN ones. ``tests/examples/test_gan_example.py`` checks both.

Printed: the final losses, each updater's skipped steps, overflows and scale changes, and the
samples' mean, std and RMS distance of their per-pixel mean to the data's, at step 0 and at the
end. For scale, on that distance: the data's mean intensity on every pixel scores 0.26; one
digit class drawn perfectly 0.10-0.21 (by class); the untrained G 0.34 (seed 0).
"""

from __future__ import annotations

import argparse
import math
import sys
import time
from types import SimpleNamespace
from typing import Dict

import numpy as np

NOISE = 16
PIXELS = 64
HIDDEN_G = 64
HIDDEN_D = 32
EVAL_SAMPLES = 512
SCOPE = "gan_digits"
"""Parameter scope of everything this example creates (``gan_digits/gen/...``, ``.../dis/...``)."""


def load_images() -> np.ndarray:
    """All 1797 bundled 8x8 digits as a (1797, 64) float32 array scaled to [0, 1]."""
    try:
        from sklearn.datasets import load_digits
    except ImportError as e:
        raise ImportError(
            "this example needs scikit-learn for its bundled digits: pip install scikit-learn"
        ) from e
    return (load_digits().data / 16.0).astype(np.float32)


def generator(z, rng=None):
    """G: noise (batch, 16) -> (batch, 64) pixels in (0, 1); parameters under ``gen/``.

    ``rng`` (numpy RandomState) seeds the weights when they are created (first call).
    """
    import nnabla as nn
    import nnabla.functions as F
    import nnabla.initializer as I
    import nnabla.parametric_functions as PF

    with nn.parameter_scope("gen"):
        w1 = I.NormalInitializer(math.sqrt(2.0 / NOISE), rng=rng)
        w2 = I.NormalInitializer(math.sqrt(1.0 / HIDDEN_G), rng=rng)
        h = F.relu(PF.affine(z, HIDDEN_G, w_init=w1, name="fc1"))
        return F.sigmoid(PF.affine(h, PIXELS, w_init=w2, name="fc2"))


def discriminator(x, rng=None):
    """D: (batch, 64) pixels -> (batch, 1) logit of "real"; parameters under ``dis/``.

    ``rng`` (numpy RandomState) seeds the weights when they are created (first call).
    """
    import nnabla as nn
    import nnabla.functions as F
    import nnabla.initializer as I
    import nnabla.parametric_functions as PF

    with nn.parameter_scope("dis"):
        w1 = I.NormalInitializer(math.sqrt(2.0 / PIXELS), rng=rng)
        w2 = I.NormalInitializer(math.sqrt(1.0 / HIDDEN_D), rng=rng)
        h = F.leaky_relu(PF.affine(x, HIDDEN_D, w_init=w1, name="fc1"), 0.2)
        return PF.affine(h, 1, w_init=w2, name="fc2")


def sample_stats(samples: np.ndarray, data_mean: np.ndarray) -> Dict[str, float]:
    """Mean and std of all pixel values, and ``distance``: the RMS over the 64 pixels of the
    difference between the samples' per-pixel mean and ``data_mean`` (shape (64,))."""
    samples = np.asarray(samples, dtype=np.float64)
    distance = float(np.sqrt(np.mean((samples.mean(axis=0) - data_mean) ** 2)))
    return {"mean": float(samples.mean()), "std": float(samples.std()), "distance": distance}


def _check_int(name, value, low):
    if not isinstance(value, int) or isinstance(value, bool):
        raise TypeError(f"{name} must be an int >= {low}, got {value!r}")
    if value < low:
        raise ValueError(f"{name} must be an int >= {low}, got {value!r}")
    return value


def clear_parameters() -> None:
    """Remove every parameter this example registered (the ``gan_digits`` scope)."""
    import nnabla as nn

    with nn.parameter_scope(SCOPE):
        nn.clear_parameters()


def build(
    seed: int = 0,
    batch: int = 32,
    lr: float = 1e-2,
    policy="dynamic",
    context: str = "cpu:half",
) -> SimpleNamespace:
    """Build both graphs, both solvers and the two updaters (parameters cleared first).

    Args:
        seed (int, default 0): seed of the weights (``seed``), of the batches and noise
            (``seed + 1``) and of the fixed evaluation noise (``seed + 2``), >= 0.
        batch (int, default 32): real and fake images per step, >= 1.
        lr (float, default 1e-2): Adam learning rate of both solvers (beta1 0.5), > 0.
        policy (str or policy, default "dynamic"): a preset name for
            :func:`updater.make_policy` (``"dynamic"``: ``DynamicScale()``, start 2**15) or a
            policy object. Policies are immutable settings: each updater keeps its own state
            (scale, counters).
        context (str, default "cpu:half"): context kind for :func:`updater.get_context`.

    Returns:
        SimpleNamespace: ``updater_d``, ``updater_g``, ``solver_d``, ``solver_g``, ``loss_d``,
        ``loss_g``, ``x_real`` (D's batch of real images, filled by ``updater_d``'s data
        feeder), ``images`` (the data), ``generate()`` (``EVAL_SAMPLES`` images from fixed
        noise, a float64 array). Call :func:`clear_parameters` when done.
    """
    _check_int("seed", seed, 0)
    _check_int("batch", batch, 1)
    if not (isinstance(lr, (int, float)) and math.isfinite(lr) and lr > 0):
        raise ValueError(f"lr must be a finite number > 0, got {lr!r}")

    import nnabla as nn
    import nnabla.functions as F
    import nnabla.solvers as S

    from updater import DynamicLossScalingUpdater, get_context, make_policy

    if isinstance(policy, str):
        policy = make_policy(policy)
    images = load_images()
    init_rng = np.random.RandomState(seed)
    data_rng = np.random.RandomState(seed + 1)

    clear_parameters()
    with nn.parameter_scope(SCOPE), nn.context_scope(get_context(context)):
        z = nn.Variable((batch, NOISE))
        fake = generator(z, init_rng)
        # G's loss goes through D: G wants D to call its images real (non-saturating loss).
        pred_fake = discriminator(fake, init_rng)
        loss_g = F.mean(F.sigmoid_cross_entropy(pred_fake, F.constant(1.0, pred_fake.shape)))
        # D's loss sees the fake images cut from G's graph: D's backward stops there.
        x_real = nn.Variable((batch, PIXELS))
        fake_cut = fake.get_unlinked_variable(need_grad=False)
        pred_real, pred_cut = discriminator(x_real), discriminator(fake_cut)
        loss_d = F.mean(
            F.sigmoid_cross_entropy(pred_real, F.constant(1.0, pred_real.shape))
        ) + F.mean(F.sigmoid_cross_entropy(pred_cut, F.constant(0.0, pred_cut.shape)))
        z_eval = nn.Variable((EVAL_SAMPLES, NOISE))
        samples = generator(z_eval)  # G's parameters, a larger batch
        params = nn.get_parameters()
        solver_g = S.Adam(lr, beta1=0.5)  # G's parameters only: it never applies D's grads
        solver_g.set_parameters({k: v for k, v in params.items() if k.startswith("gen/")})
        solver_d = S.Adam(lr, beta1=0.5)
        solver_d.set_parameters({k: v for k, v in params.items() if k.startswith("dis/")})
    z_eval.d = np.random.RandomState(seed + 2).randn(*z_eval.shape)

    def feed_d():
        x_real.d = images[data_rng.randint(0, len(images), batch)]
        z.d = data_rng.randn(*z.shape)
        fake.forward(clear_buffer=True)  # fills fake_cut (the same buffer)

    def feed_g():
        z.d = data_rng.randn(*z.shape)

    def generate():
        samples.forward(clear_buffer=True)
        return np.array(samples.d, dtype=np.float64)

    return SimpleNamespace(
        updater_d=DynamicLossScalingUpdater(solver_d, loss_d, feed_d, policy=policy),
        updater_g=DynamicLossScalingUpdater(solver_g, loss_g, feed_g, policy=policy),
        solver_d=solver_d,
        solver_g=solver_g,
        loss_d=loss_d,
        loss_g=loss_g,
        x_real=x_real,
        images=images,
        generate=generate,
    )


def train(
    steps: int = 400,
    seed: int = 0,
    *,
    batch: int = 32,
    lr: float = 1e-2,
    policy="dynamic",
    context: str = "cpu:half",
    eval_every: int = 50,
    progress: bool = False,
) -> Dict:
    """Train G and D for ``steps`` iterations (a D step, then a G step) and measure G.

    Args:
        steps (int, default 400): iterations, >= 1.
        seed (int, default 0): seed of weights, batches and noise (see :func:`build`), >= 0.
        batch, lr, policy, context: as in :func:`build`.
        eval_every (int, default 50): measure the generated samples every this many steps
            (and at the end), >= 1.
        progress (bool, default False): show a tqdm bar.

    Returns:
        dict: ``steps``, ``seconds`` (the training loop), ``loss_d`` / ``loss_g`` (final
        losses), ``loss_finite`` (every loss finite at every step), ``losses`` ((steps, 2)
        array: D's, G's loss), ``d`` / ``g`` (per updater: ``skips``, ``skipped_at`` (the
        steps it skipped), ``overflows``, ``updates_applied``, ``scales`` (the scale each
        step used), ``final_scale``,
        ``grad_absmax_median``: median unscaled largest |gradient| over applied steps for
        policies that measure it, such as ``"headroom"``, else None), ``data`` / ``initial``
        / ``final`` (:func:`sample_stats` of the data, of the generated images before and
        after training), ``trace`` (``{"step", "mean", "std", "distance"}`` at step 0, every
        ``eval_every`` steps and at the end).
    """
    _check_int("steps", steps, 1)
    _check_int("eval_every", eval_every, 1)
    from tqdm import tqdm

    gan = build(seed, batch, lr, policy, context)
    try:
        data_mean = gan.images.astype(np.float64).mean(axis=0)
        pairs = ((gan.updater_d, gan.loss_d), (gan.updater_g, gan.loss_g))
        losses, scales = np.empty((steps, 2)), np.empty((steps, 2))
        applied = np.zeros((steps, 2), dtype=bool)
        absmax = np.full((steps, 2), np.nan)
        trace = [{"step": 0, **sample_stats(gan.generate(), data_mean)}]
        start = time.perf_counter()
        for step in tqdm(range(steps), desc="GAN steps", disable=not progress):
            for column, (upd, loss) in enumerate(pairs):
                record = upd.update()
                losses[step, column] = float(loss.d)  # the loss keeps its value after backward
                scales[step, column] = record.scale
                applied[step, column] = record.update_applied
                if record.grad_absmax is not None and record.update_applied:
                    absmax[step, column] = record.grad_absmax / record.scale
            if (step + 1) % eval_every == 0 or step + 1 == steps:
                trace.append({"step": step + 1, **sample_stats(gan.generate(), data_mean)})
        seconds = time.perf_counter() - start
    finally:
        clear_parameters()

    def summary(upd, column):
        measured = absmax[:, column]
        return {
            "skips": int(upd.skips),
            "skipped_at": [int(i) for i in np.flatnonzero(~applied[:, column])],
            "overflows": int(upd.overflows),
            "updates_applied": int(upd.updates_applied),
            "scales": scales[:, column].copy(),
            "final_scale": float(upd.scale),
            "grad_absmax_median": (
                float(np.nanmedian(measured)) if np.isfinite(measured).any() else None
            ),
        }

    def stats(entry):
        return {k: v for k, v in entry.items() if k != "step"}

    return {
        "steps": steps,
        "seconds": seconds,
        "loss_d": float(losses[-1, 0]),
        "loss_g": float(losses[-1, 1]),
        "loss_finite": bool(np.isfinite(losses).all()),
        "losses": losses,
        "d": summary(gan.updater_d, 0),
        "g": summary(gan.updater_g, 1),
        "data": sample_stats(gan.images, data_mean),
        "initial": stats(trace[0]),
        "final": stats(trace[-1]),
        "trace": trace,
    }


def _scale_changes(scales, final_scale) -> str:
    shown = [float(scales[0])]
    for s in [*map(float, scales[1:]), float(final_scale)]:
        if s != shown[-1]:
            shown.append(s)
    return " -> ".join(f"{s:g}" for s in shown)


def format_summary(result: Dict) -> str:
    """The lines :func:`main` prints for a :func:`train` result."""
    lines = [
        f"steps: {result['steps']} ({result['seconds']:.1f} s); final losses: "
        f"D {result['loss_d']:.4f}, G {result['loss_g']:.4f}; "
        f"all losses finite: {result['loss_finite']}"
    ]
    for key, name in (("d", "D"), ("g", "G")):
        u = result[key]
        at = u["skipped_at"]
        where = f" (at {', '.join(map(str, at[:8]))}{', ...' if len(at) > 8 else ''})"
        line = (
            f"{name} updater: skipped steps {u['skips']}/{result['steps']}"
            f"{where if at else ''}, overflows {u['overflows']}, "
            f"scale {_scale_changes(u['scales'], u['final_scale'])}"
        )
        if u["grad_absmax_median"] is not None:
            line += f", median unscaled |grad| max {u['grad_absmax_median']:.3g}"
        lines.append(line)
    rows = (("data", "data"), ("initial", "G at step 0"), ("final", "G at the end"))
    for key, name in rows:
        s = result[key]
        lines.append(
            f"{name:12s}  mean {s['mean']:.4f}  std {s['std']:.4f}  "
            f"per-pixel-mean distance to the data {s['distance']:.4f}"
        )
    return "\n".join(lines)


def parse_args(argv=None):
    from updater import PRESETS

    parser = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0],
        epilog="Each loss has its own DynamicLossScalingUpdater (own scale, own skipped "
        "steps); the module docstring says why. Needs scikit-learn (bundled digits).",
    )
    parser.add_argument(
        "--steps", type=int, default=400, help="iterations, each a D step and a G step (400)"
    )
    parser.add_argument(
        "--seed", type=int, default=0, help="seed of weights, noise and batches (default 0)"
    )
    parser.add_argument("--batch", type=int, default=32, help="images per step (default 32)")
    parser.add_argument("--lr", type=float, default=1e-2, help="Adam learning rate (1e-2)")
    parser.add_argument(
        "--policy",
        default="dynamic",
        choices=list(PRESETS),
        help="loss-scaling preset; each updater keeps its own scale (default dynamic: "
        "DynamicScale(), start 2**15; headroom also prints each loss's |grad| max)",
    )
    parser.add_argument(
        "--context", default="cpu:half", help="nnabla context: cpu:half (default), cpu:float"
    )
    args = parser.parse_args(argv)
    if args.steps < 1 or args.batch < 1 or args.seed < 0:
        parser.error("--steps and --batch must be >= 1 and --seed >= 0")
    if not (math.isfinite(args.lr) and args.lr > 0):
        parser.error("--lr must be a finite number > 0")
    return args


def main(argv=None):
    args = parse_args(argv)
    options = {k: getattr(args, k) for k in ("batch", "lr", "policy", "context")}
    result = train(args.steps, args.seed, progress=sys.stderr.isatty(), **options)
    print(format_summary(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
