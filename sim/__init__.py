"""NumPy float16 simulation testbed for loss-scaling policies (no nnabla import)."""
