"""The order of the updater's calls: ``backward()`` starts an iteration, ``unscale()`` and
``step()`` need its gradients, ``step()`` ends it; ``update()`` is a whole iteration.

A loop may run the stages by hand on some iterations and ``update()`` on the others, in any
pattern. PyTorch's ``GradScaler`` habit, ``if u.backward(): u.unscale()``, ``u.step()``,
``u.update()``, runs two iterations per loop here: ``step()`` already advanced the scale, and
``update()`` trains again. Without a data feeder that second iteration would train the same batch
twice: ``update()`` right after ``step()`` with every input of the graph as ``step()`` left it
(compared bit for bit with a copy taken when ``step()`` ended an iteration) raises
``RuntimeError`` saying so. With a data feeder each ``update()`` feeds its own batch, and the two
patterns are the same calls: both run. Also the answers to PyTorch's ``update(new_scale=...)``,
constructor arguments (``init_scale=``, ``growth_interval=``, ...) and method names
(``unscale_``, ``is_enabled``).
"""

from __future__ import annotations

import copy
import functools
import inspect
from typing import Any, Callable, Dict, List, Sequence

import nnabla as nn
import numpy as np

from ..common.names import unexpected_keyword
from .arrays import array_dtype, copy_array, host_view
from .attempts import Pending

POLICY_ARGUMENTS = ("init_scale", "growth_interval", "growth_factor", "backoff_factor")
"""PyTorch's ``GradScaler`` arguments, which are settings of the policy here."""


def refuse_arguments(given: Dict[str, Any], accepted: Sequence[str]) -> None:
    """``TypeError`` for keyword arguments the updater does not take (``given``): PyTorch's
    :data:`POLICY_ARGUMENTS` named as ``policy=DynamicScale(...)``, any other with the closest
    of the ``accepted`` names."""
    if not given:
        return
    pytorch = {k: v for k, v in given.items() if k in POLICY_ARGUMENTS}
    if pytorch:
        settings = ", ".join(f"{k}={v!r}" for k, v in pytorch.items())
        scale = (
            f"scale={pytorch['init_scale']!r} (nnabla's name), or "
            if "init_scale" in pytorch
            else ""
        )
        raise TypeError(
            f"DynamicLossScalingUpdater takes no {', '.join(pytorch)} (PyTorch's GradScaler "
            f"arguments; got {settings}): they are settings of the policy: "
            f"{scale}policy=DynamicScale({settings})"
        )
    raise unexpected_keyword("DynamicLossScalingUpdater", next(iter(given)), accepted)


def refuse_new_scale(new_scale) -> None:
    """``TypeError`` for ``update(new_scale=...)`` (PyTorch's ``GradScaler.update``)."""
    if new_scale is not None:
        raise TypeError(
            f"update() takes no new_scale (got {new_scale!r}): update() runs one whole training "
            f"iteration; to set the scale assign updater.scale = {new_scale!r}"
        )


