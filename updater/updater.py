"""The nnabla driver: one ``update()`` call runs one whole mixed-precision training iteration.

``DynamicLossScalingUpdater`` keeps the constructor arguments of
``nnabla.experimental.mixed_precision_training.DynamicLossScalingUpdater`` (``solver, loss,
data_feeder, scale, scaling_factor, N, clear_buffer, accum_grad, weight_decay, comm, grads``), so a
script switches by changing one import, and fixes what the old one gets wrong: it never recurses
(an overflow skips the step, or retries the *same* batch), the scale stays inside
``[min_scale, max_scale]``, a persistent non-finite gradient raises :class:`NonFiniteGradientsError`
instead of driving the scale to zero, growth follows the policy's one-sentence rule, every argument
is validated, and the scale and counters can be saved and restored.

This is the only module that calls solver and loss methods. The scale dynamics live in
:mod:`updater.policy`, shared with the simulator.
"""

from __future__ import annotations

import logging
import math
import sys
from collections import deque
from dataclasses import dataclass
from typing import Any, Dict, List

import nnabla as nn
import numpy as np

from .hostview import host_view
from .policy import DynamicScale, ScaleState, policy_from_dict

logger = logging.getLogger(__name__)

STATE_FORMAT_VERSION = 1
_LEGACY_DEFAULTS = {"scale": 8.0, "scaling_factor": 2.0, "N": 2000}
_BOUND_DEFAULTS = {"min_scale": 1.0, "max_scale": 2.0**15}
_COUNTERS = (
    "steps",
    "updates_applied",
    "overflows",
    "skips",
    "consecutive_nonfinite",
    "batches",
    "passes",
)
# "auto" finite check on CPU: NumPy views from this many gradient values on (see _choose_check).
_NUMPY_CHECK_MIN_VALUES = 2**17
# |x| bit masks and the exponent-all-ones threshold (inf/NaN) for each float width.
_BITS = {
    2: (np.uint16, 0x7FFF, 0x7C00),
    4: (np.uint32, 0x7FFFFFFF, 0x7F800000),
    8: (np.uint64, 0x7FFFFFFFFFFFFFFF, 0x7FF0000000000000),
}


class NonFiniteGradientsError(FloatingPointError):
    """Raised after ``max_consecutive_nonfinite`` consecutive steps with inf/NaN gradients.

    Parameters and solver state are left exactly as they were before the failing steps.

    Attributes:
        consecutive (int): consecutive non-finite steps counted.
        loss_finite (bool or None): whether the loss of the last failing step was finite
            (False means the data or the model produce inf/NaN, not loss-scale overflow).
        param_names (list of str): parameters whose gradients held inf/NaN on the last step.
        scale (float): the loss scale used by the last failing step.
    """

    def __init__(self, message, *, consecutive, loss_finite, param_names, scale):
        super().__init__(message)
        self.consecutive = consecutive
        self.loss_finite = loss_finite
        self.param_names = list(param_names)
        self.scale = scale


@dataclass(frozen=True)
class StepRecord:
    """What one ``update()`` call did.

    Attributes:
        step (int): 0-based index of the ``update()`` call.
        scale (float): loss scale used by the (last) attempt.
        grads_finite (bool): whether the (last) attempt's gradients were all finite (agreed
            across workers when a communicator is set).
        update_applied (bool): whether ``solver.update()`` ran.
        new_scale (float): scale for the next step, after the policy advanced.
        grad_absmax (float or None): largest |gradient| as scaled (before unscaling) of the last
            attempt, when it was measured (always when the policy needs it); inf when non-finite.
        loss_finite (bool or None): whether every accumulation round's loss was finite; None
            when it was not read (finite steps with ``accum_grad == 1`` skip the read).
        attempts (int): forward/backward attempts (1 unless ``on_overflow="retry"`` retried).
    """

    step: int
    scale: float
    grads_finite: bool
    update_applied: bool
    new_scale: float
    grad_absmax: float | None
    loss_finite: bool | None
    attempts: int


# ---------------------------------------------------------------- validation helpers


