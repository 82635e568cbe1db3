"""The updater's verdicts on the model families equal what a plain nnabla loop shows (issue 48).

Every family trains :data:`~tests.updater.families.runs.STEPS` steps on every ``finite_check``
path from the scale 2**15, which every family's backward overflows; before each step a plain
nnabla forward/backward of the same batch at the same scale tells the facts (gradients inf/NaN
or not, loss finite or not, forward-written state finite or not), and the verdict they call for
(:attr:`~tests.updater.families.runs.Facts.verdict`) is the rule of
:func:`updater.driver.records.verdict`, with issue 48's rule that state a forward pass made
inf/NaN is a bad batch whatever the gradients. A run that raised fails every test of its cell
with the error.
"""

import pytest

from updater.driver.records import APPLIED, BAD_BATCH, OVERFLOW

from . import FAMILIES
from .runs import PATHS

pytestmark = pytest.mark.nnabla

CELLS = [
    pytest.param(name, path, marks=[pytest.mark.slow] if name == "lm" else [])
    for name in FAMILIES
    for path in PATHS
]


def run_of(matrix, name, path):
    run = matrix.path_run(name, path)
    if run.error:
        pytest.fail(f"{name} on finite_check={path!r} did not run: {run.error}")
    return run


def describe(step) -> str:
    return (
        f"step {step.index} ({step.part}, batch {step.batch}): the plain nnabla loop shows "
        f"{step.facts} -> {step.facts.verdict!r}; the updater: {step.verdict!r}, record "
        f"{step.record}"
    )


@pytest.mark.parametrize("name,path", CELLS)
def test_no_false_bad_batch(matrix, name, path):
    """No step is a bad batch where nnabla shows a finite loss and finite state. Every batch of
    the matrix is clean data (ignored labels, ids in their table, inputs in range), as nnabla
    computes it: every value of its forward pass is finite."""
    run = run_of(matrix, name, path)
    unclean = [describe(s) for s in run.steps if not s.facts.forward_finite]
    assert not unclean, "a batch is not clean: a value of nnabla's forward pass is inf/NaN"
    false = [describe(s) for s in run.steps if s.verdict == BAD_BATCH != s.facts.verdict]
    assert not false, "\n".join(false)


@pytest.mark.parametrize("name,path", CELLS)
def test_an_overflow_backs_off(matrix, name, path):
    """Each step whose plain facts are an overflow (gradients inf/NaN, loss and state finite)
    is skipped with the scale halved; there is one at the start of every run, and the run then
    applies at least two steps at the lower scale."""
    run = run_of(matrix, name, path)
    overflows = [s for s in run.steps if s.facts.verdict == OVERFLOW]
    assert overflows, f"no step overflowed at 2**15: {[describe(s) for s in run.steps]}"
    wrong = [
        describe(s)
        for s in overflows
        if s.verdict != OVERFLOW or s.record["new_scale"] != s.record["scale"] / 2
    ]
    assert not wrong, "\n".join(wrong)
    for part in {s.part for s in run.steps}:
        applied = [s for s in run.steps if s.part == part and s.verdict == APPLIED]
        assert len(applied) >= 2, f"{part}: {[describe(s) for s in run.steps]}"


@pytest.mark.parametrize("name,path", CELLS)
def test_every_verdict_equals_the_plain_nnabla_loop(matrix, name, path):
    """Every step: the verdict the facts call for, the loss's finiteness as nnabla shows it, the
    scale nnabla was given, one attempt."""
    run = run_of(matrix, name, path)
    wrong = [
        describe(s)
        for s in run.steps
        if s.verdict != s.facts.verdict
        or s.record["loss_finite"] is not s.facts.loss_finite
        or s.record["scale"] != s.facts.scale
        or s.record["attempts"] != 1  # skip mode: one attempt per step
    ]
    assert not wrong, "\n".join(wrong)


@pytest.mark.parametrize("name,path", CELLS)
def test_a_clean_run_warns_nothing(matrix, name, path):
    """No guard warns (``UserWarning``) or logs a warning on these runs: every solver's
    parameters are in its loss's graph, and no loss or state becomes inf/NaN."""
    assert run_of(matrix, name, path).warnings == []
