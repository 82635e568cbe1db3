"""Gradient traces: the synthetic families and the real traces that ship."""
