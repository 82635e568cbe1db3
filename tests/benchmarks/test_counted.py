"""The call counter of the benchmarks (:class:`benchmarks.common.Counted`) counts the block's own
calls: garbage left by earlier code, whose finalizers call into ``updater/`` (a recorder
collected with steps unwritten writes its trace), is collected before the block and never
inside it (a flaky count of a recorded step in the suite had ``updater/trace/parts``,
``rows`` and ``common/writing`` in it)."""

import gc

from benchmarks.common import Counted
from updater.common.validation import check_int


class _Finalized:
    """Calls into ``updater/`` when it is finalized, as a recorder does."""

    def __init__(self):
        self.cycle = self  # collected only by the cyclic garbage collector

    def __del__(self):
        check_int("n", 1, 0)


def test_garbage_from_before_the_block_is_not_counted_in_it():
    assert gc.isenabled()
    _Finalized()  # unreachable now, freed by the next collection
    with Counted() as counted:
        for _ in range(20):  # enough new containers to trigger several collections
            [[] for _ in range(1000)]
    assert counted.total == 0, counted.calls
    assert gc.isenabled()  # left as it was


def test_a_call_in_the_block_is_counted():
    with Counted() as counted:
        check_int("n", 1, 0)
    assert counted.calls["updater/common/validation"] >= 1
