"""The updater's options as one frozen record, :class:`UpdaterOptions`: each option once, with its
type, its default, its doc line, its check, whether it chooses a structure the collaborators are
built with, and what the ranks of a data-parallel run compare of it. The updater holds its current
record in a :class:`LiveOptions`, which its collaborators read at each use: assigning an option
that chooses no structure builds nothing again.

The scale and the policy (``scale``, ``scaling_factor``, ``N``, ``policy``, ``min_scale``,
``max_scale``) are not options here: they are the policy and its state
(:mod:`updater.driver.arguments`), which the ranks compare as the saved state.

What the ranks must share (:meth:`UpdaterOptions.shared`): an option that changes what a rank
computes or which collectives it enters (the solver's type, hyperparameters and state shapes,
``accum_grad``, ``on_overflow``, ...). Not compared: what only observes or reports (a recorder
and its probes, which enter no collective; a monitor; a history length;
``on_nonfinite_statistics``), how a rank frees memory (``clear_buffer``), the finite check's
path (every path decides as ``solver.check_inf_or_nan_grad()``), each rank's own data feeder,
loss graph and communicator.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Callable, Dict, Sequence

import nnabla as nn

from ..common.validation import check_bool, check_choice, check_int, check_number, check_positive
from .arguments import check_variables, warn_unchecked_lacking
from .checks import PATHS
from .probe_options import Probes, check_probes
from .solver_group import SolverGroup, check_solver

if TYPE_CHECKING:
    from ..trace.recorder import GradientRecorder

LEARNING_RATE_NAMES = ("lr", "alpha", "eta")
"""The names nnabla's solvers give their learning rate in ``solver.info`` (the value there is the
constructor's; ``solver.learning_rate()`` is the current one)."""


def solver_fingerprint(solver) -> Dict[str, Any]:
    """What the ranks compare of a solver (or of each solver of a :class:`SolverGroup`): its type,
    its hyperparameters (``solver.info``, with the current ``learning_rate()``) and the shapes of
    its states, by parameter name; of another object, its type."""
    if isinstance(solver, SolverGroup):
        return {f"[{i}]": solver_fingerprint(s) for i, s in enumerate(solver.solvers)}
    if not isinstance(solver, nn.solvers.Solver):  # an object of the user's: its type alone
        return {"type": type(solver).__name__}
    info = {k: v for k, v in solver.info.items() if k not in LEARNING_RATE_NAMES}
    states = {
        name: {k: tuple(v.shape) for k, v in state.pstate.items()}
        for name, state in solver.get_states().items()
    }
    return {"type": solver.name, "learning_rate": solver.learning_rate(), **info, "states": states}


def _shapes(variables) -> list:
    return [tuple(v.shape) for v in variables]


def _same(value):
    return value


def _solver(name, value, _):
    check_solver(name, value)
    return value


def _loss(name, value, _):
    if not isinstance(value, nn.Variable):
        raise TypeError(f"loss must be an nnabla.Variable, got {type(value).__name__}")
    if value.parent is not None and value.parent.info.type_name == "Sink":
        raise ValueError(
            "loss is the output of F.sink, whose backward writes 1 into its inputs and ignores "
            "the seed, so loss scaling cannot work (the gradients would come out 1/scale too "
            "small, and no overflow would ever be seen); sum the losses instead: "
            "loss = l1 + l2 (or F.add_n(l1, l2, ...))"
        )
    if value.size != 1:
        raise ValueError(
            f"loss must be a scalar (one element), got shape {tuple(value.shape)}; "
            "reduce it with F.mean or F.sum"
        )
    return value


def _data_feeder(name, value, _):
    if value is not None and not callable(value):
        raise TypeError(f"data_feeder must be callable or None, got {value!r}")
    return value


def _comm(name, value, _):
    if value is not None and not callable(getattr(value, "all_reduce", None)):
        raise TypeError(
            f"comm must offer all_reduce(data, division, inplace), got {type(value).__name__}"
        )
    return value


def _grads(name, value, _):
    if value is None:
        return []
    kinds = sorted({type(g).__name__ for g in value if not isinstance(g, nn.NdArray)})
    if not isinstance(value, (list, tuple)) or kinds:
        got = type(value).__name__ if not isinstance(value, (list, tuple)) else kinds
        raise TypeError(
            f"grads must be a list of nnabla.NdArray (e.g. [p.grad for p in params]) or None, "
            f"got {got}"
        )
    return value if isinstance(value, list) else list(value)  # nnabla's: the list given


def _monitor(name, value, _):
    if value is not None and not hasattr(value, "save_path"):
        raise TypeError(
            f"monitor must be an nnabla.monitor.Monitor or None, got {type(value).__name__}"
        )
    return value


def _recorder(name, value, _):
    if value is not None and not callable(getattr(value, "record", None)):
        raise TypeError(f"recorder must be a GradientRecorder or None, got {type(value).__name__}")
    return value


