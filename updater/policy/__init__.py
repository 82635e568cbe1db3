"""NumPy only: the scaling policies, pure state machines shared by the updater and the simulator
(:mod:`updater.policy.policies`), their state (:mod:`updater.policy.state`) and the named
presets (:mod:`updater.policy.presets`)."""

from .policies import (
    POLICIES,
    DynamicScale,
    HeadroomScale,
    NnablaLegacy,
    StaticScale,
    check_policy,
    policy_from_dict,
)
from .state import ScaleState, largest_safe_scale, make_state

__all__ = [
    "POLICIES",
    "DynamicScale",
    "HeadroomScale",
    "NnablaLegacy",
    "ScaleState",
    "StaticScale",
    "check_policy",
    "largest_safe_scale",
    "make_state",
    "policy_from_dict",
]
