"""Checkpoints: an interrupted and resumed run equals the uninterrupted one bit for bit."""

import json
import os
import signal
import stat
import subprocess
import sys

import nnabla as nn
import numpy as np
import pytest

from tests.broken_files import rewrite
from tests.nnabla_models import (
    TinyBNClassifier,
    TinyClassifier,
    assert_same_values,
    param_values,
    solver_state_values,
)
from tests.paths import ROOT
from updater import DynamicScale
from updater.common import writing
from updater.driver.updater import DynamicLossScalingUpdater
from updater.runtime.checkpoint import load_checkpoint, save_checkpoint

pytestmark = pytest.mark.nnabla

SCOPE = "ck"
# Spikes (loss weight 1e3) overflow at the scales this run reaches (>= 2**10);
# growth_interval=3 makes the scale grow several times in 16 steps; hysteresis=2 means the
# resumed run must also restore the hysteresis counter (calls 9 and 10 are back to back).
SPIKES = {4: 1e3, 9: 1e3, 10: 1e3}
STEPS, SPLIT = 16, 7


def build(seed=0, solver="adam", spikes=SPIKES):
    model = TinyClassifier(SCOPE, seed=seed, solver=solver, lr=0.01)
    policy = DynamicScale(
        init_scale=2.0**11, growth_interval=3, min_scale=2.0**10, max_scale=2.0**15, hysteresis=2
    )
    feed = model.feeder(weights=spikes)
    upd = DynamicLossScalingUpdater(model.solver, model.loss, feed, policy=policy)
    return model, feed, upd


def snapshot(model, upd):
    return param_values(model.params), solver_state_values(model.solver), upd.state_dict()


def assert_unchanged(before, model, upd):
    assert_same_values(before[0], param_values(model.params))
    assert_same_values(before[1], solver_state_values(model.solver))
    assert before[2] == upd.state_dict()


@pytest.mark.parametrize("solver", ["adam", "momentum"])
def test_resumed_run_is_bit_identical_to_uninterrupted(tmp_path, solver):
    model, _, upd = build(solver=solver)
    full = [upd.update() for _ in range(STEPS)]
    full_params = param_values(model.params)
    full_states = solver_state_values(model.solver)
    trajectory = [(r.scale, r.new_scale, r.update_applied) for r in full]
    assert any(not r.update_applied for r in full), "the run must contain overflows"
    assert any(r.new_scale > r.scale for r in full), "the run must contain growth"

    nn.clear_parameters()
    model, feed, upd = build(solver=solver)
    first = [upd.update() for _ in range(SPLIT)]
    path = save_checkpoint(tmp_path / "run.ckpt", upd)

    nn.clear_parameters()
    model, feed, upd = build(seed=99, solver=solver)  # different init: loading must overwrite
    upd2 = DynamicLossScalingUpdater(model.solver, model.loss, feed)  # legacy defaults
    report = load_checkpoint(path, upd2)
    assert upd2.scale == first[-1].new_scale and upd2.steps == SPLIT
    assert report.updater_state["counters"]["steps"] == SPLIT
    assert report.missing == [] and report.unexpected == []
    feed.calls = upd2.batches  # the data pipeline resumes where the run stopped
    rest = [upd2.update() for _ in range(STEPS - SPLIT)]

    resumed = [(r.scale, r.new_scale, r.update_applied) for r in first + rest]
    assert resumed == trajectory
    assert [r.step for r in rest] == list(range(SPLIT, STEPS))
    assert_same_values(full_params, param_values(model.params))
    assert_same_values(full_states, solver_state_values(model.solver))


def test_checkpoint_is_one_file_written_atomically(tmp_path):
    model, _, upd = build()
    for _ in range(3):
        upd.update()
    path = tmp_path / "a.ckpt"
    save_checkpoint(path, upd)
    save_checkpoint(path, upd)  # its own file: replaced in place
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a.ckpt"]
    with np.load(path, allow_pickle=False) as z:
        state = json.loads(str(z["updater_state"]))
        names = set(z.files)
    assert state == upd.state_dict()
    assert {f"param/{SCOPE}/fc1/affine/W", "solver_t/fc1/affine/W", "format_version"} <= names


def test_failed_save_leaves_the_previous_checkpoint_intact(tmp_path):
    model, _, upd = build()
    upd.update()
    path = tmp_path / "a.ckpt"
    save_checkpoint(path, upd)
    before = path.read_bytes()
    upd.update()
    with pytest.raises(TypeError):
        # a parameter that is not an nnabla Variable makes the save fail mid-way
        save_checkpoint(path, upd, params={"bad": object()})
    assert path.read_bytes() == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a.ckpt"]


def test_a_save_never_replaces_a_file_it_did_not_write_unless_asked(tmp_path):
    model, _, upd = build()
    upd.update()
    path = tmp_path / "a.ckpt"
    path.write_bytes(b"my own results")
    with pytest.raises(writing.UnsafeOutputError, match="a.ckpt: not written by dls"):
        save_checkpoint(path, upd)
    assert path.read_bytes() == b"my own results"
    save_checkpoint(path, upd, overwrite=True)
    assert load_checkpoint(path, upd) is not None


