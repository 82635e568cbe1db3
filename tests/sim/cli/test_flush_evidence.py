"""``dls simulate`` and ``dls tune`` never give a confident figure from flushing the trace did not
measure (issue 49, A): one tiny real model recorded three ways in cpu:half, and tiny traces made
here."""

import dataclasses
import itertools
import re

import nnabla as nn
import nnabla.functions as F
import nnabla.solvers as S
import numpy as np
import pytest

from sim.cli.main import main
from tests.nnabla_models import cpu_context
from updater import DynamicLossScalingUpdater, DynamicScale, GradientRecorder, NnablaLegacy, Probes
from updater.trace import Trace

SCOPES = itertools.count()
EVERY_STEP = Probes(overflow=True, flush=True, flush_every=1)  # 4 steps: the default samples few


def _record(path, policy, probes, steps=4):
    """loss = sum(w * x) in half with x = 2**0, 2**-2, ..., 2**-30: the float16 input already
    flushes x below 2**-24, whatever the loss scale; the recording's name is ``sum``."""
    values = (2.0 ** -np.arange(0, 32, 2)).astype(np.float32)
    with nn.context_scope(cpu_context("half")), nn.parameter_scope(f"flush_{next(SCOPES)}"):
        x = nn.Variable.from_numpy_array(values)
        w = nn.parameter.get_parameter_or_create("w", x.shape, np.ones(x.shape, np.float32))
        loss = F.sum(w * x)
        solver = S.Sgd(0.0)
        solver.set_parameters({"w": w})
    recorder = GradientRecorder(path, name="sum")
    upd = DynamicLossScalingUpdater(
        solver, loss, None, policy=policy, recorder=recorder, probes=probes
    )
    for _ in range(steps):
        upd.update()
    recorder.close()
    return path


def _row(out: str, label: str = "dynamic") -> list:
    """The cells of the first table row of ``label`` (cells split on 2+ spaces)."""
    line = next(x for x in out.splitlines() if x.startswith(label + " "))
    return re.split(r"\s{2,}", line.strip())


def _simulate(capsys, *argv) -> str:
    assert main(["simulate", *argv, "--runs", "4", "-q"]) == 0
    return capsys.readouterr().out


@pytest.mark.nnabla
def test_one_model_recorded_three_ways(tmp_path, capsys):
    """Under nnabla-legacy (scale 8) with flush probes, the default's signal lost at 2**15 is
    measured (the recorder measures 2**3 to 2**15 whatever its scale) and equals what the
    recording under the default measured; without flush probes it is "not measured", never 0%.
    (tests/sim/cli/test_three_recordings.py does the same on a model whose flushing moves with
    the scale.)"""
    legacy = _record(tmp_path / "legacy.npz", NnablaLegacy(), EVERY_STEP)
    bare = _record(tmp_path / "bare.npz", NnablaLegacy(), Probes(overflow=True))
    default = _record(tmp_path / "dyn.npz", DynamicScale(), EVERY_STEP)
    measured = Trace.load(default).flush_shares[:, -1].mean()  # at 2**15
    assert measured > 0

    for path in (legacy, default):
        out = _simulate(capsys, "--trace", str(path))
        assert _row(out)[6] == f"{100 * measured:.3g}%"
        assert "not measured" not in out and "bounded" not in out

    out = _simulate(capsys, "--trace", str(bare))
    assert _row(out)[5:7] == ["not measured", ">=0%"]
    assert "flushing not measured: sum holds no flush measurement" in " ".join(out.split())

    assert main(["tune", "--trace", str(bare), "--runs", "2", "-q"]) == 0
    words = " ".join(capsys.readouterr().out.split())
    assert "note: not a confident ranking: the traces measured no flushing" in words


def _made(tmp_path, shares) -> str:
    """A trace made here as a recording at scale 8 with flush probes would hold."""
    steps = 5
    t = Trace.from_steps([[2.0**-10, 1.0]] * steps, name="made")
    scales = np.tile(8.0 * 2.0 ** np.array([-12, -8, -4, 0]), (steps, 1))
    t = dataclasses.replace(t, flush_scales=scales, flush_shares=np.tile(shares, (steps, 1)))
    return str(t.save(tmp_path / "made.npz"))


def test_exact_beyond_the_measured_scales_is_said_and_kept(tmp_path, capsys):
    out = _simulate(capsys, "--trace", _made(tmp_path, (0.5, 0.25, 0.0, 0.0)))
    assert _row(out)[5:7] == ["0%", "0%"]
    words = " ".join(out.split())
    assert "flushing above the measured scales on 100% of applied steps is exact" in words
    assert "bounded" not in words


def test_tune_ranks_no_setting_confidently_on_extrapolated_flushing(tmp_path, capsys):
    path = _made(tmp_path, (0.5, 0.25, 0.1, 0.05))
    assert main(["tune", "--trace", path, "--runs", "2", "-q"]) == 0
    out = capsys.readouterr().out
    words = " ".join(out.split())
    assert "note: not a confident ranking: for 30 of 30 settings" in words
    assert _row(out, "chosen")[-2] == "0%-5.00%" and _row(out, "default")[-2] == "0%-5.00%"
    assert out.splitlines()[-1].startswith("DynamicLossScalingUpdater(")


def test_an_extrapolation_below_the_printed_digits_keeps_the_figure_and_says_so(tmp_path, capsys):
    """Step 0 was recorded at 2**14, the others at 2**15: the default replays step 0 above its
    measured scales, on a share too small to move the printed figure."""
    steps = 5
    t = Trace.from_steps([[2.0**-10, 1.0]] * steps, name="made")
    tops = np.array([2.0**14] + [2.0**15] * (steps - 1))
    scales = tops[:, None] * 2.0 ** np.array([-12, -8, -4, 0])
    shares = np.tile([0.01, 0.005, 0.002, 0.001], (steps, 1))
    shares[0, -1] = 1e-8
    t = dataclasses.replace(t, flush_scales=scales, flush_shares=shares)
    out = _simulate(capsys, "--trace", str(t.save(tmp_path / "made.npz")), "--jitter", "0")
    assert "-" not in _row(out)[6]
    words = " ".join(out.split())
    assert "on 20.0% of applied steps the policy's scale lay outside the scales made" in words
    assert "less than its printed digits" in words and "bounded" not in words
