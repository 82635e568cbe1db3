"""Several nnabla solvers driven as one by the updater, for one loss whose parameters train with
different solvers or learning rates (a backbone and a head, as fine-tuning scripts do)."""

from __future__ import annotations

from collections import Counter
from typing import Dict, List, Sequence

import nnabla as nn


def check_solver(name: str, solver) -> Dict[str, nn.Variable]:
    """``solver``'s parameters; ``TypeError`` unless it is an nnabla solver (or a group),
    ``ValueError`` when it has no parameters."""
    if not (callable(getattr(solver, "get_parameters", None)) and hasattr(solver, "update")):
        raise TypeError(f"{name} must be an nnabla solver, got {type(solver).__name__}")
    params = solver.get_parameters()
    if not params:
        raise ValueError(
            f"{name} has no parameters; call {name}.set_parameters(nn.get_parameters()) first"
        )
    return params


class SolverGroup:
    """Solvers over disjoint parameters, seen by the updater as one solver: one finite check over
    every gradient, so an overflow anywhere skips every solver's step, and one unscaling.

    Give it to :class:`updater.DynamicLossScalingUpdater` in place of a solver; set each
    solver's learning rate on the solver itself. Checkpoints save and load every solver's
    states by parameter name.

    A parameter held by two solvers would be unscaled and updated twice, so each Variable must
    be in one solver only (compared by identity): checked when built, and again at every
    ``zero_grad()`` (the start of each step) and ``get_parameters()`` when a solver's parameters
    changed (``set_parameters``): one ``get_parameters()`` per solver and a comparison of the
    parameters' names and hashes. The updater reads the group's parameters of a step from its
    ``zero_grad()`` (:meth:`parameters_at_zero_grad`): one read per solver per step.

    Two solvers may use the same name for distinct Variables (each set up in its own
    ``nn.parameter_scope``, nnabla's idiom): the group then names them ``solvers[i]/name`` (in
    ``get_parameters()``, ``get_states()`` and checkpoints); a name that one solver alone uses
    is kept as it is.

    Args:
        solvers (sequence of nnabla.solvers.Solver): two or more, each with its parameters set,
            no parameter in two of them.

    Raises:
        TypeError: an element is not an nnabla solver.
        ValueError: fewer than two solvers, a solver without parameters, or a parameter (the
            same Variable, under any name) in two solvers; from ``zero_grad()`` too.
    """

    def __init__(self, solvers: Sequence) -> None:
        self.solvers: List = list(solvers)
        if len(self.solvers) < 2:
            raise ValueError(f"SolverGroup needs two or more solvers, got {len(self.solvers)}")
        for i, solver in enumerate(self.solvers):
            check_solver(f"solvers[{i}]", solver)
        self._held: tuple = ()  # (name, hash) of every solver's parameters, when last checked
        self._names: List[Dict[str, str]] = []  # per solver: its name -> the group's name
        self._at_zero_grad: Dict[str, nn.Variable] | None = None  # read by the last zero_grad
        self._check_disjoint()

    def _check_disjoint(self) -> List[Dict[str, nn.Variable]]:
        """Every solver's parameters; ValueError naming a Variable held by two solvers (class
        doc). The group's names are made again when the solvers' parameters changed."""
        params = [s.get_parameters() for s in self.solvers]
        held = tuple((name, hash(v)) for p in params for name, v in p.items())
        if held == self._held:
            return params
        owner: Dict[int, tuple] = {}
        for i, p in enumerate(params):
            for name, v in p.items():
                j, other = owner.get(hash(v), (None, None))
                if j is not None:
                    same = "" if other == name else f" (named {other!r} there)"
                    raise ValueError(
                        f"parameter {name!r} is in solvers[{j}]{same} and solvers[{i}]; it would "
                        "be unscaled and updated twice: give each parameter to one solver"
                    )
                owner[hash(v)] = (i, name)
        uses = Counter(name for p in params for name in p)
        self._names = [
            {name: name if uses[name] == 1 else f"solvers[{i}]/{name}" for name in p}
            for i, p in enumerate(params)
        ]
        self._held = held
        return params

    def get_parameters(self) -> Dict[str, nn.Variable]:
        """Every solver's parameters, by the group's names (class doc), in the solvers' order."""
        return self._by_group_names(self._check_disjoint())

    def parameters_at_zero_grad(self) -> Dict[str, nn.Variable]:
        """:meth:`get_parameters` as read and checked by the last ``zero_grad()`` (read now if
        there was none). The updater reads a step's parameters with it: its step starts with
        ``zero_grad()``, so parameters given to a solver after that (by the data feeder) join
        at the next step."""
        if self._at_zero_grad is None:
            return self.get_parameters()
        return self._at_zero_grad

    def _by_group_names(self, params: List[Dict[str, nn.Variable]]) -> Dict[str, nn.Variable]:
        return {self._names[i][k]: v for i, p in enumerate(params) for k, v in p.items()}

    def get_states(self) -> Dict:
        """Every solver's states, by the group's names of their parameters."""
        self._check_disjoint()
        return {
            self._names[i][k]: v
            for i, s in enumerate(self.solvers)
            for k, v in s.get_states().items()
        }

    def set_states(self, states: Dict) -> None:
        """Give each solver the states of its own parameters (by the group's names)."""
        self._check_disjoint()
        for s, names in zip(self.solvers, self._names):
            s.set_states({k: states[names[k]] for k in s.get_parameters() if names[k] in states})

    def zero_grad(self) -> None:
        """Check that no Variable is in two solvers (class doc), then zero every gradient."""
        self._at_zero_grad = self._by_group_names(self._check_disjoint())
        for s in self.solvers:
            s.zero_grad()

    def update(self) -> None:
        for s in self.solvers:
            s.update()

    def weight_decay(self, decay_rate: float) -> None:
        for s in self.solvers:
            s.weight_decay(decay_rate)

    def scale_grad(self, scale: float) -> None:
        for s in self.solvers:
            s.scale_grad(scale)

    def check_inf_or_nan_grad(self) -> bool:
        """True when any solver's gradients hold inf/NaN."""
        return any(s.check_inf_or_nan_grad() for s in self.solvers)
