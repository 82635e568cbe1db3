"""Checkpoints carry every state the updater tracks (issue 48, finding 4): BatchNormalization
statistics made by hand as ``nn.Variable`` and the ``forward_state`` Variables (a float64 moving
average), under names that do not depend on the process. A run resumed in a new process is bit
for bit the uninterrupted one; a state the file and the model do not share is named."""

import subprocess
import sys

import nnabla as nn
import numpy as np
import pytest

from tests.paths import ROOT
from tests.updater.runtime.stateful_model import StatefulModel
from updater.runtime.checkpoint import (
    CheckpointMismatchError,
    checkpoint_state,
    load_checkpoint,
    save_checkpoint,
)
from updater.runtime.entries import checkpoint_parameters

pytestmark = pytest.mark.nnabla

STEPS, SPLIT = 12, 5
STATE = {
    **{
        f"state/BatchNormalization[{i}]/{k}": np.float32
        for i in (0, 1)
        for k in ("mean", "variance")
    },
    "state/forward_state[0]": np.float64,
    "state/forward_state[1]": np.int32,
}


def _run(*args):
    command = [sys.executable, "-m", "tests.updater.runtime.stateful_model", *map(str, args)]
    proc = subprocess.run(command, capture_output=True, text=True, cwd=ROOT, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]


@pytest.mark.parametrize("check", ["numpy", "solver", "nnabla"])
def test_a_resume_in_a_new_process_is_bit_identical_with_hand_made_state(tmp_path, check):
    nn.clear_parameters()
    full = StatefulModel(finite_check=check)
    trajectory = full.train(STEPS)
    assert not all(applied for _, applied in trajectory), "the run must skip some steps"
    expected = full.values()
    assert expected["ema"].dtype == np.float64 and expected["count"].dtype == np.int32
    assert expected["count"].item() == sum(applied for _, applied in trajectory)  # restored

    ckpt = tmp_path / "run.ckpt"
    _run(SPLIT, tmp_path / "first.npz", check, "--save", ckpt)
    _run(STEPS - SPLIT, tmp_path / "rest.npz", check, "--load", ckpt)  # a new process and start
    with np.load(tmp_path / "first.npz") as first, np.load(tmp_path / "rest.npz") as rest:
        resumed = [tuple(p) for p in first["trajectory"]] + [tuple(p) for p in rest["trajectory"]]
        assert resumed == [tuple(p) for p in np.array(trajectory)]
        assert sorted(rest.files) == sorted([*expected, "trajectory"])
        for key, values in expected.items():
            assert rest[key].dtype == values.dtype, key
            assert rest[key].tobytes() == values.tobytes(), key
    with np.load(ckpt) as z:
        assert {k: z[k].dtype for k in z.files if k.startswith("state/")} == STATE


def test_the_state_is_named_by_its_writer_and_registered_state_stays_a_parameter(tmp_path):
    nn.clear_parameters()
    model = StatefulModel()
    named = checkpoint_parameters(model.updater)
    state = checkpoint_state(model.updater, named)
    assert sorted(state) == sorted(k.partition("/")[2] for k in STATE)
    assert state["forward_state[0]"] is model.ema
    assert state["BatchNormalization[1]/mean"] == model.statistics[2]  # the same Variable
    # a statistic given as a parameter is saved as that parameter, once
    both = checkpoint_state(model.updater, {**named, "bn/mean": model.statistics[0]})
    assert "BatchNormalization[0]/mean" not in both and len(both) == len(STATE) - 1


def test_a_state_the_file_and_the_model_do_not_share_is_named(tmp_path):
    nn.clear_parameters()
    model = StatefulModel()
    model.train(2)
    path = save_checkpoint(tmp_path / "run.ckpt", model.updater)
    nn.clear_parameters()
    other = StatefulModel(seed=99)
    other.updater.forward_state = [other.ema]  # the count of passes is not tracked here
    with pytest.raises(CheckpointMismatchError, match=r"found in the current .*forward_state\[1\]"):
        load_checkpoint(path, other.updater)
    assert other.ema.d.tolist() == [[0.25] * 6]  # nothing changed
    with np.load(path) as z:  # a checkpoint without the statistics (as earlier versions wrote)
        arrays = {k: z[k] for k in z.files if "BatchNormalization" not in k}
    with open(path, "wb") as f:
        np.savez(f, **arrays)
    other.updater.forward_state = [other.ema, other.count]
    with pytest.raises(CheckpointMismatchError, match=r"missing .*BatchNormalization\[0\]/mean"):
        load_checkpoint(path, other.updater)
    report = load_checkpoint(path, other.updater, strict=False)
    assert report.missing == [
        f"state/BatchNormalization[{i}]/{k}" for i in (0, 1) for k in ("mean", "variance")
    ]
    assert other.ema.data.data.tolist() == model.ema.data.data.tolist()  # loaded, in float64
    assert other.count.data.data.tolist() == [2]
    assert other.statistics[0].d.tolist() == [[0.0] * 6]  # left as it was, as the report says
