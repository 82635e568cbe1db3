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

    Args:
        solvers (sequence of nnabla.solvers.Solver): two or more, each with its parameters set,
            no parameter in two of them.

    Raises:
        TypeError: an element is not an nnabla solver.
        ValueError: fewer than two solvers, a solver without parameters, or a parameter (by
            name) in two solvers.
    """

    def __init__(self, solvers: Sequence):
        self.solvers: List = list(solvers)
        if len(self.solvers) < 2:
            raise ValueError(f"SolverGroup needs two or more solvers, got {len(self.solvers)}")
        seen: Dict[str, int] = {}
        for i, solver in enumerate(self.solvers):
            if not (
                callable(getattr(solver, "get_parameters", None)) and hasattr(solver, "update")
            ):
                raise TypeError(
                    f"solvers[{i}] must be an nnabla solver, got {type(solver).__name__}"
                )
            names = list(solver.get_parameters())
            if not names:
                raise ValueError(f"solvers[{i}] has no parameters; call set_parameters first")
            for name in names:
                if name in seen:
                    raise ValueError(
                        f"parameter {name!r} is in solvers[{seen[name]}] and solvers[{i}]; give "
                        "each parameter to one solver"
                    )
                seen[name] = i

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
