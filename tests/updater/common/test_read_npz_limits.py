"""What ``read_npz`` (checkpoints, traces, measured runs) refuses before reading (issue 29, items
1 and 2, in part): special files by type, never opened (a FIFO hung ``load_checkpoint``, a
device ran out of memory); an entry stored twice (the last copy won); an archive whose declared
sizes pass a limit the caller can raise; an array whose header declares more bytes than its
entry holds (read_array allocated what the header said)."""

import io
import os
import threading
import zipfile

import numpy as np
import pytest

from updater import Trace
from updater.common.npz import read_npz


def read_within(path, seconds=10, **kwargs):
    """``read_npz(path)`` in a thread: (finished within ``seconds``, exception or None)."""
    outcome = {}

    def run():
        try:
            read_npz(path, "checkpoint", **kwargs)
            outcome["error"] = None
        except Exception as e:  # the test looks at it
            outcome["error"] = e

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    thread.join(seconds)
    return not thread.is_alive(), outcome.get("error")


def npy_bytes(array):
    buffer = io.BytesIO()
    np.lib.format.write_array(buffer, array, allow_pickle=False)
    return buffer.getvalue()


def test_a_fifo_is_refused_by_type_without_blocking(tmp_path):
    fifo = tmp_path / "run.ckpt.npz"
    os.mkfifo(fifo)
    done, error = read_within(fifo)
    assert done, "read_npz blocked on a FIFO"
    assert isinstance(error, OSError) and "a FIFO, not a regular file" in str(error)
    assert str(fifo) in str(error)


@pytest.mark.parametrize("device", ["/dev/zero", "/dev/urandom", "/dev/null"])
def test_a_device_is_refused_by_type(device):
    done, error = read_within(device)
    assert done and isinstance(error, OSError) and "character device" in str(error)


def test_an_entry_stored_twice_is_refused(tmp_path):
    path = tmp_path / "twice.npz"
    with zipfile.ZipFile(path, "w") as z, pytest.warns(UserWarning, match="Duplicate name"):
        z.writestr("a.npy", npy_bytes(np.zeros(2)))
        z.writestr("a.npy", npy_bytes(np.ones(2)))
    with pytest.raises(ValueError, match=r"entries \['a.npy'\] appear more than once"):
        read_npz(path, "checkpoint")


def test_an_archive_declaring_more_than_the_limit_is_refused_before_unpacking(tmp_path):
    path = tmp_path / "zeros.npz"
    np.savez_compressed(path, a=np.zeros(10**6, np.float32))  # 4 MB unpacked, a few KB on disk
    assert path.stat().st_size < 10**5
    with pytest.raises(ValueError, match="would unpack to 4,000,128 bytes, more than the limit"):
        read_npz(path, "checkpoint", max_bytes=10**6)
    assert read_npz(path, "checkpoint", max_bytes=10**7).array("a", "float").size == 10**6
    with pytest.raises(ValueError, match="gradient trace .* more than the limit"):
        Trace.load(path, max_bytes=10**6)


def test_a_header_declaring_more_than_its_entry_is_refused_without_allocating(tmp_path):
    buffer = io.BytesIO()
    header = {"descr": "<f8", "fortran_order": False, "shape": (10**12,)}
    np.lib.format.write_array_header_1_0(buffer, header)
    buffer.write(np.zeros(4).tobytes())  # 32 bytes where the header promises 8 TB
    path = tmp_path / "bomb.npz"
    with zipfile.ZipFile(path, "w") as z:
        z.writestr("a.npy", buffer.getvalue())
    with pytest.raises(ValueError, match=r"array 'a' is damaged \(its header declares 8,000,"):
        read_npz(path, "checkpoint")
