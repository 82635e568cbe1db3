"""``dls``'s memory estimate, which refuses a simulation too large before it starts: it
covers the measured peak (tracemalloc) and the peak resident memory of a real run."""

import subprocess
import sys
import tracemalloc
from pathlib import Path

import pytest

from sim.cli.main import main
from sim.replay.run import memory_estimate


@pytest.mark.parametrize(
    "argv, runs, policies",
    [
        (["simulate", "--runs", "16"], 16, 1),
        (
            "sweep --grid growth_interval=10,20,40,80 --runs 8 --families stationary,nan".split(),
            8,
            4,
        ),
    ],
)
def test_memory_estimate_covers_the_measured_peak(argv, runs, policies, capsys):
    steps = 10000
    tracemalloc.start()
    try:
        assert main([*argv, "--steps", str(steps)]) == 0
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    estimate = memory_estimate(steps, runs, policies)
    assert peak <= estimate <= 2 * peak, (peak, estimate)


DLS = Path(sys.executable).parent / "dls"
PEAK_RSS = (
    "import resource, subprocess, sys\n"
    "subprocess.run(sys.argv[1:], check=True, stdout=subprocess.DEVNULL)\n"
    "print(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss * 1024)\n"
)


def _peak_rss(*args: str) -> int:
    """Peak resident bytes of ``dls args`` run alone, in a fresh process (its own children)."""
    cmd = [sys.executable, "-c", PEAK_RSS, str(DLS), *args]
    return int(subprocess.run(cmd, capture_output=True, text=True, check=True).stdout)


@pytest.mark.parametrize("steps, runs", [(1, 1_000_000), (1000, 2000)])
def test_memory_estimate_is_within_a_quarter_of_the_peak_resident_memory(steps, runs):
    base = _peak_rss("simulate", "--steps", "1", "--runs", "1")  # the interpreter's own
    peak = _peak_rss("simulate", "--steps", str(steps), "--runs", str(runs)) - base
    estimate = memory_estimate(steps, runs)
    assert 0.75 * peak <= estimate <= 1.25 * peak, (peak, estimate)
