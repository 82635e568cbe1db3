"""Checkpoints: an interrupted and resumed run equals the uninterrupted one bit for bit."""

import json

import nnabla as nn
import numpy as np
import pytest
from nnabla_models import TinyClassifier, assert_same_values, param_values, solver_state_values

from updater import DynamicScale
from updater.checkpoint import load_checkpoint, save_checkpoint
from updater.updater import DynamicLossScalingUpdater

pytestmark = pytest.mark.nnabla

SCOPE = "ck"
# Spikes (loss weight 1e3) overflow at the scales this run reaches (>= 2**10);
# growth_interval=3 makes the scale grow several times in 16 steps; hysteresis=2 means the
# resumed run must also restore the hysteresis counter (calls 9 and 10 are back to back).
SPIKES = {4: 1e3, 9: 1e3, 10: 1e3}
STEPS, SPLIT = 16, 7


@pytest.fixture(autouse=True)
def fresh_parameters():
    nn.clear_parameters()
    yield
    nn.clear_parameters()


def build(seed=0, solver="adam"):
    model = TinyClassifier(SCOPE, seed=seed, solver=solver, lr=0.01)
    policy = DynamicScale(
        init_scale=2.0**11, growth_interval=3, min_scale=2.0**10, max_scale=2.0**15, hysteresis=2
    )
    feed = model.feeder(weights=SPIKES)
    upd = DynamicLossScalingUpdater(model.solver, model.loss, feed, policy=policy)
    return model, feed, upd


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
    upd2 = DynamicLossScalingUpdater(model.solver, model.loss, feed)  # legacy defaults, scale 8
    loaded = load_checkpoint(path, upd2)
    assert upd2.scale == first[-1].new_scale and upd2.steps == SPLIT
    assert loaded["counters"]["steps"] == SPLIT
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
    save_checkpoint(path, upd)  # overwrite in place
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


def test_loading_into_a_different_graph_fails_clearly_and_changes_nothing(tmp_path):
    model, _, upd = build()
    upd.update()
    path = save_checkpoint(tmp_path / "a.ckpt", upd)
    nn.clear_parameters()
    other = TinyClassifier("other")
    feed = other.feeder()
    upd2 = DynamicLossScalingUpdater(other.solver, other.loss, feed)
    before = param_values(other.params)
    with pytest.raises(KeyError, match="not found in the current graph"):
        load_checkpoint(path, upd2)
    assert upd2.scale == 8.0
    assert_same_values(before, param_values(other.params))


def test_loading_a_non_checkpoint_file_fails_clearly(tmp_path):
    model, _, upd = build()
    path = tmp_path / "x.npz"
    np.savez(path, a=np.zeros(2))
    with pytest.raises(ValueError, match="not a checkpoint"):
        load_checkpoint(path, upd)
