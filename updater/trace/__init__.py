"""NumPy only: the gradient trace format (:mod:`updater.trace.format`, its file
:mod:`updater.trace.archive`, its groups of fields :mod:`updater.trace.thresholds`,
:mod:`updater.trace.layers`, :mod:`updater.trace.flush`, :mod:`updater.trace.forward`), what it
holds per step (:mod:`updater.trace.measured`, its checks :mod:`updater.trace.values`), its
parts written during a run (:mod:`updater.trace.parts`) and the recorder that writes it
(:mod:`updater.trace.recorder`, its rows :mod:`updater.trace.rows`, how a recording process ends
:mod:`updater.trace.exits`)."""

from .archive import FORMAT_VERSION
from .format import Trace
from .measured import EXP_MAX, EXP_MIN, NBINS, binade_histogram

__all__ = ["EXP_MAX", "EXP_MIN", "FORMAT_VERSION", "NBINS", "Trace", "binade_histogram"]