def option(
    default,
    doc: str,
    check: Callable[[str, Any, Any], Any],
    shared: Callable | None = None,
    builds: bool = False,
):
    """A field of :class:`UpdaterOptions`: ``check(name, value, record)`` returns the value checked
    (the record holds the fields before it, checked); ``shared(value)`` is what the ranks compare
    (None: not compared); ``builds``: it chooses a structure the collaborators are built with (a
    new value takes effect by building them again at the next ``update()``); the others are read
    at each use."""
    meta = {"doc": doc, "check": check, "shared": shared, "builds": builds}
    if default is dataclasses.MISSING:
        return field(metadata=meta)
    return field(default=default, metadata=meta)


def _checker(checker, *args, **kwargs):
    """``check(name, value, record)`` calling ``checker(name, value, *args, **kwargs)``."""
    return lambda name, value, _: checker(name, value, *args, **kwargs)


@dataclass(frozen=True, eq=False)
class UpdaterOptions:
    """The options of :class:`updater.DynamicLossScalingUpdater`, checked when built and when
    :meth:`replaced` (``TypeError``/``ValueError`` naming the option, the value and the range).
    The field docs are the constructor's ``Args``."""

    solver: nn.solvers.Solver | SolverGroup = option(
        dataclasses.MISSING,
        "nnabla.solvers.Solver or SolverGroup: with its parameters set.",
        _solver,
        shared=solver_fingerprint,
        builds=True,
    )
    loss: nn.Variable = option(
        dataclasses.MISSING, "nnabla.Variable: the scalar loss.", _loss, builds=True
    )
    data_feeder: Callable[[], object] | None = option(
        None, "callable or None, default None: called before each forward.", _data_feeder
    )
    clear_buffer: bool = option(
        True, "bool, default True: free buffers in forward/backward.", _checker(check_bool)
    )
    accum_grad: int = option(
        1,
        "int, default 1: forward/backward rounds per update, >= 1.",
        _checker(check_int, 1),
        shared=_same,
        builds=True,  # where the batch is checked (with the gradients with one round)
    )
    weight_decay: float | None = option(
        None,
        "float or None, default None: ``solver.weight_decay`` after unscaling, >= 0.",
        _checker(check_number, 0.0, none_ok=True),
        shared=_same,
    )
    comm: Any = option(
        None,
        "nnabla communicator or None, default None: has ``all_reduce(data, division, inplace)``"
        ": nnabla's or :class:`updater.runtime.comm.MPICommunicator`.",
        _comm,
    )
    grads: Sequence[nn.NdArray] | None = option(
        None,
        "list of nnabla.NdArray or None, default None: gradients to all-reduce; empty or None: "
        "every current parameter gradient of the solver.",
        _grads,
        shared=lambda grads: _shapes(grads),
    )
    on_overflow: str = option(
        "skip",
        'str, default "skip": "skip", or "retry" the same batch at the lowered scale.',
        _checker(check_choice, ("skip", "retry")),
        shared=_same,
    )
    max_retries: int = option(
        8,
        'int, default 8: retries per ``update()`` in "retry" mode, >= 0.',
        _checker(check_int, 0),
        shared=_same,
    )
    max_consecutive_nonfinite: int = option(
        32,
        "int, default 32: ``update()`` calls in a row without an update after which "
        ":class:`NonFiniteGradientsError` is raised, >= 1.",
        _checker(check_int, 1),
        shared=_same,
    )
    clip_grad_norm: float | None = option(
        None,
        "float or None, default None: clip the global L2 norm of the unscaled gradients to "
        "this, > 0.",
        _checker(check_positive, none_ok=True),
        shared=_same,
    )
    average_grads: bool = option(
        False,
        "bool, default False: all-reduce with ``division=True``.",
        _checker(check_bool),
        shared=_same,
    )
    history: int = option(
        0,
        "int, default 0: keep the last ``history`` records in ``self.history``, >= 0.",
        _checker(check_int, 0),
    )
    monitor: nn.monitor.Monitor | None = option(
        None,
        "nnabla.monitor.Monitor or None, default None: writes ``loss_scale`` and "
        "``skipped_steps`` each step.",
        _monitor,
        builds=True,
    )
    recorder: GradientRecorder | None = option(
        None,
        "GradientRecorder or None, default None: records gradient histograms (its probes enter "
        "no collective: each rank probes its own gradients).",
        _recorder,
        builds=True,
    )
    probes: Probes | None = option(
        None,
        "Probes or None, default None: what is measured on the steps ``recorder`` records "
        "besides their gradients (:class:`updater.Probes`: overflow thresholds, flushing, the "
        "forward pass's headroom); None: nothing. Needs ``recorder``.",
        lambda name, value, record: check_probes(name, value, record.recorder),
        builds=True,
    )
    finite_check: str = option(
        "auto",
        'str, default "auto": the inf/NaN check\'s path (:mod:`updater.driver.checks`): '
        '"numpy" (host views), "solver" (one graph on the gradients\' device, one host read), '
        '"nnabla" (``check_inf_or_nan_grad()``), or "auto" ("solver" off the CPU; on the CPU '
        '"numpy" or "nnabla" by model size and what the steps read). All decide exactly as '
        "``solver.check_inf_or_nan_grad()``.",
        _checker(check_choice, ("auto", *PATHS)),
        builds=True,
    )
    enabled: bool = option(
        True,
        "bool, default True: False turns loss scaling off (as PyTorch's "
        "``GradScaler(enabled=False)``): seed 1, no check, every step applied.",
        _checker(check_bool),
        shared=_same,
    )
    restore_on_skip: bool = option(
        True,
        "bool, default True: a skipped step puts back the state its passes wrote "
        "(:func:`updater.driver.function_roles.state_inputs`, and ``forward_state``); False "
        "keeps it moved, as nnabla's updater does.",
        _checker(check_bool),
        shared=_same,
    )
    unchecked_inputs: Sequence[nn.Variable] = option(
        (),
        "list of nnabla.Variable, default (): inputs that may hold inf on purpose (a -inf "
        "attention mask), left out of the bad-data check; each must feed the graph of ``loss`` "
        "(else ``ValueError``); a ``loss`` assigned later keeps them (those its graph lacks no "
        "longer matter; a warning names them).",
        lambda name, value, record: check_variables(name, value, inputs_of=record.loss),
        shared=_shapes,
        builds=True,
    )
    on_nonfinite_statistics: str = option(
        "warn",
        'str, default "warn": a running statistic that became inf/NaN is reported once: "warn" '
        'logs it, "raise" raises '
        ":class:`updater.driver.forward_state.NonFiniteStatisticsError` from ``step()``.",
        _checker(check_choice, ("warn", "raise")),
    )
    forward_state: Sequence[nn.Variable] = option(
        (),
        "list of nnabla.Variable, default (): Variables that a function of yours (a "
        "``PythonFunction``) writes in its forward pass: kept and put back as the state found "
        "in the graph, never checked as data; no function's outputs.",
        _checker(check_variables, leaves=True),
        shared=_shapes,
        builds=True,
    )

    def __post_init__(self) -> None:
        for f in dataclasses.fields(self):
            object.__setattr__(self, f.name, _check(f, getattr(self, f.name), self))

    def replaced(self, **changes) -> UpdaterOptions:
        """A copy with ``changes``, each checked; the other options are taken as they are. A new
        ``loss`` keeps ``unchecked_inputs`` as they are, as nnabla's updater takes a new loss:
        those the new graph lacks no longer matter (a warning names them)."""
        new = object.__new__(UpdaterOptions)
        new.__dict__.update(self.__dict__)
        if "loss" in changes and "unchecked_inputs" not in changes:
            warn_unchecked_lacking(self.unchecked_inputs, changes["loss"])
        for f in dataclasses.fields(self):  # in the fields' order: a check sees those before
            if f.name in changes:
                object.__setattr__(new, f.name, _check(f, changes.pop(f.name), new))
        if changes:
            raise AttributeError(f"{sorted(changes)} are not options of the updater")
        return new

    def shared(self) -> Dict[str, Any]:
        """What every rank of a data-parallel run must share of these options (module doc),
        flat: ``{"accum_grad": 1, "solver.type": "Momentum", "solver.learning_rate": ...}``."""
        out = {}
        for f in SHARED:
            value = f.metadata["shared"](getattr(self, f.name))
            if isinstance(value, dict):
                out.update(_flat(f.name, value))
            else:
                out[f.name] = value
        return out


