"""``python -m sim``: the ``dls`` command (:func:`sim.cli.entry.main`)."""

import sys

from sim.cli.entry import main

if __name__ == "__main__":
    sys.exit(main())
