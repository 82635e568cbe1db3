"""What a checkpoint holds of the model, by the names it holds it under: the parameters
(:func:`checkpoint_parameters`) and every other state the updater tracks and puts back
(:func:`checkpoint_state`), as the entries of the file (:func:`model_entries`)."""

from __future__ import annotations

from typing import Dict, Mapping, NamedTuple

import nnabla as nn

from ..driver.function_roles import state_entries


def checkpoint_parameters(
    updater, params: Mapping[str, nn.Variable] | None = None
) -> Dict[str, nn.Variable]:
    """The parameters a checkpoint holds, by the names it holds them under.

    Args:
        updater (DynamicLossScalingUpdater): its solver's parameters are always included.
        params (mapping name -> nnabla.Variable or None, default None): the named parameters;
            None means ``nn.get_parameters(grad_only=False)`` (all of the current scope).

    Returns:
        dict name -> nnabla.Variable: ``params`` under their names, then each parameter of
        ``updater.solver`` that is none of them under the solver's name.

    Raises:
        TypeError: a value of ``params`` is not an ``nnabla.Variable``.
        ValueError: a solver parameter outside ``params`` has the name of another Variable
            in ``params``.
    """
    named = dict(nn.get_parameters(grad_only=False) if params is None else params)
    for name, var in named.items():
        if not isinstance(var, nn.Variable):
            raise TypeError(f"params[{name!r}] must be an nnabla.Variable, got {var!r}")
    known = set(named.values())  # nnabla Variables compare equal when they are the same one
    for name, var in updater.solver.get_parameters().items():
        if var in known:
            continue
        if name in named:
            raise ValueError(
                f"the solver's parameter {name!r} is another Variable than the parameter "
                f"{name!r} of params (or nnabla's registry); pass params naming each once"
            )
        named[name] = var
    return named


def checkpoint_state(updater, named: Mapping[str, nn.Variable]) -> Dict[str, nn.Variable]:
    """The state ``updater`` tracks (and puts back after a skipped step) that the parameters
    ``named`` do not hold, by its name in a checkpoint: what nnabla's functions in the graph of
    its loss write (e.g. BatchNormalization statistics made with ``nn.Variable``), named
    ``"<type>[<k>]/<input>"`` by the function that writes it
    (:func:`updater.driver.function_roles.state_entries`), then its option ``forward_state``,
    named ``"forward_state[<i>]"`` by its position there. The names are the same in every
    process that builds the same graph and options.

    Args:
        updater (DynamicLossScalingUpdater): reads ``loss`` and ``forward_state``.
        named (mapping name -> nnabla.Variable): the checkpoint's parameters
            (:func:`checkpoint_parameters`).

    Returns:
        dict name -> nnabla.Variable: each Variable once.
    """
    held = set(named.values())  # nnabla Variables compare equal when they are the same one
    found: Dict[str, nn.Variable] = {}
    given = {f"forward_state[{i}]": v for i, v in enumerate(updater.forward_state)}
    for name, var in {**state_entries(updater.loss), **given}.items():
        if var not in held:
            found[name] = var
            held.add(var)
    return found


class Entry(NamedTuple):
    """A Variable a checkpoint holds: the Variable, its label in messages (``"parameter
    'fc/W'"``), and the kind of array the file must hold for it (a parameter's is a float array,
    a state's any number array: its dtype is kept)."""

    var: nn.Variable
    label: str
    kind: str


def model_entries(updater, params: Mapping[str, nn.Variable] | None = None) -> Dict[str, Entry]:
    """Every Variable a checkpoint of ``updater`` holds, by entry name: ``param/<name>`` for
    :func:`checkpoint_parameters` (``params``: as there), then ``state/<name>`` for
    :func:`checkpoint_state`."""
    named = checkpoint_parameters(updater, params)
    entries = {f"param/{n}": Entry(v, f"parameter {n!r}", "float") for n, v in named.items()}
    for name, var in checkpoint_state(updater, named).items():
        entries[f"state/{name}"] = Entry(var, f"state {name!r}", "number")
    return entries
