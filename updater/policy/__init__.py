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
from .presets import PRESETS, as_policy, make_policy
from .state import ScaleState, largest_safe_scale, make_state

__all__ = [
    "POLICIES",
    "PRESETS",
    "DynamicScale",
    "HeadroomScale",
    "NnablaLegacy",
    "ScaleState",
    "StaticScale",
    "as_policy",
    "check_policy",
    "largest_safe_scale",
    "make_policy",
    "make_state",
    "policy_from_dict",
]
