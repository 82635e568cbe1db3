"""The per-run reductions of sim/replay/columns.py give the bits of the plain NumPy expressions
they replace (issue 51: the metrics of 10,000,000 runs in fewer, cheaper passes), on both sides
of each one's switch, and the replay gives the plain result when every block walks its rows."""

import numpy as np
import pytest

import sim.replay.columns as columns
from sim.replay.columns import applied_sum, count_true, first_true
from sim.replay.run import simulate
from tests.sim.replay.test_bit_identical import (  # noqa: F401 (small_blocks: a fixture)
    POLICIES,
    TRACES,
    assert_same_bits,
    assert_same_result,
    plain_simulate,
    small_blocks,
)

RNG = np.random.default_rng(11)


def flags(steps, runs, share=0.3):
    return RNG.random((steps, runs)) < share


@pytest.mark.parametrize("steps", [1, 10, 255, 256, 600])
def test_count_true_is_the_bool_sum(steps):
    many = flags(steps, 70)
    many[:, 0], many[:, 1] = True, False  # a column counted to the rows' number, one to 0
    for view in (many, many[:, 3:50:4], many[::2]):
        for dtype in (np.int64, np.int32):
            assert_same_bits(count_true(view, dtype), view.sum(axis=0, dtype=dtype))
    assert_same_bits(count_true(many), many.sum(axis=0))


def test_applied_sum_is_the_masked_sum_nan_and_signed_zero_included():
    values = RNG.random((12, 90))
    values[0, :6] = [np.nan, np.inf, -np.inf, -0.0, 5e-324, np.finfo(float).max]
    values[1, :6] = [np.nan, 1.0, np.inf, -0.0, -0.0, np.finfo(float).max]
    skipped = flags(12, 90)
    skipped[:, 0] = False
    skipped[1, 1:3] = True  # an inf and a NaN on skipped steps: the sum does not see them
    for cols in (slice(None), slice(1, 80, 3), slice(0, 1)):
        with np.errstate(over="ignore", invalid="ignore"):  # max + max, inf - inf: as plain
            got = applied_sum(skipped[:, cols], values[:, cols])
            expected = np.where(skipped[:, cols], 0.0, values[:, cols]).sum(axis=0)
        assert_same_bits(got, expected)
    single = RNG.random((12, 90)).astype(np.float32)  # another dtype: the masked select
    assert_same_bits(applied_sum(skipped, single), np.where(skipped, 0.0, single).sum(axis=0))


@pytest.mark.parametrize("steps, runs", [(3, 3 * 64), (10, 640), (1, 64), (10, 639), (50, 7)])
def test_first_true_walks_rows_or_asks_argmax_to_one_answer(steps, runs):
    assert (runs >= columns.FIRST_BY_ROWS * steps) == (runs in (192, 640, 64))  # both sides
    within = flags(steps, runs, 0.15)
    within[:, 0], within[:, 1], within[-1, 2] = False, True, True  # none, the first, the last
    first, found = first_true(within)
    expected = np.argmax(within, axis=0)
    assert_same_bits(found, within[expected, np.arange(runs)])
    assert_same_bits(first[found], expected[found])
    assert not found[0] and first[1] == 0 and found[2]


@pytest.mark.usefixtures("small_blocks")
@pytest.mark.parametrize("trace", list(TRACES))
def test_simulate_gives_the_plain_result_when_every_block_walks_its_rows(trace, monkeypatch):
    monkeypatch.setattr(columns, "FIRST_BY_ROWS", 0)  # the blocks of a few runs walk rows too
    trace = TRACES[trace]()
    for i, policy in enumerate(POLICIES):
        got = simulate(policy, trace, runs=17, seed=i, jitter=0.5, progress=False)
        assert_same_result(got, plain_simulate(policy, trace, 17, i, 0.5))
