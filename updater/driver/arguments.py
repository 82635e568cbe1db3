"""The updater's constructor arguments: checks of the nnabla objects it is given, nnabla's
scale arguments and attributes mapped onto policies, and the scales a backward seed can hold.

``DynamicLossScalingUpdater(solver, loss, feed)`` builds the recommended ``DynamicScale()``;
nnabla's ``scale``/``scaling_factor``/``N`` build a ``DynamicScale`` with nnabla's meaning;
``policy=`` is taken as given. Every scale the updater holds is at least 2**-24.
"""

from __future__ import annotations

import dataclasses
import math
import warnings
from typing import Any, Dict, Sequence

import nnabla as nn
import numpy as np

from ..common.float16 import FP16_SMALLEST_SUBNORMAL, LARGEST_SEED_POWER, SEED_MAX
from ..common.validation import check_int, check_positive
from ..policy.policies import DynamicScale, ScaleState, policy_from_dict
from ..policy.presets import as_policy
from .arrays import graph_leaves
from .records import COUNTER_MAX, unreachable_counters

LEGACY_DEFAULTS = {"scale": 8.0, "scaling_factor": 2.0, "N": 2000}
"""nnabla's defaults, used for the legacy arguments not given when one of them is."""
LEGACY_NAMES = {
    "DynamicScale": {"scaling_factor": "growth_factor", "N": "growth_interval"},
    "NnablaLegacy": {"scaling_factor": "scaling_factor", "N": "N"},
}
"""nnabla's attribute names -> the policy setting behind them, per policy class."""


def check_seedable(name: str, value) -> float:
    """``value`` as a float; ``ValueError`` unless it is a loss scale the backward seed can hold."""
    value = check_positive(name, value)
    if value < FP16_SMALLEST_SUBNORMAL:
        raise ValueError(
            f"{name} must be >= 2**-24 = {FP16_SMALLEST_SUBNORMAL!r}, got {value!r}: the loss "
            "scale seeds the backward pass, and in nnabla's half mode a seed below 2**-24 "
            "(float16's smallest positive value) rounds to 0, so every gradient would be 0"
        )
    return value


def check_scale(policy, value, name: str = "scale") -> float:
    """A scale ``policy`` may hold: seedable and within the policy's bounds
    (:meth:`updater.policy.base.Policy.bounds`: a static policy holds its own scale only)."""
    value = check_seedable(name, value)
    low, high = policy.bounds()
    if low == high != value:
        raise ValueError(
            f"{name} must be {low!r}, the only scale {policy!r} holds, got {value!r}; for "
            f"another fixed scale use StaticScale(scale={value!r})"
        )
    if not low <= value <= high:
        raise ValueError(
            f"{name} must be in [min_scale, max_scale] = [{low!r}, {high!r}] of "
            f"{type(policy).__name__}, got {value!r}"
        )
    return value


def legacy_policy(scale, scaling_factor, N, min_scale, max_scale) -> DynamicScale:
    """Map nnabla's (scale, scaling_factor, N) to a bounded DynamicScale, naming legacy args."""
    check_positive("scale", scale)
    check_positive("scaling_factor", scaling_factor)
    if scaling_factor <= 1:
        hint = f"; did you mean {1 / scaling_factor!r}?" if scaling_factor < 1 else ""
        raise ValueError(
            f"scaling_factor must be > 1 (the scale is multiplied by it on growth and divided "
            f"by it on overflow), got {scaling_factor!r}{hint}"
        )
    N = check_int("N", N, 1)
    if not min_scale <= scale <= max_scale:
        fix = (
            f"pass max_scale={scale!r} to allow it (a loss computed in half takes scales up to "
            f"{SEED_MAX['float16']:g}: its backward seed is float16)"
            if scale > max_scale
            else f"pass min_scale={scale!r} to allow it"
        )
        raise ValueError(
            f"scale must be in [min_scale, max_scale] = [{min_scale!r}, {max_scale!r}], got "
            f"{scale!r}; {fix}"
        )
    return DynamicScale(
        init_scale=float(scale),
        growth_factor=float(scaling_factor),
        backoff_factor=1.0 / float(scaling_factor),
        growth_interval=N,
        min_scale=min_scale,
        max_scale=max_scale,
        hysteresis=1,  # nnabla's meaning: every overflow divides the scale
    )


