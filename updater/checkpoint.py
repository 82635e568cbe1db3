"""Save and restore a training run (parameters, solver state, loss-scaling state) in one file.

The checkpoint is one uncompressed ``.npz`` written atomically (to a temporary name in the same
folder, then ``os.replace``), so a crash mid-save never leaves a truncated checkpoint under the
real name. Layout (all arrays, no pickles):

- ``param/<name>``: each parameter's values (float32 for float16/float32 parameters, so the
  float32 master values of nnabla's half mode survive bit for bit);
- ``solver/<param name>/<state name>``: each solver state array (e.g. Momentum's ``m``);
- ``solver_t/<param name>``: each parameter's solver step count;
- ``updater_state``: ``updater.state_dict()`` as a JSON string;
- ``format_version``: 1.
"""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path
from typing import Dict, Mapping, Union

import nnabla as nn
import numpy as np

FORMAT_VERSION = 1


def _values(array: nn.NdArray) -> np.ndarray:
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
    fd, tmp = tempfile.mkstemp(prefix=path.name + ".", suffix=".tmp", dir=path.parent or ".")
    try:
        with os.fdopen(fd, "wb") as f:
            np.savez(f, **arrays)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise
    return path


def load_checkpoint(
    path: Union[str, Path], updater, params: Mapping[str, nn.Variable] | None = None
) -> Dict:
    """Restore what :func:`save_checkpoint` wrote into existing parameters, solver and updater.

    The graph, solver and updater must already exist (built as for the saved run); values are
    written into them in place. Every saved parameter and solver state must exist and match in
    shape, else ``KeyError``/``ValueError`` names the first mismatch and nothing of the updater
    state is loaded.

    Args:
        path (str or Path): a file written by :func:`save_checkpoint`.
        updater (DynamicLossScalingUpdater): receives solver states and its state dict.
        params (mapping name -> nnabla.Variable or None, default None): where to load the
            parameters; None means ``nn.get_parameters(grad_only=False)``.

    Returns:
        dict: the updater state dict that was loaded.
    """
    if params is None:
        params = nn.get_parameters(grad_only=False)
    with np.load(Path(path), allow_pickle=False) as z:
        if "updater_state" not in z or "format_version" not in z:
            raise ValueError(f"{path} is not a checkpoint written by save_checkpoint")
        version = int(z["format_version"])
        if version != FORMAT_VERSION:
            raise ValueError(f"{path} has format_version {version}; this reads {FORMAT_VERSION}")
        saved = {k[len("param/") :]: z[k] for k in z.files if k.startswith("param/")}
        missing = sorted(set(saved) - set(params))
        if missing:
            raise KeyError(f"checkpoint parameters not found in the current graph: {missing}")
        for name, values in saved.items():
            _check_shape(params[name].data, values, f"parameter {name!r}")
        states = updater.solver.get_states()
        solver_values = {}
        for name, state in states.items():
            if f"solver_t/{name}" not in z.files:
                raise KeyError(f"checkpoint has no solver state for parameter {name!r}")
            for key, var in state.pstate.items():
                entry = f"solver/{name}/{key}"
                if entry not in z.files:
                    raise KeyError(f"checkpoint has no solver state {key!r} for {name!r}")
                solver_values[entry] = z[entry]
                _check_shape(var.data, solver_values[entry], f"solver state {name}/{key}")
        # Everything is present and fits; the updater state validates itself before changing.
        updater_state = json.loads(str(z["updater_state"]))
        updater.load_state_dict(updater_state)
        for name, values in saved.items():
            _write(params[name].data, values)
        for name, state in states.items():
            for key, var in state.pstate.items():
                _write(var.data, solver_values[f"solver/{name}/{key}"])
            state.t = int(z[f"solver_t/{name}"])
        updater.solver.set_states(states)
    return updater_state
