"""Several nnabla solvers driven as one by the updater, for one loss whose parameters train with
different solvers or learning rates (a backbone and a head, as fine-tuning scripts do)."""

from __future__ import annotations

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

    A parameter held by two solvers would be unscaled and updated twice, so each Variable (by
    identity) and each name must be in one solver only: checked when built, and again at every
    ``zero_grad()`` (the start of each step) when a solver's parameters changed
    (``set_parameters``): one ``get_parameters()`` per solver and a comparison of the
    parameters' hashes.

    Args:
        solvers (sequence of nnabla.solvers.Solver): two or more, each with its parameters set,
            no parameter in two of them.

    Raises:
        TypeError: an element is not an nnabla solver.
        ValueError: fewer than two solvers, a solver without parameters, or a parameter (the
            same Variable, or the same name) in two solvers; from ``zero_grad()`` too.
    """

    def __init__(self, solvers: Sequence) -> None:
        self.solvers: List = list(solvers)
        if len(self.solvers) < 2:
            raise ValueError(f"SolverGroup needs two or more solvers, got {len(self.solvers)}")
        for i, solver in enumerate(self.solvers):
            check_solver(f"solvers[{i}]", solver)
        self._held: tuple = ()  # hashes of every solver's parameters, when last checked
        self._check_disjoint()

    def _check_disjoint(self) -> None:
        """ValueError naming a parameter held by two solvers (module doc); a no-op while the
        solvers hold the same parameters as at the last check."""
        params = [s.get_parameters() for s in self.solvers]
        held = tuple(hash(v) for p in params for v in p.values())
        if held == self._held:
            return
        by_variable: Dict[int, tuple] = {}
        by_name: Dict[str, int] = {}
        for i, p in enumerate(params):
            for name, v in p.items():
                j, other = by_variable.get(hash(v), (None, None))
                if j is None and name in by_name:
                    j, other = by_name[name], name
                if j is not None:
                    same = "" if other == name else f" (named {other!r} there)"
                    raise ValueError(
                        f"parameter {name!r} is in solvers[{j}]{same} and solvers[{i}]; it would "
                        "be unscaled and updated twice: give each parameter to one solver"
                    )
                by_variable[hash(v)], by_name[name] = (i, name), i
        self._held = held

    def get_parameters(self) -> Dict[str, nn.Variable]:
        """Every solver's parameters, by name (in the solvers' order)."""
        return {k: v for s in self.solvers for k, v in s.get_parameters().items()}

    def get_states(self) -> Dict:
        """Every solver's states, by parameter name."""
        return {k: v for s in self.solvers for k, v in s.get_states().items()}

    def set_states(self, states: Dict) -> None:
        """Give each solver the states of its own parameters."""
        for s in self.solvers:
            s.set_states({k: states[k] for k in s.get_parameters() if k in states})

    def zero_grad(self) -> None:
        """Check that no parameter is in two solvers (class doc), then zero every gradient."""
        self._check_disjoint()
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
