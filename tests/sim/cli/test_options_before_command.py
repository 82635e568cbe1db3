"""``-q``/``-v`` before the command (issue 41): ``dls -q simulate`` ran nothing and answered
"unknown option -q (did you mean '-q'?)"; it is ``dls simulate -q`` now."""

import pytest

from sim.cli.main import main

SIMULATE = ["simulate", "--steps", "50", "--runs", "2"]


@pytest.mark.parametrize("flag", ["-q", "--quiet"])
def test_quiet_before_the_command_is_the_commands_quiet(flag, capsys):
    assert main([flag, *SIMULATE]) == 0
    before = capsys.readouterr()
    assert main([*SIMULATE, flag]) == 0
    after = capsys.readouterr()
    assert before.out == after.out and "signal lost" in before.out
    assert "did you mean" not in before.err


def test_an_unknown_option_before_the_command_is_still_an_error(capsys):
    with pytest.raises(SystemExit) as done:
        main(["-x", *SIMULATE])
    assert done.value.code == 2
    assert "unknown option -x" in capsys.readouterr().err