def check_seed_holds(policy, seed_type) -> None:
    """``ValueError`` when the policy's scale or ``max_scale`` is above the largest backward
    seed of ``seed_type`` (the loss's precision), where the seed would be inf."""
    precision = np.dtype(seed_type).name
    highest = getattr(policy, "max_scale", math.inf)
    for name, value in (("max_scale", highest), ("scale", policy.init().scale)):
        if math.isfinite(value) and value > SEED_MAX[precision]:
            raise ValueError(
                f"{name} {float(value)!r} is above {SEED_MAX[precision]!r}, the largest backward "
                f"seed a {precision} loss holds (the loss's last function computes in "
                f"{precision}, so loss.backward(scale) would seed inf): use {name} <= "
                f"2**{int(math.log2(LARGEST_SEED_POWER[precision]))}"
                + (
                    ", or compute the loss in float32 (updater.amp.rewrite does)"
                    if precision == "float16"
                    else ""
                )
            )


def policy_from_arguments(policy, scale, scaling_factor, N, min_scale, max_scale, seed_type):
    """The policy the constructor arguments ask for (see the class docstring); ``max_scale``
    defaults to the largest power of two the seed's precision (``seed_type``) holds."""
    legacy = {"scale": scale, "scaling_factor": scaling_factor, "N": N}
    given = {
        k: v
        for k, v in {**legacy, "min_scale": min_scale, "max_scale": max_scale}.items()
        if v is not None
    }
    if policy is not None:
        policy = as_policy(policy)
        if given:
            raise ValueError(
                f"pass either policy= or the legacy scale/scaling_factor/N (and "
                f"min_scale/max_scale), not both; got policy={policy!r} and {given}"
            )
    else:
        low = check_seedable("min_scale", 1.0 if min_scale is None else min_scale)
        largest = LARGEST_SEED_POWER[np.dtype(seed_type).name]
        high = check_positive("max_scale", largest if max_scale is None else max_scale)
        if all(v is None for v in legacy.values()):
            start = min(max(DynamicScale.init_scale, low), high)
            policy = DynamicScale(init_scale=start, min_scale=low, max_scale=high)
        else:
            legacy = {k: LEGACY_DEFAULTS[k] if v is None else v for k, v in legacy.items()}
            policy = legacy_policy(**legacy, min_scale=low, max_scale=high)
    if hasattr(policy, "min_scale"):
        check_seedable("min_scale", policy.min_scale)
    check_seedable("scale", float(policy.init().scale))
    check_seed_holds(policy, seed_type)
    return policy


def check_variables(name: str, values, leaves: bool = False, inputs_of=None) -> list:
    """``values`` as a list, when it is a list or tuple of ``nnabla.Variable``; else TypeError;
    with ``leaves``, ValueError for a Variable that a function computes (it has a parent);
    with ``inputs_of`` (a loss), ValueError for a Variable that does not feed its graph."""
    if not isinstance(values, (list, tuple)) or not all(isinstance(v, nn.Variable) for v in values):
        raise TypeError(f"{name} must be a list of nnabla.Variable, got {values!r}")
    if inputs_of is not None:
        inputs = {hash(v) for v in graph_leaves(inputs_of)}
        for i, v in enumerate(values):
            if hash(v) not in inputs:
                raise ValueError(
                    f"{name}[{i}] (shape {tuple(v.shape)}) is not an input of the loss's graph: "
                    "give the Variables the data feeder writes"
                )
    for i, v in enumerate(values):
        if leaves and v.parent is not None:
            raise ValueError(
                f"{name}[{i}] is the output of {v.parent.info.type_name}, which every forward "
                "pass computes anew: give the Variables a function writes into (its state "
                "inputs), not its outputs"
            )
    return list(values)


