"""The updater's own state as plain data, for checkpoints (:mod:`updater.runtime.checkpoint`):
policy, scale state and counters; and what data-parallel ranks must run alike."""

from __future__ import annotations

import logging
from typing import Any, Dict

from .arguments import check_seed_holds, checked_state
from .records import COUNTERS, Counters

STATE_FORMAT_VERSION = 1

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
    ``scale_state.scale``, ``counters.steps``, ...) and what the ranks share of the options
    (:meth:`updater.driver.options.UpdaterOptions.shared`: ``accum_grad``, ``solver.type``,
    ``solver.learning_rate``, ...), flat."""
    state = updater.state_dict()
    parts = ("policy", "scale_state", "counters")
    flat = {f"{k}.{name}": v for k in parts for name, v in state[k].items()}
    return {**flat, **updater._live.record.shared()}


def agree_settings(updater, comm) -> None:
    """With a communicator that compares (:meth:`updater.runtime.comm.MPICommunicator.check_same`,
    one collective), refuse to start (``ValueError`` on every rank, naming the first setting
    that differs) unless every rank runs the same :func:`rank_settings`."""
    if hasattr(comm, "check_same"):
        comm.check_same(rank_settings(updater), "updater settings")


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
