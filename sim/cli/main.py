"""``dls``: command line for the float16 loss-scaling simulator and the nnabla demo.

Thin: this module only builds the top-level parser, registers the subcommands and calls the
chosen one. Each subcommand is one module of :mod:`sim.cli` with one pattern: ``add_parser
(subparsers)`` registers its options, ``run(args)`` checks them and calls the library
(:mod:`sim.cli.simulate`, :mod:`sim.cli.sweep`, :mod:`sim.cli.tune`, :mod:`sim.cli.report`,
:mod:`sim.cli.train`); a new subcommand is a new module named in :data:`COMMANDS`. Everything that
can be checked before the work is checked first (:mod:`sim.cli.preflight`: settings, trace
files, output paths, the memory a simulation needs); a bad argument exits with status 2 and a
one-line message, as argparse does. Policies and their settings come from
:mod:`sim.cli.settings` (the ``--policy`` help is generated from :mod:`updater.policy.presets`,
the list of policies built only when a help is shown), printed output from
:mod:`sim.report.tables`.

Progress goes to stderr (:class:`sim.cli.progress.StageProgress`): tqdm bars on a terminal, one
status line per stage otherwise (a file or a pipe), so long commands are never silent.
"""

from __future__ import annotations

import argparse
import sys
import textwrap

from sim.cli import interrupt, report, simulate, sweep, train, tune
from sim.cli.options import FORMATTER, CommandParser
from sim.cli.parsing import log, parse_args, setup_logging
from sim.cli.settings import HELP_WIDTH
from sim.cli.version import version_line
from updater.common.writing import UnsafeOutputError

COMMANDS = (simulate, sweep, tune, report, train)
"""The subcommands' modules, in the order ``dls --help`` lists them."""

PROGRESS_NOTE = (
    "Progress goes to stderr: bars on a terminal, one status line per stage otherwise. "
    "Output paths, settings and the memory needed are checked before any work."
)


def build_parser() -> argparse.ArgumentParser:
    """The ``dls`` argument parser: each module of :data:`COMMANDS` adds its subcommand."""
    parser = argparse.ArgumentParser(
        prog="dls",
        description="Dynamic loss scaling for nnabla: float16 simulator, report and demo. "
        + PROGRESS_NOTE,
        epilog=(
            "examples:\n"
            "  dls simulate --policy dynamic --set growth_interval=200 --trace drifting\n"
            "  dls sweep --policy dynamic --grid growth_interval=500,1000,2000 "
            "--grid hysteresis=1,2\n"
            "  dls report --out my_report\n"
            "  dls train --steps 300 --out train_out\n"
            "(scripts/report.sh regenerates the committed reports/ folder)"
        ),
        formatter_class=FORMATTER,
    )
    parser.description = textwrap.fill(parser.description, width=HELP_WIDTH)
    parser.add_argument("--version", action="version", version=version_line())
    subparsers = parser.add_subparsers(
        dest="command", metavar="COMMAND", parser_class=CommandParser
    )
    subparsers.required = True
    for command in COMMANDS:
        command.add_parser(subparsers)
    return parser


def main(argv=None) -> int:
    """Entry point of ``dls``; returns the exit status (argument errors exit with 2; Ctrl-C
    130, with one line naming the files written before, :mod:`sim.cli.interrupt`). A name
    with bytes the terminal's encoding cannot show (a path that is not UTF-8) prints with
    replacement characters."""
    for stream in (sys.stdout, sys.stderr):
        if hasattr(stream, "reconfigure"):
            stream.reconfigure(errors="replace")
    parser = build_parser()
    args = parse_args(parser, argv)
    setup_logging(args.verbosity)
    shown = {k: v for k, v in vars(args).items() if k not in ("handler", "subparser", "policies")}
    log.debug("dls %s with %s", args.command, shown)
    before = interrupt.outputs_now(args)
    try:
        return args.handler(args)
    except KeyboardInterrupt:  # Ctrl-C: one line, what was written, no traceback
        written = interrupt.written_since(before, args)
        sys.stdout.flush()
        print(interrupt.interrupted_line(args.command, written), file=sys.stderr, flush=True)
        return interrupt.INTERRUPTED
    except UnsafeOutputError as e:  # an output found unsafe once the work told its names
        args.subparser.error(str(e))
    except OSError as e:  # a write that failed (a full disk): the old file is intact
        why = f"{e.filename}: {e.strerror}" if e.filename else (e.strerror or str(e))
        args.subparser.exit(1, f"{args.subparser.prog}: error: {why}\n")
    except MemoryError:
        args.subparser.exit(
            1, f"{args.subparser.prog}: error: out of memory; use fewer --steps or --runs\n"
        )


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
