"""The scales ``Probes(flush=True)`` measures flushing at (issue 49, A): one grid from the top of
the probe bounds down, whatever the recorded scale, the seed's free pass in it."""

import numpy as np
import pytest

from updater.driver.recording.flush_scales import flush_scales

FLOAT16 = (1.0, 2.0**15)  # probe bounds of a DynamicScale or NnablaLegacy with a float16 seed


@pytest.mark.parametrize(
    "seed, powers",
    [
        (8.0, [3, 7, 11, 15]),  # nnabla-legacy: on the grid
        (2.0**15, [3, 7, 11, 15]),  # the default: the same scales
        (2.0**14, [3, 7, 14, 15]),  # off the grid: replaces the nearest below the top
        (2.0**5, [3, 5, 11, 15]),  # a tie: 2**7 goes, 8 (nnabla-legacy's) stays
        (2.0**-3, [-3, 7, 11, 15]),  # below the bounds: still its own (free) pass
    ],
)
def test_one_grid_whatever_the_recorded_scale(seed, powers):
    assert np.log2(flush_scales(seed, FLOAT16)).tolist() == powers


def test_the_grid_hangs_from_the_policys_top_and_stops_at_its_floor():
    assert np.log2(flush_scales(2.0**10, (2.0**-10, 2.0**10))).tolist() == [-2, 2, 6, 10]
    low = np.log2(flush_scales(4.0, (2.0, 16.0)))  # only 16 in bounds; the seed adds itself
    assert low[:2].tolist() == [2, 4] and np.isnan(low[2:]).all()
    assert np.isnan(flush_scales(0.0, FLOAT16)).all()  # a seed of 0 in float16: nothing
