"""An updater whose solver holds no parameter the loss reaches says so on its first step (issue
41: a SolverGroup of the wrong solvers reported 20 applied updates while nothing moved); a
solver that holds some of the loss's parameters, as a GAN's updaters do, is left alone."""

import warnings

import nnabla as nn
import nnabla.solvers as S

from tests.nnabla_models import TinyClassifier
from updater import DynamicLossScalingUpdater, SolverGroup

MESSAGE = "is in the graph of the loss"


def _first_step_warnings(solver, model):
    u = DynamicLossScalingUpdater(solver, model.loss, data_feeder=model.feeder(), scale=8.0)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        u.update()
        u.update()
    return [str(w.message) for w in caught if MESSAGE in str(w.message)]


def test_a_solver_of_another_models_parameters_warns_once():
    nn.clear_parameters()
    model = TinyClassifier("reached", type_config="float")
    other = TinyClassifier("other", type_config="float")
    found = _first_step_warnings(other.solver, model)
    assert len(found) == 1
    assert found[0].startswith("none of the solver's 4 parameters (fc2/affine/b, ")


def test_a_group_of_the_wrong_solvers_warns():
    nn.clear_parameters()
    model = TinyClassifier("reached", type_config="float")
    a, b = TinyClassifier("a", type_config="float"), TinyClassifier("b", type_config="float")
    assert len(_first_step_warnings(SolverGroup([a.solver, b.solver]), model)) == 1


def test_the_models_own_solver_and_a_solver_of_part_of_it_do_not_warn():
    nn.clear_parameters()
    model = TinyClassifier("reached", type_config="float")
    assert _first_step_warnings(model.solver, model) == []
    part = S.Sgd(0.01)  # some of the loss's parameters, as a GAN's discriminator solver
    part.set_parameters({k: v for k, v in model.params.items() if "fc2" in k})
    assert _first_step_warnings(part, model) == []