def _check(f: dataclasses.Field, value, record):
    return f.metadata["check"](f.name, value, record)


def _flat(prefix: str, values: Dict[str, Any]) -> Dict[str, Any]:
    out = {}
    for key, value in values.items():
        name = f"{prefix}{key}" if key.startswith("[") else f"{prefix}.{key}"
        nested = isinstance(value, dict) and key != "states"
        out.update(_flat(name, value) if nested else {name: value})
    return out


OPTIONS = {f.name: f for f in dataclasses.fields(UpdaterOptions)}
"""The options by name, in the constructor's order."""
SHARED = tuple(f for f in OPTIONS.values() if f.metadata["shared"] is not None)
"""The options the ranks compare."""
REBUILDS = frozenset(name for name, f in OPTIONS.items() if f.metadata["builds"])
"""The options that choose a structure the collaborators are built with (the finite check's path
and its graphs, the graph's inputs and state, the recorder's hook, the monitor's series)."""


class LiveOptions:
    """The updater's options as they are now: the updater replaces :attr:`record` when an option
    is assigned, and its collaborators, which hold this object, read ``record`` at each use.

    Args:
        record (UpdaterOptions): the options at construction.
    """

    __slots__ = ("record",)

    def __init__(self, record: UpdaterOptions):
        self.record = record
