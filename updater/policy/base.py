"""What every policy shares: the base class (settings, state dict, validation of array-valued
settings) and the checks of common settings. The contract a policy keeps is at the top of
:mod:`updater.policy.policies`; a new policy subclasses :class:`Policy` (here or in a module of
its own in this folder) and is added to ``POLICIES`` there."""

from __future__ import annotations

from dataclasses import Field, asdict, fields
from typing import Any, ClassVar, Dict

import numpy as np

from ..common.names import unexpected_keyword
from ..common.validation import check_positive
from .state import ScaleState

# ---------------------------------------------------------------- validation helpers


def check_growth(name: str, value) -> None:
    check_positive(name, value)
    if value <= 1:
        raise ValueError(
            f"{name} must be > 1 (it multiplies the scale on growth), got {value!r}; "
            "a factor below 1 would invert the dynamics"
        )


def check_backoff(name: str, value) -> None:
    check_positive(name, value)
    if value >= 1:
        raise ValueError(
            f"{name} must be in (0, 1) (it multiplies the scale on overflow), got {value!r}; "
            f"did you mean {1 / value!r}?"
        )


def check_bounds(init_name: str, init, min_scale, max_scale) -> None:
    check_positive("min_scale", min_scale)
    check_positive("max_scale", max_scale)
    check_positive(init_name, init)
    if not min_scale <= init <= max_scale:
        fix = (
            f"; max_scale defaults to 2**15, the largest power of two a float16 backward seed "
            "holds (in nnabla's half mode a seed above 65504 is inf at once, so PyTorch's "
            f"start 2**16 is 2**15 here): start at 2**15, or pass max_scale={init!r} too for a "
            "loss computed in float32"
            if init > max_scale
            else f"; to start there pass min_scale={init!r} too"
        )
        raise ValueError(
            f"need 0 < min_scale <= {init_name} <= max_scale, got min_scale={min_scale!r}, "
            f"{init_name}={init!r}, max_scale={max_scale!r}{fix}"
        )


def check_count(name: str, value, low: int, high: int) -> None:
    """``ValueError`` unless a saved state's ``value`` is a whole number in ``[low, high]``."""
    if not (float(value) == int(value) and low <= value <= high):
        raise ValueError(f"saved {name} must be a whole number in [{low}, {high}], got {value!r}")


def set_setting(policy, name: str, value) -> None:
    """Store a checked (normalised) setting on a frozen policy, e.g. 2000.0 as 2000."""
    object.__setattr__(policy, name, value)


class Policy:
    """Shared plumbing: validation, settings dict, state dict, the ``needs_grad_absmax`` flag."""

    needs_grad_absmax: ClassVar[bool] = False
    __dataclass_fields__: ClassVar[Dict[str, Field[Any]]]
    """Every policy is a dataclass (declared for type checkers, which then take a policy where
    ``dataclasses.asdict`` and ``dataclasses.replace`` take a dataclass)."""

    def __new__(cls, *args, **kwargs):
        """Before the dataclass's ``__init__``: an unknown keyword names the closest setting."""
        names = [f.name for f in fields(cls) if f.init]
        for name in kwargs:
            if name not in names:
                raise unexpected_keyword(cls.__name__, name, names)
        return super().__new__(cls)

    def __post_init__(self):
        values = {f.name: getattr(self, f.name) for f in fields(self)}
        arrays = {k: v for k, v in values.items() if isinstance(v, np.ndarray)}
        set_setting(self, "_one_run", not arrays)  # single settings: one-run states take _ONE_RUN
        if not arrays:
            self._validate()
            return
        shape = np.broadcast_shapes(*(a.shape for a in arrays.values()))
        for index in np.ndindex(shape):  # each element as a scalar policy, validated
            type(self)(
                **{
                    **values,
                    **{k: np.broadcast_to(a, shape)[index].item() for k, a in arrays.items()},
                }
            )

    def _validate(self) -> None:  # pragma: no cover - overridden
        raise NotImplementedError

    def bounds(self) -> tuple:
        """``(lowest, highest)``: the scales this policy ever holds, ``[min_scale, max_scale]``
        (0 and inf for a policy without them); a loaded or assigned scale outside is refused."""
        return getattr(self, "min_scale", 0.0), getattr(self, "max_scale", float("inf"))

    def settings(self) -> Dict[str, Any]:
        """Return the settings as a plain dict of Python numbers."""
        return {k: (v.item() if isinstance(v, np.generic) else v) for k, v in asdict(self).items()}

    def state_dict(self) -> Dict[str, Any]:
        """Return ``{"policy": class name, **settings}``; :func:`policy_from_dict` inverts it."""
        return {"policy": type(self).__name__, **self.settings()}

    def check_state(self, state: ScaleState) -> None:
        """Raise ``ValueError`` naming a value of one run's ``state`` that this policy never
        reaches (the scale's bounds are checked by the caller). Here: ``hysteresis_left`` is 1,
        where policies without hysteresis keep it; a policy that moves it overrides this."""
        check_count("hysteresis_left", state.hysteresis_left, 1, 1)

    def init(self, shape=()) -> ScaleState:  # pragma: no cover - overridden
        raise NotImplementedError

    def update(self, state, grads_finite, grad_absmax=None, bad_batch=False) -> ScaleState:
        raise NotImplementedError  # pragma: no cover - overridden
