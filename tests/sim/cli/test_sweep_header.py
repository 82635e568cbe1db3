"""``dls sweep --families ''`` (issue 41): with no synthetic family the header does not state a
synthetic step count that nothing used; with families it does."""

from sim.cli.main import main

GRID = ["sweep", "--grid", "growth_interval=500,2000", "--runs", "2", "-q"]


def _header(capsys):
    return next(x for x in capsys.readouterr().out.splitlines() if x.startswith("grid: "))


def test_recorded_traces_only_state_no_synthetic_steps(capsys):
    assert main([*GRID, "--families", "", "--trace", "digits_mlp"]) == 0
    header = _header(capsys)
    assert "traces: digits_mlp, runs: 2" in header and "synthetic" not in header


def test_synthetic_families_state_their_steps(capsys):
    assert main([*GRID, "--families", "stationary", "--steps", "100"]) == 0
    assert "traces: stationary, synthetic steps: 100, runs: 2" in _header(capsys)
