"""The updater's own state as plain data, for checkpoints (:mod:`updater.runtime.checkpoint`):
policy, scale state and counters; and what data-parallel ranks must run alike."""

from __future__ import annotations

import logging
from typing import Any, Dict

from .arguments import check_seed_holds, checked_state
from .records import COUNTERS, Counters

STATE_FORMAT_VERSION = 1
RANK_SETTINGS = ("accum_grad", "average_grads", "finite_check", "weight_decay", "clip_grad_norm",
                 "on_overflow", "max_retries", "restore_on_skip", "enabled",
                 "max_consecutive_nonfinite")  # fmt: skip
"""The updater settings (besides its state) every rank of a data-parallel run must share."""

logger = logging.getLogger(__name__)


def state_dict(policy, scale_state, counters: Counters) -> Dict[str, Any]:
    """The state as JSON-serialisable data: ``"format_version"`` (int), ``"policy"``
    (``policy.state_dict()``: name and settings), ``"scale_state"`` (``ScaleState.to_dict()``:
    scale, good_steps, hysteresis_left), ``"counters"`` (steps, updates_applied, overflows,
    skips, consecutive_nonfinite, batches, passes)."""
    return {
        "format_version": STATE_FORMAT_VERSION,
        "policy": policy.state_dict(),
        "scale_state": scale_state.to_dict(),
        "counters": {name: int(getattr(counters, name)) for name in COUNTERS},
    }


def rank_settings(updater) -> Dict[str, Any]:
    """What every rank must run alike: the state (``policy.growth_interval``,
    ``scale_state.scale``, ``counters.steps``, ...) and :data:`RANK_SETTINGS`, flat."""
    state = updater.state_dict()
    flat = {f"{k}.{name}": v for k in ("policy", "scale_state", "counters")
            for name, v in state[k].items()}  # fmt: skip
    return {**flat, **{name: getattr(updater, name) for name in RANK_SETTINGS}}


def loaded_state(state: Dict[str, Any], seed_type, policy, counters: Counters):
    """``(policy, scale state)`` of :func:`state_dict` output, all checked before the saved
    counters are written into ``counters``: a missing key raises ``KeyError``; a scale that is
    not finite, below 2**-24, outside the policy's bounds or beyond what ``seed_type`` holds, or
    a negative or non-integer counter, raises ``ValueError`` naming it. A warning is logged
    when the saved policy differs from the current ``policy``."""
    loaded, scale_state = checked_state(state, STATE_FORMAT_VERSION, COUNTERS)
    check_seed_holds(loaded, seed_type)
    if loaded != policy:
        logger.warning("loaded policy %r replaces %r", loaded, policy)
    for name in COUNTERS:
        setattr(counters, name, int(state["counters"][name]))
    return loaded, scale_state
