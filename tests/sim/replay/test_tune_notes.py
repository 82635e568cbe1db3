"""``dls tune`` says what limits its choice (issue 41): a trace shorter than every growth
interval of the grid, and settings whose losses tie (it reported a many-way tie silently)."""

from sim.cli.main import main
from sim.replay.selection import tied
from sim.replay.tune import tune
from sim.traces.families import make_trace


def test_a_short_trace_and_the_ties_are_named():
    found = tune({"short": make_trace("stationary", steps=200)}, runs=2)
    short, ties = found["notes"]
    assert short.startswith("note: short (200 steps) shorter than every growth interval")
    assert "(from 250)" in short
    count = len(tied(found["rows"]))
    assert count > 1 and ties.startswith(f"note: {count} of 30 settings tie")


def test_a_trace_longer_than_every_interval_gets_no_length_note():
    found = tune({"long": make_trace("spikes", steps=4500)}, runs=2)
    assert not any("shorter than" in n for n in found["notes"])


def test_a_grid_without_growth_intervals_finds_no_trace_too_short():
    """Issue 52: ``dls tune --policy headroom`` said "growth interval of the grid (from inf)"."""
    found = tune({"short": make_trace("stationary", steps=200)}, policy="headroom", runs=2)
    assert found["notes"] and not any("shorter than" in n for n in found["notes"])


def test_no_tie_no_note():
    rows = [{"lost_mean": 0.1, "lost_worst": 0.2}, {"lost_mean": 0.2, "lost_worst": 0.3}]
    assert len(tied(rows)) == 1


def test_the_cli_prints_the_notes_within_100_columns(tmp_path, capsys):
    make_trace("stationary", steps=200).save(tmp_path / "short.npz")
    assert main(["tune", "--trace", str(tmp_path / "short.npz"), "--runs", "2", "-q"]) == 0
    out = capsys.readouterr().out
    notes = [x for x in out.splitlines() if x.startswith("note: ")]
    assert sum("shorter than every" in x or "settings tie" in x for x in notes) == 2
    assert all(len(x) <= 100 for x in out.splitlines() if x.startswith(("note: ", "  ")))
