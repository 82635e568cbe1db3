"""Stacking policies for many runs checks each policy's settings once, not once per run (issue
42: ``dls simulate --runs 200000`` built and validated 200000 policies)."""

import numpy as np

from sim.replay.run import stack_policies
from updater.policy import DynamicScale


def test_settings_are_checked_once_per_policy_and_repeated_per_run(monkeypatch):
    checked = []
    original = DynamicScale._validate
    monkeypatch.setattr(DynamicScale, "_validate", lambda self: checked.append(1) or original(self))
    policies = [DynamicScale(growth_interval=100), DynamicScale(growth_interval=500)]
    checked.clear()
    stacked = stack_policies(policies, runs=50_000)
    assert len(checked) == 2
    assert stacked.growth_interval.shape == (100_000,)
    assert (stacked.growth_interval[:50_000] == 100).all()
    assert (stacked.growth_interval[50_000:] == 500).all()
    assert np.all(stacked.init_scale == 2.0**15)
