"""GradientRecorder: writes a :class:`updater.trace.Trace` from a training run (NumPy only).

The updater hands it each recorded step as one value (:class:`updater.trace.measured.MeasuredStep`,
:meth:`GradientRecorder.record_step`; :mod:`updater.driver.recording`); with the updater's option
``probes`` (:class:`updater.Probes`) it also probes the step before handing it over, and the
value says whether the step's overflow threshold was probed and how many passes that took.
"""

from __future__ import annotations

import logging
import math
import secrets
import time
import weakref
from pathlib import Path
from typing import List, Union

import numpy as np

from ..common.names import shown
from ..common.validation import check_bool, check_int, check_positive
from .deprecated_probes import deprecated_probes
from .exits import watch_exit
from .format import GROUPS, Trace
from .forward import ForwardHeadroom
from .measured import MeasuredStep
from .parts import (
    PartsLock,
    check_trace_path,
    concat_traces,
    finish_merge,
    load_parts,
    part_files,
    parts_dir,
    recover_parts,
)
from .rows import Held, KeptStep, warn_forward, write_at_exit
from .values import check_label, layer_columns

logger = logging.getLogger(__name__)


class GradientRecorder:
    """Record per-step gradient-magnitude histograms to a :class:`Trace` ``.npz``.

    Each recorded step stores :func:`binade_histogram` of the *unscaled* gradients:
    the float16 (or float32) values the backward pass produced at the scale used, divided by that
    scale in float64 (so values flushed to zero in float16 stay zero, and the histogram shows what
    the model's gradients were after float16 rounding). The trace is written on :meth:`close`,
    on leaving a ``with`` block, or at interpreter exit (or when the recorder is garbage
    collected) if steps were recorded since the last write; recording after :meth:`close`
    continues the same trace. A SIGTERM (a job scheduler's time limit) is handled as Ctrl-C is:
    the trace is written, then the process ends by SIGTERM (:mod:`updater.trace.exits`).

    Memory and crashes: each recorded step is held in memory (about 1.2 KB, plus 968 bytes per
    parameter array with ``per_parameter``) until written. With ``write_every`` (or
    ``write_seconds``) the steps are written atomically as parts in ``<path>.parts`` and dropped
    from memory, so memory stays bounded and a crash loses at most one interval; closing merges
    the parts into ``path`` (reading them back once) and removes them. After a crash,
    :meth:`recover` merges the parts that were written; a new recorder on the same path refuses
    to start while they are there.

    Overflow is told apart from bad data, so that a replay over other scales is right:

    - a bad batch, whose **loss** or an input was inf/NaN (``loss_finite=False``), is
      ``nonfinite``: skipped at every scale, as the updater skips it (its gradients may even be
      finite, e.g. when ReLU masked a NaN input);
    - a step whose loss was finite but whose gradients held inf/NaN at the recorded scale ``s``
      overflowed: ``overflow_scale = s`` (or the smaller ``overflow_scale`` passed in), and the
      simulator replays it as an overflow at every scale ``>= overflow_scale`` and as a normal
      step below it.

    Approximations, for a step whose recorded attempt overflowed (the finite values of such an
    attempt are not the step's gradients: inf/NaN propagates backward into upstream gradients):

    - the histogram holds only the attempt's finite values (fewer values than the model has);
    - ``absmax`` is raised to at least ``65520 / s``, the smallest unscaled magnitude that
      overflows at ``s``: a lower bound that a replay at a lower scale passes to policies that
      use the largest gradient (the real largest value may be larger; if the overflow happened
      in an intermediate value, the parameter gradients' largest value may be smaller);
    - below ``overflow_scale`` the step is replayed as finite: the recording cannot tell whether
      it would also have overflowed at a lower scale (it would, if the overflowing values were
      larger than ``65520 / s`` by more than the factor between the scales).

    Non-finite gradients with a finite loss are taken as overflow even when they would be NaN at
    every scale (a NaN made by the backward pass itself): the recording cannot tell the two apart.

    Per-parameter histograms (``per_parameter=True``, off by default) keep the same statistics
    for each gradient array too (the trace's ``layer_*`` fields), named by ``record(names=...)``.
    They cost ``parameter arrays x NBINS x 8`` bytes (968 bytes per array) per recorded step,
    held in memory while the recorder lives (the file is compressed). On an overflowed step the
    arrays holding inf/NaN get the same ``absmax`` bound as the whole step (``65520 / s``, if
    larger than their finite values); the others keep their measured largest value.

    Probes (the updater's option ``probes``, :class:`updater.Probes`, off by default): on each
    recorded step the updater can probe the step's overflow threshold (the smallest power of
    two of the scale at which the real backward pass overflows, and the largest at which it
    was finite: overflows born in the backward kernels, which no stored gradient shows; for a
    step that overflowed, the first finite probe's gradients are recorded instead), measure
    the share of the true nonzero gradient values that float16 flushed to zero at several
    scales against a float32 copy of the graph (the trace's ``flush_*`` fields), and measure
    the float16 forward pass's headroom (``forward_*``); the first step within a factor 4 of
    65504 is logged as a warning naming the function, the step and the fix. Training is left
    exactly as without probing (:mod:`updater.driver.recording`). Cost: the extra
    forward/backward rounds, counted in :attr:`probe_passes`. The trace is marked
    ``overflow_probed`` when the updater probed each of its steps' threshold.

    Args:
        path (str or Path): output ``.npz`` path.
        every (int, default 1): record every ``every``-th ``update()`` call (>= 1); the trace
            stores it (``Trace.every``) and the simulator replays each recorded step ``every``
            times, on the training clock.
        name (str or None, default None): trace name; when None the file's stem as
            :func:`updater.common.names.shown` shows it (an undecodable byte as ``?``).
        per_parameter (bool, default False): also keep one histogram per gradient array.
        write_every (int or None, default None): write the trace in parts every this many
            recorded steps (>= 1), dropping them from memory (see below); None: only on close.
        write_seconds (float or None, default None): also write a part when this many seconds
            (> 0) passed since the last write.
        probe_overflow, measure_flush, flush_every, probe_from_previous, forward_headroom:
            deprecated (``DeprecationWarning``; they still work for this release, read by the
            updater when it is given no ``probes``): give ``probes=Probes(overflow=...,
            flush=..., flush_every=..., from_previous=..., forward_headroom=...)`` to the
            updater instead.

    Raises:
        OSError: ``path``'s folder is missing, ``path`` is a folder, a link or a file dls did
            not write (UnsafeOutputError), or ``<path>.parts`` is a file.
        RuntimeError: another recorder holds ``path``'s lock (``<path>.parts/lock``, held from
            construction to :meth:`close`).

    Attributes:
        probe_passes (int): forward/backward rounds the probes ran so far.
        overflow_probed (bool): the last step recorded had its overflow threshold measured by
            probes (before any: the deprecated ``probe_overflow``; :meth:`record` passes it on).
        steps (list of int): the ``update()`` numbers of the recorded steps held in memory
            (emptied when they are written as a part).
    """

    def __init__(  # noqa: PLR0913 (tests/test_layout.py: PUBLIC_SIGNATURES)
        self,
        path: Union[str, Path],
        every: int = 1,
        name: str | None = None,
        per_parameter: bool = False,
        probe_overflow: bool | None = None,
        measure_flush: bool | None = None,
        write_every: int | None = None,
        write_seconds: float | None = None,
        probe_from_previous: bool | None = None,
        forward_headroom: bool | None = None,
        flush_every: int | None = None,
    ) -> None:
        """One keyword argument per option of the class docstring (five of them deprecated, in
        their old places), each checked."""
        self.every = check_int("every", every, 1)
        self.write_every = check_int("write_every", write_every, 1, none_ok=True)
        self.write_seconds = check_positive("write_seconds", write_seconds, none_ok=True)
        self._deprecated_probes = deprecated_probes(  # read by updater.driver.recording
            {
                "probe_overflow": probe_overflow,
                "measure_flush": measure_flush,
                "flush_every": flush_every,
                "probe_from_previous": probe_from_previous,
                "forward_headroom": forward_headroom,
            }
        )
        self.overflow_probed = bool(self._deprecated_probes and self._deprecated_probes["overflow"])
        self._forward_warned = False
        self.probe_passes = 0
        self.path = check_trace_path(path)
        self.name = check_label("name", name if name is not None else shown(self.path.stem))
        self.per_parameter = check_bool("per_parameter", per_parameter)
        layer_names: List[str] | None = [] if self.per_parameter else None
        lock = PartsLock(self.path)
        finish_merge(self.path)  # an interrupted merge's leftovers: the trace is complete
        if part_files(self.path):
            lock.release()
            folder, trace = shown(parts_dir(self.path)), shown(self.path)
            raise ValueError(
                f"{folder} holds the parts of an interrupted recording: merge them into {trace} "
                f"with GradientRecorder.recover({str(self.path)!r}), or remove the folder"
            )
        recording = secrets.token_hex(8)
        self._held = Held(self.path, self.name, layer_names, self.every, recording, lock=[lock])
        self._kept, self._lock, self._layer_names = self._held.kept, self._held.lock, layer_names
        self.steps: List[int] = []
        self._last_write = time.monotonic()
        self._exit_hook = weakref.finalize(self, write_at_exit, self._held)
        watch_exit(self._exit_hook)

    def wants(self, step: int) -> bool:
        """Whether ``update()`` call number ``step`` (0-based) should be recorded."""
        return step % self.every == 0

    def record(  # noqa: PLR0913 (tests/test_layout.py: PUBLIC_SIGNATURES)
        self,
        step: int,
        grads: List[np.ndarray],
        scale: float,
        loss_finite: bool | None = True,
        overflow_scale: float | None = None,
        names: List[str] | None = None,
        flush: tuple | None = None,
        finite_scale: float | None = None,
        forward_peak: tuple | None = None,
    ) -> None:
        """Add one step by hand: :meth:`record_step` of the
        :class:`~updater.trace.measured.MeasuredStep` of these arguments.

        The arguments scripts have recorded with, one per measurement of the step (the fields
        of the value it builds); the updater hands over that value itself.

        Args:
            step (int): the ``update()`` call number (0-based).
            grads (list of arrays): the recorded attempt's gradients as scaled by ``scale``
                (float16 or float32; may hold inf/NaN).
            scale (float, finite > 0): the loss scale of the recorded attempt.
            loss_finite (bool or None, default True): False when the step was a bad batch
                (an inf/NaN loss or input: bad data, skipped at every scale, whatever its
                gradients); None (not checked) counts as True.
            overflow_scale (float or None, default None): the smallest scale at which another
                attempt of the same step overflowed with a finite loss (an earlier attempt of
                ``on_overflow="retry"``, or this attempt when the caller knows it overflowed
                although ``grads`` look finite, e.g. on another worker); > 0, None (or inf) when
                there was none. Non-finite ``grads`` with a finite loss add ``scale`` to it.
            names (list of str or None, default None): the parameter names of ``grads``, in the
                same order; required with ``per_parameter=True``, ignored otherwise. They are
                matched by name from step to step: a name first seen at a later step (a
                parameter added during training) gets zero counts and zeros at the steps before,
                and a name missing from a step gets zero counts and zeros at that step.
            flush (tuple or None, default None): ``(scales, shares)``, the measured flushed
                shares of this step (NaN: not measured); None: not measured.
            finite_scale (float or None, default None): the largest scale at which the step
                was seen finite (by probes), >= 0 and below the step's overflow scale; None or
                0: not known. Finite there with no overflow scale: censored ("above" it).
            forward_peak (tuple or None, default None): ``(peak, where)``, the forward pass's
                largest |value| / 65504 (>= 0, inf allowed) and the function (str); None: not
                measured.

        >>> import tempfile
        >>> rec = GradientRecorder(tempfile.mkdtemp() + "/t.npz")
        >>> rec.record(0, [np.array([1.0, np.inf], np.float16)], 1024.0)  # an overflow
        >>> rec.record(1, [np.array([np.nan, 2.0], np.float16)], 1024.0, loss_finite=False)
        >>> t = rec.trace()
        >>> t.nonfinite.tolist(), t.overflow_scale.tolist(), t.absmax[0] == 65520.0 / 1024
        ([False, True], [1024.0, inf], True)
        """
        measured = {"flush": flush, "forward": forward_peak}
        self.record_step(
            MeasuredStep(
                step=step,
                grads=grads,
                scale=scale,
                bad_batch=loss_finite is not None and not loss_finite,
                overflow_scale=math.inf if overflow_scale is None else overflow_scale,
                finite_scale=0.0 if finite_scale is None else finite_scale,
                names=names,
                overflow_probed=self.overflow_probed,
                measured={k: v for k, v in measured.items() if v is not None},
            )
        )

    def record_step(self, step: MeasuredStep) -> None:
        """Add one step measured (:class:`updater.trace.measured.MeasuredStep`, what the
        updater hands over): what its row is made of when written (:meth:`_keep`); its
        ``probe_passes`` count in :attr:`probe_passes` and its ``overflow_probed`` becomes
        :attr:`overflow_probed`. A step refused (``ValueError``) adds nothing."""
        kept = self._keep(step)
        if not self._lock:  # recording again after close()
            self._lock.append(PartsLock(self.path))
        forward = kept.parts.get(ForwardHeadroom.KEY)
        if forward is not None and ForwardHeadroom.near(forward) and not self._forward_warned:
            self._forward_warned = True
            warn_forward(self.path, step.step, forward["forward_peak"], forward["forward_where"])
        self.overflow_probed = step.overflow_probed
        self.probe_passes += step.probe_passes
        self._kept.append(kept)
        self.steps.append(int(step.step))
        every, seconds = self.write_every, self.write_seconds
        if (every is not None and len(self._kept) >= every) or (
            seconds is not None and time.monotonic() - self._last_write >= seconds
        ):
            self._write_part()

    def _keep(self, step: MeasuredStep) -> KeptStep:
        """What the recorder keeps of ``step`` until it writes it, everything a group could
        refuse checked now (``ValueError``): the step reduced
        (:meth:`~updater.trace.measured.MeasuredStep.reduced`: its histograms, per array with
        ``per_parameter``), the parts of the groups whose probe measured it (the gradients'
        groups make theirs when the row is written: :func:`updater.trace.rows.step_row`) and,
        with ``per_parameter``, its names among the columns (a name first seen is added)."""
        reduced, arrays = step.reduced(self._layer_names is not None)
        measured = step.measured
        parts = {
            g.KEY: g.row_checked(measured[g.KEY])
            for g in GROUPS
            if g.PROBED and measured.get(g.KEY) is not None
        }
        if self._layer_names is not None:
            layer_columns(self._layer_names, step.names, len(step.grads))
        return KeptStep(step=reduced, arrays=arrays, parts=parts)

    def _write_part(self) -> None:
        """Write the rows since the last write as the next part (atomically) and drop them."""
        self._held.write_part()
        self.steps.clear()
        self._last_write = time.monotonic()

    @staticmethod
    def recover(path: Union[str, Path]) -> Path:
        """Merge the parts an interrupted recording (``write_every``/``write_seconds``) left in
        ``<path>.parts`` into the trace at ``path``, or finish a merge that was interrupted;
        return ``path``. A trace at ``path`` with more steps than the parts is never replaced.

        Raises:
            FileNotFoundError: there are no parts.
            ValueError: a part is damaged, not a regular file or of another recording (named),
                or the trace at ``path`` holds more steps than the parts.
            RuntimeError: a recorder is still writing to ``path``.
        """
        return recover_parts(path)

    def trace(self) -> Trace:
        """Return the steps recorded so far as a :class:`Trace` (those written included)."""
        held = self._held
        if held.parts:
            earlier = load_parts(self.path, held.recording)
        else:
            earlier = [Trace.load(self.path)] if held.merged else []
        if not earlier:
            return held.recent()
        return concat_traces(earlier + ([held.recent()] if self._kept else []), self.name)

    def close(self) -> Path | None:
        """Write the trace (atomically), release the path's lock and return the path; None when
        nothing was recorded. With parts written, the rest becomes the last part and the parts
        are merged; a later :meth:`record` continues the same trace.

        Raises:
            OSError: the write failed (a full disk); the lock and the steps are kept (a later
                ``close()`` or the exit hook tries again).
        """
        held = self._held
        if held.parts or self._kept:
            path = held.write()
            if not self._kept:  # merged: the steps are in the file
                self.steps.clear()
        elif held.merged:
            path = self.path  # nothing recorded since the last close
        else:
            logger.warning(
                "GradientRecorder %s recorded no steps; nothing written", shown(self.path)
            )
            path = None
        if self._lock:
            self._lock.pop().release()
        return path

    def __repr__(self) -> str:
        """One line: the path, the name, the sampling, the options on, the steps held in
        memory and the parts written, and whether it is closed."""
        options = [o for o in ("per_parameter", "overflow_probed") if getattr(self, o)]
        parts = [f"{str(self.path)!r}", f"name={self.name!r}", f"every={self.every}"]
        parts += [f"{o}=True" for o in options]
        parts += [f"steps_held={len(self._kept)}", f"parts_written={self._held.parts}"]
        return f"GradientRecorder({', '.join(parts)}{'' if self._lock else ', closed'})"

    def __enter__(self) -> GradientRecorder:
        return self

    def __exit__(self, *exc) -> None:
        self.close()
