"""Gradient-trace files that are broken, on real files: ``Trace.load`` raises an OSError
(missing, a folder) or a ValueError naming the file and the problem (issue 20)."""

import os

import numpy as np
import pytest

from sim.traces.families import make_trace
from tests.broken_files import ARCHIVE_BREAKAGES, drop_array, rewrite, set_array
from updater.trace import Trace
from updater.trace.recorder import GradientRecorder


def _rewrite_all(path, change):
    """Every per-step array of the trace at ``path`` becomes ``change(array)``."""
    steps = ("counts", "zeros", "absmax", "nonfinite", "overflow_scale")
    rewrite(path, lambda a: a.update({k: change(a[k]) for k in steps}))


def _with_flush(scales):
    """A breakage: the trace gets a flush curve whose scales are ``scales``."""
    flush = dict(flush_scales=np.full((50, 2), scales), flush_shares=np.full((50, 2), 0.5))
    return lambda p: rewrite(p, lambda a: a.update(flush))


def _with_layers(names, negative=False):
    """A breakage: the trace gets two layers named ``names`` (the first holding every count, or
    with ``negative`` the second holding -1 and the first one more, so the sums still agree)."""

    def change(a):
        counts = np.stack([a["counts"], np.zeros_like(a["counts"])], axis=1)
        if negative:
            counts[:, 0, 0] += 1
            counts[:, 1, 0] -= 1
        zeros = np.stack([a["zeros"], np.zeros_like(a["zeros"])], axis=1)
        a.update(
            layer_names=np.array(names),
            layer_counts=counts,
            layer_zeros=zeros,
            layer_absmax=np.stack([a["absmax"], a["absmax"]], axis=1),
        )

    return lambda p: rewrite(p, change)


BROKEN = {
    **ARCHIVE_BREAKAGES,
    "no counts": (drop_array("counts"), "lacks the array 'counts': not a gradient trace"),
    "string counts": (
        set_array("counts", np.full((50, 121), "7")),
        "array 'counts' has dtype <U1, expected an integer array",
    ),
    "float nonfinite flags": (
        set_array("nonfinite", np.zeros(50)),
        "array 'nonfinite' has dtype <f8, expected a bool array",
    ),
    "a name that is not text": (
        set_array("name", np.array(3)),
        "array 'name' has dtype <i8, expected a string",
    ),
    "zeros of another length": (
        set_array("zeros", np.zeros(49, np.int64)),
        "zeros must have shape (50,), got (49,)",
    ),
    "newer format": (
        set_array("format_version", np.array(99)),
        "format_version 99 is newer than this version reads",
    ),
    "other binades": (set_array("exp_min", np.array(-70)), "uses binades [-70, 40]"),
    "no steps": (
        lambda p: _rewrite_all(p, lambda a: a[:0]),
        "a trace needs at least one step, got 0",
    ),
    "a negative count": (
        set_array("counts", np.where(np.eye(50, 121, dtype=bool), -20000, 1)),
        "counts must be >= 0; step 0 holds -20000",
    ),
    "counts wrapped from uint64": (
        set_array("counts", np.full((50, 121), 2**64 - 5, np.uint64)),
        "counts must be >= 0; step 0 holds -5",
    ),
    "every count negative": (
        set_array("counts", np.full((50, 121), -1)),
        "counts must be >= 0; step 0 holds -1",
    ),
    "counts too large to sum": (
        set_array("counts", np.full((50, 121), 2**62)),
        "more than 9.01e+15: wrapped or made up",
    ),
    "a negative zeros count": (
        set_array("zeros", np.full(50, -3)),
        "zeros must be >= 0; step 0 holds -3",
    ),
    "a NaN absmax": (
        set_array("absmax", np.full(50, np.nan)),
        "absmax must hold finite magnitudes >= 0; step 0 holds nan",
    ),
    "a negative absmax": (
        set_array("absmax", np.full(50, -1.0)),
        "absmax must hold finite magnitudes >= 0; step 0 holds -1.0",
    ),
    "negative flush scales": (
        _with_flush(scales=-(2.0**63)),
        "flush_scales must hold finite scales > 0 (NaN: not measured), got -9.2",
    ),
    "infinite flush scales": (
        _with_flush(scales=np.inf),
        "flush_scales must hold finite scales > 0 (NaN: not measured), got inf",
    ),
    "a name with an ANSI escape": (
        set_array("name", np.array("\x1b[31mred\x1b[0m")),
        "name must be printable text (no newlines or control characters), got '\\x1b[31m",
    ),
    "a name with a newline": (
        set_array("name", np.array("a\nsignal_lost 0%")),
        "name must be printable text",
    ),
    "a layer name with a newline": (
        _with_layers(["fc1/W", "fc2/W\nfake"]),
        "layer_names must be printable text",
    ),
    "negative layer counts that sum right": (
        _with_layers(["fc1/W", "fc2/W"], negative=True),
        "layer_counts must be >= 0; step 0 holds -1",
    ),
    "a NaN overflow scale": (
        set_array("overflow_scale", np.full(50, np.nan)),
        "overflow_scale must hold numbers > 0",
    ),
}


@pytest.fixture
def trace_file(tmp_path):
    return make_trace("spikes", steps=50, seed=2).save(tmp_path / "t.npz")


@pytest.mark.parametrize("case", list(BROKEN))
def test_a_broken_trace_raises_value_error_naming_file_and_problem(case, trace_file):
    make, message = BROKEN[case]
    make(trace_file)
    with pytest.raises(ValueError) as err:
        Trace.load(trace_file)
    text = str(err.value)
    assert text.startswith(f"gradient trace {trace_file}: ") and message in text, text


def test_a_missing_trace_or_a_folder_raises_os_error_naming_it(tmp_path):
    missing = tmp_path / "missing.npz"
    with pytest.raises(FileNotFoundError, match=f"cannot read gradient trace {missing}"):
        Trace.load(missing)
    with pytest.raises(IsADirectoryError, match=f"gradient trace {tmp_path}: Is a directory"):
        Trace.load(tmp_path)


def test_a_good_trace_still_loads(trace_file):
    assert Trace.load(trace_file).steps == 50


def test_a_fifo_is_refused_by_type_without_blocking(tmp_path):
    fifo = tmp_path / "t.npz"
    os.mkfifo(fifo)
    with pytest.raises(OSError, match=f"cannot read gradient trace {fifo}: a FIFO, not a regular"):
        Trace.load(fifo)


def test_a_recorder_or_trace_refuses_a_name_that_is_not_printable(tmp_path):
    with pytest.raises(ValueError, match="name must be printable text"):
        GradientRecorder(tmp_path / "t.npz", name="run\x1b[2J")
    rec = GradientRecorder(tmp_path / "t.npz", per_parameter=True)
    with pytest.raises(ValueError, match="names must be printable text"):
        rec.record(0, [np.ones(3, np.float16)], 1.0, names=["fc1\nW"])
    with pytest.raises(ValueError, match="name must be printable text"):
        Trace.from_steps([np.ones(3)], name="a\rb")