def _is_int(value) -> bool:
    return isinstance(value, (int, np.integer)) and not isinstance(value, bool)


def _is_number(value) -> bool:
    return isinstance(value, (int, float, np.integer, np.floating)) and not isinstance(value, bool)


def _check_int(name: str, value, low: int) -> int:
    if not _is_int(value):
        raise TypeError(f"{name} must be an int >= {low}, got {value!r} ({type(value).__name__})")
    if value < low:
        raise ValueError(f"{name} must be an int >= {low}, got {value!r}")
    return int(value)


def _check_positive(name: str, value, allow_none: bool = False, allow_zero: bool = False):
    if value is None and allow_none:
        return None
    rng = ">= 0" if allow_zero else "> 0"
    if not _is_number(value):
        raise TypeError(f"{name} must be a finite number {rng}, got {value!r}")
    if not math.isfinite(value) or value < 0 or (value == 0 and not allow_zero):
        raise ValueError(f"{name} must be a finite number {rng}, got {value!r}")
    return float(value)


def _check_bool(name: str, value) -> bool:
    if not isinstance(value, (bool, np.bool_)):
        raise TypeError(f"{name} must be True or False, got {value!r}")
    return bool(value)


def _legacy_policy(scale, scaling_factor, N, min_scale, max_scale) -> DynamicScale:
    """Map nnabla's (scale, scaling_factor, N) to a bounded DynamicScale, naming legacy args."""
    _check_positive("scale", scale)
    _check_positive("scaling_factor", scaling_factor)
    if scaling_factor <= 1:
        hint = f"; did you mean {1 / scaling_factor!r}?" if scaling_factor < 1 else ""
        raise ValueError(
            f"scaling_factor must be > 1 (the scale is multiplied by it on growth and divided "
            f"by it on overflow), got {scaling_factor!r}{hint}"
        )
    _check_int("N", N, 1)
    _check_positive("min_scale", min_scale)
    _check_positive("max_scale", max_scale)
    if not min_scale <= scale <= max_scale:
        raise ValueError(
            f"scale must be in [min_scale, max_scale] = [{min_scale!r}, {max_scale!r}], got "
            f"{scale!r}; pass min_scale=/max_scale= to widen the range (in nnabla's half mode "
            "the backward seed is float16, so scales above 65504 overflow at once)"
        )
    return DynamicScale(
        init_scale=float(scale),
        growth_factor=float(scaling_factor),
        backoff_factor=1.0 / float(scaling_factor),
        growth_interval=int(N),
        min_scale=float(min_scale),
        max_scale=float(max_scale),
        hysteresis=1,  # nnabla's meaning: every overflow divides the scale
    )


def _on_cpu() -> bool:
    """True when gradients surely live in host memory: the current context is a CPU one and
    nnabla's CUDA extension is not loaded (a graph built in a GPU context scope would not show
    in the current context)."""
    backend = nn.get_current_context().backend
    cpu = bool(backend) and str(backend[0]).startswith("cpu")
    return cpu and "nnabla_ext.cuda" not in sys.modules


def _grad_stats(arrays: List[np.ndarray], need_absmax: bool = True):
    """One pass over gradient arrays: per-array finite flags and, if asked, the largest |value|.

    float32/float64 arrays without ``need_absmax`` use one BLAS dot product (inf and NaN
    propagate into the sum of squares; a finite sum proves every value finite) and fall back to
    the exact bit test when the sum is not finite (a sum of huge finite squares can overflow).
    The bit test clears the sign bit: the integer order of the bits is then the order of |value|,
    and bits >= the exponent-all-ones pattern mean inf or NaN. Exact for every float width; no
    float16 arithmetic, so no false overflow.

    Returns:
        ``(finite_flags list of bool, absmax float or None)``; absmax is inf when any value is
        non-finite and None when not measured.
    """
    flags = []
    absmax = 0.0
    for a in arrays:
        if a.size == 0:
            flags.append(True)
            continue
        if not need_absmax and a.dtype != np.float16:
            flat = a.ravel()
            if math.isfinite(float(np.dot(flat, flat))):
                flags.append(True)
                continue
        uint, mask, inf_bits = _BITS[a.dtype.itemsize]
        top = np.bitwise_and(a.view(uint), uint(mask)).max()
        finite = bool(top < inf_bits)
        flags.append(finite)
        if not finite:
            absmax = math.inf
        elif need_absmax:
            absmax = max(absmax, float(np.array(top, dtype=uint).view(a.dtype)))
    if not need_absmax and all(flags):
        return flags, None
    return flags, absmax


