"""Issue 48, finding 8, across workers: one rank's forward pass makes its running variance inf
while every gradient stays finite; every rank takes the step as a bad batch, keeps the scale and
puts its own running statistics back, on every finite_check path (mpiexec -n 2, cpu:half)."""

import numpy as np
import pytest

from tests.updater.runtime.mpi_jobs import MPI_MARKS, load_ranks, run_ok
from updater.driver.checks import PATHS

pytestmark = MPI_MARKS
SHIFTED = 3  # updater_state.py's step whose batch on rank 1 makes the variance inf


@pytest.mark.parametrize("check", [*PATHS, "auto"])
def test_one_rank_s_bad_state_makes_the_batch_bad_on_every_rank(tmp_path, check):
    run_ok("updater_state.py", 2, tmp_path, check)
    results = load_ranks(tmp_path, 2)
    records = results[0]["records"]
    np.testing.assert_array_equal(results[1]["records"], records)
    applied, bad_batch = records[:, 2], records[:, 4]
    assert bad_batch.tolist() == [k == SHIFTED for k in range(len(records))]
    assert applied.tolist() == [k != SHIFTED for k in range(len(records))]
    np.testing.assert_array_equal(records[:, 3], records[:, 1])  # the scale kept
    for res in results:  # each rank's own statistics: put back, finite to the end
        before, after = res["state_before"], res["state_after"]
        assert np.array_equal(before.view(np.uint8), after.view(np.uint8))
        assert np.isfinite(res["state_end"]).all()
    for key in (k for k in results[0] if k.startswith("param/")):
        a, b = results[0][key], results[1][key]
        assert np.array_equal(a.view(np.uint8), b.view(np.uint8)), key
