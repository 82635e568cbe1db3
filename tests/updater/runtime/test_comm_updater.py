"""Data-parallel training with the real updater under mpiexec (2 and 4 ranks): overflow and bad
data skip on every rank, ranks stay identical, averaging equals one process on the combined
batch, the settings agreement and a recorder on one rank. Jobs run as in test_comm.py."""

import subprocess
import sys

import numpy as np
import pytest

from tests.paths import ROOT
from tests.updater.runtime.mpi_jobs import (
    LIMIT_S,
    MPI_MARKS,
    MPIEXEC,
    job_env,
    load_ranks,
    run_job,
    run_ok,
)

pytestmark = MPI_MARKS

# ----------------------------------------------------------------- with the real updater


@pytest.mark.slow
@pytest.mark.parametrize("ranks", [2, 4])
def test_overflow_on_one_rank_skips_everywhere_and_ranks_stay_identical(tmp_path, ranks):
    """300 steps on cpu:half, grads=None. A 1e4 loss weight on one rank makes every rank skip
    that step and halve the scale; an inf in one rank's input (bad data, issue 21) makes every
    rank skip it and keep the scale; after 300 steps all ranks hold bit-identical parameters
    and the identical scale trajectory."""
    steps = 300
    run_ok("updater_agree.py", ranks, tmp_path, "all", steps)
    results = load_ranks(tmp_path, ranks)
    records = results[0]["records"]
    for res in results[1:]:
        np.testing.assert_array_equal(res["records"], records)  # scale, flags, every step
        for key in (k for k in res if k.startswith("param/")):
            a, b = res[key], results[0][key]
            assert a.dtype == b.dtype and np.array_equal(a.view(np.uint8), b.view(np.uint8)), key
    injected = np.any([res["injected"] for res in results], axis=0)
    assert injected.sum() == 14
    assert all(res["injected"].sum() < injected.sum() for res in results)  # one rank at a time
    bad = np.any([res["bad_data"] for res in results], axis=0)
    spike = injected & ~bad
    assert bad.sum() == 8 and spike.sum() == 6
    scale, attempts, applied, new_scale = records[:, 1], records[:, 2], records[:, 3], records[:, 4]
    assert (attempts == 1).all() and not applied[injected].any()
    np.testing.assert_array_equal(new_scale[spike], scale[spike] / 2)
    np.testing.assert_array_equal(new_scale[bad], scale[bad])  # bad data: the scale stays
    np.testing.assert_array_equal(records[:, 5], bad)  # every rank reports the bad batch
    assert (new_scale > scale).sum() >= 8  # the scale also grew, so the trajectory is busy
    assert set(np.flatnonzero(applied == 0)) >= set(np.flatnonzero(injected))
    for key in (k for k in results[0] if k.startswith("param/")):
        assert np.isfinite(results[0][key]).all(), key


@pytest.mark.slow
@pytest.mark.parametrize("ranks", [2, 4])
def test_inf_in_an_unreduced_gradient_still_skips_on_every_rank(tmp_path, ranks):
    """grads covers only fc2; the inf in one rank's input lands in fc1/W's gradient, which is
    not all-reduced. The other ranks' gradients are all finite, yet every rank skips the bad
    batch and keeps its scale identically, so the reduced (fc2) parameters stay
    bit-identical."""
    run_ok("updater_agree.py", ranks, tmp_path, "partial", 80)
    results = load_ranks(tmp_path, ranks)
    records = results[0]["records"]
    for res in results[1:]:
        np.testing.assert_array_equal(res["records"], records)
    bad_steps = np.flatnonzero(np.any([res["injected"] for res in results], axis=0))
    np.testing.assert_array_equal(bad_steps, [5, 42, 79])
    for k in bad_steps:
        bad_rank = [r for r, res in enumerate(results) if res["injected"][k]]
        assert len(bad_rank) == 1
        for r, res in enumerate(results):
            assert res["local_finite"][k] == (r != bad_rank[0]), (k, r)  # only one rank saw it
        assert records[k, 2] == 1 and records[k, 3] == 0  # ...and every rank skipped once
        assert records[k, 4] == records[k, 1] and records[k, 5] == 1  # bad data: scale stays
    assert records[:, 3].sum() == 80 - 3
    for key in ("param/fc2/affine/W", "param/fc2/affine/b"):
        for res in results[1:]:
            assert np.array_equal(res[key].view(np.uint8), results[0][key].view(np.uint8))


DP_TOLERANCE = 1e-5  # absolute, per parameter per step; parameters are O(1)


