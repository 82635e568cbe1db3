"""The CUDA path on a real GPU (issue 52): the device path's one host read per step and its
verdicts, ``cudnn:half`` training of the guide's model beside nnabla's own updater, and the AMP
rewrite. ``scripts/gpu_check.sh`` runs these (``-m gpu``) on a machine with a GPU; without
nnabla-ext-cuda or a visible GPU they are skipped (never run here: no GPU was available)."""

import nnabla as nn
import nnabla.functions as F
import nnabla.initializer as I
import nnabla.parametric_functions as PF
import nnabla.solvers as S
import numpy as np
import pytest
from nnabla.experimental.mixed_precision_training import (
    DynamicLossScalingUpdater as NnablaUpdater,
)

from updater import DynamicLossScalingUpdater, DynamicScale, amp, get_context
from updater.driver.arrays import host_reads
from updater.runtime.context import cuda_device_count

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.nnabla,
    pytest.mark.skipif(
        cuda_device_count() == 0, reason="needs nnabla-ext-cuda and a GPU (scripts/gpu_check.sh)"
    ),
]
SPIKE = 1e4  # a loss weight that overflows float16 at scale 2**12


class GuideModel:
    """The guide's MLP (64-32-10, batch 32) in ``context`` under ``scope``, with seeded weights,
    a Momentum solver and a feeder of a seeded batch stream; ``spikes``: steps whose loss weight
    is ``SPIKE``."""

    def __init__(self, scope, context="cudnn:half", seed=0, spikes=()):
        rng = np.random.RandomState(seed)
        with nn.context_scope(get_context(context)), nn.parameter_scope(scope):
            self.x, self.t, self.w = nn.Variable((32, 64)), nn.Variable((32, 1)), nn.Variable(())
            init = I.NormalInitializer(0.1, rng=rng)
            h = F.relu(PF.affine(self.x, 32, w_init=init, name="fc1"))
            logits = PF.affine(h, 10, w_init=init, name="fc2")
            self.loss = self.w * F.mean(F.softmax_cross_entropy(logits, self.t))
            self.params = nn.get_parameters()
        self.solver = S.Momentum(0.01, 0.9)
        self.solver.set_parameters(self.params)
        self.data, self.spikes, self.calls = np.random.default_rng(seed), set(spikes), 0

    def feed(self):
        self.x.d = self.data.standard_normal(self.x.shape)
        self.t.d = self.data.integers(0, 10, self.t.shape)
        self.w.d = SPIKE if self.calls in self.spikes else 1.0
        self.calls += 1

    def values(self):
        return {k: v.d.astype(np.float32) for k, v in self.params.items()}


def test_the_device_path_reads_the_host_once_per_update_and_decides_as_nnabla():
    m = GuideModel("gpu_reads", spikes={2})
    u = DynamicLossScalingUpdater(m.solver, m.loss, m.feed, policy=DynamicScale(2.0**12))
    assert "finite_check='solver'" in repr(u)  # "auto" off the CPU: the device path
    reads, verdicts = [], []
    for _ in range(5):
        before = host_reads()
        finite = u.backward()
        reads.append(host_reads() - before)
        verdicts.append((finite, not m.solver.check_inf_or_nan_grad()))
        u.step()
    assert reads == [1] * 5
    assert [f for f, _ in verdicts] == [True, True, False, True, True]
    assert all(ours == theirs for ours, theirs in verdicts)
    assert (u.skips, u.scale) == (1, 2.0**11)


def test_cudnn_half_training_follows_nnabla_updater_on_the_guides_model():
    """Scale 8 and no overflow: both run backward(8), the check, scale_grad(1/8) and the
    update on the same batches; parameters agree to float16 rounding."""
    runs = {}
    for name, cls in (("nnabla", NnablaUpdater), ("ours", DynamicLossScalingUpdater)):
        m = GuideModel(f"gpu_{name}")
        updater = cls(m.solver, m.loss, m.feed, scale=8.0, scaling_factor=2.0, N=2000)
        for _ in range(20):
            updater.update()
        runs[name] = (m.values(), m.calls, updater.scale)
    (theirs, their_calls, their_scale), (ours, our_calls, our_scale) = runs["nnabla"], runs["ours"]
    assert our_calls == their_calls == 20 and our_scale == their_scale == 8.0
    for name, value in theirs.items():
        np.testing.assert_allclose(ours[name.replace("nnabla", "ours")], value, rtol=1e-3)


def test_the_amp_rewrite_trains_in_cudnn_half_and_float():
    m = GuideModel("gpu_amp", context="cudnn:float")
    with nn.context_scope(get_context("cudnn:float")):
        mixed = amp.rewrite(m.loss)
    table = amp.precision_table(mixed)
    assert "| Affine | half |" in table and "| SoftmaxCrossEntropy | float |" in table
    u = DynamicLossScalingUpdater(m.solver, mixed, m.feed)
    before = m.values()
    for _ in range(10):
        u.update()
    mixed.forward()
    assert np.isfinite(float(mixed.d)) and u.updates_applied >= 8
    assert all((m.values()[k] != v).any() for k, v in before.items())
