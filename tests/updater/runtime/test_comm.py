"""The communicator under mpiexec (2 and 4 ranks): all_reduce, argument mismatches, and a job
that ends as a whole when one rank fails or ends early.

Each test launches a script from tests/updater/runtime/mpi_scripts/ under mpiexec; every rank writes
its results to files in a temporary folder and the test compares them. A job that does not end
within its time limit is terminated and the test fails (a hang is a failure, not a wait). With 2
cores, the 4-rank runs oversubscribe the machine; MPICH needs no flag for that.
"""

import subprocess
import sys

import numpy as np
import pytest

from tests.updater.runtime.mpi_jobs import MPI_MARKS, job_env, load_ranks, run_job, run_ok

pytestmark = MPI_MARKS

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
        [sys.executable, "-c", code], capture_output=True, text=True, env=job_env(), timeout=120
    ).stdout
    assert "ImportError: MPICommunicator needs mpi4py" in out
    assert "pip install -e .[mpi]" in out


def test_abort_on_exception_rejects_bad_exit_codes():
    from updater.runtime.comm import abort_on_exception

    for bad in (0, 256, 1.0, True):
        with pytest.raises(ValueError, match=r"exit_code must be an int in \[1, 255\], got"):
            abort_on_exception(exit_code=bad)
