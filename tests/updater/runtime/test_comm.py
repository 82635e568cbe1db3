"""Data-parallel tests with real processes under mpiexec (2 and 4 ranks).

Each test launches a script from tests/updater/runtime/mpi_scripts/ under mpiexec; every rank writes
its results to files in a temporary folder and the test compares them. A job that does not end
within its time limit is terminated and the test fails (a hang is a failure, not a wait). With 2
cores, the 4-rank runs oversubscribe the machine; MPICH needs no flag for that.
"""

import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from tests.paths import ROOT

SCRIPTS = Path(__file__).resolve().parent / "mpi_scripts"
LIMIT_S = 120  # per job; a job still running after this is treated as hung


def _find_mpiexec():
    beside_python = Path(sys.executable).parent / "mpiexec"
    return str(beside_python) if beside_python.exists() else shutil.which("mpiexec")


def _have_mpi4py():
    try:
        import mpi4py  # noqa: F401
    except ImportError:
        return False
    return True


MPIEXEC = _find_mpiexec()
pytestmark = [
    pytest.mark.mpi,
    pytest.mark.skipif(
        MPIEXEC is None or not _have_mpi4py(),
        reason="mpiexec or mpi4py not found; install the 'mpi' extra: pip install -e .[mpi]",
    ),
]


def _env():
    path = os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH")) if p)
    return dict(os.environ, PYTHONPATH=path, OMP_NUM_THREADS="1")


def run_job(script, ranks, *args, limit_s=LIMIT_S):
    """Run ``mpiexec -n ranks python script args``; return (exit status, output, seconds).

    Fails the test if the job is still running after ``limit_s`` (after terminating it).
    ``ranks=None`` runs the script as a plain process, without mpiexec.
    """
    cmd = [sys.executable, str(SCRIPTS / script), *map(str, args)]
    if ranks is not None:
        cmd = [MPIEXEC, "-n", str(ranks), *cmd]
    start = time.monotonic()
    proc = subprocess.Popen(
        cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=_env(), cwd=ROOT
    )
    try:
        out, _ = proc.communicate(timeout=limit_s)
    except subprocess.TimeoutExpired:
        proc.terminate()  # mpiexec forwards SIGTERM to every rank and cleans up
        try:
            out, _ = proc.communicate(timeout=15)
        except subprocess.TimeoutExpired:
            proc.kill()
            out, _ = proc.communicate()
        pytest.fail(f"{' '.join(cmd)} still running after {limit_s} s (hung):\n{out[-4000:]}")
    return proc.returncode, out, time.monotonic() - start


def run_ok(script, ranks, *args):
    status, out, _ = run_job(script, ranks, *args)
    assert status == 0, f"{script} failed with exit status {status}:\n{out[-4000:]}"


def load_ranks(folder, ranks):
    return [dict(np.load(folder / f"rank{r}.npz")) for r in range(ranks)]


# ----------------------------------------------------------------- all_reduce


def _reference(inputs, division, dtype):
    """Sum in float64 (the inputs are chosen so the float32 sum is exact in any order), round
    to float32, divide by the number of ranks in float32, round to the array's dtype."""
    total = np.sum(np.stack([x.astype(np.float64) for x in inputs]), axis=0).astype(np.float32)
    if division:
        total = total / np.float32(len(inputs))
    with np.errstate(over="ignore"):
        return total.astype(dtype)


@pytest.fixture(scope="module")
def comm_cases(tmp_path_factory):
    """``get(ranks)``: every rank's comm_cases.py results, one mpiexec run per rank count."""
    cache = {}

    def get(ranks):
        if ranks not in cache:
            folder = tmp_path_factory.mktemp(f"comm_cases_{ranks}")
            run_ok("comm_cases.py", ranks, folder)
            cache[ranks] = load_ranks(folder, ranks)
        return cache[ranks]

    return get


