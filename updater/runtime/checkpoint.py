"""Save and restore a training run (parameters, solver state, loss-scaling state) in one file.

The checkpoint is one uncompressed ``.npz`` written by :func:`updater.common.writing.write_file`:
a crash mid-save never leaves a truncated checkpoint under the real name, the file gets the mode
of any new file, each save first deletes the temporary files that killed saves on this host
left in the folder, and a file this package did not write is not replaced unless asked.
Layout (all arrays, no pickles):

- ``param/<name>``: each parameter's values (float32 for float16/float32 parameters, so the
  float32 master values of nnabla's half mode survive bit for bit). The parameters are those of
  ``params`` (default: nnabla's registry, ``nn.get_parameters(grad_only=False)``) under their
  names there, and every other parameter the solver holds (e.g. a learnable temperature made
  with ``nn.Variable`` and given to ``solver.set_parameters``) under the solver's name;
- ``state/<name>``: every other state the updater tracks and puts back after a skipped step
  (:func:`updater.runtime.entries.checkpoint_state`: what nnabla's functions in the loss's graph
  write, as BatchNormalization statistics made with ``nn.Variable``, named by the function that
  writes them, ``state/BatchNormalization[0]/mean``; and the option ``forward_state``,
  ``state/forward_state[0]``), in its own dtype (float64 stays float64; float16 as float32);
- ``solver/<param name>/<state name>``: each solver state array (e.g. Momentum's ``m``). A state
  the solver never wrote (nnabla creates them with a lazy ``zero()``; they stay so until the first
  applied update, and for ever for parameters without gradients such as BatchNormalization's
  running statistics) is saved as zeros, the value nnabla's first update reads from it;
- ``solver_t/<param name>``: each parameter's solver step count;
- ``updater_state``: ``updater.state_dict()`` as a JSON string;
- ``format_version``: 1.

Loading reads and checks the whole file (:func:`updater.common.npz.read_npz`: names, dtypes,
shapes, finite values, the updater state) before anything reaches nnabla: on any error nothing
changes.
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Dict, List, Mapping, NamedTuple, Union

import nnabla as nn
import numpy as np

from ..common.names import shown
from ..common.npz import NpzContent, read_npz, write_npz
from ..common.validation import check_bool
from ..common.writing import write_file
from .entries import Entry, checkpoint_parameters, checkpoint_state, model_entries

__all__ = ["CheckpointMismatchError", "LoadReport", "load_checkpoint", "save_checkpoint"]
__all__ += ["checkpoint_parameters", "checkpoint_state"]  # their home: updater.runtime.entries

if TYPE_CHECKING:
    from ..driver.updater import DynamicLossScalingUpdater

logger = logging.getLogger(__name__)

FORMAT_VERSION = 1
SOLVER_T_MAX = 2**31 - 1
"""The largest solver step count nnabla holds (a C int)."""


class CheckpointMismatchError(KeyError, ValueError):
    """A strict :func:`load_checkpoint` found entries on one side only (the file, or the current
    parameters and solver). A ``KeyError`` (as in earlier versions) and a ``ValueError``."""

    def __str__(self) -> str:
        return str(self.args[0]) if self.args else ""


def _values(array: nn.NdArray, kind: str = "float") -> np.ndarray:
    """The values of ``array``: float64 as float64, other floats as float32 (float16 exactly);
    with ``kind`` "number", integers in their own dtype."""
    if array.zeroing:  # zero() and no write since (possibly never allocated: no dtype yet)
        return np.zeros(array.shape, dtype=np.float32)
    try:
        dtype = np.dtype(array.dtype)
    except RuntimeError:  # fill()ed and never allocated: no dtype yet, its value reads as any
        dtype = np.dtype(np.float32)
    if dtype != np.float64 and not (kind == "number" and dtype.kind in "iu"):
        dtype = np.dtype(np.float32)
    return np.asarray(array.get_data("r", dtype=dtype))  # written before any training runs


def _write(array: nn.NdArray, values: np.ndarray) -> None:
    array.cast(values.dtype)[...] = values


def save_checkpoint(
    path: Union[str, Path],
    updater: DynamicLossScalingUpdater,
    params: Mapping[str, nn.Variable] | None = None,
    overwrite: bool = False,
) -> Path:
    """Write parameters, solver states and ``updater.state_dict()`` to ``path`` atomically.

    The file gets the mode of a normally created file (``0o666`` less the umask). Temporary
    files of killed saves in the same folder are deleted first (see the module docstring).

    Args:
        path (str or Path): output file, used as given (no suffix is added).
        updater (DynamicLossScalingUpdater): the updater whose solver and state to save.
        params (mapping name -> nnabla.Variable or None, default None): parameters to save by
            name; None saves ``nn.get_parameters(grad_only=False)`` (all of the current scope).
            Every other parameter the solver holds is saved too, by the solver's name
            (:func:`checkpoint_parameters`), and every other state the updater tracks
            (:func:`checkpoint_state`).
        overwrite (bool, default False): replace a file at ``path`` that this package did
            not write (a checkpoint it wrote, e.g. the previous save, is replaced anyway).

    Returns:
        Path: the path written.

    A parameter or state holding inf/NaN (typically a running statistic a float16 batch
    overflowed) is saved as it is, with a warning naming it: :func:`load_checkpoint` refuses
    such values unless ``allow_nonfinite=True``.

    Raises:
        OSError: the write failed (e.g. a full disk); the message names ``path``, and a
            previous file at ``path`` is intact.
        updater.common.writing.UnsafeOutputError: ``path`` is a file this package did not
            write (without ``overwrite``), a symbolic link, or a folder; nothing was written.
    """
    path = Path(path)
    arrays: Dict[str, np.ndarray] = {"format_version": np.array(FORMAT_VERSION)}
    bad = []
    for key, entry in model_entries(updater, params).items():
        arrays[key] = _values(entry.var.data, entry.kind)
        if what := _nonfinite(arrays[key]):
            bad.append(f"{key.partition('/')[2]} ({what})")
    if bad:
        logger.warning(
            "save_checkpoint(%s): %s hold inf/NaN; load_checkpoint refuses them unless "
            "allow_nonfinite=True. A running statistic (BatchNormalization's mean or variance) "
            "becomes inf when a float16 batch overflows it: updater.amp.rewrite computes "
            "BatchNormalization in float32",
            shown(path),
            _some(bad),
        )
    for name, state in updater.solver.get_states().items():
        for key, var in state.pstate.items():
            arrays[f"solver/{name}/{key}"] = _values(var.data)
        arrays[f"solver_t/{name}"] = np.array(state.t, dtype=np.int64)
    arrays["updater_state"] = np.array(json.dumps(updater.state_dict()))
    return write_file(
        path, lambda f: write_npz(f, arrays, "checkpoint"), overwrite, kind="checkpoint"
    )


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


def _shapes(entries: Mapping[str, Entry], states) -> Dict[str, tuple]:
    """The shape of each entry a checkpoint of the current model holds, by entry name, with
    its label for messages."""
    shapes = {k: ((), f"array {k!r}") for k in ("format_version", "updater_state")}
    for key, entry in entries.items():
        shapes[key] = (tuple(entry.var.shape), entry.label)
    for name, state in states.items():
        shapes[f"solver_t/{name}"] = ((), f"array 'solver_t/{name}'")
        for key, var in state.pstate.items():
            shapes[f"solver/{name}/{key}"] = (tuple(var.shape), f"solver state '{name}/{key}'")
    return shapes


def _select(shapes: Dict[str, tuple]):
    """For :func:`updater.common.npz.read_npz`: refuse an entry of the current model whose
    declared shape differs, before any array is inflated; read only the model's entries."""

    def select(declared):
        for key, (shape, _) in declared.items():
            want, label = shapes.get(key, (shape, ""))
            if tuple(shape) != want:
                if want == ():
                    raise ValueError(f"{label} has shape {shape}, expected a single value")
                raise ValueError(
                    f"{label} has shape {tuple(shape)} in the file but {want} in the current model"
                )
        return set(declared) & set(shapes)

    return select


