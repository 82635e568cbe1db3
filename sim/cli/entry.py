"""The ``dls`` console script: says which extra to install when the simulator's dependencies are
missing (``updater`` alone needs neither), then runs :func:`sim.cli.main.main`."""

from __future__ import annotations

import importlib.util
import sys

from sim.cli.version import version_line

SIM_EXTRA = ("matplotlib", "tqdm", "tabulate")
"""The modules the ``sim`` extra installs (``pip install 'nnabla-dls[sim]'``)."""


COMMANDS = ("simulate", "sweep", "tune", "report", "train")
"""The subcommands, named by ``dls --help`` without the ``sim`` extra."""


def main(argv=None) -> int:
    """Entry point of ``dls``. Without the ``sim`` extra: ``--version`` and ``--help`` answer
    (status 0, the help naming the install command), anything else exits with status 1 and the
    install command. With it: :func:`sim.cli.main.main`'s."""
    args = list(sys.argv[1:] if argv is None else argv)
    missing = [name for name in SIM_EXTRA if importlib.util.find_spec(name) is None]
    if missing:
        install = (
            f"dls needs {' and '.join(missing)}, which the sim extra installs: "
            "pip install 'nnabla-dls[sim]' (the updater alone needs neither)"
        )
        if args == ["--version"]:
            print(version_line())
            return 0
        if args in ([], ["-h"], ["--help"]):
            print(
                f"usage: dls {{{','.join(COMMANDS)}}} ...\n\n"
                "The float16 loss-scaling simulator of nnabla-dls: replay scaling policies over "
                f"gradient traces.\n{install}, then dls --help lists every command and option."
            )
            return 0
        sys.stderr.write(f"dls: error: {install}\n")
        return 1
    from sim.cli.main import main as run

    return run(argv)