@pytest.mark.parametrize("ranks", [1, 2, 4])
def test_all_reduce_equals_numpy_on_every_rank(comm_cases, ranks):
    results = comm_cases(ranks)
    first = results[0]
    cases = sorted({k.rsplit("/", 2)[0] for k in first if k.endswith("/out")})
    assert len(cases) == 18, cases
    for key in (k for k in first if k.endswith("/out")):
        case, i = key.split("/")[:2]
        inputs = [res[f"{case}/{i}/in"] for res in results]
        outs = [res[key] for res in results]
        dtype = inputs[0].dtype
        # every rank holds the same bits, in the array's own dtype
        for rank, out in enumerate(outs):
            assert out.dtype == dtype, (key, rank, out.dtype)
            assert str(results[rank][f"{case}/{i}/dtype_after"]) == dtype.name, (key, rank)
            assert np.array_equal(out.view(np.uint8), outs[0].view(np.uint8)), (key, rank)
        division = "_mean" in case or case in ("random_f32", "half_grads")
        expected = _reference(inputs, division, dtype)
        if case == "random_f32":  # N(0, 1) values: float32 sums round, in any order
            np.testing.assert_allclose(outs[0], expected, rtol=1e-6, atol=ranks * 2.0**-22)
        elif case == "half_grads":  # float16 results: within float16 rounding
            np.testing.assert_allclose(outs[0], expected, rtol=2.0**-10)
        else:
            np.testing.assert_array_equal(outs[0], expected, err_msg=key)
    assert all(int(res["meta/size"]) == ranks for res in results)
    assert [int(res["meta/local_rank"]) for res in results] == list(range(ranks))


@pytest.mark.parametrize("ranks", [2, 4])
def test_all_reduce_float16_edges_and_nonfinite(comm_cases, ranks):
    """Pinned values: float16 sums that overflow become inf; the mean of equal maxima stays
    65504; subnormals add exactly; an inf or NaN on one rank reaches every rank."""
    results = comm_cases(ranks)
    edge = np.array([65504, -65504, 2.0**-24, 2.0**-14, 0, 1, 2048, 2049], np.float16)
    assert edge[-1] == 2048  # 2049 is not a float16: the input itself rounds to even
    for mode in ("packed", "inplace"):
        for res in results:
            total = res[f"edge_f16_{mode}_sum/0/out"]
            assert np.isposinf(total[0]) and np.isneginf(total[1])
            assert total[2] == np.float16(ranks * 2.0**-24)
            assert total[3] == np.float16(ranks * 2.0**-14)
            mean = res[f"edge_f16_{mode}_mean/0/out"]
            np.testing.assert_array_equal(mean, edge)
    for res in results:
        for name in ("nonfinite_f32", "nonfinite_f16"):
            out = res[f"{name}/0/out"]
            assert np.isposinf(out[0]) and np.isnan(out[1]) and (out[2:] == 0).all(), name
        assert res["flag/0/out"][0] == ranks // 2  # ranks with an odd number report 1.0


def test_all_reduce_bad_types_raise_on_every_rank(comm_cases):
    for res in comm_cases(2):
        errors = {k.split("/")[1]: str(v) for k, v in res.items() if k.startswith("error/")}
        assert errors["float64"].startswith("TypeError: data[0] has dtype float64")
        assert "float16 and float32" in errors["float64"]
        assert errors["division"] == "TypeError: division must be a bool, got 1"
        assert errors["numpy"].startswith("TypeError: data must be an nnabla.NdArray")
        assert "got data of type ndarray" in errors["numpy"]
        assert errors["comm"].startswith("TypeError: comm must be an mpi4py.MPI.Intracomm")
        assert errors["check_arguments"] == "TypeError: check_arguments must be a bool, got 'yes'"


@pytest.mark.parametrize(
    "mode, ranks, expected",
    [
        ("shape", 2, "data[0] as float32 array of shape (2, 3) on rank 0 but as float32 array "
         "of shape (3, 2) on rank 1"),
        ("count", 2, "data with 2 arrays on rank 0 but data with 3 arrays on rank 1"),
        ("dtype", 2, "data[1] as float16 array of shape (4,) on rank 0 but as float32"),
        ("flag", 2, "division=False on rank 0 but division=True on rank 1"),
        ("type", 2, "but as a ndarray (not an nnabla.NdArray) on rank 1"),
        ("shape", 4, "on rank 0 but as float32 array of shape (3, 2) on rank 3"),
    ],
)  # fmt: skip
def test_mismatched_arguments_raise_on_every_rank(tmp_path, mode, ranks, expected):
    """The odd rank passes something else AFTER a matching call (the steady state): every rank
    raises the same ValueError and the job exits non-zero instead of hanging."""
    status, out, _ = run_job("comm_mismatch.py", ranks, tmp_path, mode)
    assert status != 0, out[-3000:]
    messages = [(tmp_path / f"rank{r}.txt").read_text() for r in range(ranks)]
    assert len(set(messages)) == 1, messages
    assert messages[0].startswith("ValueError: all_reduce got "), messages[0]
    assert expected in messages[0], messages[0]