def _nonfinite(values: np.ndarray) -> str:
    """ "NaN", "inf", "NaN and inf", or "" when every value is finite."""
    with np.errstate(over="ignore", invalid="ignore"):  # a finite sum: one fast pass
        if np.isfinite(values.sum()) or np.isfinite(values).all():
            return ""
    found = [w for w, test in (("NaN", np.isnan), ("inf", np.isinf)) if test(values).any()]
    return " and ".join(found)


NONNEGATIVE_STATES = {
    **dict.fromkeys(("Adam", "AdamW", "AdaBelief", "AdaBound", "Lamb"), ("var",)),
    **dict.fromkeys(("AMSGRAD", "AMSBound"), ("v", "v_hat")),
    **dict.fromkeys(("Adagrad", "RMSprop"), ("v",)),
    "Adadelta": ("e_sqr_delta", "e_sqr_grad"),
    "RMSpropGraves": ("n",),
    "Adamax": ("u",),
}
"""Solver states (by nnabla solver name) that hold squares or magnitudes: never below 0."""


def _check_squares(z: NpzContent, solver: str, values: Mapping[tuple, np.ndarray]) -> None:
    """``ValueError`` if a state of :data:`NONNEGATIVE_STATES` holds a negative value (the next
    update would take its square root: NaN parameters)."""
    for (name, key), v in values.items():
        if key in NONNEGATIVE_STATES.get(solver, ()) and (v < 0).any():
            raise z.error(
                f"solver state '{name}/{key}' holds negative values ({v.min():.3g}); {solver} "
                "keeps squares or magnitudes there, never below 0"
            )


