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
    "DynamicLossScalingUpdater": "updater.driver.updater",
    "NonFiniteGradientsError": "updater.driver.records",
    "NonFiniteStatisticsError": "updater.driver.forward_state",
    "StepRecord": "updater.driver.records",
    "PRESETS": "updater.policy.presets",
    "make_policy": "updater.policy.presets",
    "GradientRecorder": "updater.trace.recorder",
    "Trace": "updater.trace",
    "get_context": "updater.runtime.context",
    "MPICommunicator": "updater.runtime.comm",
    "abort_on_exception": "updater.runtime.comm",
    "save_checkpoint": "updater.runtime.checkpoint",
    "load_checkpoint": "updater.runtime.checkpoint",
    "export_parameters": "updater.runtime.export",
    "LoadReport": "updater.runtime.checkpoint",
    "SolverGroup": "updater.driver.solver_group",
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
