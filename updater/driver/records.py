"""What an ``update()`` call decides and reports: the step's verdict (:func:`verdict`), its
:class:`StepRecord`, the updater's :class:`Counters`, and the error a persistent non-finite
gradient raises."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Dict

APPLIED, OVERFLOW, BAD_BATCH = "applied", "overflow", "bad batch"


def verdict(
    grads_finite: bool, loss_finite: bool, inputs_finite: bool, state_finite: bool = True
) -> str:
    """The one rule every path and every ``accum_grad`` follows, on the agreed facts of an
    attempt (across workers: any worker's bad loss, input or state counts):

    - the forward pass made state inf/NaN that was finite before the batch (``state_finite``
      False: a float16 BatchNormalization variance of a batch in range): :data:`BAD_BATCH`,
      whatever the gradients (applying it would leave the state inf/NaN for the rest of
      training);
    - gradients finite: :data:`APPLIED`, whatever the loss (as nnabla's own loop and PyTorch's
      GradScaler decide);
    - gradients inf/NaN and (the loss inf/NaN, or an input bad as the functions that read it
      see it: inf/NaN, beyond float16's range where a half-precision function converts it, an
      index outside its table and not a label it ignores
      (:func:`updater.driver.value_ranges.input_ranges`)): :data:`BAD_BATCH`, which no scale
      fixes: skipped, never retried, scale kept;
    - otherwise :data:`OVERFLOW`: backed off, skipped or retried.

    The updater asks about the state whatever the gradients with ``restore_on_skip`` (the
    default); with ``restore_on_skip=False`` only when they are not finite
    (:class:`updater.driver.attempts.Attempts`).

    >>> verdict(True, False, True), verdict(False, True, False), verdict(False, True, True)
    ('applied', 'bad batch', 'overflow')
    >>> verdict(False, True, True, state_finite=False), verdict(True, True, True, False)
    ('bad batch', 'bad batch')
    """
    if not state_finite:
        return BAD_BATCH
    if grads_finite:
        return APPLIED
    return OVERFLOW if loss_finite and inputs_finite else BAD_BATCH


@dataclass
class Counters:
    """The updater's counters, one record shared by the updater and its collaborators, each
    moving its own; read as ``updater.steps`` etc.

    Attributes:
        steps, updates_applied, skips (int): ``update()`` calls, calls that applied an update,
            calls that applied none (moved by ``step()``).
        overflows (int): non-finite attempts, retries included (the attempts).
        consecutive_nonfinite (int): ``update()`` calls since the last applied update.
        batches, passes (int): ``data_feeder`` calls and forward/backward rounds (the rounds).
        nonfinite_losses (int): applied steps whose loss was inf/NaN (the attempts).
        nonfinite_statistics (int): running statistics found inf/NaN, each once (the forward
            state). These two are not saved in ``state_dict()``.
    """

    steps: int = 0
    updates_applied: int = 0
    overflows: int = 0
    skips: int = 0
    consecutive_nonfinite: int = 0
    batches: int = 0
    passes: int = 0
    nonfinite_losses: int = 0
    nonfinite_statistics: int = 0

    def count_step(self, applied: bool) -> None:
        """Count a finished iteration that applied an update or not."""
        self.steps += 1
        self.updates_applied += applied
        self.skips += not applied
        self.consecutive_nonfinite = 0 if applied else self.consecutive_nonfinite + 1


class Monitor:
    """Writes the ``loss_scale`` used and the ``skipped_steps`` so far to an nnabla
    ``Monitor``, each step."""

    def __init__(self, monitor):
        from nnabla.monitor import MonitorSeries

        self.scale = MonitorSeries("loss_scale", monitor, interval=1, verbose=False)
        self.skips = MonitorSeries("skipped_steps", monitor, interval=1, verbose=False)

    def add(self, step: int, scale: float, skips: int) -> None:
        self.scale.add(step, scale)
        self.skips.add(step, skips)


COUNTERS = (
    "steps",
    "updates_applied",
    "overflows",
    "skips",
    "consecutive_nonfinite",
    "batches",
    "passes",
)
"""The counters ``state_dict()["counters"]`` saves."""
COUNTER_MAX = 2**63 - 1
"""The most a saved counter may hold (NumPy's int64; no run counts that many calls)."""


def unreachable_counters(c: Dict[str, int]) -> str | None:
    """What no run reaches in the saved counters ``c`` (:data:`COUNTERS`, each an int in
    ``[0, COUNTER_MAX]``), naming the fields; None when they agree. Every call applies an
    update or skips; a skipped call had a non-finite attempt (``overflows`` counts them all);
    every attempt runs at least one forward/backward round (``passes``)."""
    attempts = c["updates_applied"] + c["overflows"]
    rules = (
        (
            c["updates_applied"] + c["skips"] == c["steps"],
            f"updates_applied {c['updates_applied']} + skips {c['skips']} must equal steps "
            f"{c['steps']}",
        ),
        (
            c["consecutive_nonfinite"] <= c["skips"],
            f"consecutive_nonfinite {c['consecutive_nonfinite']} cannot exceed skips {c['skips']}",
        ),
        (
            c["skips"] <= c["overflows"],
            f"skips {c['skips']} cannot exceed overflows {c['overflows']} (a skipped call had "
            "a non-finite attempt)",
        ),
        (
            c["passes"] >= attempts,
            f"passes {c['passes']} must be at least updates_applied + overflows = {attempts} "
            "(each attempt runs a forward/backward round)",
        ),
    )
    return next((problem for holds, problem in rules if not holds), None)


class NonFiniteGradientsError(FloatingPointError):
    """Raised after ``max_consecutive_nonfinite`` consecutive steps with inf/NaN gradients.

    Parameters and solver state are left exactly as they were before the failing steps.

    Attributes:
        consecutive (int): consecutive non-finite steps counted.
        loss_finite (bool or None): whether the loss of the last failing step was finite
            (False means the data or the model produce inf/NaN, not loss-scale overflow).
        param_names (list of str): parameters whose gradients held inf/NaN on the last step.
        scale (float): the loss scale used by the last failing step.
        input_names (list of str): the graph's inputs that held inf/NaN on the last step (bad
            data), found on this worker.
    """

    def __init__(self, message, *, consecutive, loss_finite, param_names, scale, input_names=()):
        super().__init__(message)
        self.consecutive = consecutive
        self.loss_finite = loss_finite
        self.param_names = list(param_names)
        self.scale = scale
        self.input_names = list(input_names)

    @classmethod
    def after(cls, record, bad, consecutive: int, limit: int, inputs=()) -> NonFiniteGradientsError:
        """The error for ``consecutive`` failing calls, the last described by ``record``
        (a :class:`StepRecord`) with non-finite gradients in parameters ``bad`` and inf/NaN in
        the inputs named ``inputs``."""
        bad, inputs = list(bad), list(inputs)
        shown = ", ".join(bad[:8]) + (f" and {len(bad) - 8} more" if len(bad) > 8 else "")
        if inputs:
            cause = (
                f"inputs of the graph were bad ({'; '.join(inputs)}), so this is bad data, "
                "which no loss scale fixes (the scale was left as it was; an input that holds "
                "inf on purpose, such as a -inf attention mask, goes in unchecked_inputs)"
            )
        elif record.bad_batch:
            cause = (
                "the batch was bad data (inf/NaN loss or inputs, or state its forward pass "
                "made inf/NaN, such as a float16 BatchNormalization variance, on this or "
                "another worker), which no loss scale fixes (the scale was left as it was; "
                "updater.amp.rewrite(loss) computes BatchNormalization in float32)"
            )
        elif record.loss_finite is False:
            cause = (
                "the loss itself was non-finite, so this is a data or model problem "
                "(inf/NaN inputs, log(0), division by zero), not loss-scale overflow"
            )
        else:
            cause = (
                "the loss was finite, so the gradients overflow float16 even at this scale "
                "(or inf/NaN inputs were masked in the forward pass); lower min_scale or "
                "check the model"
            )
        return cls(
            f"{consecutive} consecutive update() calls without an applied "
            f"update (max_consecutive_nonfinite={limit}), the last at "
            f"loss scale {record.scale:g}: {cause}. Parameters with non-finite gradients: "
            f"{shown or '(none found locally; another worker reported them)'}. "
            "Parameters and solver state were left untouched.",
            consecutive=consecutive,
            loss_finite=record.loss_finite,
            param_names=bad,
            scale=record.scale,
            input_names=inputs,
        )


@dataclass(frozen=True)
class StepRecord:
    """What one ``update()`` call did.

    Attributes:
        step (int): 0-based index of the ``update()`` call.
        scale (float): the backward seed of the last attempt: the loss scale rounded to the
            loss's precision (float16 in half mode), which is what the gradients were divided by.
        update_applied (bool): whether ``solver.update()`` ran, i.e. whether the last attempt's
            gradients were finite (agreed across workers when a communicator is set).
        new_scale (float): scale for the next step, after the policy advanced.
        grad_absmax (float or None): largest |gradient| as scaled (before unscaling) of the last
            attempt, inf when non-finite, when the policy uses it (``policy.needs_grad_absmax``,
            e.g. ``HeadroomScale``); None for other policies (not measured, to save a pass).
        loss_finite (bool or None): whether every accumulation round's loss was finite (False
            on any worker makes it False everywhere); None when loss scaling is off
            (``enabled=False``: nothing is checked).
        attempts (int): forward/backward attempts (1 unless ``on_overflow="retry"`` retried).
        bad_batch (bool): the verdict was "bad batch" (:func:`verdict`): state the forward pass
            made inf/NaN, or inf/NaN gradients with an inf/NaN loss or a bad input, on some
            worker. Such a step is skipped, never retried, and the policy takes it as its
            third outcome (the scale does not move).
    """

    step: int
    scale: float
    update_applied: bool
    new_scale: float
    grad_absmax: float | None
    loss_finite: bool | None
    attempts: int
    bad_batch: bool = False
