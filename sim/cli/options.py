"""What every ``dls`` subcommand's parser shares: its class (help text built when shown), the
run options (``--steps``, ``--runs``, ``--seed``, ``--jitter``), ``--force`` and the finishing
(``-q``/``-v``, the description filled to the help's width)."""

from __future__ import annotations

import argparse
import textwrap
from typing import Callable

from sim.argtypes import positive_int, seed_int
from sim.cli.parsing import add_verbosity
from sim.cli.preflight import MEMORY_SHARE, jitter_value
from sim.cli.settings import HELP_WIDTH

FORMATTER = argparse.RawDescriptionHelpFormatter
"""The help formatter of ``dls`` and its subcommands: the examples keep their lines."""

MEMORY_NOTE = (
    f"A run that would need more than {MEMORY_SHARE:.0%} of physical memory (estimated "
    "from the steps, runs and settings) is refused before it starts."
)


class CommandParser(argparse.ArgumentParser):
    """An ``ArgumentParser`` whose epilog may end with text built only when the help is shown
    (``epilog_tail``, a callable returning it): the list of policies builds every preset, which
    parsing a command line does not need."""

    def __init__(self, *args, epilog_tail: Callable[[], str] | None = None, **kwargs):
        super().__init__(*args, **kwargs)
        self.epilog_tail = epilog_tail

    def format_help(self) -> str:
        if self.epilog_tail is not None:
            self.epilog, self.epilog_tail = (self.epilog or "") + self.epilog_tail(), None
        return super().format_help()


def add_run_options(p, steps_default: int = 10000, runs_default: int = 64) -> None:
    """``--steps``, ``--runs``, ``--seed`` and ``--jitter`` on a simulating subcommand."""
    p.add_argument(
        "--steps",
        type=positive_int,
        default=steps_default,
        help=f"steps per synthetic trace (default {steps_default})",
    )
    p.add_argument(
        "--runs",
        type=positive_int,
        default=runs_default,
        help=f"runs per setting, advanced together (default {runs_default})",
    )
    p.add_argument("--seed", type=seed_int, default=0, help="seed of traces and jitter (default 0)")
    p.add_argument(
        "--jitter",
        type=jitter_value,
        default=0.25,
        help="log2 std of the per-step, per-run gradient size factor; 0 replays "
        "the trace exactly (default 0.25)",
    )


def finish(p, run, force: bool = True, **defaults) -> None:
    """The end of every subcommand's ``add_parser``: ``--force`` (for commands that write),
    ``-q``/``-v``, the description filled, and the defaults :func:`sim.cli.main.main` reads
    (``handler``: the command's ``run(args)``; ``subparser``: its parser; ``policies``: the
    ``--policy`` names it takes)."""
    if force:
        p.add_argument(
            "--force",
            action="store_true",
            help="replace output files dls did not write (by default dls refuses to replace "
            "them: it replaces only files whose content says dls wrote them, unedited since)",
        )
    add_verbosity(p)
    p.description = textwrap.fill(p.description, width=HELP_WIDTH)
    p.set_defaults(handler=run, subparser=p, **defaults)
