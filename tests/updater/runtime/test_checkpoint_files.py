"""Checkpoint files that are broken, and saves that fail, on real files: every failure is an
OSError (missing, a folder, the disk) or a ValueError (bad content) naming the file and what is
wrong, and nothing changes (issue 20)."""

import errno
import json
import os
import shutil
import subprocess
import sys

import nnabla as nn
import numpy as np
import pytest

from tests.broken_files import ARCHIVE_BREAKAGES, rewrite, set_array
from tests.paths import ROOT
from tests.updater.runtime.test_checkpoint import SCOPE, assert_unchanged, build, snapshot
from updater.runtime.checkpoint import load_checkpoint, save_checkpoint

pytestmark = pytest.mark.nnabla

W1 = f"{SCOPE}/fc1/affine/W"


@pytest.fixture
def saved(tmp_path):
    """A checkpoint after 3 steps, and a model and updater (other weights, 1 step) to load into."""
    model, _, upd = build()
    for _ in range(3):
        upd.update()
    path = save_checkpoint(tmp_path / "run.ckpt", upd)
    nn.clear_parameters()
    model, _, upd = build(seed=99)
    upd.update()
    return path, model, upd


def set_state(change):
    def edit(arrays):
        state = json.loads(str(arrays["updater_state"]))
        change(state)
        arrays["updater_state"] = np.array(json.dumps(state))

    return lambda p: rewrite(p, edit)


def plant(key, index, value):
    def edit(arrays):
        arrays[key] = arrays[key].copy()
        arrays[key][index] = value

    return lambda p: rewrite(p, edit)


BROKEN = {
    **ARCHIVE_BREAKAGES,
    "pickled state": (
        set_array("updater_state", np.array([{"a": 1}], dtype=object)),
        "array 'updater_state' holds pickled Python objects",
    ),
    "bad JSON state": (
        set_array("updater_state", np.array('{"policy": ')),
        "array 'updater_state' is not valid JSON",
    ),
    "a JSON list as state": (
        set_array("updater_state", np.array("[1, 2]")),
        "updater state is a JSON list, expected an object",
    ),
    "state without format_version": (
        set_state(lambda s: s.pop("format_version")),
        "updater state lacks format_version",
    ),
    "state with a NaN scale": (
        set_state(lambda s: s["scale_state"].__setitem__("scale", float("nan"))),
        "updater state rejected: saved scale",
    ),
    "file without format_version": (
        lambda p: rewrite(p, lambda a: a.pop("format_version")),
        "lacks the array 'format_version': not a checkpoint written by save_checkpoint",
    ),
    "another format_version": (set_array("format_version", np.array(7)), "format_version is 7"),
    "NaN parameter": (plant(f"param/{W1}", (0, 1), np.nan), f"parameter '{W1}' holds NaN"),
    "inf solver state": (
        plant("solver/fc1/affine/W/mean", (1, 0), -np.inf),
        "solver state 'fc1/affine/W/mean' holds inf",
    ),
    "string parameter": (
        set_array(f"param/{W1}", np.full((4, 8), "abc")),
        f"parameter '{W1}' has dtype <U3, expected a float array",
    ),
    "int solver state": (
        set_array("solver/fc1/affine/W/mean", np.zeros((4, 8), np.int32)),
        "solver state 'fc1/affine/W/mean' has dtype <i4, expected a float array",
    ),
    "wrong shape": (
        set_array(f"param/{W1}", np.zeros((8, 4), np.float32)),
        f"parameter '{W1}' has shape (8, 4) in the file but (4, 8) in the current model",
    ),
    "a state nested too deeply": (
        set_array(
            "updater_state",
            np.array('{"format_version": 1, "x": ' + "[" * 3 * 10**4 + "]" * 3 * 10**4 + "}"),
        ),
        "array 'updater_state' is nested too deeply",
    ),
    "a scale of 10**400": (
        set_state(lambda s: s["scale_state"].__setitem__("scale", 10**400)),
        "updater state rejected: ",
    ),
    "a policy setting of 10**400": (
        set_state(lambda s: s["policy"].__setitem__("growth_factor", 10**400)),
        "updater state rejected: ",
    ),
    "a policy setting of 1e400": (
        lambda p: rewrite(
            p,
            lambda a: a.__setitem__(
                "updater_state",
                np.array(
                    str(a["updater_state"]).replace(
                        '"growth_factor": 2.0', '"growth_factor": 1e400'
                    )
                ),
            ),
        ),
        "updater state rejected: ",
    ),
    "a counter of 10**400": (
        set_state(lambda s: s["counters"].__setitem__("steps", 10**400)),
        "updater state rejected: ",
    ),
    "counters that are a list": (
        set_state(lambda s: s.__setitem__("counters", [1, 2])),
        "updater state rejected: ",
    ),
    "a policy that is a list": (
        set_state(lambda s: s.__setitem__("policy", [1, 2])),
        "updater state rejected: ",
    ),
    "a scale state that is a string": (
        set_state(lambda s: s.__setitem__("scale_state", "big")),
        "updater state rejected: ",
    ),
    "a negative Adam variance": (
        plant("solver/fc1/affine/W/var", (2, 3), -1e-3),
        "solver state 'fc1/affine/W/var' holds negative values (-0.001); Adam keeps",
    ),
    "negative step count": (
        set_array("solver_t/fc1/affine/W", np.array(-1)),
        "solver step count of 'fc1/affine/W' is -1",
    ),
    "text step count": (
        set_array("solver_t/fc1/affine/W", np.array("3")),
        "array 'solver_t/fc1/affine/W' has dtype <U1, expected an integer array",
    ),
}


