"""Save and restore a training run (parameters, solver state, loss-scaling state) in one file.

The checkpoint is one uncompressed ``.npz`` written by :func:`updater.files.atomic_write`: a
crash mid-save never leaves a truncated checkpoint under the real name, the file gets the mode
of any new file, and each save first deletes the temporary files that killed saves on this host
left in the folder. Layout (all arrays, no pickles):

- ``param/<name>``: each parameter's values (float32 for float16/float32 parameters, so the
  float32 master values of nnabla's half mode survive bit for bit);
- ``solver/<param name>/<state name>``: each solver state array (e.g. Momentum's ``m``). A state
  the solver never wrote (nnabla creates them with a lazy ``zero()``; they stay so until the first
  applied update, and for ever for parameters without gradients such as BatchNormalization's
  running statistics) is saved as zeros, the value nnabla's first update reads from it;
- ``solver_t/<param name>``: each parameter's solver step count;
- ``updater_state``: ``updater.state_dict()`` as a JSON string;
- ``format_version``: 1.
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass, field
from pathlib import Path
from typing import Dict, List, Mapping, Union

import nnabla as nn
import numpy as np

from .files import atomic_write

logger = logging.getLogger(__name__)

FORMAT_VERSION = 1


def _values(array: nn.NdArray) -> np.ndarray:
    if array.zeroing:  # zero() and no write since (possibly never allocated: no dtype yet)
        return np.zeros(array.shape, dtype=np.float32)
    dtype = np.float64 if array.dtype == np.float64 else np.float32
    return np.array(array.get_data("r", dtype=dtype), copy=True)


def _check_shape(array: nn.NdArray, values: np.ndarray, what: str) -> None:
    if tuple(array.shape) != values.shape:
        raise ValueError(
            f"{what} has shape {tuple(array.shape)} but the checkpoint holds {values.shape}"
        )


def _write(array: nn.NdArray, values: np.ndarray) -> None:
    array.cast(values.dtype)[...] = values


def save_checkpoint(
    path: Union[str, Path], updater, params: Mapping[str, nn.Variable] | None = None
) -> Path:
    """Write parameters, solver states and ``updater.state_dict()`` to ``path`` atomically.

    The file gets the mode of a normally created file (``0o666`` less the umask). Temporary
    files of killed saves in the same folder are deleted first (see the module docstring).

    Args:
        path (str or Path): output file, used as given (no suffix is added).
        updater (DynamicLossScalingUpdater): the updater whose solver and state to save.
        params (mapping name -> nnabla.Variable or None, default None): parameters to save;
            None saves ``nn.get_parameters(grad_only=False)`` (all of the current scope).

    Returns:
        Path: the path written.
    """
    path = Path(path)
    if params is None:
        params = nn.get_parameters(grad_only=False)
    arrays: Dict[str, np.ndarray] = {"format_version": np.array(FORMAT_VERSION)}
    for name, var in params.items():
        if not isinstance(var, nn.Variable):
            raise TypeError(f"params[{name!r}] must be an nnabla.Variable, got {var!r}")
        arrays[f"param/{name}"] = _values(var.data)
    for name, state in updater.solver.get_states().items():
        for key, var in state.pstate.items():
            arrays[f"solver/{name}/{key}"] = _values(var.data)
        arrays[f"solver_t/{name}"] = np.array(state.t, dtype=np.int64)
    arrays["updater_state"] = np.array(json.dumps(updater.state_dict()))
    atomic_write(path, lambda f: np.savez(f, **arrays))
    return path


@dataclass(frozen=True)
class LoadReport:
    """What :func:`load_checkpoint` did; entries are named as in the file (``param/<name>``...).

    Attributes:
        updater_state (dict): the updater state dict that was loaded.
        missing (list of str): entries of the current parameters and solver that the file does
            not provide; they were left unchanged. Always empty after a strict load.
        unexpected (list of str): entries of the file with no counterpart in the current
            parameters and solver; they were ignored. Always empty after a strict load.
    """

    updater_state: Dict
    missing: List[str] = field(default_factory=list)
    unexpected: List[str] = field(default_factory=list)


def _some(names: List[str], limit: int = 12) -> str:
    more = f" and {len(names) - limit} more" if len(names) > limit else ""
    return f"{names[:limit]}{more}"


def load_checkpoint(
    path: Union[str, Path],
    updater,
    params: Mapping[str, nn.Variable] | None = None,
    strict: bool = True,
) -> LoadReport:
    """Restore what :func:`save_checkpoint` wrote into existing parameters, solver and updater.

    The graph, solver and updater must already exist (built as for the saved run); values are
    written into them in place. Strict loading requires the file and the current model to hold
    the same parameters and, per parameter, the same solver state names (a checkpoint of Adam,
    with ``mean`` and ``var``, does not load into Momentum, with ``m``). A parameter's solver state
    (its arrays and step count) loads as a whole or not at all. Everything is checked before
    anything is written: on any error nothing changes (parameters, solver, updater).

    Args:
        path (str or Path): a file written by :func:`save_checkpoint`.
        updater (DynamicLossScalingUpdater): receives solver states and its state dict.
        params (mapping name -> nnabla.Variable or None, default None): where to load the
            parameters; None means ``nn.get_parameters(grad_only=False)``.
        strict (bool, default True): True raises ``KeyError`` naming every entry missing from
            the file or not found in the current graph or solver; False loads the entries that
            match, logs a warning naming the others and returns them in the report.

    Returns:
        LoadReport: the loaded updater state and the entries that were not loaded.

    Raises:
        KeyError: strict and the names differ (see ``strict``).
        ValueError: not a checkpoint, another format version, a shape that differs (also when
            not strict), or an updater state that ``updater.load_state_dict`` rejects.
    """
    if params is None:
        params = nn.get_parameters(grad_only=False)
    with np.load(Path(path), allow_pickle=False) as z:
        if "updater_state" not in z.files or "format_version" not in z.files:
            raise ValueError(f"{path} is not a checkpoint written by save_checkpoint")
        version = int(z["format_version"])
        if version != FORMAT_VERSION:
            raise ValueError(f"{path} has format_version {version}; this reads {FORMAT_VERSION}")
        files = set(z.files)
        missing: List[str] = []
        param_arrays = {}
        for name, var in params.items():
            if f"param/{name}" in files:
                param_arrays[name] = z[f"param/{name}"]
                _check_shape(var.data, param_arrays[name], f"parameter {name!r}")
            else:
                missing.append(f"param/{name}")
        states = updater.solver.get_states()
        solver_values, loaded_t = {}, set()
        for name, state in states.items():
            prefix = f"solver/{name}/"
            wanted = {prefix + key for key in state.pstate} | {f"solver_t/{name}"}
            saved = {k for k in files if k.startswith(prefix) and "/" not in k[len(prefix) :]}
            if saved | ({f"solver_t/{name}"} & files) != wanted:  # absent, or another solver
                missing += sorted(wanted)
                continue
            for key, var in state.pstate.items():
                values = solver_values[name, key] = z[prefix + key]
                _check_shape(var.data, values, f"solver state {name}/{key}")
            loaded_t.add(name)
        used = {f"param/{n}" for n in param_arrays} | {f"solver_t/{n}" for n in loaded_t}
        used |= {f"solver/{n}/{k}" for n, k in solver_values}
        unexpected = sorted(files - used - {"updater_state", "format_version"})
        missing.sort()
        if strict and (missing or unexpected):
            raise KeyError(
                f"{path} does not match the current model: missing from the checkpoint: "
                f"{_some(missing)}; checkpoint entries not found in the current graph or "
                f"solver: {_some(unexpected)}. load_checkpoint(..., strict=False) loads the rest"
            )
        # Everything loadable fits; the updater state validates itself before changing.
        updater_state = json.loads(str(z["updater_state"]))
        updater.load_state_dict(updater_state)
        for name, values in param_arrays.items():
            _write(params[name].data, values)
        for (name, key), values in solver_values.items():
            _write(states[name].pstate[key].data, values)
        for name in loaded_t:
            states[name].t = int(z[f"solver_t/{name}"])
        updater.solver.set_states(states)
    if missing or unexpected:
        logger.warning(
            "%s: checkpoint entries that did not match were not loaded: missing %s, unexpected %s",
            path,
            _some(missing),
            _some(unexpected),
        )
    return LoadReport(updater_state, missing, unexpected)
