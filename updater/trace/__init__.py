"""NumPy only: the gradient trace format (:mod:`updater.trace.format`), its parts written during
a run (:mod:`updater.trace.parts`) and the recorder that writes it
(:mod:`updater.trace.recorder`)."""

from .format import EXP_MAX, EXP_MIN, FORMAT_VERSION, NBINS, Trace, binade_histogram

__all__ = ["EXP_MAX", "EXP_MIN", "FORMAT_VERSION", "NBINS", "Trace", "binade_histogram"]
