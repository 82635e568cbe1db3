"""``dls``'s progress on stderr: a status line per stage off a terminal, bars on one, readable
labels (:class:`sim.cli.progress.StageProgress`)."""

import io

from sim.cli.main import main
from sim.cli.progress import StageProgress
from sim.replay.run import simulate_many
from sim.traces.families import make_trace
from updater.policy.presets import make_policy


def test_progress_prints_a_status_line_per_stage_when_not_a_terminal(capsys):
    argv = ["sweep", "--grid", "hysteresis=1,2", "--families", "stationary,nan"]
    assert main([*argv, "--steps", "50", "--runs", "1"]) == 0
    err = capsys.readouterr().err.splitlines()
    assert err[0].startswith("dls sweep: [1/2] stationary: 2 settings x 1 runs x 50 steps;")
    assert err[1].startswith("dls sweep: [2/2] nan: 2 settings x 1 runs x 50 steps;")
    assert err[2].startswith("dls sweep: done in")


class _Terminal(io.StringIO):
    def isatty(self):
        return True


def test_progress_on_a_terminal_keeps_the_overall_bar_with_readable_labels():
    screen = _Terminal()
    with StageProgress("sweep", stream=screen) as progress:
        progress.start(2)
        for family in ("stationary", "nan"):
            progress.stage(family)
            policies = [make_policy("dynamic", growth_interval=g) for g in (10, 20, 30, 40, 50)]
            trace = make_trace(family, steps=30)
            simulate_many(policies, trace, labels=list("01234"), progress=progress)
    text = screen.getvalue()
    assert "0+1+2" not in text and "5 settings" in text
    last = text.rstrip("\n").split("\r")[-1]  # what stays on screen: the overall bar, complete
    assert last.startswith("dls sweep: 100%") and "2/2" in last and "done in" in last


def test_library_progress_bars_have_readable_labels(capsys):
    policies = [make_policy("dynamic", growth_interval=g) for g in (10, 20, 30, 40, 50)]
    simulate_many(policies, make_trace("nan", steps=30), labels=list("01234"), progress=True)
    err = capsys.readouterr().err
    assert "0+1+2" not in err and "5 policies (0, ..., 4)" in err
