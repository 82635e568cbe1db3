"""The updater's own state as plain data (mixed into :class:`updater.DynamicLossScalingUpdater`):
policy, scale state and counters, for checkpoints (:mod:`updater.checkpoint`)."""

from __future__ import annotations

import logging
from typing import Any, Dict

from .arguments import check_seed_holds, checked_state
from .records import COUNTERS

logger = logging.getLogger(__name__)

STATE_FORMAT_VERSION = 1


class SavedState:
    """``state_dict()`` and ``load_state_dict()`` of the updater."""

    def state_dict(self) -> Dict[str, Any]:
        """Return the updater's state as plain Python data (JSON-serialisable).

        Keys: ``"format_version"`` (int), ``"policy"`` (``policy.state_dict()``: name and
        settings), ``"scale_state"`` (``ScaleState.to_dict()``: scale, good_steps,
        hysteresis_left), ``"counters"`` (steps, updates_applied, overflows, skips,
        consecutive_nonfinite, batches, passes). The history is not saved.
        """
        return {
            "format_version": STATE_FORMAT_VERSION,
            "policy": self.policy.state_dict(),
            "scale_state": self._state.to_dict(),
            "counters": {name: int(getattr(self, name)) for name in COUNTERS},
        }

    def load_state_dict(self, state: Dict[str, Any]) -> None:
        """Restore policy, scale state and counters from :meth:`state_dict` output.

        Everything is checked before anything changes: a missing key raises ``KeyError``; a
        scale that is not finite, below 2**-24 or outside the policy's bounds, or a negative
        or non-integer counter, raises ``ValueError`` naming it. The saved policy replaces the
        current one (a warning is logged when they differ).
        """
        policy, scale_state = checked_state(state, STATE_FORMAT_VERSION, COUNTERS)
        check_seed_holds(policy, self._seed_type)
        if policy != self.policy:
            logger.warning("loaded policy %r replaces %r", policy, self.policy)
        self.policy = policy
        self._state = scale_state
        for name in COUNTERS:
            setattr(self, name, int(state["counters"][name]))
