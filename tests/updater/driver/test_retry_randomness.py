"""Retry and randomness inside the graph (issue 23, item 8), on real cpu:half graphs: a retried
attempt draws new noise from F.randn (even seeded); noise fed as an input is written back."""

import itertools

import nnabla as nn
import nnabla.functions as F
import nnabla.solvers as S
import numpy as np
import pytest

from tests.nnabla_models import cpu_context
from updater import DynamicLossScalingUpdater, DynamicScale

pytestmark = pytest.mark.nnabla
SCOPES = itertools.count()
SHAPE = (4,)


def _updater(noise_in_graph: bool):
    """loss = 3 sum(w (x + noise/100)): overflows at 2**15, finite at 2**14 and below."""
    with nn.context_scope(cpu_context("half")), nn.parameter_scope(f"noise_{next(SCOPES)}"):
        x = nn.Variable.from_numpy_array(np.ones(SHAPE, np.float32))
        noise = F.randn(shape=SHAPE, seed=7) if noise_in_graph else nn.Variable(SHAPE)
        noise.persistent = True
        w = nn.parameter.get_parameter_or_create("w", SHAPE, np.ones(SHAPE, np.float32))
        loss = F.sum(w * (x + noise * 0.01)) * 3.0
        solver = S.Sgd(0.0)
        solver.set_parameters({"w": w})
    fed = np.random.RandomState(0).randn(*SHAPE).astype(np.float32)

    def feed():
        if not noise_in_graph:
            noise.d = fed

    policy = DynamicScale(init_scale=2.0**15, growth_interval=1000)
    upd = DynamicLossScalingUpdater(solver, loss, feed, policy=policy, on_overflow="retry")
    return upd, noise, fed


def test_a_retry_draws_new_noise_from_a_random_function_in_the_graph():
    upd, noise, _ = _updater(noise_in_graph=True)
    record = upd.update()
    assert record.attempts == 2 and record.update_applied
    first = F.randn(shape=SHAPE, seed=7)  # the same function afresh: its first draw
    first.forward()
    assert not np.array_equal(noise.d, first.d)  # the applied attempt saw the second draw


def test_noise_fed_as_an_input_is_the_same_in_every_attempt():
    upd, noise, fed = _updater(noise_in_graph=False)
    record = upd.update()
    assert record.attempts == 2 and record.update_applied
    assert np.array_equal(noise.d, fed)
