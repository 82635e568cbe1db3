"""Issue 50: a checkpoint is replaced only by a checkpoint save, only when its content proves
that dls wrote it, keeping its mode, and never when read-only; real nnabla models, real
files, the real ``dls`` command."""

import stat
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from tests.broken_files import damage
from tests.updater.runtime.test_checkpoint import build
from updater.common.writing import UnsafeOutputError, write_text
from updater.runtime.checkpoint import load_checkpoint, save_checkpoint
from updater.trace import Trace
from updater.trace.recorder import GradientRecorder

pytestmark = pytest.mark.nnabla

DLS = str(Path(sys.executable).parent / "dls")


@pytest.fixture
def trained():
    model, _, upd = build()
    upd.update()
    return model, upd


def _refused(save, path, words):
    before = path.read_bytes()
    with pytest.raises(UnsafeOutputError) as e:
        save()
    message = str(e.value)
    assert "\n" not in message and message.startswith(f"{path}: ") and words in message, message
    assert message.endswith("replaces it)") or message.endswith("record to another path)")
    assert path.read_bytes() == before


def test_a_copy_of_a_checkpoint_made_with_numpy_is_the_users_and_still_loads(tmp_path, trained):
    _, upd = trained
    ours = save_checkpoint(tmp_path / "run.ckpt.npz", upd)
    mine = tmp_path / "mine.ckpt.npz"
    np.savez(open(mine, "wb"), **dict(np.load(ours)))  # the same arrays and marker member
    _refused(lambda: save_checkpoint(mine, upd), mine, "not written by dls")
    _, _, fresh = build()
    assert load_checkpoint(mine, fresh).updater_state == upd.state_dict()


def test_a_checkpoint_whose_bytes_were_edited_is_the_users(tmp_path, trained):
    _, upd = trained
    path = save_checkpoint(tmp_path / "run.ckpt.npz", upd)
    damage(path)  # 8 bytes flipped inside a stored array: the directory and comment survive
    _refused(lambda: save_checkpoint(path, upd), path, "not written by dls")


def _as_written_before(path):
    """The checkpoint as the previous version wrote it: the same members, no zip comment."""
    data = path.read_bytes()
    end = data.rfind(b"PK\x05\x06")
    path.write_bytes(data[: end + 20] + b"\0\0")


def test_a_checkpoint_of_the_previous_version_loads_and_is_replaced_only_when_asked(
    tmp_path, trained
):
    _, upd = trained
    path = save_checkpoint(tmp_path / "run.ckpt.npz", upd)
    _as_written_before(path)
    _, _, fresh = build()
    assert load_checkpoint(path, fresh).updater_state == upd.state_dict()
    _refused(lambda: save_checkpoint(path, upd), path, "not written by dls")
    save_checkpoint(path, upd, overwrite=True)
    save_checkpoint(path, upd)  # ours again


def test_no_other_kind_of_output_replaces_a_checkpoint(tmp_path, trained):
    _, upd = trained
    path = save_checkpoint(tmp_path / "run.ckpt.npz", upd)
    words = "a checkpoint written by dls, not "
    trace = Trace.from_steps([np.full(8, 1e-3)] * 4)
    _refused(lambda: trace.save(path), path, words + "a gradient trace")
    _refused(
        lambda: GradientRecorder(path), path, words + "a gradient trace; not replacing it (remove"
    )
    _refused(lambda: write_text(path, "a\n1", csv=True), path, words + "a CSV file")
    before = path.read_bytes()
    command = [DLS, "sweep", "--grid", "hysteresis=1,2", "--runs", "1", "--csv", str(path)]
    proc = subprocess.run(command, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 2 and proc.stdout == "", proc
    assert proc.stderr.splitlines()[-1] == (
        f"dls sweep: error: --csv {path}: {words}a CSV file; not replacing it "
        "(--force/overwrite=True replaces it)"
    )
    assert path.read_bytes() == before
    assert [p.name for p in tmp_path.iterdir()] == ["run.ckpt.npz"]  # no parts, no temporary


def test_a_checkpoint_keeps_its_mode_and_a_read_only_one_is_refused(tmp_path, trained):
    _, upd = trained
    path = save_checkpoint(tmp_path / "run.ckpt.npz", upd)
    path.chmod(0o600)
    save_checkpoint(path, upd)
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    path.chmod(0o444)
    _refused(lambda: save_checkpoint(path, upd), path, "read-only (mode 0444)")
    save_checkpoint(path, upd, overwrite=True)
    assert stat.S_IMODE(path.stat().st_mode) == 0o444


def test_a_recorder_closing_over_a_checkpoint_saved_since_refuses(tmp_path, trained):
    _, upd = trained
    path = tmp_path / "run.npz"
    rec = GradientRecorder(path)  # nothing there yet
    rec.record(0, [np.full(4, 1e-3, np.float16)], 1.0)
    save_checkpoint(path, upd)  # the same name, by mistake
    before = path.read_bytes()
    with pytest.raises(UnsafeOutputError, match="a checkpoint written by dls, not a gradient"):
        rec.close()
    assert path.read_bytes() == before
