"""The updater's options record (issue 37/38): each option once with its default, doc line,
check and what the ranks share; the ranks' agreement and the docs' list derive from it."""

import re

import nnabla as nn
import pytest

from tests.nnabla_models import TinyClassifier
from tests.paths import ROOT
from updater import DynamicLossScalingUpdater, GradientRecorder
from updater.driver.options import OPTIONS, SHARED, UpdaterOptions
from updater.driver.saved_state import rank_settings

pytestmark = pytest.mark.nnabla


def test_every_option_has_a_doc_line_a_check_and_a_sharing_rule():
    for name, f in OPTIONS.items():
        kind, _, text = f.metadata["doc"].partition(": ")
        assert kind and text.endswith("."), name
        assert callable(f.metadata["check"]), name
        assert f.metadata["shared"] is None or callable(f.metadata["shared"]), name


def test_what_the_ranks_compare_comes_from_the_record(tmp_path):
    """A setting that changes what a rank computes is compared (the solver's type,
    hyperparameters, learning rate and state shapes included); an observer is not."""
    m = TinyClassifier("shared", type_config="float")
    recorder = GradientRecorder(tmp_path / "t.npz")
    u = DynamicLossScalingUpdater(m.solver, m.loss, m.feeder(), recorder=recorder, history=3)
    settings = rank_settings(u)
    assert settings["solver.type"] == "Momentum"
    assert settings["solver.momentum"] == pytest.approx(0.9)
    assert settings["solver.learning_rate"] == pytest.approx(0.05)
    assert settings["solver.states"]["fc1/affine/W"] == {"m": (4, 8)}
    m.solver.set_learning_rate(0.01)  # the current rate, not the constructor's
    assert rank_settings(u)["solver.learning_rate"] == pytest.approx(0.01)
    for name in ("accum_grad", "weight_decay", "on_overflow", "enabled", "restore_on_skip"):
        assert name in settings
    for name in ("recorder", "monitor", "history", "finite_check", "clear_buffer", "comm"):
        assert not any(k.split(".")[0] == name for k in settings), name
    recorder.close()


def test_the_docs_list_the_options_the_ranks_share():
    text = (ROOT / "docs" / "guide" / "workers.md").read_text()
    listed = re.search(
        r"the record `updater\.driver\.options\.UpdaterOptions`\s+marks shared \((.*?)\)\.",
        text,
        re.S,
    )
    names = set(re.findall(r"`(\w+)`", listed.group(1)))
    assert names == {f.name for f in SHARED} - {"solver"}


def test_a_replaced_record_checks_the_new_values_only():
    m = TinyClassifier("replaced", type_config="float")
    o = UpdaterOptions(m.solver, m.loss, unchecked_inputs=[m.x])
    assert o.replaced(accum_grad=2).accum_grad == 2 and o.accum_grad == 1
    other = TinyClassifier("replaced_other", type_config="float")
    with pytest.warns(UserWarning, match=r"unchecked_inputs\[0\] \(8, 4\): they no longer"):
        assert o.replaced(loss=other.loss).unchecked_inputs == [m.x]  # as nnabla takes a loss
    with pytest.raises(ValueError, match=r"unchecked_inputs\[0\] .* is not an input"):
        o.replaced(loss=other.loss, unchecked_inputs=[m.x])
    with pytest.raises(AttributeError, match="not options"):
        o.replaced(acum_grad=2)
    assert isinstance(o.loss, nn.Variable)
