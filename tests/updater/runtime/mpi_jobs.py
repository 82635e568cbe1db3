"""Running test scripts under mpiexec for the data-parallel tests: the job runner with its time
limit, the marks that skip without MPI, and the ranks' result files."""

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
MPI_MARKS = [
    pytest.mark.mpi,
    pytest.mark.skipif(
        MPIEXEC is None or not _have_mpi4py(),
        reason="mpiexec or mpi4py not found; install the 'mpi' extra: pip install -e .[mpi]",
    ),
]
"""The marks of every module that runs jobs under mpiexec."""


def job_env():
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
        cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=job_env(), cwd=ROOT
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
