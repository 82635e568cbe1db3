"""Checkpoints hold every parameter the solver holds, also Variables outside nnabla's parameter
registry (issue 23, item 3): a learnable temperature made with ``nn.Variable``."""

import nnabla as nn
import nnabla.functions as F
import nnabla.initializer as I
import nnabla.parametric_functions as PF
import nnabla.solvers as S
import numpy as np
import pytest

from tests.nnabla_models import assert_same_values, cpu_context, param_values, solver_state_values
from updater import DynamicScale
from updater.driver.updater import DynamicLossScalingUpdater
from updater.runtime.checkpoint import (
    CheckpointMismatchError,
    checkpoint_parameters,
    load_checkpoint,
    save_checkpoint,
)

pytestmark = pytest.mark.nnabla

STEPS, SPLIT = 12, 5


class Tempered:
    """``mean(softmax_cross_entropy(affine(x) * temperature))`` in cpu:half, trained by Adam over
    the affine layer (in the registry) and ``temperature`` (an ``nn.Variable``, only in the
    solver)."""

    def __init__(self, seed=0, temperature=1.0):
        rng = np.random.RandomState(seed)
        with nn.context_scope(cpu_context("half")), nn.parameter_scope("tempered"):
            self.x, self.t = nn.Variable((8, 4)), nn.Variable((8, 1))
            self.temperature = nn.Variable((1, 1), need_grad=True)
            self.temperature.d = temperature
            y = PF.affine(self.x, 3, w_init=I.NormalInitializer(0.5, rng=rng), name="fc")
            self.loss = F.mean(F.softmax_cross_entropy(y * self.temperature, self.t))
            self.solver = S.Adam(0.05)
            self.solver.set_parameters({**nn.get_parameters(), "temperature": self.temperature})
        self.calls = 0
        self.updater = DynamicLossScalingUpdater(
            self.solver, self.loss, self.feed, policy=DynamicScale(init_scale=2.0**10)
        )

    def feed(self):
        rng = np.random.RandomState(1000 + self.calls)
        self.x.d = rng.randn(*self.x.shape)
        self.t.d = rng.randint(0, 3, self.t.shape)
        self.calls += 1

    def train(self, steps):
        self.calls = self.updater.batches  # the data resumes where the run stopped
        return [(r.scale, r.update_applied) for r in (self.updater.update() for _ in range(steps))]

    def values(self):
        params = param_values({**nn.get_parameters(grad_only=False), "T": self.temperature})
        return params, solver_state_values(self.solver)


def test_a_temperature_outside_the_registry_survives_save_and_load(tmp_path):
    full = Tempered()
    trajectory = full.train(STEPS)
    expected = full.values()
    assert full.temperature.d.item() != 1.0, "the temperature must be learned"

    nn.clear_parameters()
    first = Tempered()
    head = first.train(SPLIT)
    path = save_checkpoint(tmp_path / "t.ckpt", first.updater)
    saved_temperature = first.temperature.d.copy()

    nn.clear_parameters()
    resumed = Tempered(seed=99, temperature=3.0)  # other values: loading must replace them
    report = load_checkpoint(path, resumed.updater)
    assert report.missing == [] and report.unexpected == []
    assert head + resumed.train(STEPS - SPLIT) == trajectory
    assert_same_values(expected[0], resumed.values()[0])
    assert_same_values(expected[1], resumed.values()[1])
    with np.load(path) as z:  # under the solver's name
        assert np.array_equal(z["param/temperature"], saved_temperature)


def test_strict_load_needs_the_value_of_every_solver_state(tmp_path):
    model = Tempered()
    model.train(2)
    path = save_checkpoint(tmp_path / "t.ckpt", model.updater)
    with np.load(path) as z:  # as checkpoints of earlier versions were: no temperature value
        arrays = {k: z[k] for k in z.files if k != "param/temperature"}
    with open(path, "wb") as f:
        np.savez(f, **arrays)
    nn.clear_parameters()
    other = Tempered(seed=99, temperature=3.0)
    with pytest.raises(CheckpointMismatchError, match=r"missing from the checkpoint: \['param/te"):
        load_checkpoint(path, other.updater)
    assert other.temperature.d.item() == 3.0
    report = load_checkpoint(path, other.updater, strict=False)
    assert report.missing == ["param/temperature"] and other.temperature.d.item() == 3.0


def test_the_checkpoint_names_registry_parameters_once(tmp_path):
    model = Tempered()
    names = checkpoint_parameters(model.updater)
    assert sorted(names) == ["temperature", "tempered/fc/affine/W", "tempered/fc/affine/b"]
    clash = nn.Variable((1, 1), need_grad=True)
    with pytest.raises(ValueError, match="solver's parameter 'temperature' is another Variable"):
        checkpoint_parameters(model.updater, {**nn.get_parameters(), "temperature": clash})
