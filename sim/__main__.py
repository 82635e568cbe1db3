"""``python -m sim``: the ``dls`` command (:func:`sim.cli.main.main`)."""

import sys

from sim.cli.main import main

if __name__ == "__main__":
    sys.exit(main())
