"""``copy.copy(updater)`` is an independent updater (issue 48, finding 5), as nnabla's shallow
copy is: it shares the solver, loss and data feeder and keeps its own scale, counters, history
and collaborators; before, the copy's ``update()`` moved the original's counters.
``copy.deepcopy(updater)`` raises a TypeError that says what to do instead (before, and in
nnabla's updater, a TypeError from inside nnabla's solver pickling)."""

import copy

import pytest
from nnabla.experimental.mixed_precision_training import (
    DynamicLossScalingUpdater as NnablaUpdater,
)

from tests.nnabla_models import TinyClassifier
from updater import DynamicLossScalingUpdater

pytestmark = pytest.mark.nnabla


@pytest.mark.parametrize("cls", [NnablaUpdater, DynamicLossScalingUpdater])
def test_a_copy_keeps_its_own_counters_and_scale_as_nnabla_s_does(cls):
    m = TinyClassifier(f"copied_{cls.__module__.split('.')[0]}", type_config="half")
    feed = m.feeder(weights={2: 1e4})  # the copy's second call overflows at scale 8
    u = cls(m.solver, m.loss, feed, scale=8.0, scaling_factor=2.0, N=2000)
    u.update()
    c = copy.copy(u)
    assert c.solver is u.solver and c.loss is u.loss and c.data_feeder is u.data_feeder
    c.update()
    c.update()  # the spike: the copy backs off
    assert c.scale < 8.0 and u.scale == 8.0
    if cls is DynamicLossScalingUpdater:
        assert (u.steps, u.skips, u.batches) == (1, 0, 1)
        assert c.steps == 3 and c.skips == 1 and c.batches == 3
        assert c.update().step == 3 and u.update().step == 1
        assert u._work is not c._work and u._attempts is not c._attempts


def test_a_copy_keeps_its_own_history_and_pending_iteration():
    m = TinyClassifier("copied_stages", type_config="half")
    u = DynamicLossScalingUpdater(m.solver, m.loss, m.feeder(), history=4)
    u.update()
    u.backward()
    c = copy.copy(u)
    u.step()
    assert len(u.history) == 2 and len(c.history) == 1
    c.step()  # the copy finishes the iteration it was copied in, apart from the original
    assert c.steps == 2 and u.steps == 2 and c.history[-1] is not u.history[-1]
    assert c.history.maxlen == 4


def test_deepcopy_says_what_to_do_and_what_it_says_works():
    m = TinyClassifier("deep", type_config="half")
    u = DynamicLossScalingUpdater(m.solver, m.loss, m.feeder(), scale=8.0, N=1)
    u.update()
    theirs = NnablaUpdater(m.solver, m.loss, m.feeder(), scale=8.0)
    with pytest.raises(TypeError, match="pickl"):  # nnabla's: from inside its solver
        copy.deepcopy(theirs)
    for target in (u, {"updater": u}):
        with pytest.raises(TypeError) as info:
            copy.deepcopy(target)
        message = str(info.value)
        assert message.startswith("copy.deepcopy cannot copy a DynamicLossScalingUpdater")
        assert (
            "copy.copy(updater)" in message and "load_state_dict(updater.state_dict())" in message
        )
    assert copy.copy(u).scale == u.scale == 16.0  # the first way
    other = TinyClassifier("deep_again", type_config="half")
    new = DynamicLossScalingUpdater(other.solver, other.loss, other.feeder())
    new.load_state_dict(u.state_dict())  # the second
    assert (new.scale, new.steps) == (u.scale, u.steps) == (16.0, 1)