@pytest.mark.slow
def test_two_ranks_with_averaging_equal_one_process_on_the_combined_batch(tmp_path):
    """cpu float context, 30 steps, Momentum: 2 ranks x batch 8 with average_grads=True against
    one process on the 16 samples. Same scale trajectory and skipped step (an inf in rank 1's
    batch at step 7); parameters within DP_TOLERANCE after every step (float32 summation
    order is the only difference: observed about 2e-7)."""
    steps = 30
    run_ok("updater_dp_equiv.py", 2, tmp_path, "dp", steps)
    run_ok("updater_dp_equiv.py", None, tmp_path, "single", steps)
    dp0, dp1, single = (np.load(tmp_path / f"{n}.npz") for n in ("dp_rank0", "dp_rank1", "single"))
    np.testing.assert_array_equal(dp0["records"], single["records"])
    np.testing.assert_array_equal(dp1["records"], single["records"])
    assert single["records"][7, 3] == 0 and single["records"][:, 3].sum() == steps - 1
    assert np.array_equal(dp0["params"], dp1["params"])
    diff = np.abs(dp0["params"] - single["params"]).max(axis=1)
    assert (diff <= DP_TOLERANCE).all(), diff
    moved = np.abs(single["params"][-1] - single["params"][0]).max()
    assert moved > 100 * DP_TOLERANCE  # training moved the parameters far beyond the tolerance


@pytest.mark.slow
def test_example_trains_data_parallel_and_reports(tmp_path):
    """examples/train_mpi.py on 2 ranks (a short run): it finishes, the ranks end with
    bit-identical parameters, and rank 0 alone prints the accuracy and the scale summary."""
    cmd = [MPIEXEC, "-n", "2", sys.executable, str(ROOT / "examples" / "train_mpi.py")]
    done = subprocess.run(
        [*cmd, "--steps", "60"],
        capture_output=True,
        text=True,
        env=job_env(),
        cwd=ROOT,
        timeout=LIMIT_S,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    out = done.stdout
    assert out.count("test accuracy:") == 1
    assert "ranks: 2, steps: 60, global batch: 64" in out
    assert "parameters bit-identical on all ranks: True" in out
    accuracy = float(out.split("test accuracy:")[1].split()[0])
    assert accuracy > 0.5  # 60 steps of a 64-64-10 MLP: far above chance (0.1)
    assert "loss scale: 4096 -> 8192; grew 1 times" in out  # growth_interval=50


@pytest.mark.slow
def test_a_parameter_added_to_the_solver_later_is_all_reduced(tmp_path):
    """grads=None follows the solver's current parameters: 'extra' joins after 2 steps and
    its gradient (different data on each rank) is averaged, so the ranks stay identical."""
    run_ok("updater_new_params.py", 2, tmp_path)
    results = load_ranks(tmp_path, 2)
    assert "np/extra" in results[0]
    for key in results[0]:
        a, b = results[0][key], results[1][key]
        assert np.array_equal(a.view(np.uint8), b.view(np.uint8)), key


SETTINGS = {
    "growth_interval": "policy.growth_interval",
    "accum_grad": "accum_grad",
    "lr": "solver.learning_rate",
    "adam": "solver.type",
}
"""rank_settings.py's modes whose ranks differ, and the setting the refusal names."""


@pytest.mark.parametrize("mode", sorted(SETTINGS))
def test_ranks_with_different_settings_refuse_to_start(tmp_path, mode):
    status, out, _ = run_job("rank_settings.py", 2, tmp_path, mode)
    assert status != 0, out
    assert f"ranks run different updater settings: {SETTINGS[mode]} is" in out, out
    assert not list(tmp_path.glob("rank*.steps"))  # no rank trained a step


def test_ranks_with_the_same_settings_train(tmp_path):
    status, out, _ = run_job("rank_settings.py", 2, tmp_path, "same")
    assert status == 0, out
    assert [p.read_text() for p in sorted(tmp_path.glob("rank*.steps"))] == ["3", "3"]


@pytest.mark.parametrize("mode", ["recorder", "probing"])
def test_a_recorder_on_one_rank_changes_no_rank_s_training(tmp_path, mode):
    """A recorder on rank 0 only, plain or probing (its probes enter no collective), is not a
    setting the ranks compare, and every rank's parameters come out bit for bit as without it."""
    for folder in ("same", mode):
        (tmp_path / folder).mkdir()
    run_ok("rank_settings.py", 2, tmp_path / "same", "same")
    status, out, _ = run_job("rank_settings.py", 2, tmp_path / mode, mode, limit_s=90)
    assert status == 0, out
    assert (tmp_path / mode / "trace.npz").exists()
    for without, recorded in zip(load_ranks(tmp_path / "same", 2), load_ranks(tmp_path / mode, 2)):
        for key in without:
            assert np.array_equal(without[key].view(np.uint8), recorded[key].view(np.uint8)), key


def test_a_rank_that_ends_before_its_first_update_stops_the_others_after_the_grace(tmp_path):
    """Issue 50, class 7: rank 1 builds the updater and ends before its first update; rank 0's
    first update waited for ever in the settings check's allgather (still blocked at 90 s).
    Now it aborts the job the exit grace (2 s here) after rank 1 ended, naming it."""
    status, out, seconds = run_job("rank_ends_before_update.py", 2, tmp_path, 2, limit_s=90)
    assert status != 0, out
    assert "rank 1 ended while rank 0 waits for it in the check of the updater settings" in out
    assert (tmp_path / "rank0.started").exists() and (tmp_path / "rank1.started").exists()
    assert not (tmp_path / "rank0.finished").exists()
    assert seconds < 60, seconds
