"""A run of every model family on every ``finite_check`` path, checkpointed after
:data:`~tests.updater.families.runs.RESUME_AT` steps (``save_checkpoint``) and resumed in a new
process (``load_checkpoint``), ends bit for bit where the uninterrupted run ends (issue 48):
the same records and losses, parameters, running statistics, solver states and updater state."""

import pytest

from .runs import RESUME_AT
from .test_agreement import assert_same
from .test_verdicts import CELLS, run_of

pytestmark = [pytest.mark.nnabla, pytest.mark.slow]


@pytest.mark.parametrize("name,path", CELLS)
def test_a_resume_in_a_new_process_is_bit_identical(matrix, name, path):
    whole = run_of(matrix, name, path)
    resumed = matrix.resumed(name)[path]
    if resumed.error:
        pytest.fail(f"the resumed run failed: {resumed.error}")
    tail = [s for s in whole.steps if s.index >= RESUME_AT]
    assert [(s.batch, s.record, s.loss) for s in resumed.steps] == [
        (s.batch, s.record, s.loss) for s in tail
    ]
    assert_same(whole.final, resumed.final, "uninterrupted vs resumed")
