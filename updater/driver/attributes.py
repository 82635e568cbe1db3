"""The updater's attributes that read its records, as static tools see them: an attribute per
option, declared with its type in :class:`UpdaterAttributes` and made a property by
:func:`attach_options` (it reads the live record :class:`updater.driver.options.LiveOptions` and
assigns through the updater's ``_set_option``), and a read-only one per counter
(:class:`updater.driver.records.Counters`). The updater's typed signature writes :data:`DEFAULT`
for each option's default, which :func:`attach_options` replaces with the record's, so each
default is written once, in :class:`updater.driver.options.UpdaterOptions`."""

from __future__ import annotations

import inspect
import textwrap
from operator import attrgetter
from typing import TYPE_CHECKING, Any, Callable, Sequence

import nnabla as nn

from .options import OPTIONS

if TYPE_CHECKING:  # nnabla's types are named nn.solvers.Solver, nn.monitor.Monitor
    from ..trace.recorder import GradientRecorder
    from .probe_options import Probes
    from .solver_group import SolverGroup


def _counter(name: str) -> property:
    """A read-only attribute: the counter ``name`` (:class:`Counters`)."""
    return property(attrgetter(f"_counters.{name}"), doc=f"The counter {name} (read-only).")


class UpdaterAttributes:
    """The attributes of :class:`updater.DynamicLossScalingUpdater` that read its records (module
    doc): the options, typed as the fields of :class:`updater.driver.options.UpdaterOptions`
    (``history`` and ``finite_check`` are the updater's own properties), and the counters."""

    solver: nn.solvers.Solver | SolverGroup
    loss: nn.Variable
    data_feeder: Callable[[], object] | None
    clear_buffer: bool
    accum_grad: int
    weight_decay: float | None
    comm: Any
    grads: Sequence[nn.NdArray] | None
    on_overflow: str
    max_retries: int
    max_consecutive_nonfinite: int
    clip_grad_norm: float | None
    average_grads: bool
    monitor: nn.monitor.Monitor | None
    recorder: GradientRecorder | None
    probes: Probes | None
    enabled: bool
    restore_on_skip: bool
    unchecked_inputs: Sequence[nn.Variable]
    on_nonfinite_statistics: str
    forward_state: Sequence[nn.Variable]

    steps = _counter("steps")
    updates_applied = _counter("updates_applied")
    overflows = _counter("overflows")
    skips = _counter("skips")
    consecutive_nonfinite = _counter("consecutive_nonfinite")
    batches = _counter("batches")
    passes = _counter("passes")
    nonfinite_losses = _counter("nonfinite_losses")
    nonfinite_statistics = _counter("nonfinite_statistics")

    def __deepcopy__(self, memo: dict) -> None:
        """``copy.deepcopy(updater)`` raises ``TypeError`` saying what to do instead: nnabla's
        solvers, graphs and arrays cannot be deep-copied (nnabla's own updater fails inside
        pickling, "self.solver,self.solverp cannot be converted to a Python object")."""
        raise TypeError(
            f"copy.deepcopy cannot copy a {type(self).__name__}: nnabla's solver and graph "
            "cannot be copied. Use copy.copy(updater) for an independent updater (its own "
            "scale, counters and history) over the same solver, loss and data feeder, or build "
            "the model, solver and updater again and copy the state into the new one with "
            "new.load_state_dict(updater.state_dict()) (save_checkpoint and load_checkpoint "
            "carry the parameters and solver state too)"
        )


class _RecordDefault:
    def __repr__(self) -> str:
        return "DEFAULT"


DEFAULT: Any = _RecordDefault()
"""The default of each option in the updater's typed signature: :func:`attach_options` puts the
record's default (:class:`UpdaterOptions`) in its place, so each default is written once."""


def args_doc(indent: str, width: int = 96) -> str:
    """The ``Args`` entries of the options, for the updater's docstring."""
    entries = []
    for name, f in OPTIONS.items():
        kind, _, text = f.metadata["doc"].partition(": ")
        entry = f"{name} ({kind}): {text}"
        entries.append(
            textwrap.fill(entry, width, initial_indent=indent, subsequent_indent=indent + "    ")
        )
    return "\n".join(entries)


def attach_options(cls) -> None:
    """Give ``cls`` (the updater) an attribute per option it does not define itself: reads
    ``_live.record`` (:class:`LiveOptions`), assigns through ``cls._set_option``; its
    docstring's ``{options}`` line the options' ``Args`` entries; and its ``__init__`` the
    record's default of each option where its signature says :data:`DEFAULT`."""
    for name, f in OPTIONS.items():
        if name not in vars(cls):
            read = attrgetter(f"_live.record.{name}")
            write = lambda self, value, name=name: self._set_option(name, value)  # noqa: E731
            setattr(cls, name, property(read, write, doc=f.metadata["doc"]))
    cls.__doc__ = cls.__doc__.replace(" " * 8 + "{options}", args_doc(" " * 8))
    init = cls.__init__
    given = [p for p in inspect.signature(init).parameters.values() if p.default is not p.empty]
    default = {
        p.name: OPTIONS[p.name].default if p.default is DEFAULT else p.default for p in given
    }
    keyword = [p.name for p in given if p.kind is p.KEYWORD_ONLY]
    init.__defaults__ = tuple(default[p.name] for p in given if p.name not in keyword)
    init.__kwdefaults__ = {name: default[name] for name in keyword}
