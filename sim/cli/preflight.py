"""Checks ``dls`` makes before any work: argument values, trace files, output paths, memory.

Each check reports a bad argument through ``parser.error`` (exit status 2 and a one-line
message naming the option, as argparse does), so a command never starts work it cannot finish.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
from pathlib import Path

from sim.replay.headroom import forward_headroom_warning
from sim.replay.run import MAX_JITTER, memory_estimate
from sim.traces.families import Trace, make_trace
from sim.traces.named import family_name, recorded_trace_file
from updater.common.identity import kind_by_suffix
from updater.common.names import shown
from updater.common.writing import UnsafeOutputError, check_target

TRACE_HINT = "expected an .npz trace written by GradientRecorder or Trace.save"
MEMORY_SHARE = 0.5
"""Largest share of physical memory a simulation may need before ``dls`` refuses to start it."""


# ---------------------------------------------------------------- argparse types


def jitter_value(text: str) -> float:
    """An argparse type: a number in [0, 8] (the log2 std of the gradient size factor)."""
    problem = f"needs a number in [0, {MAX_JITTER:g}], got {text!r}"
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(problem) from None
    if not 0 <= value <= MAX_JITTER:
        raise argparse.ArgumentTypeError(problem)
    return value


# ---------------------------------------------------------------- traces


def trace_for(parser, spec: str, steps: int, seed: int) -> Trace:
    """The trace ``--trace spec`` names: a family's (:func:`family_name`; ``steps`` and
    ``seed`` make it) or :func:`load_trace`'s."""
    family = family_name(spec)
    if family is not None:
        return make_trace(family, steps=steps, seed=seed)
    return load_trace(parser, spec)


def load_trace(parser, spec: str) -> Trace:
    """The trace ``--trace spec`` names (a shipped recording's name,
    :data:`sim.traces.real.SHIPPED_RECORDINGS`, in any case, or an .npz file), or a one-line
    error saying what is wrong with the file (missing, a folder, not an .npz archive, a single
    .npy array, missing arrays, ...: :meth:`Trace.load`'s words); a name that is neither
    suggests the closest family or recording."""
    try:
        path = recorded_trace_file(spec)
    except ValueError as e:
        parser.error(f"--{e}")
    if path.exists() and not (path.is_dir() or path.is_file()):  # reading a FIFO would block
        parser.error(f"--trace {shown(spec)}: not a regular file ({TRACE_HINT})")
    try:
        trace = Trace.load(path)
    except FileNotFoundError:
        parser.error(f"--trace {shown(spec)}: trace file not found")
    except IsADirectoryError:
        parser.error(f"--trace {shown(spec)}: is a folder, not a trace file ({TRACE_HINT})")
    except OSError as e:
        parser.error(f"--trace {shown(spec)}: cannot read it: {e.strerror}")
    except ValueError as e:  # the loader names the file; the option already does
        problem = str(e).replace(f"gradient trace {shown(path)}: ", "", 1)
        parser.error(f"--trace {shown(spec)}: {problem} ({TRACE_HINT})")
    warning = forward_headroom_warning(trace)
    if warning is not None:
        print(f"warning: {warning}", file=sys.stderr)
    return trace


# ---------------------------------------------------------------- output paths


def _check_writable(parser, option: str, path: str, folder: Path) -> None:
    """Create and delete a temporary file in ``folder``: the honest test (permissions, a
    read-only file system, root's exemptions)."""
    try:
        with tempfile.TemporaryFile(dir=folder):
            pass
    except OSError as e:
        parser.error(f"{option} {shown(path)}: cannot write into {shown(folder)}: {e.strerror}")