def _sum_of_squares(arrays: List[np.ndarray]) -> float:
    total = 0.0
    for a in arrays:
        flat = a.ravel().astype(np.float64)
        total += float(np.dot(flat, flat))
    return total


# ---------------------------------------------------------------- the updater


class DynamicLossScalingUpdater:
    """Run one mixed-precision training iteration per :meth:`update` call, with loss scaling.

    ``update()``: ``solver.zero_grad()``; ``accum_grad`` times ``data_feeder()``,
    ``loss.forward(clear_no_need_grad=clear_buffer)``, ``loss.backward(scale,
    clear_buffer=clear_buffer)``; with ``comm``: all-reduce the gradients, then agree across
    workers on "finite"; finite check; if finite: unscale, clip, weight decay,
    ``solver.update()``; advance the policy; return a :class:`StepRecord`.

    Without ``policy`` the legacy trio maps to ``DynamicScale(init_scale=scale,
    growth_factor=scaling_factor, backoff_factor=1/scaling_factor, growth_interval=N,
    min_scale=min_scale, max_scale=max_scale, hysteresis=1)``: the scale grows on the
    ``N``-th consecutive finite step (nnabla's grew after N+2, then every N+1) and is divided
    by ``scaling_factor`` on every overflow.

    Args:
        solver (nnabla.solvers.Solver): solver with parameters already set.
        loss (nnabla.Variable): scalar loss (one element).
        data_feeder (callable or None, default None): called with no arguments before each
            forward; None does nothing.
        scale (float, default 8.0): initial loss scale, in [min_scale, max_scale].
        scaling_factor (float, default 2.0): growth multiplier and backoff divisor, > 1.
        N (int, default 2000): consecutive finite steps before growth, >= 1.
        clear_buffer (bool, default True): free buffers in forward/backward.
        accum_grad (int, default 1): forward/backward rounds per update, >= 1.
        weight_decay (float or None, default None): decay passed to ``solver.weight_decay``
            after unscaling, >= 0.
        comm (nnabla communicator or None, default None): object with
            ``all_reduce(data, division=False, inplace=False)``, e.g. nnabla's
            ``MultiProcessDataParallelCommunicator`` or :class:`updater.comm.MPICommunicator`.
        grads (list of nnabla.NdArray or None, default None): gradients to all-reduce; None (or
            empty) with ``comm`` means every parameter gradient of the solver.
        policy (policy from :mod:`updater.policy` or None, default None): replaces the legacy
            trio (which must then stay at their defaults).
        min_scale (float, default 1.0): lower bound for the legacy mapping, > 0.
        max_scale (float, default 2**15): upper bound for the legacy mapping; 2**15 is the
            largest power of two below float16's max (nnabla half seeds backward in float16).
        on_overflow (str, default "skip"): "skip" skips the step and lowers the scale; "retry"
            recomputes the same batch (no new ``data_feeder`` call) at the lowered scale.
        max_retries (int, default 8): retries per ``update()`` in "retry" mode, >= 0; after them
            the step is skipped.
        max_consecutive_nonfinite (int, default 32): consecutive non-finite attempts after which
            :class:`NonFiniteGradientsError` is raised, >= 1 (32 covers the 15 halvings from
            2**15 to 1 and then some).
        clip_grad_norm (float or None, default None): clip the global L2 norm of the unscaled
            gradients to this value, > 0.
        average_grads (bool, default False): all-reduce with ``division=True`` (mean instead of
            sum).
        history (int, default 0): keep the last ``history`` :class:`StepRecord` in
            ``self.history`` (0 keeps none), >= 0.
        monitor (nnabla.monitor.Monitor or None, default None): writes ``loss_scale`` and
            ``skipped_steps`` series each step.
        recorder (GradientRecorder or None, default None): records gradient histograms.
        finite_check (str, default "auto"): "numpy" (one exact NumPy pass per gradient
            array over its bit patterns, giving the largest |g| too; a float32 dot product when
            |g| max is not needed), "solver" (``check_inf_or_nan_grad()``;
            the largest |g| by nnabla functions on the device), or "auto" ("numpy" on CPU
            contexts when the parameters hold at least 2**17 values or the gradients are read
            anyway for the policy's |g| max, clipping or the recorder; "solver" otherwise,
            including on GPUs). Both give the same answer.

    Attributes:
        steps, updates_applied, overflows, skips (int): ``update()`` calls, calls that applied
            an update, non-finite attempts, calls that applied none.
        consecutive_nonfinite (int): non-finite attempts since the last finite one.
        batches, passes (int): ``data_feeder`` calls and forward/backward rounds run.
        history (collections.deque of StepRecord): the last ``history`` records.
        scale (float, read-only): the scale the next step uses.

    Raises:
        TypeError / ValueError: for any bad argument, naming it and the accepted range.
    """

    def __init__(
        self,
        solver,
        loss,
        data_feeder=None,
        scale=8.0,
        scaling_factor=2.0,
        N=2000,
        clear_buffer=True,
        accum_grad=1,
        weight_decay=None,
        comm=None,
        grads=None,
        *,
        policy=None,
        min_scale=1.0,
        max_scale=2.0**15,
        on_overflow="skip",
        max_retries=8,
        max_consecutive_nonfinite=32,
        clip_grad_norm=None,
        average_grads=False,
        history=0,
        monitor=None,
        recorder=None,
        finite_check="auto",
    ):
        if not (callable(getattr(solver, "get_parameters", None)) and hasattr(solver, "update")):
            raise TypeError(f"solver must be an nnabla solver, got {type(solver).__name__}")
        self.param_names = list(solver.get_parameters().keys())
        if not self.param_names:
            raise ValueError(
                "solver has no parameters; call solver.set_parameters(nn.get_parameters()) "
                "before creating the updater"
            )
        if not isinstance(loss, nn.Variable):
            raise TypeError(f"loss must be an nnabla.Variable, got {type(loss).__name__}")
        if loss.size != 1:
            raise ValueError(
                f"loss must be a scalar (one element), got shape {tuple(loss.shape)}; "
                "reduce it with F.mean or F.sum"
            )
        if data_feeder is not None and not callable(data_feeder):
            raise TypeError(f"data_feeder must be callable or None, got {data_feeder!r}")
        legacy = {"scale": scale, "scaling_factor": scaling_factor, "N": N}
        bounds = {"min_scale": min_scale, "max_scale": max_scale}
        if policy is None:
            policy = _legacy_policy(scale, scaling_factor, N, min_scale, max_scale)
        else:
            if not (callable(getattr(policy, "init", None)) and callable(policy.update)):
                raise TypeError(
                    f"policy must be a policy from updater.policy, got {type(policy).__name__}"
                )
            changed = {k: v for k, v in {**legacy, **bounds}.items()
                       if v != {**_LEGACY_DEFAULTS, **_BOUND_DEFAULTS}[k]}  # fmt: skip
            if changed:
                raise ValueError(
                    f"pass either policy= or the legacy scale/scaling_factor/N (and "
                    f"min_scale/max_scale), not both; got policy={policy!r} and {changed}"
                )
        if on_overflow not in ("skip", "retry"):
            raise ValueError(f"on_overflow must be 'skip' or 'retry', got {on_overflow!r}")
        if finite_check not in ("auto", "numpy", "solver"):
            raise ValueError(
                f"finite_check must be 'auto', 'numpy' or 'solver', got {finite_check!r}"
            )
        if comm is not None and not callable(getattr(comm, "all_reduce", None)):
            raise TypeError(
                f"comm must offer all_reduce(data, division, inplace), got {type(comm).__name__}"
            )
        if grads is not None:
            kinds = sorted({type(g).__name__ for g in grads if not isinstance(g, nn.NdArray)})
            if not isinstance(grads, (list, tuple)) or kinds:
                got = type(grads).__name__ if not isinstance(grads, (list, tuple)) else kinds
                raise TypeError(
                    f"grads must be a list of nnabla.NdArray (e.g. [p.grad for p in params]) "
                    f"or None, got {got}"
                )
        if monitor is not None and not hasattr(monitor, "save_path"):
            raise TypeError(
                f"monitor must be an nnabla.monitor.Monitor or None, got {type(monitor).__name__}"
            )
        if recorder is not None and not callable(getattr(recorder, "record", None)):
            raise TypeError(
                f"recorder must be a GradientRecorder or None, got {type(recorder).__name__}"
            )

        self.solver = solver
        self.loss = loss
        self.data_feeder = data_feeder
        self.clear_buffer = _check_bool("clear_buffer", clear_buffer)
        self.accum_grad = _check_int("accum_grad", accum_grad, 1)
        self.weight_decay = _check_positive("weight_decay", weight_decay, True, True)
        self.comm = comm
        self.grads = list(grads) if grads else None
        self.policy = policy
        self.on_overflow = on_overflow
        self.max_retries = _check_int("max_retries", max_retries, 0)
        self.max_consecutive_nonfinite = _check_int(
            "max_consecutive_nonfinite", max_consecutive_nonfinite, 1
        )
        self.clip_grad_norm = _check_positive("clip_grad_norm", clip_grad_norm, True)
        self.average_grads = _check_bool("average_grads", average_grads)
        self.history = deque(maxlen=_check_int("history", history, 0))
        self.recorder = recorder
        self._params = list(solver.get_parameters().values())
        self._state: ScaleState = policy.init()
        for name in _COUNTERS:
            setattr(self, name, 0)
        self._monitor_series = None
        if monitor is not None:
            from nnabla.monitor import MonitorSeries

            self._monitor_series = (
                MonitorSeries("loss_scale", monitor, interval=1, verbose=False),
                MonitorSeries("skipped_steps", monitor, interval=1, verbose=False),
            )
        self.finite_check = self._choose_check(finite_check)
        self._flag = None  # one-element agreement flag, made on first use
        self._inputs = None  # input leaves snapshotted for "retry" with accum_grad > 1
        self._saved_batches: List[List[np.ndarray]] = []

    # ------------------------------------------------------------ public state

    @property
    def scale(self) -> float:
        """The loss scale the next ``update()`` will use."""
        return float(self._state.scale)

    @property
    def scale_state(self) -> ScaleState:
        """The policy state (scale, good_steps, hysteresis_left)."""
        return self._state

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
            "counters": {name: int(getattr(self, name)) for name in _COUNTERS},
        }

    def load_state_dict(self, state: Dict[str, Any]) -> None:
        """Restore policy, scale state and counters from :meth:`state_dict` output.

        The saved policy replaces the current one (a warning is logged when they differ).
        """
        missing = [k for k in ("policy", "scale_state", "counters") if k not in state]
        if missing:
            raise KeyError(f"updater state dict is missing keys {missing}")
        version = state.get("format_version", STATE_FORMAT_VERSION)
        if version != STATE_FORMAT_VERSION:
            raise ValueError(
                f"updater state format_version {version!r} is not supported "
                f"(this version reads {STATE_FORMAT_VERSION})"
            )
        policy = policy_from_dict(state["policy"])
        scale_state = ScaleState.from_dict(state["scale_state"])
        lost = [k for k in _COUNTERS if k not in state["counters"]]
        if lost:
            raise KeyError(f"updater state dict counters are missing {lost}")
        if policy != self.policy:
            logger.warning("loaded policy %r replaces %r", policy, self.policy)
        self.policy = policy
        self._state = scale_state
        for name in _COUNTERS:
            setattr(self, name, int(state["counters"][name]))

    # ------------------------------------------------------------ the iteration

    def update(self) -> StepRecord:
        """Run one iteration; return its :class:`StepRecord`.

        Raises:
            NonFiniteGradientsError: after ``max_consecutive_nonfinite`` consecutive non-finite
                attempts (parameters and solver state untouched).
        """
        step = self.steps
        attempts = 0
        while True:
            attempts += 1
            scale = float(self._state.scale)
            loss_finite = self._forward_backward(scale, feed=attempts == 1)
            if self.comm is not None:
                self._all_reduce()
            arrays, finite, absmax, bad = self._check(scale)
            if self.comm is not None:
                finite = self._agree(finite)
            if not finite and absmax is not None:
                absmax = math.inf
            if not finite and loss_finite is None:
                loss_finite = self._loss_finite()
            consecutive = 0 if finite else self.consecutive_nonfinite + 1
            too_many = consecutive >= self.max_consecutive_nonfinite
            last = finite or too_many or self.on_overflow == "skip" or attempts > self.max_retries
            if last and self.recorder is not None and self.recorder.wants(step):
                self.recorder.record(step, arrays or self._host_grads(), scale)
            if finite:
                self._apply(scale, arrays)
            self._state = self.policy.update(
                self._state, finite, absmax if self.policy.needs_grad_absmax else None
            )
            self.overflows += not finite
            self.consecutive_nonfinite = consecutive
            if last:
                break
        record = StepRecord(
            step=step,
            scale=scale,
            grads_finite=finite,
            update_applied=finite,
            new_scale=float(self._state.scale),
            grad_absmax=absmax,
            loss_finite=loss_finite,
            attempts=attempts,
        )
        self.steps += 1
        self.updates_applied += finite
        self.skips += not finite
        self.history.append(record)
        if self._monitor_series is not None:
            self._monitor_series[0].add(step, record.new_scale)
            self._monitor_series[1].add(step, self.skips)
        if not finite and too_many:
            raise self._error(record, bad)
        return record

    # ------------------------------------------------------------ pieces

    def _choose_check(self, requested: str) -> str:
        if requested != "auto":
            return requested
        if not _on_cpu():
            return "solver"
        # Measured in training loops on CPU (nnabla 1.39): reading the gradients through
        # data_ptr views plus one BLAS dot (float32) or bit test (float16) per array beats
        # check_inf_or_nan_grad() from a few hundred thousand gradient values on (about 215 us
        # against 370 us per step at 670k float32 values); below that, nnabla's single C++ call
        # has less fixed per-array cost. NumPy is also used whenever the gradients are read
        # anyway (|g| max, clipping, recording).
        reads_anyway = (
            self.policy.needs_grad_absmax
            or self.clip_grad_norm is not None
            or self.recorder is not None
        )
        large = sum(p.size for p in self._params) >= _NUMPY_CHECK_MIN_VALUES
        return "numpy" if reads_anyway or large else "solver"

    def _input_leaves(self) -> List[nn.Variable]:
        if self._inputs is None:
            found: Dict[int, nn.Variable] = {}

            def visit(func):
                for v in func.inputs:
                    if v.parent is None and not v.need_grad:
                        found.setdefault(hash(v), v)

            self.loss.visit(visit)
            self._inputs = list(found.values())
        return self._inputs

    def _forward_backward(self, scale: float, feed: bool) -> bool | None:
        """zero_grad and ``accum_grad`` rounds; ``feed=False`` replays the saved batch(es)."""
        snapshot = (
            self.on_overflow == "retry" and self.accum_grad > 1 and self.data_feeder is not None
        )
        if feed and snapshot:
            self._saved_batches = []
        read_loss = self.accum_grad > 1
        loss_finite = True if read_loss else None
        self.solver.zero_grad()
        for r in range(self.accum_grad):
            if feed:
                if self.data_feeder is not None:
                    self.data_feeder()
                    self.batches += 1
                if snapshot:
                    self._saved_batches.append([v.d.copy() for v in self._input_leaves()])
            elif snapshot:
                for v, d in zip(self._input_leaves(), self._saved_batches[r]):
                    v.d = d
            self.loss.forward(clear_no_need_grad=self.clear_buffer)
            if read_loss:
                loss_finite = loss_finite and self._loss_finite()
            self.loss.backward(scale, clear_buffer=self.clear_buffer)
            self.passes += 1
        return loss_finite

    def _loss_finite(self) -> bool:
        return bool(np.isfinite(host_view(self.loss.data)).all())

    def _reduced_grads(self) -> List[nn.NdArray]:
        return self.grads if self.grads is not None else [p.grad for p in self._params]

    def _all_reduce(self) -> None:
        self.comm.all_reduce(self._reduced_grads(), division=self.average_grads, inplace=False)

    def _agree(self, local_finite: bool) -> bool:
        """Sum a one-element flag (1.0 = this worker saw inf/NaN) over workers; finite if 0."""
        if self._flag is None:
            self._flag = nn.NdArray.from_numpy_array(np.zeros(1, np.float32))
        self._flag.fill(0.0 if local_finite else 1.0)
        self.comm.all_reduce(self._flag, division=False, inplace=True)
        return bool(host_view(self._flag)[0] <= 0)

    def _host_grads(self) -> List[np.ndarray]:
        return [host_view(p.grad) for p in self._params]

    def _check(self, scale: float):
        """Return (host arrays or None, finite, absmax or None, names of non-finite params)."""
        need_absmax = self.policy.needs_grad_absmax
        if self.finite_check == "numpy":
            arrays = self._host_grads()
            flags, absmax = _grad_stats(arrays, need_absmax)
            finite = all(flags)
            absmax = absmax if need_absmax else None
            if need_absmax and self.comm is not None and self.grads is not None:
                absmax = _grad_stats([host_view(g) for g in self.grads])[1]
        else:
            arrays = None
            finite = not self.solver.check_inf_or_nan_grad()
            absmax = None
            if need_absmax:
                absmax = self._device_absmax() if finite else math.inf
            flags = None
        bad = []
        if not finite:
            if flags is None:
                flags = _grad_stats(self._host_grads())[0]
            bad = [n for n, ok in zip(self.param_names, flags) if not ok]
        return arrays, finite, absmax, bad

    def _device_absmax(self) -> float:
        import nnabla.functions as F

        arrays = self.grads if (self.comm is not None and self.grads is not None) else None
        arrays = arrays or [p.grad for p in self._params]
        return max(float(F.max(F.abs(g)).get_data("r")) for g in arrays if g.size)

    def _apply(self, scale: float, arrays: List[np.ndarray] | None) -> None:
        factor = 1.0 / scale
        if self.clip_grad_norm is not None:
            norm = math.sqrt(_sum_of_squares(arrays or self._host_grads())) / scale
            if norm > self.clip_grad_norm:
                factor *= self.clip_grad_norm / norm
        self.solver.scale_grad(factor)
        if self.weight_decay is not None:
            self.solver.weight_decay(self.weight_decay)
        self.solver.update()

    def _error(self, record: StepRecord, bad: List[str]) -> NonFiniteGradientsError:
        shown = ", ".join(bad[:8]) + (f" and {len(bad) - 8} more" if len(bad) > 8 else "")
        if record.loss_finite is False:
            cause = (
                "the loss itself was non-finite, so this is a data or model problem "
                "(inf/NaN inputs, log(0), division by zero), not loss-scale overflow"
            )
        else:
            cause = (
                "the loss was finite, so the gradients overflow float16 even at this scale "
                "(or inf/NaN inputs were masked in the forward pass); lower min_scale or "
                "check the model"
            )
        return NonFiniteGradientsError(
            f"{self.consecutive_nonfinite} consecutive non-finite gradient steps "
            f"(max_consecutive_nonfinite={self.max_consecutive_nonfinite}) at loss scale "
            f"{record.scale:g}: {cause}. Parameters with non-finite gradients: "
            f"{shown or '(none found locally; another worker reported them)'}. "
            "Parameters and solver state were left untouched.",
            consecutive=self.consecutive_nonfinite,
            loss_finite=record.loss_finite,
            param_names=bad,
            scale=record.scale,
        )
