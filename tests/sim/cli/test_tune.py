"""dls tune and dls sweep --trace (issue 19, item 5): the report's rule on the user's traces."""

import itertools

import numpy as np
import pytest

from sim.cli.main import main
from sim.traces.families import make_trace
from sim.traces.real import MODELS
from tests.nnabla_models import TinyClassifier

SCOPES = itertools.count()


def _pasted_line_constructs(line: str):
    """Run the printed line with a real model's solver, loss and feeder; return the updater."""
    from updater import DynamicLossScalingUpdater, DynamicScale, HeadroomScale

    model = TinyClassifier(f"tune_{next(SCOPES)}")
    names = dict(
        DynamicLossScalingUpdater=DynamicLossScalingUpdater,
        DynamicScale=DynamicScale,
        HeadroomScale=HeadroomScale,
        solver=model.solver,
        loss=model.loss,
        feed=model.feeder(),
    )
    return eval(line, names)  # the line a user pastes


@pytest.mark.nnabla
@pytest.mark.parametrize("model", MODELS)
def test_tune_on_every_shipped_trace_prints_a_line_that_constructs(model, capsys):
    assert main(["tune", "--trace", model, "--runs", "2"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0].startswith(f"dynamic: 30 settings x 1 trace(s) ({model}), 2 runs")
    words = [" ".join(line.split()) for line in out]
    chosen = next(i for i, w in enumerate(words) if w.startswith("chosen "))
    assert words[chosen + 1].startswith("default 2^15 2000 1 ")
    assert words[chosen + 2].startswith("legend: signal lost = ")
    updater = _pasted_line_constructs(out[-1])
    assert updater.update().scale > 0  # and it trains


@pytest.mark.nnabla
def test_tune_headroom_on_two_traces(tmp_path, capsys):
    a = make_trace("spikes", steps=300, seed=1).save(tmp_path / "a.npz")
    b = make_trace("nan", steps=300, seed=2).save(tmp_path / "b.npz")
    argv = ["tune", "--trace", str(a), "--trace", str(b), "--policy", "headroom", "--runs", "2"]
    assert main(argv) == 0
    out = capsys.readouterr().out.splitlines()
    assert "8 settings x 2 trace(s) (spikes, nan)" in out[0]
    assert "policy=HeadroomScale(margin=" in out[-1]
    assert _pasted_line_constructs(out[-1]).policy.margin <= 2  # the rule's eligible margins


@pytest.mark.parametrize(
    "make, message",
    [
        (lambda d: d / "missing.npz", "trace file not found"),
        (lambda d: d, "is a folder"),
        (lambda d: (d / "x.npz").write_bytes(b"not a zip") and d / "x.npz", "not an .npz"),
        (lambda d: np.savez(d / "r.npz", scale=np.ones(3)) or d / "r.npz", "lacks"),
    ],
)
def test_bad_traces_exit_2_with_one_line(tmp_path, capsys, make, message):
    with pytest.raises(SystemExit) as exc:
        main(["tune", "--trace", str(make(tmp_path))])
    err = capsys.readouterr().err.strip().splitlines()
    assert exc.value.code == 2 and message in err[-1] and err[-1].startswith("dls tune: error:")


def test_sweep_takes_recorded_traces_with_or_without_families(tmp_path, capsys):
    path = make_trace("drifting", steps=200, seed=3).save(tmp_path / "rec.npz")
    argv = ["sweep", "--grid", "growth_interval=50,500", "--runs", "2", "--steps", "200"]
    assert main([*argv, "--families", "", "--trace", str(path)]) == 0
    out = capsys.readouterr().out
    blocks = out.split("\n\n")  # the table's blocks of columns each name the rows
    assert "traces: drifting," in out and all(b.count(" drifting ") == 2 for b in blocks)
    assert main([*argv, "--families", "stationary", "--trace", str(path)]) == 0
    out = capsys.readouterr().out
    blocks = out.split("\n\n")
    assert "traces: stationary,drifting" in out and all(
        b.count(" stationary ") == 2 for b in blocks
    )
    with pytest.raises(SystemExit):
        main([*argv, "--families", ""])  # nothing to sweep