def warn_unchecked_lacking(unchecked: Sequence[nn.Variable], loss) -> None:
    """Warn once about the ``unchecked_inputs`` that the graph of a new ``loss`` lacks (a
    Variable that is not an nnabla Variable is left to the loss's own check)."""
    if not unchecked or not isinstance(loss, nn.Variable):
        return
    inputs = {hash(v) for v in graph_leaves(loss)}
    lacking = [
        f"unchecked_inputs[{i}] {tuple(v.shape)}"
        for i, v in enumerate(unchecked)
        if hash(v) not in inputs
    ]
    if lacking:
        warnings.warn(
            f"the new loss's graph does not read {', '.join(lacking)}: they no longer matter "
            "(kept: they count again if the loss is assigned back); assign "
            "updater.unchecked_inputs to change the list",
            UserWarning,
            stacklevel=5,
        )


def legacy_setting(policy, name: str):
    """The policy setting behind nnabla's attribute ``name`` (``scaling_factor`` or ``N``)."""
    mapped = LEGACY_NAMES.get(type(policy).__name__, {})
    if name not in mapped:
        raise AttributeError(
            f"{name} is defined for DynamicScale and NnablaLegacy policies, not for "
            f"{type(policy).__name__}"
        )
    return getattr(policy, mapped[name])


def with_legacy_setting(policy, name: str, value):
    """``policy`` with nnabla's attribute ``name`` set (DynamicScale's backoff follows
    ``1/scaling_factor``); ``N`` must be a whole number >= 1, the policy validates the rest."""
    legacy_setting(policy, name)  # raises for policies without it
    value = check_int(name, value, 1) if name == "N" else value
    changes = {LEGACY_NAMES[type(policy).__name__][name]: value}
    if isinstance(policy, DynamicScale) and name == "scaling_factor":
        changes["backoff_factor"] = 1.0 / check_positive(name, value)
    return dataclasses.replace(policy, **changes)


def legacy_property(name: str, kind: type, doc: str) -> property:
    """The updater's attribute ``name`` of nnabla's (``scaling_factor`` or ``N``): reads the
    policy's setting as ``kind``, assigns a policy with it set (:func:`with_legacy_setting`;
    ``AttributeError`` for policies without it)."""

    def read(self):
        return kind(legacy_setting(self.policy, name))

    def write(self, value):
        self.policy = with_legacy_setting(self.policy, name, value)

    return property(read, write, doc=doc)


def checked_state(state: Dict[str, Any], version: int, counters: Sequence[str]):
    """Check an updater state dict (see ``DynamicLossScalingUpdater.state_dict``) before
    anything is loaded; return ``(policy, scale_state)``.

    Raises ``KeyError`` for a missing key, ``ValueError`` for another format version, an
    unknown key, a scale that is not finite, below 2**-24 or outside the policy's bounds, a
    negative or non-integer counter, a state the policy never reaches
    (``policy.check_state``), or counters that contradict each other, naming it.
    """
    keys = ("format_version", "policy", "scale_state", "counters")
    missing = [k for k in keys[1:] if k not in state]
    if missing:
        raise KeyError(f"updater state dict is missing keys {missing}")
    unknown = sorted(set(state) - set(keys)) + sorted(set(state["counters"]) - set(counters))
    if unknown:
        raise ValueError(f"updater state dict has unknown keys {unknown}")
    found = state.get("format_version", version)
    if found != version:
        raise ValueError(
            f"updater state format_version {found!r} is not supported (this version reads "
            f"{version})"
        )
    policy = policy_from_dict(state["policy"])
    lost = [k for k in counters if k not in state["counters"]]
    if lost:
        raise KeyError(f"updater state dict counters are missing {lost}")
    saved = state["scale_state"]
    scale_state = ScaleState.from_dict(saved)
    if np.ndim(scale_state.scale) != 0:
        raise ValueError(f"saved scale must be one number, got {saved['scale']!r}")
    check_scale(policy, saved["scale"], "saved scale")
    counts = {"good_steps": saved["good_steps"], "hysteresis_left": saved["hysteresis_left"]}
    counts.update({k: state["counters"][k] for k in counters})
    for name, value in counts.items():
        check_int(f"saved {name}", value, 0, COUNTER_MAX)
    policy.check_state(scale_state)
    problem = unreachable_counters({k: int(state["counters"][k]) for k in counters})
    if problem:
        raise ValueError(
            f"saved counters no run reaches: {problem}; the state was changed after it was "
            "saved: load another one"
        )
    return policy, scale_state
