"""``repr(GradientRecorder)`` is one line (issue 41): a README block printed the recorder and
got ``<updater.trace.recorder.GradientRecorder object at 0x...>``."""

import pytest

from tests.nnabla_models import TinyClassifier
from updater import DynamicLossScalingUpdater, GradientRecorder, Probes


@pytest.mark.nnabla
def test_repr_says_what_is_recorded_and_held_then_closed(tmp_path):
    m = TinyClassifier("recorder_repr")
    recorder = GradientRecorder(tmp_path / "grads.npz", every=2)
    probes = Probes(overflow=True)
    updater = DynamicLossScalingUpdater(
        m.solver, m.loss, m.feeder(), recorder=recorder, probes=probes
    )
    for _ in range(4):
        updater.update()
    assert repr(recorder) == (
        f"GradientRecorder({str(tmp_path / 'grads.npz')!r}, name='grads', every=2, "
        "overflow_probed=True, steps_held=2, parts_written=0)"
    )
    recorder.close()
    assert repr(recorder).endswith("steps_held=2, parts_written=0, closed)")
    assert "\n" not in repr(recorder)
