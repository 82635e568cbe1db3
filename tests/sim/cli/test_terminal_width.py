"""What the subcommands print fits 100 columns (issue 41: a 181-character policy line and
155-character tables), but the constructor line ``dls tune`` hands over to paste; ``dls tune``
over several traces shows each trace beside what its table averages."""

import pytest

from sim.cli.main import main


@pytest.mark.parametrize(
    "argv",
    [
        ["simulate", "--steps", "60", "--runs", "4"],
        ["sweep", "--grid", "growth_interval=10,20", "--steps", "60", "--runs", "2"],
    ],
)
def test_simulate_and_sweep_print_at_most_100_columns(capsys, argv):
    assert main(argv) == 0
    out = capsys.readouterr().out
    assert out.startswith("policy: ") and "DynamicScale(" in out
    assert max(map(len, out.splitlines())) <= 100


def test_tune_over_two_traces_shows_each_trace_and_fits_100_columns(capsys):
    argv = ["tune", "--trace", "spikes", "--trace", "drifting", "--steps", "300", "--runs", "2"]
    assert main(argv) == 0
    lines = capsys.readouterr().out.splitlines()
    pasted = lines[-1]
    assert pasted.startswith("DynamicLossScalingUpdater(")
    assert max(map(len, lines[:-1])) <= 100
    table = lines[lines.index("per trace:") + 1 :]
    rows = [line.split()[:2] for line in table if line.split()[:1] in (["spikes"], ["drifting"])]
    assert rows == [
        ["spikes", "chosen"],
        ["spikes", "default"],
        ["drifting", "chosen"],
        ["drifting", "default"],
    ]


def test_tune_over_one_trace_has_no_per_trace_table(capsys):
    assert main(["tune", "--trace", "spikes", "--steps", "300", "--runs", "2"]) == 0
    assert "per trace:" not in capsys.readouterr().out
