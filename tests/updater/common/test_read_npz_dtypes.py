"""Issue 50, class 4: an array's declared dtype is checked with its shape before anything is
inflated. A small file whose single-value member declares ``<U...``, ``V...`` or ``S...`` of
many megabytes cost that much memory (1-2 GiB and 13-23 s for the issue's 1 GiB members) before
the refusal; a trace name of any length loaded. Checkpoints, traces and trace parts read through
the one check (``updater.common.npz.dtype_problem``)."""

import shutil
import tracemalloc
import zipfile

import numpy as np
import pytest

from updater import GradientRecorder, Trace
from updater.common.npz import MAX_TEXT
from updater.trace.parts import parts_dir

MEMBER_BYTES = 2**26  # 64 MiB unpacked, about 64 KB deflated
BOMBS = {
    "text": f"<U{MEMBER_BYTES // 4}",
    "void": f"|V{MEMBER_BYTES}",
    "bytes": f"|S{MEMBER_BYTES}",
}


def plant(path, key, descr):
    """Replace the member ``key`` of the .npz at ``path`` by a 0-d array declared ``descr``
    (all zeros, streamed: the test never holds it whole)."""
    source = path.with_suffix(".src")
    shutil.move(path, source)
    with zipfile.ZipFile(source) as old, zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as new:
        for info in old.infolist():
            if info.filename != f"{key}.npy":
                new.writestr(info, old.read(info))
        with new.open(f"{key}.npy", "w", force_zip64=True) as entry:
            header = {"descr": descr, "fortran_order": False, "shape": ()}
            np.lib.format.write_array_header_1_0(entry, header)
            left = np.dtype(descr).itemsize
            while left:
                entry.write(bytes(min(left, 2**20)))
                left -= min(left, 2**20)
    source.unlink()
    assert path.stat().st_size < MEMBER_BYTES // 100  # a small file


def peak_while(load):
    """``(error, peak bytes allocated)`` of calling ``load()``."""
    tracemalloc.start()
    try:
        load()
        error = None
    except ValueError as e:
        error = e
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    return error, peak


def small_trace(tmp_path, name="t"):
    return Trace.from_steps([np.full(8, 0.5), np.full(8, 2.0)], name=name).save(tmp_path / "t.npz")


@pytest.mark.parametrize("kind", list(BOMBS))
@pytest.mark.parametrize("member", ["name", "format_version"])
def test_a_trace_member_declaring_a_huge_dtype_is_refused_before_inflating(tmp_path, kind, member):
    path = small_trace(tmp_path)
    plant(path, member, BOMBS[kind])
    error, peak = peak_while(lambda: Trace.load(path))
    assert error is not None and str(path) in str(error) and "\n" not in str(error)
    assert f"array {member!r}" in str(error)
    assert peak < MEMBER_BYTES // 8, f"{peak:,} bytes allocated before the refusal"


def test_a_trace_part_declaring_a_huge_dtype_is_refused_before_inflating(tmp_path):
    path = tmp_path / "g.npz"  # a crashed recording left one part
    part = parts_dir(path) / "part-00000000.npz"
    parts_dir(path).mkdir()
    shutil.copy(small_trace(tmp_path), part)
    plant(part, "name", BOMBS["text"])
    error, peak = peak_while(lambda: GradientRecorder.recover(path))
    assert error is not None and str(part) in str(error)
    assert peak < MEMBER_BYTES // 8, f"{peak:,} bytes allocated before the refusal"
    assert part.exists() and not path.exists()  # nothing lost, nothing written


@pytest.mark.nnabla
def test_a_checkpoint_state_declaring_a_huge_dtype_is_refused_before_inflating(tmp_path):
    from tests.updater.runtime.test_checkpoint import build
    from updater.runtime.checkpoint import load_checkpoint, save_checkpoint

    _, _, upd = build(spikes={})
    path = save_checkpoint(tmp_path / "run.ckpt", upd)
    plant(path, "updater_state", BOMBS["text"])
    error, peak = peak_while(lambda: load_checkpoint(path, upd))
    assert error is not None and str(path) in str(error) and "updater_state" in str(error)
    assert peak < MEMBER_BYTES // 8, f"{peak:,} bytes allocated before the refusal"


def test_a_name_longer_than_a_file_holds_is_refused_when_made_and_when_read(tmp_path):
    long = "n" * (MAX_TEXT + 1)
    with pytest.raises(ValueError, match="name must hold at most 65,536 characters"):
        Trace.from_steps([np.ones(3)], name=long)
    path = small_trace(tmp_path)
    plant(path, "name", f"<U{MAX_TEXT + 1}")  # a file that says so, made by hand
    with pytest.raises(ValueError, match=r"array 'name' declares text of 65,537 characters"):
        Trace.load(path)
    longest = tmp_path / "longest"  # the planted file is the user's now: not replaced
    longest.mkdir()
    assert Trace.load(small_trace(longest, "n" * MAX_TEXT)).name == "n" * MAX_TEXT
