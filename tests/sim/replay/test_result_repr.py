"""``repr(RunResult)`` is one line (issue 41): the dataclass's default printed every array,
thousands of lines for one ``simulate``."""

from sim.replay.run import simulate
from sim.traces.families import make_trace
from updater import DynamicScale


def test_repr_is_one_line_with_the_mean_skipped_steps():
    result = simulate(DynamicScale(), make_trace("spikes", steps=2000), runs=8)
    text = repr(result)
    skipped = result.skipped.sum(axis=0).mean()
    assert text == (
        f"RunResult(label='dynamic', trace='spikes', steps=2000, runs=8, "
        f"skipped_per_run={skipped:g})"
    )
    assert skipped > 0 and len(text) < 120
