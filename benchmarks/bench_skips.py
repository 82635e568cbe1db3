"""What a skipped step costs: the forward/backward passes and batches one overflow event and one
call on a persistent NaN consume, ours against nnabla's updater, and the cost of a retry."""

from __future__ import annotations

import time

import numpy as np

from benchmarks.common import Model


def overflow_cost(seed=0):
    """Passes and batches consumed by one overflow event and by one call on a persistent NaN."""
    import nnabla as nn
    from nnabla.experimental.mixed_precision_training import (
        DynamicLossScalingUpdater as NnablaUpdater,
    )
    from nnabla.ext_utils import get_extension_context

    from updater import DynamicLossScalingUpdater, NonFiniteGradientsError

    nn.set_default_context(get_extension_context("cpu", type_config="half"))
    rng = np.random.default_rng(seed)
    out = {}
    for name in ("nnabla", "ours"):
        nn.clear_parameters()
        m = Model(name, 16, [16, 4], 8, rng)
        if name == "nnabla":
            upd = NnablaUpdater(m.solver, m.loss, data_feeder=m.feed, scale=2.0**15)
        else:
            upd = DynamicLossScalingUpdater(m.solver, m.loss, data_feeder=m.feed, scale=2.0**15)
        # one overflow event: a single batch holding a value large enough to overflow at 2**15
        m.poison = 3e4
        m.batches = 0
        _call_once(upd, m, poison_first_only=True)
        event = {"passes": _passes(upd, m), "batches": m.batches}
        upd.update()  # one clean step, so the NaN run starts from zero consecutive failures
        # persistent NaN: every batch holds a NaN; call update() until it raises (at most 50)
        m.poison = float("nan")
        m.batches = 0
        before = upd.passes if name == "ours" else 0
        calls, raised = 0, "no"
        while calls < 50:
            calls += 1
            try:
                upd.update()
            except NonFiniteGradientsError:
                raised = "yes"
                break
            if name == "nnabla":
                break  # one call already shows its cost; later calls would divide by zero
        passes = _passes(upd, m) - before
        nan = {"calls": calls, "passes": passes, "batches": m.batches, "raised": raised}
        out[name] = {"overflow": event, "nan": nan}
    return out


def _passes(upd, model):
    """Forward/backward passes so far: ours counts them; nnabla's feeds once per pass."""
    return upd.passes if hasattr(upd, "passes") else model.batches


def _call_once(upd, model, poison_first_only):
    """Call update() once with only the first batch poisoned (later batches are clean)."""
    feed = model.feed
    first = [True]

    def feed_once():
        poison = model.poison
        if not first[0] and poison_first_only:
            model.poison = None
        first[0] = False
        feed()
        model.poison = poison

    upd.data_feeder = feed_once
    try:
        upd.update()
    finally:
        upd.data_feeder = feed
        model.poison = None


def retry_cost(iters, accum=4, width=2048, batch=16, seed=0):
    """Seconds per update in "skip" and "retry" mode, and in "skip" with
    ``restore_on_skip=False`` ("keep"), when nothing overflows (cpu:float).

    The model has a frozen ``width x width`` layer (``need_grad=False``, 16 MiB in float32)
    and BatchNormalization; ``accum_grad=accum``. The updaters train separate copies,
    interleaved iteration by iteration. "retry" keeps each round's inputs so that a retry can
    recompute them; "skip" and "retry" copy the running statistics before each batch (the
    default ``restore_on_skip``), "keep" does not; frozen weights are never copied.
    """
    import nnabla as nn
    import nnabla.functions as F
    import nnabla.parametric_functions as PF
    import nnabla.solvers as S
    from nnabla.ext_utils import get_extension_context

    from updater import DynamicLossScalingUpdater

    nn.set_default_context(get_extension_context("cpu", type_config="float"))
    nn.clear_parameters()
    rng = np.random.default_rng(seed)
    updaters = {}
    for mode in ("skip", "retry", "keep"):
        x, t = nn.Variable((batch, width)), nn.Variable((batch, 1))
        with nn.parameter_scope(mode):
            h = F.relu(PF.affine(x, width, name="frozen", fix_parameters=True))
            h = PF.batch_normalization(PF.affine(h, 64, name="fc1"), name="bn")
            loss = F.mean(F.softmax_cross_entropy(PF.affine(F.relu(h), 10, name="fc2"), t))
            solver = S.Momentum(0.01, 0.9)
            solver.set_parameters(nn.get_parameters())

        def feed(x=x, t=t):
            x.d = rng.standard_normal(x.shape)
            t.d = rng.integers(0, 10, t.shape)

        overflow = "retry" if mode == "retry" else "skip"
        updaters[mode] = DynamicLossScalingUpdater(
            solver,
            loss,
            feed,
            accum_grad=accum,
            on_overflow=overflow,
            scale=8.0,
            restore_on_skip=mode != "keep",
        )
    times = {mode: [] for mode in updaters}
    for i in range(iters + 2):
        for mode in ("skip", "retry", "keep")[i % 3 :] + ("skip", "retry", "keep")[: i % 3]:
            t0 = time.perf_counter()
            rec = updaters[mode].update()
            if i >= 2:  # the first two are warm-up
                times[mode].append(time.perf_counter() - t0)
            assert rec.attempts == 1
    sec = {mode: float(np.median(v)) for mode, v in times.items()}
    return {"accum": accum, "width": width, "iters": iters, "seconds": sec}