def test_loading_into_a_different_graph_fails_clearly_and_changes_nothing(tmp_path):
    model, _, upd = build()
    upd.update()
    path = save_checkpoint(tmp_path / "a.ckpt", upd)
    nn.clear_parameters()
    other = TinyClassifier("other")
    feed = other.feeder()
    upd2 = DynamicLossScalingUpdater(other.solver, other.loss, feed)
    before = snapshot(other, upd2)
    with pytest.raises(KeyError, match="not found in the current graph"):
        load_checkpoint(path, upd2)
    assert_unchanged(before, other, upd2)


def test_loading_a_non_checkpoint_file_fails_clearly(tmp_path):
    model, _, upd = build()
    path = tmp_path / "x.npz"
    np.savez(path, a=np.zeros(2))
    with pytest.raises(ValueError, match="not a checkpoint"):
        load_checkpoint(path, upd)


# ---------------------------------------------------------------- solver states never written


def states_unwritten(solver):
    """True when every solver state array is still nnabla's lazy zero (never written)."""
    return all(v.data.zeroing for st in solver.get_states().values() for v in st.pstate.values())


def train(upd, feed, steps):
    feed.calls = upd.batches
    return [(r.scale, r.new_scale, r.update_applied) for r in (upd.update() for _ in range(steps))]


@pytest.mark.parametrize("target", ["fresh", "trained"])
@pytest.mark.parametrize("before", ["no_update", "overflowing_first_step"])
@pytest.mark.parametrize("solver", ["momentum", "adam"])
def test_checkpoint_before_the_first_applied_update_round_trips(tmp_path, solver, before, target):
    spikes = {0: 1e3} if before == "overflowing_first_step" else {}
    model, feed, upd = build(solver=solver, spikes=spikes)
    if before == "overflowing_first_step":
        assert not upd.update().update_applied
    assert states_unwritten(model.solver)  # the case under test: nnabla's lazy zeros
    path = save_checkpoint(tmp_path / "a.ckpt", upd)
    expected = train(upd, feed, 5)
    params, states = param_values(model.params), solver_state_values(model.solver)

    nn.clear_parameters()
    model, feed, upd = build(seed=99, solver=solver, spikes=spikes)
    if target == "trained":  # states written and t > 0: loading must reset them
        train(upd, feed, 3)
        assert not states_unwritten(model.solver)
    load_checkpoint(path, upd)
    assert train(upd, feed, 5) == expected
    assert_same_values(params, param_values(model.params))
    assert_same_values(states, solver_state_values(model.solver))


@pytest.mark.parametrize("target", ["fresh", "trained"])
def test_batch_norm_running_statistics_in_the_solver_round_trip(tmp_path, target):
    # nn.get_parameters(grad_only=False): the running mean/var states are never written.
    model = TinyBNClassifier(SCOPE, solver="adam", lr=0.01)
    feed = model.feeder()
    upd = DynamicLossScalingUpdater(model.solver, model.loss, feed, scale=8.0)
    train(upd, feed, 3)
    states = model.solver.get_states()
    running = ["bn1/bn/mean", "bn1/bn/var"]  # need_grad False: states never written, t == 0
    assert all(not model.params[n].need_grad and states[n].t == 0 for n in running)
    assert all(states[n].pstate[k].data.zeroing for n in running for k in ("mean", "var"))
    path = save_checkpoint(tmp_path / "bn.ckpt", upd)
    expected = train(upd, feed, 4)
    params, states = param_values(model.params), solver_state_values(model.solver)

    nn.clear_parameters()
    model = TinyBNClassifier(SCOPE, seed=99, solver="adam", lr=0.01)
    feed = model.feeder()
    upd = DynamicLossScalingUpdater(model.solver, model.loss, feed, scale=8.0)
    if target == "trained":
        train(upd, feed, 2)
    load_checkpoint(path, upd)
    assert train(upd, feed, 4) == expected
    assert_same_values(params, param_values(model.params))
    assert_same_values(states, solver_state_values(model.solver))


# ---------------------------------------------------------------- strict and non-strict loading


def test_strict_load_rejects_a_parameter_missing_from_the_file(tmp_path):
    model, _, upd = build()
    upd.update()
    w2 = "fc2/affine/W"
    path = save_checkpoint(tmp_path / "a.ckpt", upd)
    rewrite(path, lambda arrays: arrays.pop(f"param/{SCOPE}/{w2}"))
    saved = param_values(model.params)
    nn.clear_parameters()
    model, _, upd = build(seed=99)
    before = snapshot(model, upd)
    with pytest.raises(KeyError, match=f"missing from the checkpoint.*param/{SCOPE}/{w2}"):
        load_checkpoint(path, upd)
    assert_unchanged(before, model, upd)

    report = load_checkpoint(path, upd, strict=False)
    assert report.missing == [f"param/{SCOPE}/{w2}"] and report.unexpected == []
    assert report.updater_state == upd.state_dict()
    saved[w2] = before[0][w2]  # left as it was; everything else loaded
    assert_same_values(saved, param_values(model.params))


