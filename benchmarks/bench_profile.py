"""Where an update's time goes: ``cProfile`` of nnabla's updater and of each of our
``finite_check`` paths on the MLPs of :mod:`benchmarks.depth_models` (6, 202 and 302 parameter
arrays) and its convolutional net, in cpu:float.

Each row lists the functions with the most time of their own ("tottime") per update. nnabla's
compiled calls (forward, backward, the solver's methods, ``get_parameters``) are not profiled on
their own: their time counts in the Python function that makes them, so the rounds' time is
nnabla's forward and backward, ``apply``'s is ``solver.update()``, the "nnabla" check's is
``check_inf_or_nan_grad()``. The profiler's own cost inflates every figure; compare within a
row and across paths, not with the timed sections.

Also: the loss read, the old way (a NumPy view and reduction) and the new (one number), timed
right after a bare step's backward pass and at once again (:func:`cold_reads`).
"""

from __future__ import annotations

import cProfile
import pstats
import re
from pathlib import Path

import numpy as np

from benchmarks import bench_depth, depth_models
from sim.tables import markdown_grid

MODELS = {
    "MLP, 6 arrays": lambda rng: depth_models.mlp(6, rng),
    "MLP, 202 arrays": lambda rng: depth_models.mlp(202, rng),
    "MLP, 302 arrays": lambda rng: depth_models.mlp(302, rng),
    "conv net, 38 arrays": lambda rng: depth_models.conv_bn(12, rng),
}
VARIANTS = ("nnabla's", *bench_depth.PATHS)
TOP = 5
"""Functions listed per row."""
FEED = ("depth_models.", "<frozen importlib", "numpy.random", "posix.stat")
"""Label prefixes of the benchmark's data feeder's work (random data, the imports nnabla's
``Variable.d`` makes), left out of the lists and counted apart."""


def _updater(variant, solver, loss, feed):
    from nnabla.experimental.mixed_precision_training import (
        DynamicLossScalingUpdater as NnablaUpdater,
    )

    from updater import DynamicLossScalingUpdater

    if variant == "nnabla's":
        return NnablaUpdater(solver, loss, data_feeder=feed, scale=8.0)
    return DynamicLossScalingUpdater(
        solver, loss, data_feeder=feed, scale=8.0, finite_check=variant
    )


def _label(function) -> str:
    """``module.function`` of a profiled function; a built-in one by its type and name
    (``<method 'reduce' of 'numpy.ufunc' objects>``: ``numpy.ufunc.reduce``)."""
    filename, _, name = function
    if filename != "~":
        return f"{Path(filename).stem}.{name}"
    method = re.fullmatch(r"<method '(\w+)' of '([\w.]+)' objects>", name)
    if method:
        return f"{method[2]}.{method[1]}"
    return re.sub(r"^<built-in method (.+)>$", r"\1", name)


def profile(build, variant, steps=20, warmup=5, seed=0):
    """``(microseconds per update, of them the feeder's, [(function, own microseconds per
    update)] largest first, the feeder's left out)`` of ``steps`` updates of ``variant`` on
    the model ``build(rng)`` makes."""
    import nnabla as nn

    nn.clear_parameters()
    u = _updater(variant, *build(np.random.default_rng(seed)))
    for _ in range(warmup):
        u.update()
    profiler = cProfile.Profile()
    profiler.enable()
    for _ in range(steps):
        u.update()
    profiler.disable()
    stats = pstats.Stats(profiler).stats
    own = {}
    for function, (_, _, tottime, _, _) in stats.items():
        label = _label(function)
        own[label] = own.get(label, 0.0) + 1e6 * tottime / steps
    total = sum(own.values())
    feed = sum(us for label, us in own.items() if label.startswith(FEED))
    ranked = sorted(own.items(), key=lambda item: -item[1])
    return total, feed, [(label, us) for label, us in ranked if not label.startswith(FEED)]


