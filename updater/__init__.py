"""Dynamic loss scaling for nnabla float16 training.

The policies import with NumPy alone; the nnabla driver, context helpers, communicator and
checkpoint helpers load lazily on first use, so ``import updater.policy`` never imports nnabla.
``updater.__version__`` is the installed distribution's version (``nnabla-dls``), or
``"0+unknown"`` when the package is imported from a checkout that was never installed.
"""

import importlib
from importlib.metadata import PackageNotFoundError, version
from typing import TYPE_CHECKING

from .common.moved import alias_moved
from .policy import (
    DynamicScale,
    HeadroomScale,
    NnablaLegacy,
    ScaleState,
    StaticScale,
    policy_from_dict,
)

MOVED = {
    "updater.amp_lists": "updater.amp.lists",
    "updater.checkpoint": "updater.runtime.checkpoint",
    "updater.checks": "updater.common.validation",
    "updater.comm": "updater.runtime.comm",
    "updater.common.files": "updater.common.npz",
    "updater.context": "updater.runtime.context",
    "updater.driver.finite_checks": "updater.driver.checks",
    "updater.driver.forward_peak": "updater.driver.recording.forward_peak",
    "updater.driver.probes": "updater.driver.recording.probes",
    "updater.driver.recording.options": "updater.driver.probe_options",
    "updater.files": "updater.common.npz",
    "updater.float16": "updater.common.float16",
    "updater.policy_state": "updater.policy.state",
    "updater.presets": "updater.policy.presets",
    "updater.recorder": "updater.trace.recorder",
    "updater.records": "updater.driver.records",
    "updater.solver_group": "updater.driver.solver_group",
    "updater.trace_parts": "updater.trace.parts",
    "updater.updater": "updater.driver.updater",
}
"""Module paths of earlier versions -> where the module is now: the old path still imports,
warning ``DeprecationWarning`` once (:mod:`updater.common.moved`)."""
alias_moved(MOVED)

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
    "Probes": "updater.driver.probe_options",
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

if TYPE_CHECKING:  # what static tools see of _LAZY (tests/updater/driver/test_typed.py: they agree)
    from .driver.forward_state import NonFiniteStatisticsError as NonFiniteStatisticsError
    from .driver.probe_options import Probes as Probes
    from .driver.records import NonFiniteGradientsError as NonFiniteGradientsError
    from .driver.records import StepRecord as StepRecord
    from .driver.solver_group import SolverGroup as SolverGroup
    from .driver.updater import DynamicLossScalingUpdater as DynamicLossScalingUpdater
    from .policy.presets import PRESETS as PRESETS
    from .policy.presets import make_policy as make_policy
    from .runtime.checkpoint import LoadReport as LoadReport
    from .runtime.checkpoint import load_checkpoint as load_checkpoint
    from .runtime.checkpoint import save_checkpoint as save_checkpoint
    from .runtime.comm import MPICommunicator as MPICommunicator
    from .runtime.comm import abort_on_exception as abort_on_exception
    from .runtime.context import get_context as get_context
    from .runtime.export import export_parameters as export_parameters
    from .trace import Trace as Trace
    from .trace.recorder import GradientRecorder as GradientRecorder

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