def check_output_file(
    parser, option: str, path: str, force: bool = False, inputs=(), *, kind: str
) -> None:
    """An output file: its folder must exist and be writable; and
    :func:`updater.common.writing.check_target` must accept it as a ``kind`` (not a folder, a
    link, an input, or unless ``force`` a file dls did not write as a ``kind``, or a read-only
    one)."""
    if not path:
        parser.error(f"{option}: needs a file name, got {path!r}")
    p = Path(path)
    if p.is_dir():
        parser.error(f"{option} {shown(path)}: is a folder; give a file name")
    folder = p.parent
    if not folder.exists():
        parser.error(
            f"{option} {shown(path)}: folder {shown(folder)} does not exist (create it first)"
        )
    if not folder.is_dir():
        parser.error(f"{option} {shown(path)}: {shown(folder)} is a file, not a folder")
    try:
        check_target(p, force, inputs, kind=kind)
    except UnsafeOutputError as e:
        parser.error(f"{option} {e}")
    _check_writable(parser, option, path, folder)


def check_output_dir(parser, option: str, path: str, names=(), force: bool = False) -> None:
    """An output folder (created if missing): not an existing file, its nearest existing
    ancestor is a writable folder, and :func:`updater.common.writing.check_target` accepts
    each of the files ``names`` in it."""
    if not path:
        parser.error(f"{option}: needs a folder name, got {path!r}")
    p = Path(path)
    if p.exists() and not p.is_dir():
        parser.error(f"{option} {shown(path)}: is an existing file, not a folder")
    existing = next(a for a in (p.absolute(), *p.absolute().parents) if a.exists())
    if not existing.is_dir():
        parser.error(f"{option} {shown(path)}: cannot create it: {shown(existing)} is a file")
    _check_writable(parser, option, path, existing)
    for name in names:
        try:
            check_target(p / name, force, kind=kind_by_suffix(name))
        except UnsafeOutputError as e:
            parser.error(f"{option} {shown(path)}: {e}")


def check_figure(parser, option: str, path: str, force: bool = False, inputs=()) -> None:
    """A figure file: an output file whose extension names a format matplotlib writes."""
    check_output_file(parser, option, path, force, inputs, kind=kind_by_suffix(path))
    from sim.plots.common import check_figure_path  # its extension names a format matplotlib writes

    try:
        check_figure_path(path)
    except (ValueError, TypeError) as e:
        parser.error(f"{option}: {e}")


# ---------------------------------------------------------------- work

TRAIN_MAX_STEP_RUNS = 4 * 10**6
"""Most steps x runs ``dls train`` starts: 10**6 steps of its four variants, many hours on a CPU."""


def check_work(parser, steps: int, runs: int, limit: int) -> None:
    """Refuse ``steps`` x ``runs`` beyond ``limit``: work that would not finish."""
    if steps * runs > limit:
        parser.error(
            f"--steps {steps} x {runs} runs is {steps * runs:,} step-runs, more than the "
            f"limit of {limit:,}; use at most --steps {limit // runs}"
        )


# ---------------------------------------------------------------- memory


def _memory_limit():
    """``(limit, physical)`` in bytes, or ``(None, None)`` where the OS does not say."""
    try:
        physical = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (AttributeError, ValueError, OSError):
        return None, None
    return int(physical * MEMORY_SHARE), physical


def _size(n: float) -> str:
    for unit in ("bytes", "KiB", "MiB", "GiB", "TiB"):
        if n < 1024 or unit == "TiB":
            return f"{n:.0f} {unit}" if unit == "bytes" else f"{n:.1f} {unit}"
        n /= 1024
    raise AssertionError  # pragma: no cover


def check_memory(parser, steps: int, runs: int, policies: int = 1) -> None:
    """Refuse a run whose :func:`sim.replay.run.memory_estimate` exceeds ``MEMORY_SHARE`` of
    physical memory (no check where the OS does not tell its memory size)."""
    limit, physical = _memory_limit()
    need = memory_estimate(steps, runs, policies)
    if limit is not None and need > limit:
        what = f"{steps} steps x {runs} runs" + (f" x {policies} settings" if policies > 1 else "")
        parser.error(
            f"{what} needs about {_size(need)} of memory (estimate), more than the limit "
            f"{_size(limit)} ({MEMORY_SHARE:.0%} of this machine's {_size(physical)}); "
            "use fewer --steps or --runs"
        )