def _numpy_read(loss) -> bool:
    """The loss read as the host paths made it before issue 42: a NumPy view and reduction."""
    from updater.driver.arrays import host_view

    return bool(np.isfinite(host_view(loss.data)).all())


def _number_read(loss) -> bool:
    """The loss read as they make it now: one number."""
    from updater.driver.arrays import host_all_finite

    return host_all_finite(loss.data)


READS = {"NumPy view and reduction": _numpy_read, "one number": _number_read}


def cold_reads(build, steps=200, seed=0):
    """Median microseconds of each of :data:`READS` of the loss right after a bare step's
    backward pass (first) and at once again (second), on the model ``build(rng)`` makes; the
    reads take turns, one per step."""
    import time

    import nnabla as nn

    nn.clear_parameters()
    solver, loss, feed = build(np.random.default_rng(seed))
    times = {(name, when): [] for name in READS for when in ("first", "again")}
    for i in range(steps):
        solver.zero_grad()
        feed()
        loss.forward(clear_no_need_grad=True)
        loss.backward(8.0, clear_buffer=True)
        name = list(READS)[i % len(READS)]
        for when in ("first", "again"):
            start = time.perf_counter()
            READS[name](loss)
            times[name, when].append(1e6 * (time.perf_counter() - start))
        solver.scale_grad(1 / 8.0)
        solver.update()
    return {key: float(np.median(v)) for key, v in times.items()}


def run(quick=False):
    import nnabla as nn
    from nnabla.ext_utils import get_extension_context

    nn.set_default_context(get_extension_context("cpu", type_config="float"))
    models = {"MLP, 6 arrays": MODELS["MLP, 6 arrays"]} if quick else MODELS
    steps = 3 if quick else 20
    profiles = {
        (model, variant): profile(build, variant, steps)
        for model, build in models.items()
        for variant in VARIANTS
    }
    cold = "MLP, 6 arrays" if quick else "MLP, 202 arrays"
    return {
        "profiles": profiles,
        "cold": (cold, cold_reads(MODELS[cold], 20 if quick else 400)),
    }


def markdown(res) -> str:
    rows = []
    for (model, variant), (total, feed, own) in res["profiles"].items():
        top = ", ".join(f"{name} {us:,.0f}" for name, us in own[:TOP])
        rows.append([model, variant, f"{total:,.0f}", f"{feed:,.0f}", top])
    heads = [
        "model",
        "updater",
        "us per update (profiled)",
        "of it the data feeder",
        f"top {TOP} functions: own us per update",
    ]
    return "\n".join(
        [
            "Where an update's time goes (`cProfile`, cpu:float, 64-wide MLPs and the "
            "convolutional net of the section above; nnabla's compiled calls count in the "
            "function that makes them: the rounds' own time is forward and backward, "
            "`apply`'s is `solver.update()`, `unscale`'s is `solver.scale_grad()`, the "
            '"nnabla" check\'s is `check_inf_or_nan_grad()`, `flat.forward` is the device '
            "graph, `params` is `solver.get_parameters()`):",
            "",
            markdown_grid(heads, rows),
            "",
            _cold_text(*res["cold"]),
        ]
    )


def _cold_text(model: str, reads: dict) -> str:
    """The cold reads as a sentence and a table."""
    rows = [[name, f"{reads[name, 'first']:.1f}", f"{reads[name, 'again']:.1f}"] for name in READS]
    heads = ["loss read", "first after backward, us", "at once again, us"]
    return (
        f"Python right after nnabla's backward pass ({model}, a bare step, medians of "
        "alternating steps) runs several times slower than the same code at once again, most "
        "likely because the backward pass left little of its code and data in the processor's "
        "caches. Every stretch of Python an update runs between nnabla's calls pays this, so "
        "its Python costs more in place than stubbed (the first section's measurement).\n\n"
        + markdown_grid(heads, rows)
    )


def main():
    print(markdown(run()))


if __name__ == "__main__":
    main()
