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


CASES = {
    # the policy: DynamicScale(hysteresis=2, growth_interval=3), after 4 applied steps
    "solver step count 2**31": (solver_step(2**31), "solver step count"),
    "hysteresis_left 50": (scale_state("hysteresis_left", 50), "hysteresis_left"),
    "hysteresis_left 0": (scale_state("hysteresis_left", 0), "hysteresis_left"),
    "good_steps 3": (scale_state("good_steps", 3), "good_steps"),
    "skips beyond steps": (counter("skips", 9), "counters contradict"),
    "consecutive beyond skips": (counter("consecutive_nonfinite", 3), "counters contradict"),
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
