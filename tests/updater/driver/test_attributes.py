"""nnabla's updater attributes (issue 37 item 4): ``solver``, ``loss``, ``data_feeder``,
``scale``, ``clear_buffer``, ``accum_grad``, ``weight_decay``, ``comm``, ``grads`` assigned
between ``update()`` calls take effect at the next one, as in nnabla's own
``DynamicLossScalingUpdater`` running the same script at the same seeds (real graphs, cpu:float
and cpu:half); a bad value raises naming it and changes nothing; an attribute that cannot change
says what to do instead."""

import nnabla as nn
import nnabla.functions as F
import nnabla.solvers as S
import numpy as np
import pytest
from nnabla.experimental.mixed_precision_training import (
    DynamicLossScalingUpdater as NnablaUpdater,
)

from tests.nnabla_models import (
    TinyClassifier,
    assert_same_values,
    param_values,
    solver_state_values,
)
from updater import DynamicLossScalingUpdater

pytestmark = pytest.mark.nnabla


class SpyComm:
    """A one-process communicator: the sum over one rank is the input; records the calls."""

    def __init__(self):
        self.calls = []

    def all_reduce(self, data, division=False, inplace=False):
        self.calls.append((data, division, inplace))


def new_solver(m):
    solver = S.Sgd(0.5)
    solver.set_parameters(m.params)
    return solver


def scaled_loss(m):
    with nn.context_scope(m.ctx):
        return m.loss * 3.0


def spy_comm(u, m):
    u.comm = SpyComm()
    u.grads = [p.grad for p in m.params.values()]
    return u.comm


CHANGES = {
    "solver": lambda u, m: setattr(u, "solver", new_solver(m)),
    "loss": lambda u, m: setattr(u, "loss", scaled_loss(m)),
    "data_feeder": lambda u, m: setattr(u, "data_feeder", m.feeder(seed=7)),
    "scale": lambda u, m: setattr(u, "scale", 64.0),
    "accum_grad": lambda u, m: setattr(u, "accum_grad", 2),
    "clear_buffer": lambda u, m: setattr(u, "clear_buffer", False),
    "weight_decay": lambda u, m: setattr(u, "weight_decay", 0.05),
    "comm_and_grads": spy_comm,
}
"""Assignments as a script makes them between two ``update()`` calls."""


def train(cls, change, type_config):
    """Two updates, ``change(updater, model)``, three updates: the parameters and solver
    states, the updater and what ``change`` returned."""
    nn.clear_parameters()
    m = TinyClassifier("attrs", type_config=type_config)
    u = cls(m.solver, m.loss, m.feeder(), scale=8.0, scaling_factor=2.0, N=2000)
    for _ in range(2):
        u.update()
    made = change(u, m) if change is not None else None
    for _ in range(3):
        u.update()
    solver = u.solver
    return {**param_values(m.params), **solver_state_values(solver)}, u, made


@pytest.mark.parametrize("type_config", ["float", "half"])
@pytest.mark.parametrize("name", sorted(CHANGES))
def test_an_assigned_attribute_takes_effect_at_the_next_update_as_in_nnabla(name, type_config):
    theirs, _, _ = train(NnablaUpdater, CHANGES[name], type_config)
    ours, u, made = train(DynamicLossScalingUpdater, CHANGES[name], type_config)
    assert_same_values(theirs, ours)
    unchanged, _, _ = train(DynamicLossScalingUpdater, None, type_config)
    if name not in ("comm_and_grads", "clear_buffer", "scale"):  # these change no value
        assert any(not np.array_equal(unchanged[k], ours[k]) for k in ours), name
    if name == "scale":  # unscaling is exact: the values are the same, the scale is not
        assert u.scale == 64.0
    if name == "comm_and_grads":  # three updates reduced the gradients given
        reduced = [call for call in made.calls if call[0] is u.grads]
        assert len(reduced) == 3 and reduced[0][1:] == (False, False)
    if name == "clear_buffer":  # the intermediate buffers are kept now
        assert not u.loss.parent.inputs[0].data.clear_called


def test_the_attribute_reads_back_what_was_assigned_and_the_collaborators_use_it():
    m = TinyClassifier("readback", type_config="float")
    u = DynamicLossScalingUpdater(m.solver, m.loss, m.feeder())
    solver, loss = new_solver(m), scaled_loss(m)
    u.solver, u.loss, u.accum_grad = solver, loss, 3
    assert (u.solver, u.loss, u.accum_grad) == (solver, loss, 3)
    u.update()
    assert u._work.options.record.solver is solver and u._rounds.loss is loss
    assert u._rounds.options.record.accum_grad == 3
    assert u.batches == 3 and u.passes == 3


