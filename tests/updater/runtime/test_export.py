"""nnabla's own parameter file of a checkpoint's weights (issue 30): ``nn.load_parameters`` on
the exported file gives the trained weights, bit for bit, with no graph built; on cpu:half."""

import logging

import nnabla as nn
import numpy as np
import pytest

from tests.nnabla_models import TinyBNClassifier, param_values
from updater import DynamicLossScalingUpdater, export_parameters, save_checkpoint

pytestmark = pytest.mark.nnabla


@pytest.fixture
def checkpoint(tmp_path):
    """``(path, trained values)`` of a checkpoint of a trained BatchNormalization model."""
    m = TinyBNClassifier("exp")
    u = DynamicLossScalingUpdater(m.solver, m.loss, m.feeder())
    for _ in range(4):
        u.update()
    path = save_checkpoint(tmp_path / "run.ckpt.npz", u)
    return path, param_values(nn.get_parameters(grad_only=False))


@pytest.mark.parametrize("suffix", [".h5", ".protobuf"])
def test_load_parameters_on_the_export_gives_the_trained_weights(tmp_path, checkpoint, suffix):
    path, trained = checkpoint
    nn.clear_parameters()
    out = export_parameters(path, tmp_path / f"weights{suffix}")
    assert nn.get_parameters(grad_only=False) == {}  # nothing was built to export
    nn.load_parameters(str(out))
    loaded = param_values(nn.get_parameters(grad_only=False))
    assert list(loaded) == list(trained)  # the same names, in the same order
    for name in trained:
        assert np.array_equal(loaded[name], trained[name]), name
    assert not np.array_equal(trained["exp/bn1/bn/mean"], 0)  # trained, not the initial values


def test_export_refuses_another_suffix_and_a_file_that_is_not_a_checkpoint(tmp_path, checkpoint):
    path, _ = checkpoint
    with pytest.raises(ValueError, match=r"must end in .h5 or .protobuf"):
        export_parameters(path, tmp_path / "weights.npz")
    other = tmp_path / "other.npz"
    np.savez(other, a=np.zeros(3))
    with pytest.raises(ValueError, match="not a checkpoint written by save_checkpoint"):
        export_parameters(other, tmp_path / "weights.h5")
    assert not (tmp_path / "weights.h5").exists()


class _Lines(logging.Handler):
    def __init__(self):
        super().__init__(logging.DEBUG)
        self.lines = []

    def emit(self, record):
        self.lines.append(f"{record.name}: {record.getMessage()}")


@pytest.mark.parametrize("suffix", [".h5", ".protobuf"])
def test_the_log_names_the_exported_file_not_a_file_descriptor(tmp_path, checkpoint, suffix):
    """Issue 41: nnabla's own line named the temporary file object
    (``Parameter save (.h5): <_io.BufferedWriter name=4>``)."""
    lines = _Lines()
    loggers = [logging.getLogger("nnabla"), logging.getLogger("updater.runtime.export")]
    levels = [log.level for log in loggers]
    for log in loggers:
        log.addHandler(lines)
        log.setLevel(logging.INFO)
    try:
        out = export_parameters(checkpoint[0], tmp_path / f"run{suffix}")
    finally:
        for log, level in zip(loggers, levels):
            log.removeHandler(lines)
            log.setLevel(level)
    assert lines.lines == [f"updater.runtime.export: Parameter save ({suffix}): {out}"]
    assert logging.getLogger("nnabla").filters == []  # nnabla's other lines are left alone


def test_the_state_entries_stay_out_and_a_script_reads_them_from_the_checkpoint(tmp_path):
    """Statistics made with ``nn.Variable`` and ``forward_state`` are saved as ``state/``, not
    exported: loading the export registers exactly the checkpoint's parameters (no
    ``BatchNormalization[0]/mean`` parameter that no graph looks up), and the state's values
    are there for ``np.load``, as docs/guide/checkpoints.md says."""
    from tests.updater.runtime.stateful_model import StatefulModel

    nn.clear_parameters()
    m = StatefulModel(finite_check="numpy")
    m.train(3)
    path = save_checkpoint(tmp_path / "run.ckpt.npz", m.updater)
    with np.load(path) as z:
        params = [k[len("param/") :] for k in z.files if k.startswith("param/")]
        mean = z["state/BatchNormalization[0]/mean"]
        assert "state/forward_state[0]" in z.files
    nn.clear_parameters()
    nn.load_parameters(str(export_parameters(path, tmp_path / "run.h5")))
    assert sorted(nn.get_parameters(grad_only=False)) == sorted(params)
    assert np.array_equal(mean, m.statistics[0].d) and not np.array_equal(mean, 0)