@pytest.mark.parametrize("case", list(BROKEN))
def test_a_broken_checkpoint_raises_value_error_naming_file_and_problem(case, saved):
    path, model, upd = saved
    make, message = BROKEN[case]
    make(path)
    before = snapshot(model, upd)
    with pytest.raises(ValueError) as err:
        load_checkpoint(path, upd)
    assert str(err.value).startswith(f"checkpoint {path}: ") and message in str(err.value)
    assert_unchanged(before, model, upd)


@pytest.mark.parametrize(
    "make, error, words",
    [
        (lambda p: p.unlink(), FileNotFoundError, "No such file or directory"),
        (lambda p: (p.unlink(), p.mkdir()), IsADirectoryError, "Is a directory"),
    ],
    ids=["missing file", "folder instead of file"],
)
def test_a_missing_checkpoint_or_a_folder_raises_os_error_naming_it(make, error, words, saved):
    path, model, upd = saved
    make(path)
    before = snapshot(model, upd)
    with pytest.raises(error) as err:
        load_checkpoint(path, upd)
    assert f"cannot read checkpoint {path}: {words}" in str(err.value)
    assert_unchanged(before, model, upd)


@pytest.mark.skipif(os.name != "posix" or os.geteuid() == 0, reason="root reads any file")
def test_an_unreadable_checkpoint_raises_permission_error(saved):
    path, model, upd = saved
    path.chmod(0)
    with pytest.raises(PermissionError, match=f"cannot read checkpoint {path}: Permission denied"):
        load_checkpoint(path, upd)


@pytest.mark.parametrize("case", ["NaN parameter", "inf solver state"])
def test_nonfinite_values_load_on_purpose(case, saved):
    path, model, upd = saved
    BROKEN[case][0](path)
    load_checkpoint(path, upd, allow_nonfinite=True)
    values = model.params["fc1/affine/W"].d if case == "NaN parameter" else None
    if values is not None:
        assert np.isnan(values[0, 1]) and np.isfinite(np.delete(values.ravel(), 1)).all()
    else:
        state = model.solver.get_states()["fc1/affine/W"].pstate["mean"].d
        assert state[1, 0] == -np.inf


def test_nonfinite_refusal_names_every_bad_array(saved):
    path, model, upd = saved
    plant(f"param/{W1}", (0, 1), np.nan)(path)
    plant(f"param/{SCOPE}/fc2/affine/b", (0,), np.inf)(path)
    with pytest.raises(ValueError, match="allow_nonfinite=True") as err:
        load_checkpoint(path, upd)
    assert f"parameter '{W1}' holds NaN; parameter '{SCOPE}/fc2/affine/b' holds inf" in str(
        err.value
    )


def test_load_checks_its_flags(saved):
    path, _, upd = saved
    with pytest.raises(TypeError, match="allow_nonfinite must be a bool"):
        load_checkpoint(path, upd, allow_nonfinite="yes")


