"""The float16 simulation testbed: imports ``updater``, never the other way; NumPy only outside
``sim.nnabla_studies``."""
