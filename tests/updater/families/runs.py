"""The runs the matrix compares, each from a freshly built family:

- :func:`path_run`: ours (``updater.DynamicLossScalingUpdater``) on one ``finite_check`` path,
  :data:`STEPS` steps from the scale 2**15 (too high for every family: the first steps
  overflow), each step shadowed by a plain nnabla forward/backward of the same batch at the same
  scale (:func:`plain_facts`: what nnabla itself shows), checkpointed after :data:`RESUME_AT`;
- :func:`nnabla_run`: nnabla's own updater, same settings and batches;
- :func:`float_run`: a plain float32 loop (``cpu:float``, no scaling) applying the batches
  nnabla's updater applied, in its order;
- :func:`resumed_runs`: the path runs resumed from their checkpoints in a new process
  (``python -m tests.updater.families.resume``).

Batch ``k`` of a part is the same everywhere: a part's stream feeds batch ``k`` at its
``k``-th call. A step of a GAN is a discriminator step, then a generator step.
"""

from __future__ import annotations

import logging
import pickle
import subprocess
import sys
import warnings
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Dict, List, Tuple

import numpy as np
from nnabla.experimental.mixed_precision_training import (
    DynamicLossScalingUpdater as NnablaUpdater,
)

from tests.nnabla_models import solver_state_values
from tests.paths import ROOT
from updater import DynamicLossScalingUpdater, load_checkpoint, save_checkpoint
from updater.driver.checks import PATHS as CHECK_PATHS
from updater.driver.records import APPLIED, BAD_BATCH, OVERFLOW

from . import FAMILIES

PATHS = (*CHECK_PATHS, "auto")
"""Every ``finite_check`` value."""
STEPS, RESUME_AT = 6, 3
"""Steps per run (each part), and the step whose start the checkpoint holds."""
SCALING = {"scale": 2.0**15, "scaling_factor": 2.0, "N": 1000}
"""Both updaters' settings, as nnabla's arguments: start at 2**15, halve on overflow, no growth
within a run."""


class Stream:
    """A data feeder: its ``k``-th call (from ``start``) writes batch ``k`` with ``feed``."""

    def __init__(self, feed, start: int = 0):
        self.feed, self.calls = feed, start

    def __call__(self) -> None:
        self.feed(self.calls)
        self.calls += 1


@dataclass(frozen=True)
class Facts:
    """What a plain nnabla forward/backward of one batch at one scale shows."""

    scale: float  # the backward seed
    grads_finite: bool  # not solver.check_inf_or_nan_grad()
    loss_finite: bool
    state_finite: bool  # the values the forward pass wrote (running statistics) are finite
    forward_finite: bool  # every output of every function of the forward pass is finite

    @property
    def verdict(self) -> str:
        """The verdict these facts call for (issue 48): state the forward made inf/NaN from
        finite inputs is a bad batch whatever the gradients; else finite gradients are
        applied, and non-finite ones are a bad batch with an inf/NaN loss, else an overflow."""
        if not self.state_finite:
            return BAD_BATCH
        if self.grads_finite:
            return APPLIED
        return OVERFLOW if self.loss_finite else BAD_BATCH


@dataclass(frozen=True)
class Step:
    """One updater step: the part, the step index, the batch, the plain facts, the record's
    fields (:func:`record_fields`) and the loss after ``update()``."""

    part: str
    index: int
    batch: int
    facts: Facts | None
    record: Dict[str, Any]
    loss: float

    @property
    def verdict(self) -> str:
        if self.record["update_applied"]:
            return APPLIED
        return BAD_BATCH if self.record["bad_batch"] else OVERFLOW


RECORD_FIELDS = ("scale", "update_applied", "new_scale", "loss_finite", "bad_batch", "attempts")
"""The fields of a ``StepRecord`` the matrix compares."""


def record_fields(record) -> Dict[str, Any]:
    """The :data:`RECORD_FIELDS` of a ``StepRecord``."""
    return {name: getattr(record, name) for name in RECORD_FIELDS}


@dataclass
class Run:
    """A run's steps and final values; ``error``: what stopped it (a build or a step raising);
    ``warnings``: what the updater warned (``UserWarning``) or logged (level WARNING and up)."""

    steps: List[Step] = field(default_factory=list)
    final: Dict = field(default_factory=dict)
    error: str | None = None
    warnings: List[str] = field(default_factory=list)


def values(variable) -> np.ndarray:
    """A copy of a Variable's values (float32: every value here is float16 or float32)."""
    return np.array(variable.data.get_data("r", dtype=np.float32), copy=True)


def plain_facts(family, part, k: int, scale: float) -> Facts:
    """Zero the part's gradients, feed batch ``k``, forward, ``backward(scale)``, as a plain
    nnabla loop does; read the facts (:class:`Facts`); put back what the forward wrote (found
    by comparing every parameter of the family, running statistics included, before and
    after), so the updater's step that follows starts from the same state."""
    before = {name: values(v) for name, v in family.params.items()}
    part.solver.zero_grad()
    part.feed(k)
    part.loss.forward(clear_no_need_grad=False)  # keeps every output to look at
    loss_finite = bool(np.isfinite(part.loss.d).all())
    outputs = []
    part.loss.visit(lambda f: outputs.extend(f.outputs))
    forward_finite = all(np.isfinite(v.d).all() for v in outputs)
    after = {name: values(v) for name, v in family.params.items()}
    written = [n for n in before if not np.array_equal(before[n], after[n], equal_nan=True)]
    state_finite = all(np.isfinite(after[n]).all() for n in written)
    part.loss.backward(scale, clear_buffer=True)
    grads_finite = not part.solver.check_inf_or_nan_grad()
    for name in written:
        family.params[name].data.cast(np.float32)[...] = before[name]
    return Facts(scale, grads_finite, loss_finite, state_finite, forward_finite)


