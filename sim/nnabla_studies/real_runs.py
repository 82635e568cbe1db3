"""Real training runs under a chosen policy, measured against a float32 shadow of the model.

This is the other half of the simulator's check (:mod:`sim.replay.predictions`): a model of
:mod:`sim.nnabla_studies.models` trains for real in ``cpu:half`` with the updater under some
policy, and at every step a float32 copy of its training graph (same parameters, same batch)
computes the true gradients. Per step the run keeps the loss scale used (the float16 seed),
whether the update was applied, whether the loss was finite, the true largest |gradient| and the
share of the true nonzero gradient values that the float16 backward pass at that scale left at
exactly zero (flushed, anywhere on their way through the graph), as a
:class:`sim.replay.measured.MeasuredRun`.

The shadow pass reads the parameters in float32; the float16 graph reads them rounded to
float16, so the two see the same weights up to that rounding. Running statistics that the shadow's
forward pass moves (BatchNormalization) are put back after it. Only the updater's public API and
nnabla's are used: the run reads the step's record, not the driver's internals.
"""

from __future__ import annotations

import tempfile
import time
from pathlib import Path

import numpy as np

from sim.nnabla_studies.models import half_model
from sim.replay.measured import MeasuredRun
from updater.common.float16 import flushed_shares
from updater.policy.presets import as_policy


def _host_copies(params) -> list:
    return [np.array(p.grad.get_data("r"), dtype=np.float64).ravel() for p in params]


def _untrained(solver) -> list:
    """The parameters of the current scope that ``solver`` does not train: the state a forward
    pass moves (BatchNormalization's running mean and variance in these models)."""
    import nnabla as nn

    trained = {hash(v) for v in solver.get_parameters().values()}
    return [v for v in nn.get_parameters(grad_only=False).values() if hash(v) not in trained]


def _saved(variables) -> list:
    """Each variable with its dtype and a host copy of its data in that dtype (bit for bit)."""
    return [(v, v.data.dtype, np.array(v.data.cast(v.data.dtype), copy=True)) for v in variables]


def _restore(saved) -> None:
    """Write back what :func:`_saved` copied, each array in the dtype it had."""
    for v, dtype, data in saved:
        v.data.cast(dtype)[...] = data


def _measured_step(model, shadow, updater) -> tuple:
    """One step: feed the batch, the shadow's true gradients (its running statistics put back),
    then the updater's step. Returns the scale used, whether the update was applied, whether
    the loss was finite, the true largest |gradient|, the flushed shares (0 when the gradients
    were not finite) and the loss."""
    solver = model["solver"]
    params = list(solver.get_parameters().values())
    model["feed"]()
    moved = _saved(_untrained(solver))
    solver.zero_grad()
    shadow.forward(clear_no_need_grad=True)
    shadow.backward(clear_buffer=True)
    _restore(moved)
    true = _host_copies(params)
    finite = updater.backward()
    half = _host_copies(params) if finite else None
    record = updater.step()
    shares = (0.0, 0.0) if half is None else flushed_shares(true, half, record.scale)
    top = max(float(np.abs(g).max()) for g in true)
    loss_finite = record.loss_finite is not False
    return (record.scale, record.update_applied, loss_finite, top, *shares, float(model["loss"].d))


def measure_run(
    name: str,
    policy,
    label: str,
    steps: int,
    seed: int = 0,
    recorder=None,
    probes=None,
    order: int = 0,
) -> MeasuredRun:
    """Train model ``name`` for ``steps`` steps in ``cpu:half`` under ``policy``, measuring every
    step against the float32 shadow (module doc). Same seed and batch order ``order``, same
    weights and batches whatever the policy (another order: the same weights, other batches);
    ``recorder`` (a GradientRecorder or None) and ``probes`` (an :class:`updater.Probes` or
    None) are handed to the updater. With ``probes`` and no recorder a recorder of the run's
    own records them; when they probe the overflow threshold of every step
    (``Probes(overflow=True)``, a recorder of ``every=1``), the run keeps the thresholds
    (``MeasuredRun.overflow_scale``).
    """
    import nnabla as nn

    from updater import DynamicLossScalingUpdater, get_context

    policy = as_policy(policy)
    folder = None
    if probes is not None and recorder is None:
        from updater import GradientRecorder

        folder = tempfile.TemporaryDirectory()
        recorder = GradientRecorder(Path(folder.name) / "probes.npz")
    with half_model(name, seed, order) as model:
        solver = model["solver"]
        with nn.context_scope(get_context("cpu:float")):
            shadow = model["training_loss"]()
        # the batch is fed once per step, before the shadow pass; the updater's forward reads it
        updater = DynamicLossScalingUpdater(
            solver, model["loss"], None, policy=policy, recorder=recorder, probes=probes
        )
        start = time.perf_counter()
        steps_measured = [_measured_step(model, shadow, updater) for _ in range(steps)]
        seconds = time.perf_counter() - start
        accuracy = model["evaluate"]()
    columns = [np.array(c, dtype=float) for c in zip(*steps_measured)] or [np.empty(0)] * 7
    scale, applied, loss_finite, absmax, flushed, flushed_small, loss = columns
    applied, loss_finite = applied.astype(bool), loss_finite.astype(bool)
    probed = {}
    if probes is not None and probes.overflow and recorder.every == 1:
        trace = recorder.trace()
        probed = dict(overflow_scale=trace.overflow_scale, finite_scale=trace.finite_scale)
    if folder is not None:
        recorder.close()
        folder.cleanup()
    return MeasuredRun(
        name,
        label,
        policy,
        scale,
        applied,
        loss_finite,
        absmax,
        flushed,
        flushed_small,
        loss,
        accuracy,
        seconds,
        f"{model['data']}; {model['arch']}",
        **probed,
        order=order,
    )