def _updater_state(z: NpzContent) -> Dict:
    z.require(
        "format_version", "updater_state", hint=": not a checkpoint written by save_checkpoint"
    )
    version = z.scalar("format_version", "int")
    if version != FORMAT_VERSION:
        raise z.error(f"format_version is {version}; this version reads {FORMAT_VERSION}")
    state = z.json("updater_state")
    if not isinstance(state, dict):
        raise z.error(f"updater state is a JSON {type(state).__name__}, expected an object")
    if "format_version" not in state:
        raise z.error("updater state lacks format_version")
    return state


def load_checkpoint(
    path: Union[str, Path],
    updater: DynamicLossScalingUpdater,
    params: Mapping[str, nn.Variable] | None = None,
    strict: bool = True,
    allow_nonfinite: bool = False,
    max_bytes: int | None = None,
) -> LoadReport:
    """Restore what :func:`save_checkpoint` wrote into existing parameters, solver and updater.

    The graph, solver and updater must already exist (built as for the saved run); values are
    written into them in place. Strict loading requires the file and the current model to hold
    the same parameters (:func:`checkpoint_parameters`: ``params`` and every parameter the
    solver holds, so each solver state gets its parameter's value), the same other state
    (:func:`checkpoint_state`, put back in its saved dtype) and, per parameter, the same
    solver state names (a checkpoint of Adam, with ``mean`` and ``var``, does not load into
    Momentum, with ``m``). A parameter's solver state (its arrays and step count) loads as a
    whole or not at all. The whole file is read and checked (dtypes, shapes, finite values, the
    updater state) before anything is written: on any error nothing changes.

    Args:
        path (str or Path): a file written by :func:`save_checkpoint`.
        updater (DynamicLossScalingUpdater): receives solver states and its state dict.
        params (mapping name -> nnabla.Variable or None, default None): where to load the
            parameters; None means ``nn.get_parameters(grad_only=False)``.
        strict (bool, default True): True raises :class:`CheckpointMismatchError` naming every
            entry missing from the file or not found in the current graph or solver; False
            loads the entries that match, logs a warning naming the others and returns them in
            the report.
        allow_nonfinite (bool, default False): load parameters, state and solver states
            holding inf or NaN; by default they are refused, by name.
        max_bytes (int or None, default None): the most bytes the file may unpack to, checked
            before unpacking (:func:`updater.common.npz.read_npz`); None: half the physical
            memory.

    Returns:
        LoadReport: the loaded updater state and the entries that were not loaded.

    Raises:
        OSError: the file is missing, a folder or unreadable.
        ValueError: the file is not a checkpoint (empty, truncated, not an ``.npz``, an entry
            missing or damaged), has another format version, holds an array that is not a
            float array or has another shape (also when not strict), holds inf/NaN (unless
            ``allow_nonfinite``), or an updater state that is not valid JSON, lacks
            ``format_version`` or that ``updater.load_state_dict`` rejects. The message names
            the file and the problem.
        CheckpointMismatchError: strict and the names differ (see ``strict``); it is a
            ``KeyError`` and a ``ValueError``.
    """
    strict = check_bool("strict", strict)
    allow_nonfinite = check_bool("allow_nonfinite", allow_nonfinite)
    entries = model_entries(updater, params)
    states = updater.solver.get_states()
    z = read_npz(path, "checkpoint", max_bytes, _select(_shapes(entries, states)))
    got = _read(z, entries, states, getattr(updater.solver, "name", ""))
    missing, unexpected = got.missing, got.unexpected
    if strict and (missing or unexpected):
        raise CheckpointMismatchError(
            f"checkpoint {shown(path)} does not match the current model: missing from the "
            f"checkpoint: {_some(missing)}; checkpoint entries not found in the current graph or "
            f"solver: {_some(unexpected)}. load_checkpoint(..., strict=False) loads the rest"
        )
    if not allow_nonfinite:
        _refuse_nonfinite(z, entries, got)
    _write_all(z, updater, entries, states, got)
    if missing or unexpected:
        logger.warning(
            "%s: checkpoint entries that did not match were not loaded: missing %s, unexpected %s",
            shown(path),
            _some(missing),
            _some(unexpected),
        )
    return LoadReport(got.updater_state, missing, unexpected)


