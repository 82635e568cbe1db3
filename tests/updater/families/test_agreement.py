"""The updater on the model families agrees with nnabla's own updater, with a float32 run, and
with itself on every ``finite_check`` path (issue 48); the language model reads the embedding
rows float32 reads.

Tolerances, on the training loss of each applied step (the loss ``update()`` computed):

- against nnabla's ``DynamicLossScalingUpdater`` (same settings, same batches): both apply the
  same batches at the same scales and differ only in how they unscale (ours in float32 by
  ``1/seed``, nnabla's in the gradients' float16), which is exact for a power-of-two scale
  unless a gradient leaves float16's normal range; so one float16 step relative
  (:data:`NNABLA_RTOL`, 2**-10). Measured: equal on every family.
- against float32 (``cpu:float``, no scaling, the same batches): float16 rounds every function's
  output to 11 significant bits (up to 2**-11 relative per rounding) and nnabla's CPU half
  kernels also accumulate their sums in float16, and the few applied steps follow slightly
  different gradients: :data:`FLOAT_RTOL` (1e-2, about 20 roundings). Measured at most 1.5e-3
  (VAE; MLP 4.2e-4, LSTM 4.8e-4, GAN 6.0e-4; nnabla's updater on the segmentation net 9.9e-4;
  the language model, whose loss and softmax run in float32, 4.4e-5 with its Slices in float32).
"""

import numpy as np
import pytest

from updater.driver.records import APPLIED

from . import FAMILIES
from .language import embed_ids, language_model
from .runs import PATHS
from .test_verdicts import CELLS, run_of

pytestmark = pytest.mark.nnabla

NNABLA_RTOL = 2.0**-10
FLOAT_RTOL = 1e-2


def applied(run):
    """(part, batch) -> (scale, loss) of the run's applied steps."""
    return {
        (s.part, s.batch): (s.record["scale"], s.loss) for s in run.steps if s.verdict == APPLIED
    }


def reference(run, what):
    if run.error:
        pytest.fail(f"{what} did not run: {run.error}")
    return applied(run)


@pytest.mark.parametrize("name,path", CELLS)
def test_the_same_steps_and_losses_as_nnablas_updater(matrix, name, path):
    """The batches ours applies (among those it fed) are the batches nnabla's updater applies,
    at the same scales, with the same losses within :data:`NNABLA_RTOL`."""
    ours = applied(run_of(matrix, name, path))
    fed = {(s.part, s.batch) for s in matrix.path_run(name, path).steps}
    theirs = {
        k: v for k, v in reference(matrix.nnabla_run(name), "nnabla's updater").items() if k in fed
    }
    assert sorted(ours) == sorted(theirs), "applied (part, batch): ours vs nnabla's"
    for key, (scale, loss) in ours.items():
        assert scale == theirs[key][0], key
        assert loss == pytest.approx(theirs[key][1], rel=NNABLA_RTOL), key


@pytest.mark.parametrize("name,path", CELLS)
def test_the_losses_of_a_float32_run(matrix, name, path):
    """Each loss of an applied step is within :data:`FLOAT_RTOL` of the float32 run's loss on the
    same batch (the float32 run applies the batches nnabla's updater applied, in its order)."""
    ours = applied(run_of(matrix, name, path))
    floats = reference(matrix.float_run(name), "the float32 run")
    assert len(ours) >= 2 and set(ours) <= set(floats), (
        f"ours {sorted(ours)}, float32 {sorted(floats)}"
    )
    for key, (_, loss) in ours.items():
        assert loss == pytest.approx(floats[key][1], rel=FLOAT_RTOL), key


@pytest.mark.parametrize(
    "name", [pytest.param(n, marks=[pytest.mark.slow] if n == "lm" else []) for n in FAMILIES]
)
def test_every_path_gives_the_same_run_bit_for_bit(matrix, name):
    """Records, losses and every final value (parameters, running statistics, solver states,
    the updaters' state) are the same on every path: each decides as
    ``solver.check_inf_or_nan_grad()``."""
    first, *others = (run_of(matrix, name, path) for path in PATHS)
    for path, run in zip(PATHS[1:], others):
        assert [(s.record, s.loss) for s in run.steps] == [
            (s.record, s.loss) for s in first.steps
        ], path
        assert_same(first.final, run.final, f"{PATHS[0]} vs {path}")


def assert_same(a, b, where: str) -> None:
    """Two snapshots (``runs.snapshot``) hold the same values bit for bit."""
    assert sorted(a["params"]) == sorted(b["params"]), where
    for name in a["params"]:
        assert a["params"][name].tobytes() == b["params"][name].tobytes(), f"{where}: {name}"
    for solver_a, solver_b in zip(a["solvers"], b["solvers"]):
        assert sorted(solver_a) == sorted(solver_b), where
        for key in solver_a:
            assert np.array_equal(solver_a[key], solver_b[key]), f"{where}: solver {key}"
    assert a["updaters"] == b["updaters"], where


@pytest.mark.slow
def test_the_language_model_reads_the_embedding_rows_of_float32():
    """The rewritten language model computes every function between ``ids`` and Embed in
    float32 (building it raises ``IdsThroughHalfError`` otherwise, before any forward), and its
    Embed reads exactly ``ids[:, :-1]``, ids above 2048 and above 65520 included: the rows a
    float32 graph reads."""
    family = language_model("half")
    part = family.parts[0]
    part.feed(0)
    part.loss.forward()
    ids = family.extra["ids"].d[:, :-1]
    assert (ids >= 65520).any() and ((ids > 2048) & (ids < 65504)).any()
    assert np.array_equal(embed_ids(part.loss).d, ids)
