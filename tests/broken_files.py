"""Ways to break an ``.npz`` file on disk, shared by the loader tests (checkpoints, gradient
traces, measured runs): each is ``name -> (make(path), words the loader's ValueError holds)``."""

from __future__ import annotations

import numpy as np


def rewrite(path, change):
    """Call ``change(arrays)`` on the arrays of the .npz at ``path`` and write them back."""
    with np.load(path) as z:
        arrays = dict(z)
    change(arrays)
    with open(path, "wb") as f:  # a file object: np.savez would add ".npz" to a name
        np.savez(f, **arrays)


def set_array(key, value):
    """A breakage: the array ``key`` becomes ``value``."""
    return lambda p: rewrite(p, lambda arrays: arrays.__setitem__(key, value))


def drop_array(key):
    """A breakage: the array ``key`` is removed."""
    return lambda p: rewrite(p, lambda arrays: arrays.pop(key))


def cut(share):
    """A breakage: the file keeps only its first ``share`` of bytes."""
    return lambda p: p.write_bytes(p.read_bytes()[: int(len(p.read_bytes()) * share)])


def damage(p):
    """Flip bytes in the middle of the archive: the zip directory survives, an entry does not."""
    data = bytearray(p.read_bytes())
    middle = len(data) // 2
    data[middle : middle + 8] = bytes(255 - b for b in data[middle : middle + 8])
    p.write_bytes(bytes(data))


ARCHIVE_BREAKAGES = {
    "empty file": (lambda p: p.write_bytes(b""), "the file is empty (0 bytes)"),
    **{
        f"truncated at {share:.0%}": (cut(share), "truncated or not an .npz archive")
        for share in (0.1, 0.5, 0.9, 0.99)
    },
    "random bytes": (
        lambda p: p.write_bytes(np.random.RandomState(0).bytes(5000)),
        "truncated or not an .npz archive",
    ),
    "a single .npy array": (
        lambda p: np.save(open(p, "wb"), np.zeros(3)),
        "a single NumPy array (.npy), not an .npz archive",
    ),
    "a damaged entry": (damage, "is damaged"),
    "pickled objects": (
        lambda p: np.savez(open(p, "wb"), a=np.array([{"a": 1}], dtype=object)),
        "array 'a' holds pickled Python objects",
    ),
}
"""Breakages of the archive itself, the same for every loader."""


def with_bomb(path, name, shape, dtype=np.float32):
    """Rewrite the .npz at ``path`` with the array ``name`` replaced by zeros of ``shape``,
    deflated (a file of a few hundred KB that unpacks to ``prod(shape) * itemsize`` bytes),
    written in chunks so the test itself never holds it."""
    import zipfile

    with np.load(path) as z:
        arrays = {k: z[k] for k in z.files if k != name}
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as archive:
        for key, value in arrays.items():
            with archive.open(f"{key}.npy", "w") as entry:
                np.lib.format.write_array(entry, value)
        with archive.open(f"{name}.npy", "w", force_zip64=True) as entry:
            header = {"descr": np.dtype(dtype).str, "fortran_order": False, "shape": shape}
            np.lib.format.write_array_header_1_0(entry, header)
            left = int(np.prod(shape)) * np.dtype(dtype).itemsize
            block = bytes(1 << 20)
            while left > 0:
                entry.write(block[: min(left, len(block))])
                left -= len(block)