@pytest.mark.parametrize("ranks", [2, 4])
def test_a_failing_rank_ends_the_whole_job(tmp_path, ranks):
    """With abort_on_exception(), an exception on one rank while the others wait in
    all_reduce ends every rank with a non-zero exit status (run_job fails on a hang)."""
    status, out, _ = run_job("rank_fails.py", ranks, tmp_path)
    assert status != 0
    # the hook ran the previous excepthook (which printed the traceback and left this marker)
    # before MPI_Abort; MPICH's own "MPI_Abort" line is not checked: its output forwarding can
    # be torn down before that line arrives.
    last = ranks - 1
    marker = tmp_path / f"rank{last}.excepthook"
    assert marker.read_text() == "RuntimeError: simulated failure on the last rank"
    assert not any((tmp_path / f"rank{r}.excepthook").exists() for r in range(last))
    assert "RuntimeError: simulated failure on the last rank" in out
    assert all((tmp_path / f"rank{r}.started").exists() for r in range(ranks))
    assert not any((tmp_path / f"rank{r}.finished").exists() for r in range(ranks))


@pytest.mark.parametrize("mode", ["exit0", "raise", "fewer"])
def test_a_rank_that_ends_early_ends_the_whole_job(tmp_path, mode):
    """Without abort_on_exception() in the script: sys.exit(0), an exception or fewer steps on
    one rank hung the others in all_reduce; now the job ends with a non-zero status: rank 0,
    waiting in all_reduce for rank 1 that ended, aborts after the exit grace (2 s here)."""
    status, out, _ = run_job("rank_ends.py", 2, tmp_path, mode, 2)
    assert status != 0, out
    if mode != "raise":  # an exception aborts at once, through the excepthook
        assert "rank 1 ended while rank 0 waits for it in all_reduce" in out, out
    assert not (tmp_path / "rank0.finished").exists()


def test_a_rank_waiting_in_barrier_for_a_rank_that_ended_is_aborted(tmp_path):
    status, out, _ = run_job("rank_ends.py", 2, tmp_path, "barrier", 2)
    assert status != 0, out
    assert "rank 1 ended while rank 0 waits for it in barrier" in out, out
    assert not (tmp_path / "rank0.finished").exists()


@pytest.mark.parametrize("mode", ["together", "busy"])
def test_ranks_that_end_apart_but_without_waiting_for_each_other_exit_cleanly(tmp_path, mode):
    """ "busy": rank 0 works 3 s after rank 1 ended (examples/train_mpi.py evaluates so)."""
    status, out, _ = run_job("rank_ends.py", 2, tmp_path, mode, 600)
    assert status == 0 and "aborting" not in out, out
    assert (tmp_path / "rank0.finished").exists()
    assert (tmp_path / "rank1.finished").exists() == (mode == "together")


def test_rank_0_evaluating_past_the_grace_after_the_others_returned_is_left_alone(tmp_path):
    """Issue 40 item 8: rank 1 ends its script after training; rank 0 computes outside any
    collective for the grace + 2 s, then saves. It was aborted at the grace (rank 1's exit
    watch gave up waiting for it); now only a rank waiting in a collective is aborted."""
    status, out, _ = run_job("rank_ends.py", 2, tmp_path, "evaluate", 2)
    assert status == 0 and "aborting" not in out, out
    assert np.load(tmp_path / "rank0.saved.npy").shape == (64, 64)
    assert (tmp_path / "rank0.finished").exists() and (tmp_path / "rank1.finished").exists()


def test_missing_mpi4py_gives_an_install_hint():
    code = (
        "import sys; sys.modules['mpi4py'] = None\n"
        "from updater.runtime.comm import MPICommunicator\n"
        "try:\n    MPICommunicator()\n"
        "except ImportError as exc:\n    print('ImportError:', exc)\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, env=_env(), timeout=120
    ).stdout
    assert "ImportError: MPICommunicator needs mpi4py" in out
    assert "pip install -e .[mpi]" in out


def test_abort_on_exception_rejects_bad_exit_codes():
    from updater.runtime.comm import abort_on_exception

    for bad in (0, 256, 1.0, True):
        with pytest.raises(ValueError, match=r"exit_code must be an int in \[1, 255\], got"):
            abort_on_exception(exit_code=bad)


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
        env=_env(),
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
