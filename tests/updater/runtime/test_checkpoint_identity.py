"""A checkpoint says by its own content that dls wrote it (a copy alone in another folder is
saved over by the README's resume loop), and its declared shapes are checked against the
model before anything is inflated; real nnabla models, real files, a real process."""

import json
import shutil
import subprocess
import sys

import numpy as np
import pytest

from tests.broken_files import rewrite, with_bomb
from tests.paths import ROOT
from tests.updater.runtime.test_checkpoint import SCOPE, assert_unchanged, build, snapshot
from updater.runtime.checkpoint import load_checkpoint, save_checkpoint

pytestmark = pytest.mark.nnabla


def test_the_readme_resume_loop_saves_over_a_checkpoint_copied_alone(tmp_path):
    (tmp_path / "here").mkdir(), (tmp_path / "elsewhere").mkdir()
    model, _, upd = build()
    upd.update()
    save_checkpoint(tmp_path / "here" / "run.ckpt.npz", upd)
    copy = tmp_path / "elsewhere" / "run.ckpt.npz"
    shutil.copy(tmp_path / "here" / "run.ckpt.npz", copy)  # cp run.ckpt.npz elsewhere/
    model, _, upd = build()  # resuming: rebuild, load, train, save every few steps
    load_checkpoint(copy, upd)
    for i in range(4):
        upd.update()
        if i % 2 == 1:
            save_checkpoint(copy, upd)
    assert [p.name for p in copy.parent.iterdir()] == ["run.ckpt.npz"]
    model, _, fresh = build()
    assert load_checkpoint(copy, fresh).updater_state == upd.state_dict()


def test_a_checkpoint_saved_as_the_old_manifest_name_is_what_was_saved(tmp_path):
    model, _, upd = build()
    upd.update()
    path = save_checkpoint(tmp_path / ".dls-written.json", upd)
    model, _, fresh = build()
    assert load_checkpoint(path, fresh).updater_state == upd.state_dict()


def test_an_unknown_scale_state_key_is_refused_and_nothing_changes(tmp_path):
    model, _, upd = build()
    upd.update()
    path = save_checkpoint(tmp_path / "a.ckpt", upd)
    state = upd.state_dict()
    state["scale_state"]["extra"] = 1

    rewrite(path, lambda a: a.__setitem__("updater_state", np.array(json.dumps(state))))
    before = snapshot(model, upd)
    with pytest.raises(ValueError, match=r"unknown keys \['extra'\]"):
        load_checkpoint(path, upd)
    assert_unchanged(before, model, upd)


LOAD = """
import resource, sys
sys.path.insert(0, {root!r})
from tests.updater.runtime.test_checkpoint import build
from updater.runtime.checkpoint import load_checkpoint
model, _, upd = build()
before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
try:
    load_checkpoint({path!r}, upd)
except ValueError as e:
    print(e)
print((resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before) // 1024)
"""


def test_a_parameter_declared_larger_than_the_models_is_refused_before_inflating(tmp_path):
    model, _, upd = build()
    upd.update()
    path = save_checkpoint(tmp_path / "a.ckpt", upd)
    name = f"{SCOPE}/fc1/affine/W"
    with_bomb(path, f"param/{name}", (2**26,))  # 256 MiB of float32 zeros, ~300 KB on disk
    assert path.stat().st_size < 2**20
    script = LOAD.format(root=str(ROOT), path=str(path))
    command = [sys.executable, "-c", script]
    proc = subprocess.run(command, capture_output=True, text=True, timeout=300)
    error, grown_mib = proc.stdout.splitlines()
    assert f"parameter {name!r} has shape (67108864,) in the file but" in error, proc.stderr
    assert int(grown_mib) < 64  # the 256 MiB array was never inflated
