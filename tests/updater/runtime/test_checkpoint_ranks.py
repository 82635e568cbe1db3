"""Checkpoints with several workers, as docs/guide/workers.md says (issue 52): rank 0 saves and
every rank loads and trains on, identical; ranks saving the same path at once leave a checkpoint
that loads; a rank that did not load is refused at its first step, before training."""

import numpy as np
import pytest

from tests.updater.runtime.mpi_jobs import MPI_MARKS, load_ranks, run_job

pytestmark = [*MPI_MARKS, pytest.mark.nnabla]


@pytest.mark.parametrize("save", ["rank0", "every"])
def test_every_rank_loads_the_checkpoint_one_or_every_rank_saved(tmp_path, save):
    status, out, _ = run_job("checkpoint_ranks.py", 2, tmp_path, save, "every")
    assert status == 0, out
    assert [p.read_text() for p in sorted(tmp_path.glob("rank*.steps"))] == ["5", "5"]
    rank0, rank1 = load_ranks(tmp_path, 2)
    for key in rank0:
        assert np.array_equal(rank0[key].view(np.uint8), rank1[key].view(np.uint8)), key
    assert sorted(p.name for p in tmp_path.iterdir() if "ckpt" in p.name) == ["run.ckpt.npz"]


def test_a_rank_that_did_not_load_is_refused_before_any_step(tmp_path):
    status, out, _ = run_job("checkpoint_ranks.py", 2, tmp_path, "rank0", "rank0")
    assert status != 0, out
    assert "settings: scale_state.good_steps is 0 on rank 1 and 3 on rank 0" in out, out
    assert not list(tmp_path.glob("rank*.steps"))
