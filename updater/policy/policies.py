"""Loss-scaling policies: pure state machines shared by the nnabla updater and the simulator.

The policy contract, which every policy here keeps and a new one must keep:

- A policy is a frozen dataclass of settings, subclassing :class:`updater.policy.base.Policy` and
  listed in :data:`POLICIES`. Its ``_validate()`` checks scalar settings (wrong type ``TypeError``,
  wrong value ``ValueError``, see :mod:`updater.common.validation`); a policy built with
  array-valued settings (many settings at once, :func:`sim.replay.run.stack_policies`) is validated
  element by element.
- ``init(shape=())`` returns the initial :class:`ScaleState` broadcast to ``shape``.
- ``update(state, grads_finite, grad_absmax=None, bad_batch=False)`` returns the next state.
  ``bad_batch`` marks a step whose data was bad: the third outcome, next to finite and
  overflow; each policy's rules say what it does. The updater's rule: gradients finite, a finite
  step whatever the loss; gradients inf/NaN with an inf/NaN loss or an input bad as the graph
  sees it (inf/NaN, or beyond float16's range where a half function reads it), a bad batch
  (``grads_finite=False, bad_batch=True``); otherwise an overflow. Its rules are
  written once, with no ``if`` on values, over a small namespace of elementwise operations
  (:func:`updater.policy.state.ops_for`): Python-number operations for one run (scalar state,
  flag and settings: a few microseconds), NumPy operations otherwise, so the same code advances
  one run, many runs (arrays), or many runs with different settings. ``grads_finite`` is True
  for a good step; ``grad_absmax`` (the largest scaled |gradient|) is passed only to policies
  with ``needs_grad_absmax = True``.
- The scale stays finite, > 0 and within the policy's ``[min_scale, max_scale]`` if it has them.

Named configurations (``pytorch``, ``deepspeed``, ...) are in :mod:`updater.policy.presets`. No
module here imports nnabla.

Example:
    >>> p = DynamicScale(init_scale=8.0, growth_interval=2, hysteresis=1)
    >>> s = p.init()
    >>> s = p.update(s, True); float(s.scale)
    8.0
    >>> s = p.update(s, True); float(s.scale)
    16.0
    >>> s = p.update(s, False); float(s.scale)
    8.0
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Any, ClassVar, Dict

import numpy as np

from ..common.validation import check_bool, check_int, check_positive
from .base import (
    Policy,
    check_backoff,
    check_bounds,
    check_count,
    check_growth,
    set_setting,
)
from .state import (
    ScaleState,
    largest_safe_scale,  # noqa: F401 (public here too)
    make_state,
    ops_for,
    unless_bad,
)


@dataclass(frozen=True)
class StaticScale(Policy):
    """A fixed loss scale: every step uses ``scale``; overflows only skip the step, and a bad
    batch leaves ``good_steps`` as it was.

    Args:
        scale (float, default 1.0): the loss scale, finite and > 0.
    """

    scale: float = 1.0

    def _validate(self):
        check_positive("scale", self.scale)

    def bounds(self) -> tuple:
        """``(scale, scale)``: the one scale a static policy holds."""
        return self.scale, self.scale

    def init(self, shape=()) -> ScaleState:
        """Return the initial state, broadcast to ``shape`` (``()`` for one run)."""
        return make_state(np.full(shape, self.scale), np.zeros(shape), np.ones(shape))

    def update(self, state, grads_finite, grad_absmax=None, bad_batch=False) -> ScaleState:
        """Return the next state: the scale never changes; ``good_steps`` counts finite steps
        since the last overflow; a bad batch leaves it as it was."""
        x = ops_for(self, state, grads_finite, bad_batch)
        good = x.where(x.flag(grads_finite), state.good_steps + 1, 0)
        new = x.state(x.like(state.scale, good), good, state.hysteresis_left)
        return unless_bad(x, bad_batch, state, new)


@dataclass(frozen=True)
class DynamicScale(Policy):
    """Grow the scale after a run of finite steps, back it off after overflows.

    Rules (one sentence each):

    - The scale grows by ``growth_factor`` (capped at ``max_scale``) on the
      ``growth_interval``-th consecutive finite step; ``good_steps`` resets on growth and on
      every overflow.
    - Each overflow uses up one of ``hysteresis`` units, the overflow that uses up the last one
      and every later overflow back the scale off by ``backoff_factor`` (floored at
      ``min_scale``), and only growth refills the units (with ``consecutive_hysteresis=True``,
      every finite step refills them too).
    - A bad batch (inf/NaN loss or input) changes nothing: scale, ``good_steps`` and
      hysteresis stay as they were, as if the step had not happened.

    The hysteresis rule is Megatron-LM's DynamicGradScaler and DeepSpeed's DynamicLossScaler
    (``consecutive_hysteresis`` is DeepSpeed's option of that name and apex's
    ``update_scale_hysteresis``): from 2**15 with hysteresis 2, a persistent overflow reaches 1
    after 16 steps. ``hysteresis_left`` counts the overflows until the next backoff: it starts
    at ``hysteresis``, drops by one per overflow but not below 1, and is not refilled by a
    backoff.

    Example: hysteresis 2, no growth, steps overflow, finite, overflow, overflow:

    >>> p = DynamicScale(init_scale=1024.0, growth_interval=10**6, hysteresis=2)
    >>> s, out = p.init(), []
    >>> for ok in (False, True, False, False):
    ...     s = p.update(s, ok)
    ...     out.append(float(s.scale))
    >>> out
    [1024.0, 1024.0, 512.0, 256.0]
    >>> p = DynamicScale(1024.0, growth_interval=10**6, hysteresis=2, consecutive_hysteresis=True)
    >>> s, out = p.init(), []
    >>> for ok in (False, True, False, False):
    ...     s = p.update(s, ok)
    ...     out.append(float(s.scale))
    >>> out
    [1024.0, 1024.0, 1024.0, 512.0]

    Args:
        init_scale (float, default 2**15): starting scale, in [min_scale, max_scale]; starting
            high costs a few skipped steps, starting low costs thousands of underflowing steps
            (see reports/README.md).
        growth_factor (float, default 2.0): multiplier on growth, > 1.
        backoff_factor (float, default 0.5): multiplier on backoff, in (0, 1).
        growth_interval (int, default 2000): finite steps needed to grow, >= 1.
        min_scale (float, default 1.0): floor, finite and > 0.
        max_scale (float, default 2**15): cap, finite; 2**15 is the largest power of two a
            float16 backward seed can hold (nnabla's half mode seeds backward in float16).
        hysteresis (int, default 1): overflows needed for the first backoff after a growth (or
            after the start, or after a finite step with ``consecutive_hysteresis``), >= 1;
            1 backs off on every overflow (the report's choice under this rule; Megatron-LM
            and DeepSpeed default to 2).
        consecutive_hysteresis (bool, default False): if True, every finite step refills the
            hysteresis (only overflows in a row count); if False, only growth refills it.
    """

    init_scale: float = 2.0**15
    growth_factor: float = 2.0
    backoff_factor: float = 0.5
    growth_interval: int = 2000
    min_scale: float = 1.0
    max_scale: float = 2.0**15
    hysteresis: int = 1
    consecutive_hysteresis: bool = False

    def _validate(self):
        check_growth("growth_factor", self.growth_factor)
        check_backoff("backoff_factor", self.backoff_factor)
        set_setting(self, "growth_interval", check_int("growth_interval", self.growth_interval, 1))
        set_setting(self, "hysteresis", check_int("hysteresis", self.hysteresis, 1))
        check_bool("consecutive_hysteresis", self.consecutive_hysteresis)
        check_bounds("init_scale", self.init_scale, self.min_scale, self.max_scale)

    def check_state(self, state: ScaleState) -> None:
        """``hysteresis_left`` in ``[1, hysteresis]``, ``good_steps`` below ``growth_interval``."""
        check_count("hysteresis_left", state.hysteresis_left, 1, self.hysteresis)
        check_count("good_steps", state.good_steps, 0, self.growth_interval - 1)

    def init(self, shape=()) -> ScaleState:
        """Return the initial state, broadcast to ``shape`` (``()`` for one run)."""
        return make_state(
            np.full(shape, self.init_scale), np.zeros(shape), np.full(shape, self.hysteresis)
        )

    def update(self, state, grads_finite, grad_absmax=None, bad_batch=False) -> ScaleState:
        """Return the state after one step whose gradients were finite or not, or whose
        batch was bad."""
        x = ops_for(self, state, grads_finite, bad_batch)
        finite = x.flag(grads_finite)
        scale, good, hyst = state
        good_next = good + 1
        grow = x.both(finite, good_next >= self.growth_interval)
        back = x.both(x.negate(finite), hyst <= 1)
        grown = x.minimum(x.mul(scale, self.growth_factor), self.max_scale)
        shrunk = x.maximum(scale * self.backoff_factor, self.min_scale)
        new_scale = x.where(grow, grown, x.where(back, shrunk, scale))
        new_good = x.where(x.both(finite, x.negate(grow)), good_next, 0)
        refill = x.either(grow, x.both(finite, self.consecutive_hysteresis))
        new_hyst = x.where(refill, self.hysteresis, x.where(finite, hyst, x.maximum(hyst - 1, 1)))
        return unless_bad(x, bad_batch, state, x.state(new_scale, new_good, new_hyst))


@dataclass(frozen=True)
class NnablaLegacy(Policy):
    """nnabla's experimental updater's exact scale dynamics, for comparison only.

    The first growth comes after ``N + 2`` finite steps and then every ``N + 1`` (the old code
    grows when its counter exceeds ``N`` and increments it after the check); each overflow
    divides the scale by ``scaling_factor`` and restarts the count. A bad batch counts as an
    overflow, as in the original, which cannot tell them apart. No floor and no cap, as in
    the original: repeated overflows drive the scale to 0.0.

    Args:
        scale (float, default 8.0): starting scale, finite and > 0.
        scaling_factor (float, default 2.0): growth multiplier and backoff divisor, > 1.
        N (int, default 2000): the documented growth interval, >= 1.
    """

    scale: float = 8.0
    scaling_factor: float = 2.0
    N: int = 2000

    def _validate(self):
        check_positive("scale", self.scale)
        check_growth("scaling_factor", self.scaling_factor)
        set_setting(self, "N", check_int("N", self.N, 1))

    def check_state(self, state: ScaleState) -> None:
        """``hysteresis_left`` 1, the counter at most ``N + 1`` (it grows past ``N``)."""
        super().check_state(state)
        check_count("good_steps", state.good_steps, 0, self.N + 1)

    def init(self, shape=()) -> ScaleState:
        """Return the initial state, broadcast to ``shape`` (``()`` for one run)."""
        return make_state(np.full(shape, self.scale), np.zeros(shape), np.ones(shape))

    def update(self, state, grads_finite, grad_absmax=None, bad_batch=False) -> ScaleState:
        """Return the state after one step, exactly as the old updater changes it."""
        x = ops_for(self, state, grads_finite, bad_batch)
        finite = x.both(x.flag(grads_finite), x.negate(x.flag(bad_batch)))
        scale, counter, hyst = state
        grow = x.both(finite, counter > self.N)
        new_scale = x.where(
            finite, x.where(grow, scale * self.scaling_factor, scale), scale / self.scaling_factor
        )
        new_counter = x.where(finite, x.where(grow, 0, counter) + 1, 0)
        return x.state(new_scale, new_counter, x.like(hyst, new_counter))


@dataclass(frozen=True)
class HeadroomScale(Policy):
    """Jump to the largest power-of-two scale that leaves ``margin`` headroom below float16's max.

    Rules: on a finite step with measured largest scaled gradient ``a > 0`` at scale ``s``, the
    next scale is the largest power of two ``t`` with ``t * (a / s) * margin <= 65504``, clipped
    to ``[min_scale, max_scale]``; on a finite step with ``a == 0`` (no signal) the scale grows by
    ``growth_factor`` (capped); on overflow the scale is multiplied by ``backoff_factor``
    (floored). ``good_steps`` counts finite steps since the last overflow. A bad batch (inf/NaN
    loss or input) changes nothing.

    Args:
        init_scale (float, default 2**10): starting scale, in [min_scale, max_scale].
        margin (float, default 2.0): headroom factor >= 1 kept between the largest scaled
            gradient and 65504; 2 lands within a factor 2 of the largest safe scale, 4 skips
            fewer steps when the gradient size jumps a lot from step to step.
        backoff_factor (float, default 2**-8): multiplier on overflow, in (0, 1); large jumps
            down are cheap because the next finite step jumps straight back up.
        growth_factor (float, default 2.0): multiplier when no gradient is nonzero, > 1.
        min_scale (float, default 1.0): floor, finite and > 0.
        max_scale (float, default 2**15): cap, finite.
    """

    needs_grad_absmax: ClassVar[bool] = True

    init_scale: float = 2.0**10
    margin: float = 2.0
    backoff_factor: float = 2.0**-8
    growth_factor: float = 2.0
    min_scale: float = 1.0
    max_scale: float = 2.0**15

    def _validate(self):
        check_positive("margin", self.margin)
        if self.margin < 1:
            raise ValueError(f"margin must be >= 1, got {self.margin!r}")
        check_backoff("backoff_factor", self.backoff_factor)
        check_growth("growth_factor", self.growth_factor)
        check_bounds("init_scale", self.init_scale, self.min_scale, self.max_scale)

    def init(self, shape=()) -> ScaleState:
        """Return the initial state, broadcast to ``shape`` (``()`` for one run)."""
        return make_state(np.full(shape, self.init_scale), np.zeros(shape), np.ones(shape))

    def update(self, state, grads_finite, grad_absmax=None, bad_batch=False) -> ScaleState:
        """Return the state after one step; ``grad_absmax`` is the largest |scaled gradient|."""
        if grad_absmax is None:
            raise ValueError(
                "HeadroomScale.update needs grad_absmax (the largest absolute scaled gradient "
                "of the step), got None"
            )
        x = ops_for(self, state, grads_finite, grad_absmax, bad_batch)
        finite = x.flag(grads_finite)
        scale, good, hyst = state
        absmax = x.value(grad_absmax)
        usable = x.both(x.both(finite, x.isfinite(absmax)), absmax > 0)
        safe_absmax = x.where(usable, absmax, 1.0)
        target = x.largest_safe_scale(safe_absmax / scale, self.margin)
        moved = x.where(usable, target, x.mul(scale, self.growth_factor))
        shrunk = scale * self.backoff_factor
        new_scale = x.clip(x.where(finite, moved, shrunk), self.min_scale, self.max_scale)
        new_good = x.where(finite, good + 1, 0)
        new = x.state(new_scale, new_good, x.like(hyst, new_good))
        return unless_bad(x, bad_batch, state, new)


POLICIES = {cls.__name__: cls for cls in (StaticScale, DynamicScale, NnablaLegacy, HeadroomScale)}


def check_policy(value, name: str = "policy"):
    """``value`` if it offers the policy contract's ``init`` and ``update``; ``TypeError``
    otherwise, saying what to pass for a policy class or a preset name given instead."""
    if isinstance(value, type):
        raise TypeError(
            f"{name} must be a policy instance, got the class {value.__name__}: pass "
            f"{value.__name__}() (or {value.__name__}(setting=value, ...))"
        )
    if isinstance(value, str):
        raise TypeError(
            f"{name} must be a policy from updater.policy, got the str {value!r}: pass "
            f"make_policy({value!r}) (from updater import make_policy)"
        )
    if not (callable(getattr(value, "init", None)) and callable(getattr(value, "update", None))):
        raise TypeError(
            f"{name} must be a policy from updater.policy (with init and update), a preset name "
            f"or a policy class name (see make_policy), got {type(value).__name__}"
        )
    return value


def policy_from_dict(d: Dict[str, Any]):
    """Rebuild a policy from its :meth:`state_dict` (``{"policy": name, **settings}``)."""
    d = dict(d)
    name = d.pop("policy", None)
    if name not in POLICIES:
        raise ValueError(f"policy must be one of {sorted(POLICIES)}, got {name!r}")
    cls = POLICIES[name]
    known = {f.name for f in fields(cls)}
    unknown = sorted(set(d) - known)
    if unknown:
        raise ValueError(f"unknown settings {unknown} for {name}; accepted: {sorted(known)}")
    return cls(**d)
