"""An updater whose solver holds no parameter the loss reaches says so on its first step (issue
41: a SolverGroup of the wrong solvers reported 20 applied updates while nothing moved), also
when the graph reads them all without need_grad (fix_parameters=True) and for each member of a
SolverGroup (issue 48); a solver that holds some of the loss's parameters, as a GAN's updaters
do, is left alone."""

import warnings

import nnabla as nn
import nnabla.functions as F
import nnabla.initializer as I
import nnabla.parametric_functions as PF
import nnabla.solvers as S
import numpy as np

from tests.nnabla_models import TinyClassifier, cpu_context
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


def test_a_group_of_the_wrong_solvers_warns_for_each():
    nn.clear_parameters()
    model = TinyClassifier("reached", type_config="float")
    a, b = TinyClassifier("a", type_config="float"), TinyClassifier("b", type_config="float")
    found = _first_step_warnings(SolverGroup([a.solver, b.solver]), model)
    assert [w.split(" (")[0] for w in found] == [
        f"none of the 4 parameters of the SolverGroup's solvers[{i}]" for i in (0, 1)
    ]


def test_a_group_member_the_loss_does_not_reach_is_named():
    """Issue 48, finding 7: the loss reaches solvers[0]'s parameters only; solvers[1] (another
    model's) would apply steps that move nothing, and the group as a whole said nothing."""
    nn.clear_parameters()
    model = TinyClassifier("reached", type_config="half")
    other = TinyClassifier("unused", type_config="half")
    found = _first_step_warnings(SolverGroup([model.solver, other.solver]), model)
    assert len(found) == 1
    assert found[0].startswith("none of the 4 parameters of the SolverGroup's solvers[1] (fc2/")


def _fixed(scope, fixed_head):
    """affine(fix_parameters=True) -> tanh -> affine(fix_parameters=fixed_head) -> softmax
    cross-entropy in cpu:half; Sgd over ``nn.get_parameters()`` (which holds the fixed ones)."""
    rng = np.random.RandomState(0)
    with nn.context_scope(cpu_context("half")), nn.parameter_scope(scope):
        x, t = nn.Variable((8, 4)), nn.Variable((8, 1))
        w = I.NormalInitializer(0.5, rng)
        h = F.tanh(PF.affine(x, 6, w_init=w, fix_parameters=True, name="fc1"))
        y = PF.affine(h, 3, w_init=w, fix_parameters=fixed_head, name="fc2")
        loss = F.mean(F.softmax_cross_entropy(y, t))
        solver = S.Sgd(0.1)
        solver.set_parameters(nn.get_parameters())

    def feed():
        x.d, t.d = rng.randn(8, 4), rng.randint(0, 3, (8, 1))

    return solver, loss, feed


def _warnings(updaters, steps=2):
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for _ in range(steps):
            for u in updaters:
                u.update()
    return [str(w.message) for w in caught if "none of" in str(w.message)]


def test_a_model_whose_every_layer_is_fixed_warns_and_a_fine_tuned_head_does_not():
    """Issue 48, finding 7: with every layer built with fix_parameters=True the solver holds
    the parameters and the graph reads them, but no gradient reaches them."""
    nn.clear_parameters()
    solver, loss, feed = _fixed("all_fixed", fixed_head=True)
    assert len(solver.get_parameters()) == 4
    u = DynamicLossScalingUpdater(solver, loss, feed)
    found = _warnings([u])
    assert len(found) == 1 and "need_grad=False" in found[0] and "fix_parameters" in found[0]
    solver, loss, feed = _fixed("head_trains", fixed_head=False)  # a frozen backbone
    assert _warnings([DynamicLossScalingUpdater(solver, loss, feed)]) == []


def test_a_group_the_loss_reaches_whole_and_a_gans_two_updaters_do_not_warn():
    nn.clear_parameters()
    model = TinyClassifier("grouped", type_config="half")
    first = {k: v for k, v in model.params.items() if "fc1" in k}
    solvers = [S.Sgd(0.01), S.Adam(0.001)]
    solvers[0].set_parameters(first)
    solvers[1].set_parameters({k: v for k, v in model.params.items() if k not in first})
    group = DynamicLossScalingUpdater(SolverGroup(solvers), model.loss, model.feeder())
    assert _warnings([group]) == []
    assert _warnings(_gan()) == []


def _gan():
    """A generator and a discriminator (one affine layer each, cpu:half), each with its own
    solver and updater; the generator's loss reads the discriminator's parameters too."""
    rng = np.random.RandomState(0)
    with nn.context_scope(cpu_context("half")):
        z, real = nn.Variable((8, 2)), nn.Variable((8, 3))
        with nn.parameter_scope("gen"):
            fake = PF.affine(z, 3, w_init=I.NormalInitializer(0.5, rng))
        with nn.parameter_scope("dis"):
            d_real = PF.affine(real, 1, w_init=I.NormalInitializer(0.5, rng))
            d_fake = PF.affine(fake, 1)
        ones, zeros = F.constant(1.0, (8, 1)), F.constant(0.0, (8, 1))
        loss_d = F.mean(F.sigmoid_cross_entropy(d_real, ones))
        loss_d += F.mean(F.sigmoid_cross_entropy(d_fake, zeros))
        loss_g = F.mean(F.sigmoid_cross_entropy(d_fake, ones))
    made = []
    for scope, loss in (("dis", loss_d), ("gen", loss_g)):
        solver = S.Adam(0.001)
        with nn.parameter_scope(scope):
            solver.set_parameters(nn.get_parameters())
        made.append(DynamicLossScalingUpdater(solver, loss, None))
    z.d, real.d = rng.randn(8, 2), rng.randn(8, 3)
    return made


def test_the_models_own_solver_and_a_solver_of_part_of_it_do_not_warn():
    nn.clear_parameters()
    model = TinyClassifier("reached", type_config="float")
    assert _first_step_warnings(model.solver, model) == []
    part = S.Sgd(0.01)  # some of the loss's parameters, as a GAN's discriminator solver
    part.set_parameters({k: v for k, v in model.params.items() if "fc2" in k})
    assert _first_step_warnings(part, model) == []
