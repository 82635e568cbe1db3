"""Every shipped trace, and a file of every older format version, loads to the same fields as
the loader before the trace's optional groups became sub-records (issue 38 item 4): the
fingerprints in ``loaded_fields.json`` were written by that loader (commit 2a08a39) with
:func:`fingerprints`."""

import hashlib
import json
from pathlib import Path

import numpy as np
import pytest

from tests.paths import SHIPPED_TRACES
from updater.trace import Trace

EXPECTED = Path(__file__).with_name("loaded_fields.json")
FIELDS = (
    "counts",
    "zeros",
    "absmax",
    "nonfinite",
    "name",
    "overflow_scale",
    "layer_names",
    "layer_counts",
    "layer_zeros",
    "layer_absmax",
    "overflow_probed",
    "flush_scales",
    "flush_shares",
    "finite_scale",
    "forward_peak",
    "forward_where",
    "every",
)
"""The public fields of a trace, as the docs show them."""
VERSION_KEYS = {
    1: ("counts", "zeros", "absmax", "nonfinite", "name"),
    2: ("overflow_scale",),
    3: ("layer_names", "layer_counts", "layer_zeros", "layer_absmax"),
    4: ("overflow_probed", "flush_scales", "flush_shares"),
    5: ("finite_scale", "forward_peak", "forward_where"),
    6: ("every",),
}
"""The arrays each format version added."""


def fingerprint(trace) -> dict:
    """Each public field of ``trace``: its type, and its dtype, shape and hash or its value."""
    out = {"repr": repr(trace), "steps": trace.steps, "has": []}
    for has in ("has_layers", "has_flush", "has_forward"):
        if getattr(trace, has):
            out["has"].append(has)
    for name in FIELDS:
        value = getattr(trace, name)
        if isinstance(value, np.ndarray):
            digest = hashlib.sha256(np.ascontiguousarray(value).tobytes()).hexdigest()
            out[name] = [str(value.dtype), list(value.shape), digest]
        elif isinstance(value, tuple):
            out[name] = ["tuple", hashlib.sha256("\n".join(value).encode()).hexdigest()]
        else:
            out[name] = [type(value).__name__, value]
    return out


def old_format_files(folder: Path) -> dict:
    """A file of each format version 1 to 6, cut from the shipped ``digits_conv_bn`` (its
    first 50 steps, one recorded with every group; format 5: version 6 adds ``every`` 3)."""
    source = dict(np.load(SHIPPED_TRACES / "digits_conv_bn.npz"), every=np.array(3))
    files = {}
    for version in VERSION_KEYS:
        keys = [k for v in range(1, version + 1) for k in VERSION_KEYS[v]]
        arrays = {k: source[k] for k in keys}
        for k in keys:
            if source[k].ndim and k != "layer_names":  # per step: the first 50 steps
                arrays[k] = source[k][:50]
        arrays.update(format_version=version, exp_min=source["exp_min"])
        arrays["exp_max"] = source["exp_max"]
        files[f"v{version}"] = folder / f"v{version}.npz"
        np.savez(files[f"v{version}"], **arrays)
    return files


def fingerprints(folder: Path) -> dict:
    """The fingerprint of each shipped trace and of each old format file written in
    ``folder``."""
    shipped = sorted(p for p in SHIPPED_TRACES.glob("*.npz") if not p.name.endswith(".run.npz"))
    paths = {p.name: p for p in shipped}
    paths.update(old_format_files(folder))
    return {key: fingerprint(Trace.load(path)) for key, path in paths.items()}


def test_every_shipped_trace_and_old_format_loads_as_before(tmp_path):
    expected = json.loads(EXPECTED.read_text())
    got = json.loads(json.dumps(fingerprints(tmp_path)))
    assert sorted(got) == sorted(expected)
    assert len([k for k in got if k.endswith(".npz")]) == 8  # the shipped recordings
    for key in expected:
        assert got[key] == expected[key], key


@pytest.mark.parametrize("version", [1, 4, 6])
def test_the_old_format_files_hold_what_their_version_had(tmp_path, version):
    """The fixture itself: a version's file has its arrays and no later ones."""
    path = old_format_files(tmp_path)[f"v{version}"]
    with np.load(path) as z:
        assert int(z["format_version"]) == version
        assert ("layer_names" in z) is (version >= 3)
        assert ("every" in z) is (version >= 6)
