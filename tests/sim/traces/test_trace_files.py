"""Gradient-trace files that are broken, on real files: ``Trace.load`` raises an OSError
(missing, a folder) or a ValueError naming the file and the problem (issue 20)."""

import numpy as np
import pytest

from sim.traces.families import make_trace
from tests.broken_files import ARCHIVE_BREAKAGES, drop_array, set_array
from updater.trace import Trace

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
