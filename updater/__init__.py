"""Dynamic loss scaling for nnabla float16 training.

The policies import with NumPy alone; the nnabla driver, context helpers, communicator and
checkpoint helpers load lazily on first use, so ``import updater.policy`` never imports nnabla.
``updater.__version__`` is the installed distribution's version (``nnabla-dls``), or
``"0+unknown"`` when the package is imported from a checkout that was never installed.
"""

import importlib
from importlib.metadata import PackageNotFoundError, version

from .policy import (
    DynamicScale,
    HeadroomScale,
    NnablaLegacy,
    ScaleState,
    StaticScale,
    policy_from_dict,
)

try:
    __version__ = version("nnabla-dls")
except PackageNotFoundError:  # imported from a checkout that was never installed
    __version__ = "0+unknown"

_LAZY = {
    "DynamicLossScalingUpdater": "updater.updater",
    "NonFiniteGradientsError": "updater.records",
    "NonFiniteStatisticsError": "updater.statistics",
    "StepRecord": "updater.records",
    "PRESETS": "updater.presets",
    "make_policy": "updater.presets",
    "GradientRecorder": "updater.recorder",
    "Trace": "updater.trace",
    "get_context": "updater.context",
    "MPICommunicator": "updater.comm",
    "save_checkpoint": "updater.checkpoint",
    "load_checkpoint": "updater.checkpoint",
    "LoadReport": "updater.checkpoint",
    "SolverGroup": "updater.solver_group",
}

__all__ = [
    "DynamicScale",
    "HeadroomScale",
    "NnablaLegacy",
    "ScaleState",
    "StaticScale",
    "policy_from_dict",
    *_LAZY,
]


def __getattr__(name):
    if name in _LAZY:
        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'updater' has no attribute {name!r}")
