"""Issue 50: a path holding control characters reaches no exception message or log line raw,
also in the checkpoint's and the recorder's own messages (a mismatched checkpoint, an
interrupted recording's parts, a recover with nothing to merge, a recording of no steps)."""

import logging

import nnabla as nn
import nnabla.functions as F
import nnabla.parametric_functions as PF
import nnabla.solvers as S
import numpy as np
import pytest

from tests.nnabla_models import cpu_context
from updater import DynamicLossScalingUpdater, load_checkpoint, save_checkpoint
from updater.runtime.checkpoint import CheckpointMismatchError
from updater.trace import Trace
from updater.trace.parts import parts_dir, write_part
from updater.trace.recorder import GradientRecorder

NAME = "run\x1b[2J\x1b]0;pwned\x07"
ESCAPED = "run\\x1b[2J\\x1b]0;pwned\\x07"


def _clean(message: str) -> None:
    assert "\x1b" not in message and "\x07" not in message, repr(message)
    assert ESCAPED in message, repr(message)


def _updater(width, name="affine"):
    with nn.context_scope(cpu_context("half")), nn.parameter_scope(f"esc{width}"):
        x = nn.Variable((2, 3))
        loss = F.mean(PF.affine(x, width, name=name))
        params = nn.get_parameters()
    solver = S.Sgd(0.1)
    solver.set_parameters(params)
    return DynamicLossScalingUpdater(solver, loss), params


@pytest.mark.nnabla
def test_a_mismatched_checkpoint_names_its_path_escaped(tmp_path):
    path = tmp_path / f"{NAME}.ckpt.npz"
    saved, params = _updater(2)
    save_checkpoint(path, saved, params=params)
    other, other_params = _updater(4)
    with pytest.raises(ValueError) as shape:  # another shape
        load_checkpoint(path, other, params=other_params)
    renamed, renamed_params = _updater(2, name="fc")
    with pytest.raises(CheckpointMismatchError) as names:  # other parameter names
        load_checkpoint(path, renamed, params=renamed_params)
    _clean(str(shape.value))
    _clean(str(names.value))


def test_the_recorders_messages_name_their_paths_escaped(tmp_path, caplog):
    path = tmp_path / f"{NAME}.npz"
    write_part(path, 0, Trace.from_steps([np.full(4, 1e-3)] * 2, name="t"), "a" * 16)
    with pytest.raises(ValueError) as interrupted:
        GradientRecorder(path)
    _clean(str(interrupted.value))
    for part in parts_dir(path).iterdir():
        part.unlink()
    parts_dir(path).rmdir()
    empty = tmp_path / f"{NAME}.empty.npz"
    parts_dir(empty).mkdir()
    with pytest.raises(FileNotFoundError) as nothing:
        GradientRecorder.recover(empty)
    _clean(str(nothing.value))
    with caplog.at_level(logging.WARNING, logger="updater.trace.recorder"):
        GradientRecorder(tmp_path / f"{NAME}.none.npz").close()
    _clean(caplog.records[-1].getMessage())
