"""The finite check of a step's gradients, one object per path (``finite_check=``), one module
per path, chosen once by :func:`choose_check`: it finds whether they are finite (with the largest
|gradient|, the sum of squares and the names of non-finite parameters when asked), unscales them
and measures their sum of squares, and answers one record of the attempt's facts
(:meth:`~updater.driver.checks.base.FiniteCheck.facts`,
:class:`~updater.driver.checks.base.StepFacts`: the gradients, the loss, the inputs, the
statistics and the names), reading on the host (:class:`~updater.driver.checks.base.HostReads`)
what the path does not read with the gradients: its own answer's ``NOT_CHECKED`` never leaves
this package. No other module compares the path's name.

Three paths, same decisions: "numpy" (:mod:`.host`), "solver" (:mod:`.device`), "nnabla"
(:mod:`.nnabla`). A new path is a :class:`~updater.driver.checks.base.FiniteCheck` subclass in a
module of its own here, named in :data:`PATHS`.

The names of the parameters whose gradients are not finite are read from the gradients when
first asked (:func:`~updater.driver.checks.base.non_finite_names`), on the two concatenating
layouts.
"""

from __future__ import annotations

from typing import List

from ..arrays import on_cpu
from .base import Ask, Extras, FiniteCheck, HostReads, StepFacts, host_grads
from .device import DeviceCheck
from .host import HostCheck, per_array
from .nnabla import NnablaCheck

__all__ = ["PATHS", "Ask", "Extras", "FiniteCheck", "HostReads", "StepFacts", "choose_check"]
__all__ += ["host_grads", "resolve_path"]

PATHS = {check.name: check for check in (HostCheck, DeviceCheck, NnablaCheck)}
"""The paths by their ``finite_check`` value."""
SMALL_MODEL_VALUES = 2**15
"""``finite_check="auto"`` on a CPU: "nnabla" below this many gradient values (flag only)."""


def resolve_path(requested: str, flag_only: bool, n_values: int, n_arrays: int) -> str:
    """The path for ``finite_check=requested`` on ``n_values`` gradient values in ``n_arrays``
    arrays: as given unless "auto". "auto" is "solver" off the CPU
    (gradients stay on the device; a fixed number of nnabla functions and one host read per
    check, where ``check_inf_or_nan_grad`` waits for the device once per array). On the CPU, when
    steps need only the finite flag (``flag_only``: no |g| max, clipping or recorder), "numpy"
    for models of at least :data:`SMALL_MODEL_VALUES` values that it works array by array
    (:func:`~updater.driver.checks.host.per_array`), whose fused pass saves nnabla's second pass
    over large arrays, else "nnabla"; when steps read the gradients, "numpy".

    Measured in training loops on this project's 2-core machine (nnabla 1.39,
    ``reports/benchmarks.md``): on small models and on many arrays two C++ loops beat anything
    Python runs per array or the copy of a concatenation (a 64-64-10 MLP in cpu:half: 0.985x
    the bare loop against 1.025x); on a few large arrays the fused NumPy pass costs about what
    ``check_inf_or_nan_grad`` plus ``scale_grad`` cost, or less.
    """
    if requested != "auto":
        return requested
    if not on_cpu():
        return "solver"
    fused = per_array(n_arrays, n_values) and n_values >= SMALL_MODEL_VALUES
    return "nnabla" if flag_only and not fused else "numpy"


def choose_check(requested: str, flag_only: bool, sizes: List[int], solver, loss) -> FiniteCheck:
    """The check object of the path :func:`resolve_path` gives for gradient arrays of ``sizes``
    values, on the device of ``loss``'s last function."""
    path = resolve_path(requested, flag_only, sum(sizes), len(sizes))
    return PATHS[path].build(solver, loss, sizes)