def snapshot(family, updaters) -> Dict:
    """Every value a resume must give back: parameters (running statistics too), each solver's
    states and step counts, each updater's ``state_dict()``."""
    return {
        "params": {name: values(v) for name, v in family.params.items()},
        "solvers": [solver_state_values(part.solver) for part in family.parts],
        "updaters": [u.state_dict() for u in updaters],
    }


def ours(family, path: str) -> List[DynamicLossScalingUpdater]:
    """One updater per part, on ``path``, with :data:`SCALING`."""
    return [
        DynamicLossScalingUpdater(p.solver, p.loss, Stream(p.feed), finite_check=path, **SCALING)
        for p in family.parts
    ]


def train(family, updaters, start: int, save=None) -> List[Step]:
    """Steps ``start`` to :data:`STEPS` of ``updaters``, each shadowed by :func:`plain_facts`;
    ``save(updaters)`` at the start of step :data:`RESUME_AT`."""
    steps = []
    for i in range(start, STEPS):
        if save is not None and i == RESUME_AT:
            save(updaters)
        for part, upd in zip(family.parts, updaters):
            k = upd.data_feeder.calls
            facts = plain_facts(family, part, k, upd.scale)
            record = upd.update()
            steps.append(Step(part.name, i, k, facts, record_fields(record), float(part.loss.d)))
    return steps


def checkpoint(folder: Path, path: str, part: str) -> Path:
    """The checkpoint file of ``part`` in the run on ``path``."""
    return folder / f"{path}-{part}.ckpt.npz"


def path_run(name: str, path: str, folder: Path) -> Run:
    """Ours on ``path`` (module doc); checkpoints in ``folder``."""
    run = Run()
    with warned(run.warnings):
        try:
            family = FAMILIES[name]("half")
            updaters = ours(family, path)

            def save(upds):
                for part, upd in zip(family.parts, upds):
                    save_checkpoint(checkpoint(folder, path, part.name), upd, params=family.params)

            run.steps = train(family, updaters, 0, save)
            run.final = snapshot(family, updaters)
        except Exception as e:  # reported by the tests that read the run
            run.error = f"{type(e).__name__}: {e}"
    return run


@contextmanager
def warned(found: List[str]):
    """Collect into ``found`` the ``UserWarning``s raised and the records the ``updater``
    loggers write at level WARNING and above, while in the block."""

    class Collect(logging.Handler):
        def emit(self, record):
            found.append(f"{record.name}: {record.getMessage()}")

    handler, logger = Collect(logging.WARNING), logging.getLogger("updater")
    logger.addHandler(handler)
    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always", UserWarning)
            yield
        found.extend(f"UserWarning: {w.message}" for w in caught if w.category is UserWarning)
    finally:
        logger.removeHandler(handler)


def resume(name: str, path: str, folder: Path) -> Run:
    """In this process: build the family afresh, load the checkpoints of ``path``'s run and
    train the remaining steps."""
    run = Run()
    try:
        family = FAMILIES[name]("half")
        updaters = ours(family, path)
        for part, upd in zip(family.parts, updaters):
            load_checkpoint(checkpoint(folder, path, part.name), upd, params=family.params)
            upd.data_feeder.calls = upd.batches
        run.steps = train(family, updaters, RESUME_AT)
        run.final = snapshot(family, updaters)
    except Exception as e:
        run.error = f"{type(e).__name__}: {e}"
    return run


def resumed_runs(name: str, folder: Path) -> Dict[str, Run]:
    """Every path's run resumed in one new process (``resume.py``), by path."""
    out = folder / "resumed.pickle"
    command = [sys.executable, "-m", "tests.updater.families.resume", name, str(folder), str(out)]
    proc = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=600)
    if proc.returncode != 0:
        return {p: Run(error=f"the new process failed: {proc.stderr[-2000:]}") for p in PATHS}
    with open(out, "rb") as f:
        return pickle.load(f)


def nnabla_run(name: str) -> Run:
    """nnabla's own updater, :data:`SCALING`, the same streams: it retries an overflow inside
    ``update()`` on the next batch. One step per applied batch (the record holds its scale)."""
    run = Run()
    try:
        family = FAMILIES[name]("half")
        updaters = [
            NnablaUpdater(p.solver, p.loss, Stream(p.feed), **SCALING) for p in family.parts
        ]
        for i in range(STEPS):
            for part, upd in zip(family.parts, updaters):
                upd.update()
                record = {"scale": upd.scale, "update_applied": True}
                k = upd.data_feeder.calls - 1
                run.steps.append(Step(part.name, i, k, None, record, float(part.loss.d)))
    except Exception as e:
        run.error = f"{type(e).__name__}: {e}"
    return run


def float_run(name: str, applied: List[Tuple[str, int]]) -> Run:
    """A plain float32 loop (scale 1, no check) applying batch ``k`` of part ``part`` for each
    ``(part, k)`` of ``applied``, in that order (the steps nnabla's updater applied)."""
    family = FAMILIES[name]("float")
    parts = {part.name: part for part in family.parts}
    run = Run()
    for i, (name_of_part, k) in enumerate(applied):
        part = parts[name_of_part]
        part.solver.zero_grad()
        part.feed(k)
        part.loss.forward(clear_no_need_grad=True)
        part.loss.backward(1.0, clear_buffer=True)
        part.solver.update()
        record = {"scale": 1.0, "update_applied": True}
        run.steps.append(Step(part.name, i, k, None, record, float(part.loss.d)))
    return run
