"""The finite-check paths as one module each (issue 38): each answers one ``Findings`` record, with
``NOT_CHECKED`` (which has no truth value) for what it leaves to the host; the options, the
updater's signature and its arguments follow the record of options and the table of paths."""

import inspect

import nnabla as nn
import numpy as np
import pytest

from tests.nnabla_models import TinyClassifier
from updater.driver.checks import PATHS, Ask, FiniteCheck
from updater.driver.checks.base import NOT_CHECKED
from updater.driver.options import OPTIONS, UpdaterOptions
from updater.driver.updater import DynamicLossScalingUpdater

pytestmark = pytest.mark.nnabla


def test_not_checked_has_no_truth_value():
    with pytest.raises(TypeError, match="did not check"):
        bool(NOT_CHECKED)
    assert repr(NOT_CHECKED) == "NOT_CHECKED"


def test_each_path_is_a_finite_check_in_a_module_of_its_own():
    modules = {cls.__module__ for cls in PATHS.values()}
    assert len(modules) == len(PATHS) == 3
    for name, cls in PATHS.items():
        assert issubclass(cls, FiniteCheck) and cls.name == name
        assert cls.__module__.startswith("updater.driver.checks.")


@pytest.mark.parametrize("path", sorted(PATHS))
@pytest.mark.parametrize("bad_input", [False, True])
def test_each_path_answers_what_it_checks_and_marks_the_rest_not_checked(path, bad_input):
    """On a real step: the device path reads the loss, the inputs and the statistics with the
    gradients (one round) and answers them; the host paths leave them NOT_CHECKED, and the
    rounds find the bad input on the host instead."""
    nn.clear_parameters()
    m = TinyClassifier(f"paths_{path}", type_config="float")
    feed = m.feeder()
    u = DynamicLossScalingUpdater(m.solver, m.loss, None, finite_check=path)
    feed()
    if bad_input:
        m.x.d = np.full(m.x.shape, np.inf, np.float32)
    u._rounds.run(1.0)
    extras = u._rounds.extras(u._forward_state.checked_with_gradients())
    found = u._work.check.inspect(u._work.params, Ask(False), extras)
    assert found.finite == (not bad_input)
    own = (found.loss_finite, found.inputs_in_range, found.statistics_finite)
    if path == "solver":
        assert own == (not bad_input, not bad_input, True)
        assert u._rounds.host_loss_finite()  # not read on the host
    else:
        assert own == (NOT_CHECKED,) * 3
        assert u._rounds.host_loss_finite() is (not bad_input)
        assert u._rounds.inputs_finite is not bad_input
    # the one call the attempts make: every fact answered, none NOT_CHECKED
    facts = u._work.facts(u._attempts.reads.plan(), False)
    answered = (facts.finite, facts.loss_finite, facts.inputs_in_range, list(facts.statistics))
    assert answered == (not bad_input, not bad_input, not bad_input, [])


def test_finite_check_accepts_auto_and_the_paths_only():
    m = TinyClassifier("paths_choice", type_config="float")
    for path in ("auto", *PATHS):
        assert UpdaterOptions(m.solver, m.loss, finite_check=path).finite_check == path
    with pytest.raises(ValueError, match="'auto', 'numpy', 'solver', 'nnabla'"):
        UpdaterOptions(m.solver, m.loss, finite_check="host")


def test_the_signature_lists_every_option_with_the_records_default():
    parameters = inspect.signature(DynamicLossScalingUpdater).parameters
    assert set(OPTIONS) <= set(parameters)
    assert not any(p.kind is p.VAR_KEYWORD for p in parameters.values())
    for name in ("on_overflow", "recorder", "forward_state"):
        assert parameters[name].kind is inspect.Parameter.KEYWORD_ONLY
        assert parameters[name].default == OPTIONS[name].default
    with pytest.raises(TypeError, match="'on_overflow'"):
        m = TinyClassifier("paths_sig", type_config="float")
        DynamicLossScalingUpdater(m.solver, m.loss, on_overflw="retry")
