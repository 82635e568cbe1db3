"""Assigning an option (issue 51): the collaborators read the live options, so only an option
that chooses a structure (``REBUILDS``), or an assignment that changes the finite check's path,
builds them again; any other keeps them, the probe guess and the float32 reference graph, and
takes effect at the next ``update()`` as if the updater had been built with it."""

import numpy as np
import pytest

from tests.nnabla_models import TinyClassifier
from tests.updater.driver.test_attributes import SpyComm
from updater import DynamicLossScalingUpdater, DynamicScale, GradientRecorder, HeadroomScale, Probes
from updater.driver.options import OPTIONS, REBUILDS

pytestmark = pytest.mark.nnabla

NEW_VALUES = {
    "data_feeder": lambda m: m.feeder(seed=7),
    "clear_buffer": lambda m: False,
    "weight_decay": lambda m: 1e-4,
    "comm": lambda m: SpyComm(),
    "grads": lambda m: [p.grad for p in m.params.values()],
    "on_overflow": lambda m: "retry",
    "max_retries": lambda m: 2,
    "max_consecutive_nonfinite": lambda m: 5,
    "clip_grad_norm": lambda m: 0.5,
    "average_grads": lambda m: True,
    "enabled": lambda m: False,
    "restore_on_skip": lambda m: False,
    "on_nonfinite_statistics": lambda m: "raise",
}
"""A new value of each option that chooses no structure (``history`` is not assignable)."""


def collaborators(u) -> list:
    return [u._work, u._forward_state, u._rounds, u._attempts, u._monitor, u._work.check]


def test_the_options_that_rebuild_are_the_structures():
    assert set(NEW_VALUES) == set(OPTIONS) - REBUILDS - {"history"}
    assert REBUILDS == {
        "solver",
        "loss",
        "accum_grad",
        "monitor",
        "recorder",
        "probes",
        "finite_check",
        "unchecked_inputs",
        "forward_state",
    }


@pytest.mark.parametrize("name", sorted(NEW_VALUES))
def test_an_option_that_chooses_no_structure_rebuilds_nothing(tmp_path, name):
    """The five collaborators, the check, the probe guess and the float32 reference graph of
    the recorded steps stay, before and after the next ``update()``."""
    m = TinyClassifier(f"live_{name}")
    recorder = GradientRecorder(tmp_path / "t.npz")
    probes = Probes(overflow=True, flush=True, flush_every=1)  # the first step measured
    u = DynamicLossScalingUpdater(m.solver, m.loss, m.feeder(), recorder=recorder, probes=probes)
    u.update()
    recording = u._attempts.recording
    built, reference, guess = collaborators(u), recording._reference, recording._probe_guess
    assert reference is not None and guess is not None
    setattr(u, name, NEW_VALUES[name](m))
    u.update()
    assert all(now is then for now, then in zip(collaborators(u), built))
    assert u._attempts.recording is recording and recording._reference is reference
    if name != "enabled":  # no recorded step when loss scaling is off
        assert recording._probe_guess is not None
    recorder.close()


def test_a_structure_or_another_path_rebuilds_them():
    """``finite_check`` chooses the path; on ``"auto"`` on the CPU a small model whose steps
    read only the finite flag takes "nnabla", and ``clip_grad_norm`` or a policy that measures
    |g| max makes it "numpy": those build the collaborators again, a policy on the same path
    does not."""
    m = TinyClassifier("live_paths")
    u = DynamicLossScalingUpdater(m.solver, m.loss, m.feeder())
    assert u.finite_check == "nnabla"
    built = collaborators(u)
    u.max_retries = 3
    u.policy = DynamicScale(init_scale=64.0)
    assert u.finite_check == "nnabla" and collaborators(u) == built
    u.clip_grad_norm = 1.0
    assert u.finite_check == "numpy" and u._attempts is not built[3]
    u.clip_grad_norm = None
    u.policy = HeadroomScale()
    assert u.finite_check == "numpy"
    built = collaborators(u)
    u.finite_check = "solver"
    assert u.finite_check == "solver" and u._work is not built[0]


def run(scope: str, assign: bool, steps=(2, 4)) -> tuple:
    """Train a half model ``steps[0]`` updates with the defaults, then ``steps[1]`` with retries,
    clipping and weight decay: assigned to the same updater (``assign``), or given to a new one
    that loads the first one's state. A spike at the fourth batch overflows."""
    m = TinyClassifier(scope, seed=3)
    feed = m.feeder(weights={3: 3e4})
    first = DynamicLossScalingUpdater(m.solver, m.loss, feed, scale=2.0**12)
    records = [first.update() for _ in range(steps[0])]
    later = {"on_overflow": "retry", "max_retries": 1, "clip_grad_norm": 0.5, "weight_decay": 1e-3}
    if assign:
        u = first
        for name, value in later.items():
            setattr(u, name, value)
    else:
        u = DynamicLossScalingUpdater(m.solver, m.loss, feed, scale=2.0**12, **later)
        u.load_state_dict(first.state_dict())
    records += [u.update() for _ in range(steps[1])]
    params = {k.split("/", 1)[1]: v.d.copy() for k, v in m.params.items()}
    return records, params, u.state_dict(), u.overflows


def test_an_assigned_option_takes_effect_at_the_next_update():
    """Bit for bit as an updater built with it that starts from the same state."""
    assigned = run("live_assigned", assign=True)
    built = run("live_built", assign=False)
    records, params, state, overflows = assigned
    assert any(r.attempts == 2 for r in records) and overflows >= 1  # the retry took effect
    assert records == built[0] and state == built[2] and overflows == built[3]
    for name, values in params.items():
        assert np.array_equal(values.view(np.uint16), built[1][name].view(np.uint16)), name