@pytest.mark.parametrize("into", ["sgd", "momentum"])
def test_strict_load_rejects_solver_states_of_another_solver_type(tmp_path, into, caplog):
    model, _, upd = build(solver="adam")
    upd.update()
    path = save_checkpoint(tmp_path / "adam.ckpt", upd)
    saved = param_values(model.params)
    nn.clear_parameters()
    model, _, upd = build(seed=99, solver=into)
    upd.update()
    before = snapshot(model, upd)
    with pytest.raises(KeyError, match="solver/fc1/affine/W/mean") as err:
        load_checkpoint(path, upd)
    assert "solver/fc1/affine/W/var" in str(err.value)
    if into == "momentum":
        assert "solver/fc1/affine/W/m" in str(err.value)
    assert_unchanged(before, model, upd)

    report = load_checkpoint(path, upd, strict=False)
    assert "solver/fc2/affine/b/mean" in report.unexpected
    assert {"solver_t/fc2/affine/b"} <= set(report.unexpected) & set(report.missing)
    assert ("solver/fc2/affine/b/m" in report.missing) == (into == "momentum")
    assert "did not match" in caplog.text
    assert_same_values(saved, param_values(model.params))  # parameters loaded
    assert_same_values(before[1], solver_state_values(model.solver))  # solver states kept


def test_a_rejected_updater_state_changes_nothing(tmp_path):
    model, _, upd = build()
    upd.update()
    path = save_checkpoint(tmp_path / "a.ckpt", upd)

    def newer(arrays):
        state = json.loads(str(arrays["updater_state"]))
        state["format_version"] = 99  # load_state_dict raises before changing anything
        arrays["updater_state"] = np.array(json.dumps(state))

    rewrite(path, newer)
    nn.clear_parameters()
    model, _, upd = build(seed=99, solver="adam")
    before = snapshot(model, upd)
    with pytest.raises(ValueError, match="format_version"):
        load_checkpoint(path, upd)
    assert_unchanged(before, model, upd)


# ---------------------------------------------------------------- files: mode and orphans


@pytest.mark.parametrize("umask", [0o022, 0o027], ids=["022", "027"])
def test_checkpoint_file_mode_honours_the_umask(tmp_path, umask):
    model, _, upd = build()
    upd.update()
    old = os.umask(umask)
    try:
        save_checkpoint(tmp_path / "a.ckpt", upd)
        np.savez(tmp_path / "b.npz", a=np.zeros(2))
    finally:
        os.umask(old)
    modes = {p.name: stat.S_IMODE(p.stat().st_mode) for p in tmp_path.iterdir()}
    mode = 0o666 & ~umask
    assert modes == {"a.ckpt": mode, "b.npz": mode}


KILLED_SAVE = """
import os, signal, sys
sys.path.insert(0, {root!r})
import nnabla as nn
from tests.nnabla_models import TinyClassifier
from updater.runtime.checkpoint import save_checkpoint
from updater.driver.updater import DynamicLossScalingUpdater
model = TinyClassifier("killed")
upd = DynamicLossScalingUpdater(model.solver, model.loss, model.feeder())
upd.update()
os.fsync = lambda fd: os.kill(os.getpid(), signal.SIGKILL)  # killed once the data is written
save_checkpoint({path!r}, upd)
"""


def test_a_save_killed_midway_leaves_no_orphan_after_the_next_save(tmp_path):
    script = KILLED_SAVE.format(root=str(ROOT), path=str(tmp_path / "a.ckpt"))
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, timeout=120)
    assert proc.returncode == -signal.SIGKILL, proc.stderr.decode()
    (orphan,) = tmp_path.iterdir()  # the full-size temporary file, not the checkpoint
    assert orphan.name != "a.ckpt" and orphan.stat().st_size > 1000
    model, _, upd = build()
    upd.update()
    save_checkpoint(tmp_path / "c.ckpt", upd)  # any save in the folder removes it
    assert sorted(p.name for p in tmp_path.iterdir()) == ["c.ckpt"]


def test_a_save_never_deletes_the_temporary_file_of_a_live_save(tmp_path):
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    live = writing._temp_path(tmp_path / "b.ckpt")  # this process: alive
    dead_here = live.name.replace(f".{os.getpid()}.", f".{dead.pid}.", 1)  # a killed save
    elsewhere = dead_here.replace(f".{writing._HOST}.", ".otherhost.", 1)  # cannot tell: keep
    other_namespace = dead_here.replace(f".{writing._NAMESPACE}.", ".4026531999.", 1)  # keep
    # a user's file that only looks like the old pattern (no token): never touched
    users = f"thesis.tex.{writing._HOST}.{dead.pid}.0123abcd.part"
    kept = [live.name, elsewhere, other_namespace, users, f"user.{dead.pid}.tmp"]
    for name in [*kept, dead_here]:
        (tmp_path / name).write_bytes(b"being written")
    model, _, upd = build()
    upd.update()
    save_checkpoint(tmp_path / "c.ckpt", upd)
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(["c.ckpt", *kept])
