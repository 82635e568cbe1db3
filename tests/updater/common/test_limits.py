"""Limits from what is known (updater/common/npz.py, the trace's loader): declared shapes are
checked before any array is inflated, unknown formats are refused; real files, a real process
for the memory a load takes."""

import subprocess
import sys
import zipfile

import numpy as np
import pytest

from tests.broken_files import with_bomb
from tests.paths import ROOT
from updater.common.npz import read_npz
from updater.trace import Trace

BIG = (2**25,)  # int64 zeros: 256 MiB unpacked, a few hundred KB on disk

LOAD = """
import resource, sys
sys.path.insert(0, {root!r})
from updater.trace import Trace
before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
try:
    Trace.load({path!r})
except ValueError as e:
    print(e)
grown = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before
print(grown // 1024)
"""


def test_a_trace_declaring_more_steps_than_it_has_is_refused_before_inflating(tmp_path):
    path = Trace.from_steps([np.ones(3)] * 5, name="t").save(tmp_path / "t.npz")
    with_bomb(path, "zeros", BIG, np.int64)
    assert path.stat().st_size < 2**20
    script = LOAD.format(root=str(ROOT), path=str(path))
    proc = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=120
    )
    error, grown_mib = proc.stdout.splitlines()
    assert f"zeros must have shape (5,), got {BIG}" in error, proc.stderr
    assert int(grown_mib) < 64  # the 256 MiB array was never inflated


def test_a_trace_of_an_unknown_format_version_is_refused(tmp_path):
    path = Trace.from_steps([np.ones(3)] * 2).save(tmp_path / "t.npz")
    with np.load(path) as z:
        arrays = dict(z)
    with open(path, "wb") as f:
        np.savez(f, **{**arrays, "format_version": np.array(-7)})
    with pytest.raises(ValueError, match=r"format_version -7 is not a trace format \(1 to 6\)"):
        Trace.load(path)


def test_an_entry_stored_twice_among_many_is_named(tmp_path):
    path = tmp_path / "many.npz"
    with zipfile.ZipFile(path, "w") as archive:
        for i in range(30_000):
            archive.writestr(f"a{i}.npy", b"")
        with pytest.warns(UserWarning, match="Duplicate name"):
            archive.writestr("a7.npy", b"")
    with pytest.raises(ValueError, match=r"entries \['a7.npy'\] appear more than once"):
        read_npz(path, "test file")
