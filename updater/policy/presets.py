"""Named policy configurations, importable by training scripts and used by the simulator.

A training script: ``DynamicLossScalingUpdater(solver, loss, feed, policy=PRESETS["deepspeed"])``
or ``policy=make_policy("deepspeed", growth_interval=500)``.

>>> make_policy("deepspeed", growth_interval=500).hysteresis
2
"""

from __future__ import annotations

import dataclasses
from typing import Any, Dict, List

from ..common.float16 import FP16_SMALLEST_SUBNORMAL
from ..common.names import did_you_mean, match_name
from .base import Policy
from .policies import (
    POLICIES,
    DynamicScale,
    HeadroomScale,
    NnablaLegacy,
    StaticScale,
    check_policy,
)

PRESETS = {
    "nnabla-legacy": NnablaLegacy(scale=8.0, scaling_factor=2.0, N=2000),
    "pytorch": DynamicScale(
        init_scale=2.0**15,
        growth_factor=2.0,
        backoff_factor=0.5,
        growth_interval=2000,
        min_scale=FP16_SMALLEST_SUBNORMAL,
        max_scale=2.0**15,
        hysteresis=1,
    ),
    "deepspeed": DynamicScale(
        init_scale=2.0**15,
        growth_factor=2.0,
        backoff_factor=0.5,
        growth_interval=1000,
        min_scale=1.0,
        max_scale=2.0**15,
        hysteresis=2,
    ),
    "dynamic": DynamicScale(),
    "headroom": HeadroomScale(),
    "static": StaticScale(1.0),
}
"""Named policies. ``pytorch``: GradScaler's 2**16 start capped to 2**15 (the largest power of
two a float16 backward seed holds), x2 / x0.5 / 2000, no hysteresis and no floor (min_scale
2**-24).
``deepspeed``: hysteresis 2 refilled only by growth (DeepSpeed's default,
``consecutive_hysteresis`` false), min scale 1, window 1000, same capped start. ``dynamic`` and
``headroom``: the project's defaults. ``nnabla-legacy``: the old updater (start 8, N=2000)."""


def names() -> List[str]:
    """Every name :func:`make_policy` accepts: the presets, then the policy classes."""
    return [*PRESETS, *POLICIES]


def _field_types(cls) -> Dict[str, type]:
    kinds = {"int": int, int: int, "bool": bool, bool: bool}
    return {f.name: kinds.get(f.type, float) for f in dataclasses.fields(cls)}


def make_policy(name: str, **settings: Any) -> Policy:
    """A preset (or policy class name) with some settings replaced.

    Args:
        name (str): a key of :data:`PRESETS` or a class name (``DynamicScale``, ...), in any
            case (``"DeepSpeed"``); an unknown name raises ``ValueError`` naming the closest.
        **settings: settings to change, e.g. ``growth_interval=200``.

    >>> make_policy("dynamic", growth_interval=200).growth_interval
    200
    """
    known = names()
    found = match_name(name, known)
    if found is None:
        raise ValueError(f"policy must be one of {known}, got {name!r}{did_you_mean(name, known)}")
    name = found
    base = PRESETS[name] if name in PRESETS else POLICIES[name]()
    types = _field_types(type(base))
    unknown = sorted(set(settings) - set(types))
    if unknown:
        raise ValueError(
            f"unknown settings {unknown} for {name} ({type(base).__name__}); "
            f"accepted: {sorted(types)}"
        )
    return dataclasses.replace(base, **settings)


def setting_types(name: str) -> Dict[str, type]:
    """Setting names of a preset or class and the type of each (int, float or bool)."""
    return _field_types(type(make_policy(name)))


def as_policy(value, name: str = "policy") -> Policy:
    """A policy from ``value``: a policy as it is, or a name :func:`make_policy` accepts
    (``"dynamic"``, ``"deepspeed"``, ``"DynamicScale"``, ...); ``TypeError`` for anything else
    (a policy class names the call to make), ``ValueError`` for an unknown name.

    >>> as_policy("deepspeed") == PRESETS["deepspeed"]
    True
    """
    return make_policy(value) if isinstance(value, str) else check_policy(value, name)