class _Read(NamedTuple):
    """What a checkpoint holds for the current model, read and checked before anything is
    written: the updater state, the model's arrays by key, the solver states' arrays by
    ``(parameter, key)`` and step counts by parameter, and the entries missing or unexpected."""

    updater_state: Dict
    model: Dict[str, np.ndarray]
    solver: Dict[tuple, np.ndarray]
    steps: Dict[str, int]
    missing: List[str]
    unexpected: List[str]


def _read(z: NpzContent, entries, states, solver_name: str) -> _Read:
    """The checkpoint ``z``'s entries for the model ``entries`` and the solver ``states`` (of
    nnabla's solver ``solver_name``), each checked as it is read."""
    updater_state = _updater_state(z)
    missing = [key for key in entries if key not in z]
    model = {key: z.array(key, e.kind, e.label) for key, e in entries.items() if key in z}
    solver, steps = {}, {}
    for name, state in states.items():
        prefix = f"solver/{name}/"
        wanted = {prefix + key for key in state.pstate} | {f"solver_t/{name}"}
        saved = {k for k in z.declared if k.startswith(prefix) and "/" not in k[len(prefix) :]}
        if saved | ({f"solver_t/{name}"} & set(z.declared)) != wanted:  # absent, or another solver
            missing += sorted(wanted)
            continue
        for key in state.pstate:
            label = f"solver state '{name}/{key}'"
            solver[name, key] = z.array(prefix + key, "float", label)
        steps[name] = z.scalar(f"solver_t/{name}", "int")
        if not 0 <= steps[name] <= SOLVER_T_MAX:  # nnabla holds it in a C int
            raise z.error(
                f"solver step count of {name!r} is {steps[name]}, expected 0 to {SOLVER_T_MAX}"
            )
    _check_squares(z, solver_name, solver)
    used = set(model) | {f"solver_t/{n}" for n in steps} | {f"solver/{n}/{k}" for n, k in solver}
    unexpected = sorted(set(z.declared) - used - {"updater_state", "format_version"})
    return _Read(updater_state, model, solver, steps, sorted(missing), unexpected)


def _refuse_nonfinite(z: NpzContent, entries, got: _Read) -> None:
    """``ValueError`` naming the arrays of ``got`` that hold inf or NaN."""
    labelled = {entries[k].label: v for k, v in got.model.items()}
    labelled.update({f"solver state '{n}/{k}'": v for (n, k), v in got.solver.items()})
    bad = [f"{label} holds {what}" for label, v in labelled.items() if (what := _nonfinite(v))]
    if bad:
        raise z.error(
            f"{'; '.join(bad[:12])}{' and more' if len(bad) > 12 else ''} "
            "(load_checkpoint(..., allow_nonfinite=True) loads them anyway)"
        )


def _write_all(z: NpzContent, updater, entries, states, got: _Read) -> None:
    """Load ``got``'s updater state (which validates itself before changing anything), then
    write its arrays into the model's and the solver's."""
    try:
        updater.load_state_dict(got.updater_state)
    except (KeyError, TypeError, ValueError, ArithmeticError, RecursionError) as e:
        reason = e.args[0] if isinstance(e, KeyError) and e.args else e  # e.g. 10**400: overflow
        raise z.error(f"updater state rejected: {reason}") from e
    for key, values in got.model.items():
        _write(entries[key].var.data, values)
    for (name, key), values in got.solver.items():
        _write(states[name].pstate[key].data, values)
    for name, t in got.steps.items():
        states[name].t = t
    updater.solver.set_states(states)
