"""The README's Python blocks run as written (all but the GPU one, which needs CUDA)."""

import re
import subprocess
import sys
from pathlib import Path

import pytest

from tests.paths import ROOT

BLOCKS = re.findall(r"```python\n(.*?)```", (ROOT / "README.md").read_text(), re.S)
GPU = [b for b in BLOCKS if '"cudnn"' in b]
MPI = [b for b in BLOCKS if "MPICommunicator()" in b]
QUICK_START = BLOCKS[0]
# a block that starts "# continues the quick start" runs after the quick start's code
PLAIN = [
    QUICK_START + b if b.startswith("# continues the quick start") else b
    for b in BLOCKS
    if b not in GPU + MPI
]


def test_the_readme_blocks_are_the_ones_these_tests_know():
    assert len(GPU) == 1 and len(MPI) == 1 and len(PLAIN) == 10
    assert "save_checkpoint" in QUICK_START


def run_script(tmp_path, code, *launcher):
    script = tmp_path / "block.py"
    script.write_text(code)
    proc = subprocess.run(
        [*launcher, sys.executable, str(script)],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    return proc.stdout


@pytest.mark.nnabla
@pytest.mark.parametrize("index", range(len(PLAIN)))
def test_readme_block_runs_as_written(tmp_path, index):
    out = run_script(tmp_path, PLAIN[index])
    if "save_checkpoint" in PLAIN[index]:
        assert (tmp_path / "run.ckpt.npz").exists()
        assert out.splitlines()[0].startswith("0 32768.0")
    if "run.h5" in PLAIN[index]:  # issue 30: nnabla's own .h5 of the trained weights
        assert (tmp_path / "run.h5").stat().st_size > 0
    if "cut.ckpt.npz" in PLAIN[index]:  # issue 20: a damaged checkpoint is refused by name
        assert "checkpoint cut.ckpt.npz: truncated or not an .npz archive" in out
    if "amp.rewrite" in PLAIN[index]:  # issue 14: the precision table says what runs where
        assert re.search(r"\| Affine \| half \| \d+ \|", out)
        assert re.search(r"\| SoftmaxCrossEntropy \| float \|", out)
    if "probe_overflow=True" in PLAIN[index]:  # issue 19: probed and measured
        from updater.trace import Trace

        trace = Trace.load(tmp_path / "probed.npz")
        assert trace.overflow_probed and trace.has_flush and trace.steps == 20
        assert float(out.split()[-1]) >= 4  # float32 once and three float16 scales, + probes
    elif "GradientRecorder" in PLAIN[index]:
        from updater.trace import Trace

        trace = Trace.load(tmp_path / "grads.npz")
        assert trace.steps == 20  # every 10th of 200 steps, or 20 steps in the per-layer block
        if "per_parameter=True" in PLAIN[index]:  # issue 12: the per-layer table is printed
            names = {f"fc{i}/affine/{p}" for i in (1, 2) for p in "Wb"}
            assert set(trace.layer_names) == names
            assert "| `(whole model)` |" in out and "| `fc1/affine/W` |" in out


@pytest.mark.mpi
@pytest.mark.nnabla
def test_readme_mpi_block_runs_under_mpiexec_on_two_ranks(tmp_path):
    mpiexec = Path(sys.executable).parent / "mpiexec"
    if not mpiexec.exists():
        pytest.skip("mpiexec not installed beside python; install the 'mpi' extra")
    run_script(tmp_path, MPI[0], str(mpiexec), "-n", "2")