# ---------------------------------------------------------------- saves that fail

FULL_DISK = """
import hashlib, os, resource, signal, sys
sys.path.insert(0, {root!r})
from tests.nnabla_models import TinyClassifier
from updater.runtime.checkpoint import save_checkpoint
from updater.driver.updater import DynamicLossScalingUpdater
small = TinyClassifier("small", solver="adam")
big = TinyClassifier("big", hidden=2000, solver="adam")  # about 190 KB of checkpoint
updaters = [DynamicLossScalingUpdater(m.solver, m.loss, m.feeder()) for m in (small, big)]
if {limit_size}:  # the file system refuses writes past 40 000 bytes in any file
    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
    resource.setrlimit(resource.RLIMIT_FSIZE, (40000, resource.RLIM_INFINITY))
path = {path!r}
save_checkpoint(path, updaters[0], params=small.params)
first = hashlib.sha256(open(path, "rb").read()).hexdigest()
try:
    save_checkpoint(path, updaters[1], params=big.params)
finally:  # the first checkpoint is intact, no temporary file is left
    same = hashlib.sha256(open(path, "rb").read()).hexdigest() == first
    print(sorted(os.listdir(os.path.dirname(path))), same, flush=True)
"""


def _tmpfs_command(folder, script):
    """Run ``script`` with a 64 KiB tmpfs mounted on ``folder``, in a user and mount namespace
    (no root needed where unprivileged user namespaces are allowed), or None where not."""
    unshare = shutil.which("unshare")
    if unshare is None:
        return None
    probe = subprocess.run(
        [unshare, "-r", "-m", "mount", "-t", "tmpfs", "-o", "size=64k", "tmpfs", str(folder)],
        capture_output=True,
    )
    if probe.returncode != 0:
        return None
    shell = f'mount -t tmpfs -o size=64k tmpfs "{folder}" && exec "$0" -c "$1"'
    return [unshare, "-r", "-m", "sh", "-c", shell, sys.executable, script]


@pytest.mark.parametrize("how", ["full tmpfs", "file size limit"])
def test_a_failed_save_names_the_path_and_prints_nothing_but_the_exception(tmp_path, how):
    folder = tmp_path / "disk"
    folder.mkdir()
    path = folder / "run.ckpt"
    script = FULL_DISK.format(root=str(ROOT), path=str(path), limit_size=how != "full tmpfs")
    if how == "full tmpfs":
        command = _tmpfs_command(folder, script)
        if command is None:
            pytest.skip("no unprivileged tmpfs here (unshare -r -m unavailable)")
        code = errno.ENOSPC
    else:
        command = [sys.executable, "-c", script]
        code = errno.EFBIG
    proc = subprocess.run(command, capture_output=True, text=True, timeout=120)
    listing = "['run.ckpt'] True\n"  # the first checkpoint, nothing else
    assert proc.returncode == 1 and proc.stdout == listing, proc.stderr
    lines = [x for x in proc.stderr.splitlines() if "[nnabla][INFO]" not in x]
    assert lines[0] == "Traceback (most recent call last):", proc.stderr
    reason = f"[Errno {code}] cannot write {path}: {os.strerror(code)}"
    assert lines[-1] == f"OSError: {reason}", proc.stderr
    assert proc.stderr.count("Traceback") == 1 and "Exception ignored" not in proc.stderr


def test_a_solver_state_filled_before_the_first_update_is_saved_with_its_value(tmp_path):
    """nnabla keeps a fill() lazy (no dtype until read): saving read its dtype and raised
    RuntimeError: unclassified error in dtype, naming nothing."""
    model, _, upd = build()
    states = model.solver.get_states()
    states["fc1/affine/W"].pstate["var"].data.fill(0.25)
    model.solver.set_states(states)
    path = save_checkpoint(tmp_path / "filled.ckpt", upd)
    with np.load(path) as z:
        assert (z["solver/fc1/affine/W/var"] == 0.25).all()
        assert (z["solver/fc1/affine/W/mean"] == 0).all()
    nn.clear_parameters()
    model, _, fresh = build(seed=99)
    load_checkpoint(path, fresh)
    assert (model.solver.get_states()["fc1/affine/W"].pstate["var"].d == 0.25).all()
