"""The float16 simulation testbed: imports ``updater``, never the other way; NumPy only outside
``sim.nnabla_studies``. ``sim.__version__`` is the distribution's (the same as
``updater.__version__``)."""

from updater import __version__

__all__ = ["__version__"]
