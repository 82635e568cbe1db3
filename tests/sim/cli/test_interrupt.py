"""Issue 50, class 8: Ctrl-C during ``dls report`` printed "done in 13 s", then a 43-line
KeyboardInterrupt traceback. Now: one line naming the files written before, exit status 130,
no "done". A real SIGINT to a real ``dls report`` process."""

import os
import signal
import subprocess
import sys
import time

from tests.paths import ROOT


def _report(out):
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    cmd = [sys.executable, "-m", "sim.cli.main", "report", "--quick", "--out", str(out)]
    return subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def _interrupt(proc):
    proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=120)
    return proc.returncode, out, err.strip().splitlines()


def test_ctrl_c_in_the_first_stage_says_nothing_was_written(tmp_path):
    proc = _report(tmp_path / "rep")
    for line in proc.stderr:  # working, not yet writing
        if "[1/" in line:
            break
    status, out, err = _interrupt(proc)
    assert (status, out) == (130, "")
    assert err[-1] == "dls report: interrupted (Ctrl-C); nothing written"
    assert not any("Traceback" in line or "done in" in line for line in err), err


def test_ctrl_c_after_figures_were_written_lists_them_in_one_line(tmp_path):
    out_dir = tmp_path / "rep"
    proc = _report(out_dir)
    deadline = time.monotonic() + 300
    while not (out_dir.is_dir() and any(out_dir.glob("*.png"))):
        assert proc.poll() is None and time.monotonic() < deadline
        time.sleep(0.05)
    status, out, err = _interrupt(proc)
    assert status == 130 and "done in" not in out + "".join(err)
    assert not any("Traceback" in line for line in err), err
    written = sorted(str(p) for p in out_dir.iterdir())
    head = f"dls report: interrupted (Ctrl-C); wrote {len(written)} file"
    assert err[-1].startswith(head) and err[-1].endswith(", ".join(written)), (err[-1], written)
    assert not (out_dir / "README.md").exists()
