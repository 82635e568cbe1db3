"""Several recordings of one model pooled (sim/replay/pool.py, ``dls simulate/sweep/tune --trace A
--trace B``; issue 32, item 5): the runs are drawn across the recordings, so the spread holds
both."""

import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from sim.replay.pool import TracePool, pool_by_name, simulate_pooled
from sim.replay.run import simulate_many
from updater.policy import StaticScale
from updater.trace import NBINS, Trace

DLS = Path(sys.executable).parent / "dls"


def _recording(overflowing_steps, name="model", steps=40) -> Trace:
    """A probed recording in which ``overflowing_steps`` steps overflow from 2**10 on."""
    counts = np.zeros((steps, NBINS), np.int64)
    counts[:, 60] = 3
    over = np.full(steps, np.inf)
    over[:overflowing_steps] = 2.0**10
    finite = np.where(np.isinf(over), 2.0**15, 2.0**9)
    return Trace(
        counts,
        np.zeros(steps),
        np.full(steps, 1e-3),
        np.zeros(steps, bool),
        name,
        over,
        overflow_probed=True,
        finite_scale=finite,
    )


def test_the_runs_are_drawn_across_the_recordings():
    pool = TracePool([_recording(5), _recording(20)])
    assert pool.name == "model (2 recordings)" and pool.steps == 40
    result = simulate_pooled([StaticScale(2.0**10)], pool, runs=5, jitter=0.0)[0]
    assert result.runs == 5 and result.trace_name == "model (2 recordings)"
    assert sorted(result.skipped.sum(axis=0).tolist()) == [5, 5, 5, 20, 20]
    assert sorted(result.metrics["skipped"].tolist()) == [5, 5, 5, 20, 20]
    one = simulate_pooled([StaticScale(2.0**10)], _recording(5), runs=3, jitter=0.25)[0]
    alone = simulate_many([StaticScale(2.0**10)], _recording(5), runs=3, jitter=0.25)[0]
    np.testing.assert_array_equal(one.scale, alone.scale)


def test_a_pool_holds_recordings_of_one_model():
    with pytest.raises(ValueError, match="one name, one step count and one every"):
        TracePool([_recording(5), _recording(5, name="other")])
    with pytest.raises(ValueError, match="one name, one step count and one every"):
        TracePool([_recording(5), _recording(5, steps=30)])
    with pytest.raises(ValueError, match="runs must be at least the number of pooled"):
        simulate_pooled([StaticScale(8.0)], TracePool([_recording(1), _recording(2)]), runs=1)
    grouped = pool_by_name([_recording(1), _recording(2, name="b"), _recording(3)])
    assert [g.name for g in grouped] == ["model (2 recordings)", "b"]


def _dls(*argv, cwd):
    return subprocess.run([str(DLS), *argv], capture_output=True, text=True, timeout=300, cwd=cwd)


def test_dls_simulate_sweep_and_tune_pool_recordings_of_one_model(tmp_path):
    a = _recording(5).save(tmp_path / "a.npz")
    b = _recording(20).save(tmp_path / "b.npz")
    other = _recording(3, name="other").save(tmp_path / "o.npz")
    done = _dls(
        *"simulate --policy static --set scale=2**10 --trace".split(),
        str(a),
        "--trace",
        str(b),
        "--runs",
        "4",
        "--jitter",
        "0",
        cwd=tmp_path,
    )
    assert done.returncode == 0, done.stderr
    assert "trace: model (2 recordings) (40 steps)" in done.stdout
    row = r"\nstatic +model \(2 recordings\) +4 +12\.5 "  # runs, overflows (5 + 20) / 2
    assert re.search(row, done.stdout), done.stdout
    bad = _dls("simulate", "--trace", str(a), "--trace", str(other), cwd=tmp_path)
    assert bad.returncode == 2 and "recordings of one model" in bad.stderr
    tuned = _dls("tune", "--trace", str(a), "--trace", str(b), "--runs", "2", cwd=tmp_path)
    assert tuned.returncode == 0, tuned.stderr
    assert "x 1 trace(s) (model (2 recordings))" in tuned.stdout
    swept = _dls(
        "sweep",
        "--grid",
        "growth_interval=50,100",
        "--families",
        "",
        "--trace",
        str(a),
        "--trace",
        str(b),
        "--runs",
        "2",
        cwd=tmp_path,
    )
    assert swept.returncode == 0, swept.stderr
    assert "model (2 recordings)" in swept.stdout


def test_dls_simulate_and_tune_group_files_by_the_same_rule_and_say_so(tmp_path):
    """Issue 39: tune grouped differently-named recordings into separate models without a word
    where simulate refused them; both group with pool_by_name and name the rule."""
    a = _recording(5).save(tmp_path / "a.npz")
    other = _recording(3, name="other").save(tmp_path / "o.npz")
    bad = _dls("simulate", "--trace", str(a), "--trace", str(other), cwd=tmp_path)
    assert bad.returncode == 2 and "recordings pool by their trace name" in bad.stderr
    tuned = _dls("tune", "--trace", str(a), "--trace", str(other), "--runs", "2", cwd=tmp_path)
    assert tuned.returncode == 0, tuned.stderr
    assert "note: tuning over 2 models, averaged (model, other)" in tuned.stderr
    assert "recordings pool by their trace name" in tuned.stderr
    one = _dls("tune", "--trace", str(a), "--runs", "2", cwd=tmp_path)
    assert one.returncode == 0 and "note:" not in one.stderr
