"""Two solvers on one loss (issue 23, item 5) through SolverGroup, on real cpu:half graphs: an
overflow in the backbone's gradients skips both solvers' steps; finite steps apply each solver's
own update; checkpoints keep both solvers' states."""

import itertools

import nnabla as nn
import nnabla.functions as F
import nnabla.initializer as I
import nnabla.parametric_functions as PF
import nnabla.solvers as S
import numpy as np
import pytest

from tests.nnabla_models import (
    assert_same_values,
    cpu_context,
    param_values,
    solver_state_values,
)
from updater import DynamicLossScalingUpdater, DynamicScale, SolverGroup, StaticScale
from updater.runtime.checkpoint import load_checkpoint, save_checkpoint

pytestmark = pytest.mark.nnabla
SCOPES = itertools.count()


def _fine_tuning(x_scale=1.0):
    """A backbone (Momentum, lr 0.01) and a head (Adam, lr 0.001) on one loss; the backbone's
    weight gradient is x times larger than the head's inputs allow, so a large x overflows it
    alone."""
    rng = np.random.RandomState(0)
    with nn.context_scope(cpu_context("half")), nn.parameter_scope(f"group_{next(SCOPES)}"):
        x = nn.Variable.from_numpy_array(np.full((4, 3), x_scale, np.float32))
        t = nn.Variable.from_numpy_array(np.array([[0], [1], [0], [1]]))
        with nn.parameter_scope("backbone"):
            h = F.sin(PF.affine(x, 6, w_init=I.NormalInitializer(0.1, rng=rng)))  # bounded
        with nn.parameter_scope("head"):
            y = PF.affine(h, 2, w_init=I.NormalInitializer(0.5, rng=rng))
        loss = F.mean(F.softmax_cross_entropy(y, t))
        backbone, head = S.Momentum(0.01, 0.9), S.Adam(0.001)
        backbone.set_parameters(_under(nn, "backbone"))
        head.set_parameters(_under(nn, "head"))
    return loss, backbone, head


def _under(nn_module, prefix):
    return {k: v for k, v in nn_module.get_parameters().items() if f"/{prefix}/" in f"/{k}"}


def test_an_overflow_in_one_solver_skips_every_solver():
    """The head's solver alone sees no overflow (the issue's silent wrong step); the group sees
    the backbone's and skips both."""
    loss, backbone, head = _fine_tuning(x_scale=3000.0)
    policy = DynamicScale(init_scale=2.0**15)
    alone = DynamicLossScalingUpdater(head, loss, None, policy=policy)
    assert alone.backward() and backbone.check_inf_or_nan_grad()  # the silent case
    alone.step()
    loss, backbone, head = _fine_tuning(x_scale=3000.0)
    params = {**backbone.get_parameters(), **head.get_parameters()}
    before = param_values(params)
    upd = DynamicLossScalingUpdater(SolverGroup([backbone, head]), loss, None, policy=policy)
    record = upd.update()
    assert not record.update_applied and record.new_scale == 2.0**14
    assert_same_values(param_values(params), before)


def test_finite_steps_apply_each_solvers_own_update():
    """The group trains exactly as the two solvers stepped by hand on the unscaled gradients."""
    results = []
    for grouped in (True, False):
        loss, backbone, head = _fine_tuning()
        params = {**backbone.get_parameters(), **head.get_parameters()}
        if grouped:
            upd = DynamicLossScalingUpdater(SolverGroup([backbone, head]), loss, None, scale=8.0)
            for _ in range(3):
                assert upd.update().update_applied
        else:
            for _ in range(3):
                for s in (backbone, head):
                    s.zero_grad()
                loss.forward()
                loss.backward(8.0)
                for s in (backbone, head):
                    s.scale_grad(1 / 8.0)
                    s.update()
        results.append((param_values(params), solver_state_values(backbone)))
    assert_same_values(results[0][0], results[1][0])
    assert_same_values(results[0][1], results[1][1])


def test_a_checkpoint_keeps_both_solvers(tmp_path):
    loss, backbone, head = _fine_tuning()
    upd = DynamicLossScalingUpdater(SolverGroup([backbone, head]), loss, None)
    upd.update()
    save_checkpoint(tmp_path / "g.ckpt", upd)
    saved = {**solver_state_values(backbone), **solver_state_values(head)}
    upd.update()  # moves both solvers' states
    load_checkpoint(tmp_path / "g.ckpt", upd)
    assert_same_values({**solver_state_values(backbone), **solver_state_values(head)}, saved)


def test_bad_groups_are_refused():
    loss, backbone, head = _fine_tuning()
    with pytest.raises(ValueError, match="two or more"):
        SolverGroup([head])
    with pytest.raises(ValueError, match="is in solvers\\[0\\] and solvers\\[1\\]"):
        SolverGroup([head, head])
    with pytest.raises(TypeError, match="solvers\\[1\\] must be an nnabla solver"):
        SolverGroup([head, "adam"])


def test_a_variable_under_two_names_is_refused():
    """Issue 28: the overlap was checked by name, so the same Variable under another name was
    accepted, unscaled twice, and its gradient ended at 1/1024 of its true value."""
    loss, backbone, head = _fine_tuning()
    name, w = next(iter(head.get_parameters().items()))
    other = S.Sgd(0.01)
    other.set_parameters({"alias/W": w})
    with pytest.raises(ValueError, match=r"'alias/W' is in solvers\[0\] \(named '.*' there\)"):
        SolverGroup([head, other])


