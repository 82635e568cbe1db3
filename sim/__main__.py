"""``python -m sim``: the ``dls`` command (:func:`sim.cli.main.main`)."""

import sys

from sim.cli.main import main

sys.exit(main())
