"""The ``dls`` console script: says which extra to install when the simulator's dependencies are
missing (``updater`` alone needs neither), then runs :func:`sim.cli.main.main`."""

from __future__ import annotations

import importlib.util
import sys

SIM_EXTRA = ("matplotlib", "tqdm", "tabulate")
"""The modules the ``sim`` extra installs (``pip install 'nnabla-dls[sim]'``)."""


def main(argv=None) -> int:
    """Entry point of ``dls``: exit status 1 with the install command when the ``sim`` extra is
    missing, else :func:`sim.cli.main.main`'s."""
    missing = [name for name in SIM_EXTRA if importlib.util.find_spec(name) is None]
    if missing:
        sys.stderr.write(
            f"dls: error: dls needs {' and '.join(missing)}, which the sim extra installs: "
            "pip install 'nnabla-dls[sim]' (the updater alone needs neither)\n"
        )
        return 1
    from sim.cli.main import main as run

    return run(argv)
