"""Checkpoint loads are all-or-nothing (issue 29, item 1): every value is checked before the
first write, the solver's step count against what nnabla holds, and the updater's saved state
against its policy's invariants and its counters against each other. Each bad file raises a
ValueError naming the file and the problem, and nothing changes."""

import json

import nnabla as nn
import numpy as np
import pytest

from tests.broken_files import rewrite
from tests.updater.runtime.test_checkpoint import assert_unchanged, build, snapshot
from updater import DynamicLossScalingUpdater, StaticScale
from updater.runtime.checkpoint import load_checkpoint, save_checkpoint


def solver_step(t):
    def change(arrays):
        for key in [k for k in arrays if k.startswith("solver_t/")]:
            arrays[key] = np.array(t)

    return change


def updater_state(edit):
    def change(arrays):
        state = json.loads(str(arrays["updater_state"]))
        edit(state)
        arrays["updater_state"] = np.array(json.dumps(state))

    return change


def scale_state(key, value):
    return updater_state(lambda s: s["scale_state"].__setitem__(key, value))


def counter(key, value):
    return updater_state(lambda s: s["counters"].__setitem__(key, value))


def counters(**values):
    return updater_state(lambda s: s["counters"].update(values))


CASES = {
    # the policy: DynamicScale(hysteresis=2, growth_interval=3), after 4 applied steps
    "solver step count 2**31": (solver_step(2**31), "solver step count"),
    "hysteresis_left 50": (scale_state("hysteresis_left", 50), "hysteresis_left"),
    "hysteresis_left 0": (scale_state("hysteresis_left", 0), "hysteresis_left"),
    "good_steps 3": (scale_state("good_steps", 3), "good_steps"),
    "skips beyond steps": (counter("skips", 9), "skips 9 must equal steps 4"),
    "consecutive beyond skips": (counter("consecutive_nonfinite", 3), "cannot exceed skips 0"),
    # issue 50, class 5: counters no run reaches
    "steps 2**70": (counters(steps=2**70, updates_applied=2**70, passes=2**70), "saved steps"),
    "a skip without an overflow": (counters(steps=5, skips=1), "skips 1 cannot exceed overflows"),
    "fewer passes than attempts": (counters(passes=3), "passes 3 must be at least"),
    "a scale above max_scale": (scale_state("scale", 2.0**16), "saved scale"),
    "unknown key": (updater_state(lambda s: s.__setitem__("scales", [1])), "unknown keys"),
    "unknown counter": (counter("steps_done", 4), "unknown keys"),
}


@pytest.mark.nnabla
@pytest.mark.parametrize("case", list(CASES))
def test_a_checkpoint_outside_the_invariants_is_refused_and_changes_nothing(tmp_path, case):
    change, words = CASES[case]
    model, _, upd = build(spikes={})
    for _ in range(4):
        assert upd.update().update_applied
    path = save_checkpoint(tmp_path / "a.ckpt", upd)
    load_checkpoint(path, upd)  # the file as saved loads
    rewrite(path, change)
    nn.clear_parameters()
    model, _, upd = build(seed=99, spikes={})
    before = snapshot(model, upd)
    with pytest.raises(ValueError, match=words) as raised:
        load_checkpoint(path, upd)
    assert str(path) in str(raised.value)
    assert_unchanged(before, model, upd)


@pytest.mark.nnabla
def test_a_static_policy_refuses_a_saved_scale_other_than_its_own(tmp_path):
    """Issue 50, class 5: a StaticScale(8) checkpoint whose scale says 32768 trained at 32768
    under a static policy of 8 (a warning only); it is refused, naming the field and the file."""
    model, feed, _ = build(spikes={})
    upd = DynamicLossScalingUpdater(model.solver, model.loss, feed, policy=StaticScale(8.0))
    upd.update()
    path = save_checkpoint(tmp_path / "static.ckpt", upd)
    rewrite(path, scale_state("scale", 32768.0))
    before = snapshot(model, upd)
    with pytest.raises(ValueError, match=r"saved scale must be 8.0, the only scale") as raised:
        load_checkpoint(path, upd)
    message = str(raised.value)
    assert str(path) in message and "\n" not in message and "StaticScale(scale=32768.0)" in message
    assert_unchanged(before, model, upd)
    with pytest.raises(ValueError, match="the only scale"):
        upd.scale = 16.0  # the same rule when assigned
    assert upd.scale == 8.0
