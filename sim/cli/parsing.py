"""Reading ``dls``'s command line: errors from the subcommand's own parser (with its usage),
"did you mean" for commands, options and names (:mod:`sim.cli.names`), ``-q``/``-v`` and the
logging they set.

argparse leaves a subcommand's unknown arguments to the top-level parser, which prints the
top-level usage (``usage: dls [-h] [--version] COMMAND ...``); :func:`parse_args` hands them
back to the subcommand's parser instead.
"""

from __future__ import annotations

import argparse
import logging
import sys
from typing import List, Sequence

from sim.cli.names import did_you_mean, match_name, resolve

log = logging.getLogger("dls")

LOG_FORMAT = "[%(name)s][%(levelname)s]: %(message)s"
"""How ``dls`` prints a log line on stderr (nnabla's own format, without its time stamp)."""

OWN_LOGGERS = ("dls", "sim", "updater")
"""The loggers ``-v`` opens to DEBUG (other libraries' debug lines, e.g. matplotlib's, stay
hidden)."""

PAIR_OPTIONS = ("--set", "--grid")
"""Options whose value is one ``KEY=VALUE`` word."""

VERBOSITY = ("-q", "--quiet", "-v", "--verbose")
"""The options :func:`add_verbosity` gives every subcommand, also taken before the command
(``dls -q simulate`` is ``dls simulate -q``)."""


def add_verbosity(p: argparse.ArgumentParser) -> None:
    """``-q``/``--quiet`` and ``-v``/``--verbose`` on a subcommand's parser."""
    group = p.add_mutually_exclusive_group()
    group.add_argument(
        "-q",
        "--quiet",
        dest="verbosity",
        action="store_const",
        const=-1,
        default=0,
        help="print results only: no progress, warnings and errors only in the log",
    )
    group.add_argument(
        "-v",
        "--verbose",
        dest="verbosity",
        action="store_const",
        const=1,
        help="also print this package's debug log lines",
    )


def setup_logging(verbosity: int) -> None:
    """Log level WARNING (``-q``) or INFO on the root logger, and DEBUG on
    :data:`OWN_LOGGERS` with ``-v``. The root logger gets a stderr handler in
    :data:`LOG_FORMAT` unless one is already set up (nnabla's import then finds it and adds
    none of its own)."""
    root = logging.getLogger()
    if not root.handlers:
        handler = logging.StreamHandler(sys.stderr)
        handler.setFormatter(logging.Formatter(LOG_FORMAT))
        root.addHandler(handler)
    root.setLevel(logging.WARNING if verbosity < 0 else logging.INFO)
    for name in OWN_LOGGERS:
        logging.getLogger(name).setLevel(logging.DEBUG if verbosity > 0 else logging.NOTSET)


def _command(parser, commands: Sequence[str], argv: List[str]) -> List[str]:
    """``argv`` with its command spelled as registered (any case) and the :data:`VERBOSITY`
    options given before it moved after it; an unknown command is an error with the closest
    commands."""
    i = next((i for i, a in enumerate(argv) if not a.startswith("-")), None)
    if i is None:
        return argv
    name = match_name(argv[i], commands)
    if name is None:
        parser.error(
            f"unknown command {argv[i]!r}{did_you_mean(argv[i], commands)}; "
            f"choose from {', '.join(commands)}"
        )
    before = [a for a in argv[:i] if a not in VERBOSITY]
    moved = [a for a in argv[:i] if a in VERBOSITY]
    return [*before, name, *moved, *argv[i + 1 :]]


def _unrecognized(sub, argv: List[str], extras: List[str]) -> None:
    """Report arguments the subcommand does not take through its own parser: a ``KEY VALUE``
    given to ``--set``/``--grid`` as two words, an unknown option with the closest ones."""
    for j, word in enumerate(argv):
        option, inline, key = word.partition("=")  # --set KEY VALUE or --set=KEY VALUE
        if option not in PAIR_OPTIONS:
            continue
        rest = argv[j + 1 :]
        if not inline:
            key, rest = (rest[0], rest[1:]) if rest else ("", [])
        if key and "=" not in key and rest and rest[0] in extras:
            sub.error(f"{option} takes KEY=VALUE as one word: write {option} {key}={rest[0]}")
    options = [o for o in extras if o.startswith("-")]
    if options:
        name = options[0].split("=")[0]
        known = [s for a in sub._actions for s in a.option_strings]
        sub.error(f"unknown option {name}{did_you_mean(name, known)}; see {sub.prog} --help")
    sub.error(f"unrecognized arguments: {' '.join(extras)}")


def parse_args(parser, argv: Sequence[str] | None = None) -> argparse.Namespace:
    """Parse ``argv`` (default ``sys.argv[1:]``) with ``parser``, whose subcommands set
    ``subparser`` (their own parser) and optionally ``policies`` (the ``--policy`` names they
    accept, matched in any case); errors exit with status 2 through the subcommand's parser."""
    argv = list(sys.argv[1:] if argv is None else argv)
    commands = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)][0]
    argv = _command(parser, list(commands.choices), argv)
    args, extras = parser.parse_known_args(argv)
    if extras:
        _unrecognized(args.subparser, argv, extras)
    if getattr(args, "policies", None):
        args.policy = resolve(args.subparser, "--policy", args.policy, args.policies, "policy")
    return args
