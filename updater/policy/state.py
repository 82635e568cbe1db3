"""The state a policy advances, and the two sets of elementwise operations its rules are written
over: Python numbers for one run (a few microseconds per step), NumPy arrays for many runs (the
simulator). :mod:`updater.policy` holds the policies and their contract.
"""

from __future__ import annotations

import math
import operator
from types import SimpleNamespace
from typing import Any, Dict, NamedTuple

import numpy as np

from ..common.float16 import FP16_MAX


class ScaleState(NamedTuple):
    """State of one run (scalars) or many runs (arrays of one shape).

    One run holds Python numbers (``float``, ``int``, ``int``), many runs NumPy arrays
    (float64, int64, int64).

    Attributes:
        scale: the loss scale to use for the next step.
        good_steps: consecutive finite steps since the last growth or overflow.
        hysteresis_left: overflows until the next backoff, that backoff's overflow included,
            in [1, hysteresis] (1 means the next overflow backs off; always 1 for policies
            without hysteresis).
    """

    scale: Any
    good_steps: Any
    hysteresis_left: Any

    def to_dict(self) -> Dict[str, Any]:
        """Return ``{"scale", "good_steps", "hysteresis_left"}`` as Python numbers or lists."""
        return {k: np.asarray(v).tolist() for k, v in self._asdict().items()}

    @classmethod
    def from_dict(cls, d: Dict[str, Any]) -> ScaleState:
        """Rebuild a state from :meth:`to_dict` output; raises ``KeyError`` naming a missing or
        an unknown key."""
        missing = [k for k in cls._fields if k not in d]
        if missing:
            raise KeyError(f"scale state dict is missing keys {missing}; expected {cls._fields}")
        unknown = sorted(str(k) for k in d if k not in cls._fields)
        if unknown:
            raise KeyError(f"scale state dict has unknown keys {unknown}; expected {cls._fields}")
        return make_state(d["scale"], d["good_steps"], d["hysteresis_left"])


def make_state(scale, good_steps, hysteresis_left) -> ScaleState:
    """A state of arrays, or of Python numbers when every field is a single value."""
    scale = np.asarray(scale, dtype=np.float64)
    good_steps = np.asarray(good_steps, dtype=np.int64)
    hysteresis_left = np.asarray(hysteresis_left, dtype=np.int64)
    if scale.ndim == good_steps.ndim == hysteresis_left.ndim == 0:
        return _one_state(scale, good_steps, hysteresis_left)
    return ScaleState(scale, good_steps, hysteresis_left)


def _one_state(scale, good_steps, hysteresis_left) -> ScaleState:
    return ScaleState(float(scale), int(good_steps), int(hysteresis_left))


# ---------------------------------------------------------------- the operations of the rules


def _quiet_mul(a, b):
    with np.errstate(over="ignore"):  # an inf product is capped by the rule that uses it
        return np.multiply(a, b)


def _one_largest_safe_scale(a: float, margin: float) -> float:
    """:func:`largest_safe_scale` of one Python number."""
    y = FP16_MAX / (a * margin) if a * margin != 0 else math.inf
    return math.ldexp(0.5, math.frexp(y)[1]) if 0 < y < math.inf else y


_ONE_RUN = SimpleNamespace(
    flag=bool,
    value=float,
    both=operator.and_,  # of flags (bool): C builtins, no Python frame per operation
    either=operator.or_,
    negate=operator.not_,
    where=lambda cond, a, b: a if cond else b,
    minimum=min,
    maximum=max,
    clip=lambda v, low, high: min(max(v, low), high),
    mul=operator.mul,
    isfinite=math.isfinite,
    largest_safe_scale=_one_largest_safe_scale,
    like=lambda value, other: value,
    state=_one_state,
)
"""The rules' operations on Python numbers: one run. ``both`` and ``either`` take flags (the
bools that ``flag``, comparisons and ``negate`` give); all but ``where``, ``like`` and ``state``
are C builtins, so a step's advance costs a few Python calls."""

_MANY_RUNS = SimpleNamespace(
    flag=lambda v: np.asarray(v, dtype=bool),
    value=lambda v: np.asarray(v, dtype=np.float64),
    both=np.logical_and,
    either=np.logical_or,
    negate=np.logical_not,
    where=np.where,
    minimum=np.minimum,
    maximum=np.maximum,
    clip=np.clip,
    mul=_quiet_mul,
    isfinite=np.isfinite,
    largest_safe_scale=lambda a, margin: largest_safe_scale(a, margin),
    like=lambda value, other: np.broadcast_to(value, np.shape(other)),
    state=make_state,
)
"""The same operations, elementwise on NumPy arrays: many runs."""

_SINGLE = (bool, int, float, np.bool_, np.number)
_PYTHON_NUMBERS = frozenset((bool, int, float))
_PYTHON_NUMBERS_OR_NONE = _PYTHON_NUMBERS | {type(None)}


def _single(value) -> bool:
    return isinstance(value, _SINGLE) or (isinstance(value, np.ndarray) and value.ndim == 0)


def ops_for(policy, state, *values) -> SimpleNamespace:
    """The operations for this call: one run when the policy's settings, the state and the
    step's values are all single numbers, else many. Python numbers (the updater's) are told
    by their exact types in one C-level test; NumPy scalars and 0-d arrays by :func:`_single`."""
    if not policy._one_run:
        return _MANY_RUNS
    scale = state.scale
    if type(scale) in _PYTHON_NUMBERS and _PYTHON_NUMBERS_OR_NONE.issuperset(map(type, values)):
        return _ONE_RUN
    if _single(scale) and all(v is None or _single(v) for v in values):
        return _ONE_RUN
    return _MANY_RUNS


def unless_bad(x, bad_batch, state: ScaleState, new: ScaleState) -> ScaleState:
    """``new``, except where the step was a bad batch: there ``state`` as it was (``bad_batch``
    the literal False, the default, costs nothing)."""
    if bad_batch is False:
        return new
    bad = x.flag(bad_batch)
    return x.state(*(x.where(bad, old, value) for old, value in zip(state, new)))


def largest_safe_scale(grad_absmax_unscaled, margin: float = 1.0):
    """Largest power of two ``s`` with ``s * grad_absmax_unscaled * margin <= 65504``.

    Args:
        grad_absmax_unscaled (float or array, > 0): largest |gradient| at scale 1.
        margin (float, default 1.0): extra headroom factor, >= 1.

    >>> float(largest_safe_scale(1.0))
    32768.0
    """
    a = np.asarray(grad_absmax_unscaled, dtype=np.float64)
    with np.errstate(divide="ignore", over="ignore"):  # 0 -> inf, clipped by callers
        y = FP16_MAX / (a if np.ndim(margin) == 0 and margin == 1 else a * margin)
    if isinstance(y, np.ndarray) and y.size and y.min() >= 0:
        # y is 0, inf or normal (65504 over a finite float64 is never subnormal): its mantissa
        # bits cleared, in place, it is the power of two at or below it; 0 and inf stay
        bits = y.view(np.int64)
        np.bitwise_and(bits, _SIGN_AND_EXPONENT, out=bits)
        return y
    # y = m * 2**e with 0.5 <= m < 1 gives 2**(e-1), exactly (a rounded log2 is not, just below
    # a power of two); m is 0, inf or NaN for y = 0, inf or NaN, and ceil keeps those
    m, e = np.frexp(y)
    return np.ldexp(np.ceil(m) * 0.5, e)


_SIGN_AND_EXPONENT = np.int64(-(1 << 52))
"""A float64's sign and exponent bits, as an int64 mask (its 52 mantissa bits clear)."""