class CallOrder:
    """The iteration between ``backward()`` and ``step()``, and the checks of the call order
    (module doc).

    Attributes:
        pending (Pending or None): the iteration ``backward()`` started, until ``step()`` ends
            it; None: none.
        left (list of NdArray or None): copies of the graph's inputs when a ``step()`` without
            a data feeder ended the last iteration, for the next ``update()`` to compare; None:
            nothing to compare (:meth:`start_update` has nothing to check without either).
    """

    def __init__(self) -> None:
        self.pending: Pending | None = None
        self.left: List[nn.NdArray] | None = None

    def start(self) -> None:
        """Before an iteration's backward pass: ``RuntimeError`` when one is pending."""
        if self.pending is not None:
            raise RuntimeError(
                "backward() was called again before step(): finish the iteration with "
                "step() (or call update(), which runs backward(), unscale() and step())"
            )

    def start_update(self, inputs: Callable[[], Sequence[nn.Variable]]) -> None:
        """Before ``update()``: ``RuntimeError`` for the GradScaler habit (module doc), when
        the graph's inputs (``inputs()``, asked only then) hold what the last ``step()`` left
        in them."""
        if self.pending is not None:
            self.start()  # raises
        left, self.left = self.left, None
        if not left:
            return
        variables = inputs()
        same = len(left) == len(variables)
        if same and all(same_values(v.data, kept) for v, kept in zip(variables, left)):
            raise RuntimeError(
                "update() was called right after step() on the same batch: update() is not "
                "PyTorch's GradScaler.update(), it runs a whole training iteration (backward(), "
                "unscale(), step()), and would train this batch twice. step() already advanced "
                "the scale: drop the update() call after step() (or set the next batch's "
                "inputs first)"
            )

    def require(self, what: str) -> Pending:
        """The pending iteration; ``RuntimeError`` naming ``what`` needs it when none is."""
        if self.pending is None:
            raise RuntimeError(
                f"{what} needs the gradients of backward(): call backward() first (or update(): "
                "backward(), unscale() and step())"
            )
        return self.pending

    def end(self, inputs: Sequence[nn.Variable] | None) -> None:
        """After an iteration; ``inputs``: the graph's inputs when ``step()`` ended it without
        a data feeder (copied for :meth:`start_update`), else None."""
        self.pending = None
        self.left = None if inputs is None else [copy_array(v.data) for v in inputs]

    def copied(self) -> CallOrder:
        """An independent copy (the pending iteration copied too), for ``copy.copy``."""
        new = CallOrder()
        new.pending = None if self.pending is None else copy.copy(self.pending)
        new.left = self.left
        return new


def same_values(array: nn.NdArray, kept: nn.NdArray) -> bool:
    """Whether ``array`` holds ``kept``'s values bit for bit (same shape and dtype)."""
    if tuple(array.shape) != tuple(kept.shape) or array_dtype(array) != array_dtype(kept):
        return False
    return bool(np.array_equal(host_view(array).view(np.uint8), host_view(kept).view(np.uint8)))


def refuse_unknown_keywords(cls) -> None:
    """Wrap ``cls.__init__`` (the updater's, whose signature names every argument it takes) so
    that a keyword it does not take raises :func:`refuse_arguments`'s ``TypeError`` (PyTorch's
    names answered, else the closest name) instead of Python's; the signature stays."""
    init = cls.__init__
    accepted = list(inspect.signature(init).parameters)[1:]
    known = frozenset(accepted)

    @functools.wraps(init)
    def checked_init(self, *args, **kwargs):
        refuse_arguments({k: v for k, v in kwargs.items() if k not in known}, accepted)
        init(self, *args, **kwargs)

    cls.__init__ = checked_init


PYTORCH_METHODS = {
    "unscale_": "unscale() (no argument: the updater's solver; a second call does nothing)",
    "is_enabled": "the enabled option (updater.enabled)",
}
"""PyTorch's ``GradScaler`` methods the updater names otherwise, and the name here."""


def answer_habits(cls) -> None:
    """The signature ``help(cls)`` and IDEs show for ``update()``: without ``new_scale`` (only
    there to answer PyTorch's habit; ``__init__``'s is made by
    :func:`updater.driver.attributes.attach_options`); and an ``AttributeError`` naming the method
    to call for a name of :data:`PYTORCH_METHODS`."""
    update = inspect.signature(cls.update)
    cls.update.__signature__ = update.replace(parameters=list(update.parameters.values())[:1])

    def __getattr__(self, name: str):  # only for names ordinary lookup did not find
        if name not in PYTORCH_METHODS:  # that lookup's own error (a property's message too)
            return object.__getattribute__(self, name)
        raise AttributeError(
            f"{type(self).__name__!r} object has no attribute {name!r} (PyTorch's "
            f"GradScaler.{name}): here it is {PYTORCH_METHODS[name]}"
        )

    cls.__getattr__ = __getattr__
