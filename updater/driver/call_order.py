"""The order of the updater's calls: ``backward()`` starts an iteration, ``unscale()`` and
``step()`` need its gradients, ``step()`` ends it; ``update()`` is a whole iteration.

PyTorch's ``GradScaler`` habit, ``if u.backward(): u.unscale()``, ``u.step()``, ``u.update()``,
runs two iterations per loop here: ``step()`` already advanced the scale, and ``update()`` feeds
and trains on another batch. ``update()`` right after ``step()`` in two iterations in a row
raises ``RuntimeError`` saying so (once is allowed: a loop may run the stages by hand on some
iterations and ``update()`` on the others). Also the answers to PyTorch's ``init_scale=`` and
``update(new_scale=...)``.
"""

from __future__ import annotations

from .attempts import Pending


def refuse_init_scale(init_scale) -> None:
    """``TypeError`` for the updater's ``init_scale=`` (PyTorch's name), pointing to ours."""
    if init_scale is not None:
        raise TypeError(
            f"DynamicLossScalingUpdater takes no init_scale (got {init_scale!r}): the initial "
            f"scale is scale={init_scale!r} (nnabla's name), or a policy's setting: "
            f"policy=DynamicScale(init_scale={init_scale!r}, ...)"
        )


def refuse_new_scale(new_scale) -> None:
    """``TypeError`` for ``update(new_scale=...)`` (PyTorch's ``GradScaler.update``)."""
    if new_scale is not None:
        raise TypeError(
            f"update() takes no new_scale (got {new_scale!r}): update() runs one whole training "
            f"iteration; to set the scale assign updater.scale = {new_scale!r}"
        )


class CallOrder:
    """The iteration between ``backward()`` and ``step()``, and the checks of the call order
    (module doc)."""

    def __init__(self):
        self.pending: Pending | None = None  # set by backward(), cleared by step()
        self._ended_by_step = False  # the last iteration was ended by a call of step()
        self._updates_after_step = 0  # iterations in a row ended by step(), then update()

    def start(self) -> None:
        """Before an iteration's backward pass: ``RuntimeError`` when one is pending."""
        if self.pending is not None:
            raise RuntimeError(
                "backward() was called again before step(): finish the iteration with "
                "step() (or call update(), which runs backward(), unscale() and step())"
            )

    def start_update(self) -> None:
        """Before ``update()``: ``RuntimeError`` for the GradScaler habit (module doc)."""
        self.start()
        after_step = self._ended_by_step
        self._updates_after_step = self._updates_after_step + 1 if after_step else 0
        if self._updates_after_step >= 2:
            self._updates_after_step = 0
            raise RuntimeError(
                "update() was called right after step() in two iterations in a row: update() "
                "is not PyTorch's GradScaler.update(), it runs a whole training iteration "
                "(backward(), unscale(), step()) on the next batch, so each loop trained twice. "
                "step() already advanced the scale: drop the update() call after step() (or "
                "call only update())"
            )

    def require(self, what: str) -> Pending:
        """The pending iteration; ``RuntimeError`` naming ``what`` needs it when none is."""
        if self.pending is None:
            raise RuntimeError(
                f"{what} needs the gradients of backward(): call backward() first (or update(): "
                "backward(), unscale() and step())"
            )
        return self.pending

    def end(self, by_step: bool) -> None:
        """After an iteration; ``by_step``: ended by a call of ``step()``, not ``update()``."""
        self.pending = None
        self._ended_by_step = by_step
