"""The replay's flushed share between sampled flush measurements (sim.casting.underflow,
issue 39 item 3)."""

import dataclasses

import numpy as np
import pytest

from sim.casting.underflow import flushed_share, measured_flushed_share
from updater.trace import Trace


def _trace(shares):
    """5 steps of one histogram; flushing measured at scales 1 and 4 where ``shares`` has a
    row (None: not measured)."""
    t = Trace.from_steps([[2.0**-30, 1.0, 2.0**-10, 3.0]] * len(shares))
    return dataclasses.replace(
        t,
        flush_scales=np.array([[1.0, 4.0] if s is not None else [np.nan] * 2 for s in shares]),
        flush_shares=np.array([s if s is not None else [np.nan] * 2 for s in shares]),
    )


def test_unmeasured_steps_take_the_measured_neighbours_correction_weighted_by_distance():
    model = float(flushed_share(_trace([None]), 2.0)[0])  # 2**-30 of 4 values flushed: 0.25
    assert model == 0.25
    t = _trace([[0.3, 0.3], None, None, None, [0.5, 0.5]])
    got = measured_flushed_share(t, np.full(5, 2.0))
    # corrections +0.05 at step 0 and +0.25 at step 4, linear between
    np.testing.assert_allclose(got, model + np.array([0.05, 0.1, 0.15, 0.2, 0.25]))
    # before the first and after the last measured step: the nearest one's correction alone
    t = _trace([None, [0.3, 0.3], None, [0.5, 0.5], None])
    got = measured_flushed_share(t, np.full(5, 2.0))
    np.testing.assert_allclose(got, model + np.array([0.05, 0.05, 0.15, 0.25, 0.25]))


def test_with_every_step_measured_each_step_keeps_its_own_curve():
    t = _trace([[0.3, 0.4], [0.5, 0.5], [0.25, 0.25]])
    got = measured_flushed_share(t, np.array([2.0, 2.0, 2.0**8]))
    # step 0: halfway in log2 between 0.3 and 0.4; step 2 above 4: the model shifted by 0
    assert got.tolist() == pytest.approx([0.35, 0.5, float(flushed_share(t, 2.0**8)[2])])
    runs = measured_flushed_share(t, np.full((3, 2), 2.0))
    assert runs.shape == (3, 2) and runs[:, 0].tolist() == pytest.approx(got[:2].tolist() + [0.25])
