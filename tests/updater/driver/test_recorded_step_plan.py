"""A recorded step does only the work its configuration needs (issue 51): the probes copy the
forward state only when the graph writes some (found once per build, again when a loss is
assigned), and the attempts ask the recorder once per step whether it records it. Counted with
``sys.setprofile`` on real cpu:half graphs."""

import sys

import nnabla as nn
import nnabla.functions as F
import nnabla.parametric_functions as PF
import pytest

from tests.nnabla_models import TinyBNClassifier, TinyClassifier
from updater import DynamicLossScalingUpdater, GradientRecorder, Probes
from updater.driver.forward_state import ForwardState

pytestmark = pytest.mark.nnabla


def _calls(update, code) -> list:
    """The frames' locals of the calls of ``code`` while ``update()`` runs."""
    seen = []

    def profile(frame, event, arg):
        if event == "call" and frame.f_code is code:
            seen.append(dict(frame.f_locals))

    sys.setprofile(profile)
    try:
        update()
    finally:
        sys.setprofile(None)
    return seen


def _saved_slots(upd) -> list:
    """The slots :meth:`ForwardState.save` copies into during one ``update()``."""
    return [f["slot"] for f in _calls(upd.update, ForwardState.save.__code__)]


def _recorded(model, tmp_path, **options) -> DynamicLossScalingUpdater:
    recorder = GradientRecorder(tmp_path / f"{model.scope}.npz")
    return DynamicLossScalingUpdater(
        model.solver, model.loss, model.feeder(), recorder=recorder, scale=1024.0, **options
    )


def test_the_probes_of_a_graph_without_state_copy_none(tmp_path):
    upd = _recorded(TinyClassifier("rplan_mlp"), tmp_path, probes=Probes(overflow=True))
    for _ in range(2):
        assert _saved_slots(upd) == []
    assert upd.recorder.probe_passes > 0  # the probes ran


def test_the_probes_of_a_graph_with_statistics_copy_them(tmp_path):
    upd = _recorded(TinyBNClassifier("rplan_bn"), tmp_path, probes=Probes(overflow=True))
    assert _saved_slots(upd) == ["before", "probe"]


def test_a_loss_with_statistics_assigned_is_found_and_copied_by_the_probes(tmp_path):
    """The same parameters first trained through a loss without the BatchNormalization layer
    (nothing copied), then through the one with it (its statistics copied)."""
    m = TinyBNClassifier("rplan_assign")
    with nn.context_scope(m.ctx), nn.parameter_scope(m.scope):
        h = PF.affine(m.x, 6, name="fc1")
        y = PF.affine(F.tanh(h), m.classes, name="fc2")
        plain = F.mean(F.softmax_cross_entropy(y, m.t)) * m.weight
    recorder = GradientRecorder(tmp_path / "assign.npz")
    upd = DynamicLossScalingUpdater(
        m.solver, plain, m.feeder(), recorder=recorder, probes=Probes(overflow=True), scale=1024.0
    )
    assert _saved_slots(upd) == []
    upd.loss = m.loss
    assert _saved_slots(upd) == ["before", "probe"]
    upd.loss = plain
    assert _saved_slots(upd) == []


@pytest.mark.parametrize(
    "probes", [Probes(overflow=True), Probes(overflow=True, forward_headroom=True), None]
)
def test_the_attempts_ask_the_recorder_once_per_step(tmp_path, probes):
    upd = _recorded(TinyClassifier("rplan_wants"), tmp_path, probes=probes)
    for _ in range(2):
        assert len(_calls(upd.update, GradientRecorder.wants.__code__)) == 1