@pytest.mark.parametrize("check", ["numpy", "nnabla", "solver"])
def test_an_overlap_added_later_is_refused_on_every_path(check):
    """A parameter given to a second solver after the group was built (set_parameters with
    reset=False) is refused by the next update() on every finite-check path, before anything
    changed (before: "numpy" and the other paths trained differently)."""
    loss, backbone, head = _fine_tuning()
    group = SolverGroup([backbone, head])
    upd = DynamicLossScalingUpdater(group, loss, None, scale=8.0, finite_check=check)
    assert upd.update().update_applied
    params = {**backbone.get_parameters(), **head.get_parameters()}
    before = param_values(params)
    name, w = next(iter(backbone.get_parameters().items()))
    head.set_parameters({"late/" + name: w}, reset=False)
    with pytest.raises(ValueError, match=r"'late/.*' is in solvers\[0\] .*and solvers\[1\]"):
        upd.update()
    assert_same_values(param_values(params), before)


class _CountingSolver:
    """A real nnabla solver whose ``get_parameters()`` calls are counted."""

    def __init__(self, solver):
        self.solver, self.reads = solver, 0

    def get_parameters(self):
        self.reads += 1
        return self.solver.get_parameters()

    def __getattr__(self, name):
        return getattr(self.solver, name)


@pytest.mark.parametrize("check", ["numpy", "nnabla", "solver"])
def test_an_update_reads_each_solver_s_parameters_once(check):
    """Issue 42: the group's zero_grad() and the updater's read of the parameters each read
    every solver's parameters (two reads per solver per step); the updater now takes the ones
    zero_grad() read and checked."""
    loss, backbone, head = _fine_tuning()
    counted = [_CountingSolver(backbone), _CountingSolver(head)]
    upd = DynamicLossScalingUpdater(SolverGroup(counted), loss, None, scale=8.0, finite_check=check)
    upd.update()  # the first step also checks the loss reaches the parameters
    before = [s.reads for s in counted]
    for _ in range(3):
        assert upd.update().update_applied
    assert [s.reads - b for s, b in zip(counted, before)] == [3, 3]


def _two_scopes():
    """A generator-like trunk and a head, each set up in its own parameter scope with its own
    solver (nnabla's idiom): both solvers name their weights 'fc/affine/W' and 'fc/affine/b'."""
    rng = np.random.RandomState(1)
    root = f"scopes_{next(SCOPES)}"
    with nn.context_scope(cpu_context("half")), nn.parameter_scope(root):
        x = nn.Variable.from_numpy_array(rng.randn(4, 3).astype(np.float32))
        t = nn.Variable.from_numpy_array(np.array([[0], [1], [0], [1]]))
        solvers = []
        for scope, width, solver in (
            ("trunk", 6, S.Momentum(0.01, 0.9)),
            ("head", 2, S.Adam(0.01)),
        ):
            with nn.parameter_scope(scope):
                x = PF.affine(x, width, w_init=I.NormalInitializer(0.5, rng=rng), name="fc")
                solver.set_parameters(nn.get_parameters())
                solvers.append(solver)
            x = F.tanh(x) if scope == "trunk" else x
        loss = F.mean(F.softmax_cross_entropy(x, t))
    return loss, solvers


def test_solvers_in_their_own_parameter_scopes_are_one_group_despite_equal_names(tmp_path):
    """Issue 37: the overlap check compared names, so two solvers set up in their own scopes
    were refused; the Variables are distinct, and the group trains as a plain nnabla loop does
    (bit for bit), and keeps both solvers' states in a checkpoint."""
    loss, solvers = _two_scopes()
    assert list(solvers[0].get_parameters()) == list(solvers[1].get_parameters())
    every = [v for s in solvers for v in s.get_parameters().values()]
    start = {str(i): v.d.copy() for i, v in enumerate(every)}
    for _ in range(3):  # nnabla's own loop at a fixed scale
        for s in solvers:
            s.zero_grad()
        loss.forward(clear_no_need_grad=True)
        loss.backward(8.0, clear_buffer=True)
        for s in solvers:
            s.scale_grad(1.0 / 8.0)
            s.update()
    plain = {str(i): v.d.copy() for i, v in enumerate(every)}
    for i, v in enumerate(every):
        v.d = start[str(i)]
    for s in solvers:
        s.set_states({k: _zeroed(st) for k, st in s.get_states().items()})
    group = SolverGroup(solvers)
    assert len(group.get_parameters()) == 4
    assert sorted(group.get_states())[0] == "solvers[0]/fc/affine/W"
    upd = DynamicLossScalingUpdater(group, loss, None, policy=StaticScale(8.0))
    for _ in range(3):
        assert upd.update().update_applied
    assert_same_values(plain, {str(i): v.d.copy() for i, v in enumerate(every)})
    states = _states(solvers)
    save_checkpoint(tmp_path / "c.npz", upd)
    for s in solvers:
        s.set_states({k: _zeroed(st) for k, st in s.get_states().items()})
    load_checkpoint(tmp_path / "c.npz", upd)
    assert_same_values(states, _states(solvers))
    assert any(v.any() for k, v in states.items() if k.startswith("1/"))  # Adam's moved


def _states(solvers):
    """Every solver's state values, keyed ``i/param/state``."""
    return {f"{i}/{k}": v for i, s in enumerate(solvers) for k, v in solver_state_values(s).items()}


def _zeroed(state):
    """A solver state with every array zero and step 0 (as a fresh solver's)."""
    for var in state.pstate.values():
        var.data.zero()
    state.t = 0
    return state