@pytest.mark.parametrize(
    "name, value, error, match",
    [
        ("accum_grad", 0, ValueError, r"accum_grad must be .*>= 1.*got 0"),
        ("clear_buffer", "no", TypeError, r"clear_buffer must be a bool"),
        ("loss", "loss", TypeError, r"loss must be an nnabla.Variable, got str"),
        ("solver", object(), TypeError, r"solver must be an nnabla solver"),
        ("weight_decay", -1.0, ValueError, r"weight_decay must be .*>= 0"),
        ("comm", 3, TypeError, r"comm must offer all_reduce"),
        ("grads", [1], TypeError, r"grads must be a list of nnabla.NdArray"),
        ("data_feeder", 3, TypeError, r"data_feeder must be callable"),
        ("on_overflow", "again", ValueError, r"on_overflow"),
    ],
)
def test_a_bad_assignment_raises_naming_it_and_changes_nothing(name, value, error, match):
    m = TinyClassifier("badset", type_config="float")
    u = DynamicLossScalingUpdater(m.solver, m.loss, m.feeder())
    before = getattr(u, name)
    with pytest.raises(error, match=match):
        setattr(u, name, value)
    assert getattr(u, name) is before or getattr(u, name) == before
    assert u.update().update_applied


def test_a_non_scalar_loss_and_a_loss_the_policy_cannot_seed_are_refused():
    m = TinyClassifier("badloss", type_config="float")
    u = DynamicLossScalingUpdater(m.solver, m.loss, m.feeder(), max_scale=2.0**20)
    with nn.context_scope(m.ctx):
        wide = F.stack(m.loss, m.loss)
    with pytest.raises(ValueError, match=r"loss must be a scalar .*shape \(2,\)"):
        u.loss = wide
    half = TinyClassifier("badloss_half", type_config="half")
    with pytest.raises(ValueError, match=r"max_scale 1048576.0 is above 65504.0"):
        u.loss = half.loss  # a float16 loss cannot seed 2**20
    assert u.loss is m.loss


def test_history_cannot_be_replaced_and_says_how_to_set_its_length():
    m = TinyClassifier("hist", type_config="float")
    u = DynamicLossScalingUpdater(m.solver, m.loss, m.feeder(), history=2)
    with pytest.raises(AttributeError, match=r"DynamicLossScalingUpdater\(\.\.\., history=N\)"):
        u.history = 5
    for _ in range(3):
        u.update()
    assert [r.step for r in u.history] == [1, 2]


def test_options_that_only_the_updater_reads_do_not_rebuild_the_collaborators():
    m = TinyClassifier("nobuild", type_config="float")
    u = DynamicLossScalingUpdater(m.solver, m.loss, m.feeder())
    work = u._work
    u.weight_decay, u.max_consecutive_nonfinite = 1e-4, 5
    u.update()
    assert u._work is work
    u.finite_check = "numpy"
    assert u.finite_check == "numpy" and u._work is not work


def test_an_input_gradient_holds_each_update_s_own_batch_where_nnabla_s_adds_them_up():
    """The README's statement, run: after each update() an input with need_grad holds that
    update's scaled gradient (ours) or the sum of every update's (nnabla's)."""
    grads = {}
    for cls in (NnablaUpdater, DynamicLossScalingUpdater):
        nn.clear_parameters()
        m = TinyClassifier("inputgrad", type_config="float")
        m.x.need_grad = True
        u = cls(m.solver, m.loss, m.feeder(), scale=8.0, scaling_factor=2.0, N=2000)
        grads[cls] = []
        for _ in range(3):
            u.update()
            grads[cls].append(m.x.g.copy())
    ours, theirs = grads[DynamicLossScalingUpdater], grads[NnablaUpdater]
    assert np.array_equal(ours[0], theirs[0])
    for k in (1, 2):  # the same parameters on both sides: nnabla's adds this batch's to the last
        np.testing.assert_allclose(ours[k], theirs[k] - theirs[k - 1], rtol=1e-5, atol=1e-6)
        assert not np.allclose(theirs[k], ours[k])


def test_help_shows_no_private_path_and_no_argument_that_raises():
    """Issue 41 item 5: the properties' docs named private paths (``_counters.skips``), and the
    signatures offered ``init_scale=None`` and ``update(new_scale=None)``, which raise."""
    import inspect
    import pydoc
    import re

    text = pydoc.render_doc(DynamicLossScalingUpdater, renderer=pydoc.plaintext)
    assert not re.findall(r"``_\w+\.", text)
    assert "init_scale" not in str(inspect.signature(DynamicLossScalingUpdater))
    assert str(inspect.signature(DynamicLossScalingUpdater.update)) == "(self) -> 'StepRecord'"
    assert "accum_grad (int, default 1): forward/backward rounds per update" in text
