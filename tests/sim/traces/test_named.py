"""The Python API takes the trace names the CLI takes (issue 41): ``simulate("dynamic",
"spikes")`` raised ``TypeError`` (trace must be a Trace), ``Trace.load("digits_conv_bn")`` said
only "No such file"."""

import numpy as np
import pytest

from sim.replay.run import simulate
from sim.traces.families import make_trace
from sim.traces.named import named_trace
from sim.traces.real import shipped_trace
from updater import DynamicScale, Trace


def test_simulate_takes_a_family_name_in_any_case_as_the_cli_does():
    by_name = simulate("Dynamic", "Spikes", runs=2, seed=3)
    by_trace = simulate(DynamicScale(), make_trace("spikes", steps=10000, seed=3), runs=2, seed=3)
    assert by_name.trace_name == "spikes" and np.array_equal(by_name.scale, by_trace.scale)


def test_simulate_takes_a_shipped_recording_and_a_path(tmp_path):
    shipped = simulate("dynamic", "Digits_Conv_BN", runs=2)
    assert shipped.trace_name == "digits_conv_bn" and shipped.steps == 800
    make_trace("drifting", steps=300).save(tmp_path / "mine.npz")
    assert simulate("dynamic", str(tmp_path / "mine.npz")).steps == 300
    assert simulate("dynamic", tmp_path / "mine.npz").steps == 300


def test_an_unknown_name_names_the_closest():
    with pytest.raises(ValueError, match=r"got 'spikez' \(did you mean 'spikes'\?\)$"):
        simulate("dynamic", "spikez")
    with pytest.raises(ValueError, match=r"did you mean 'digits_mlp"):
        named_trace("digits_mpl")


def test_trace_load_of_a_name_points_to_named_trace(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    with pytest.raises(FileNotFoundError) as error:
        Trace.load("digits_conv_bn")
    assert str(error.value).endswith("is read by sim.traces.named.named_trace('digits_conv_bn')")
    assert named_trace("digits_conv_bn").steps == Trace.load(shipped_trace("digits_conv_bn")).steps
    with pytest.raises(FileNotFoundError) as error:
        Trace.load("missing.npz")  # a file name: the plain error
    assert "named_trace" not in str(error.value)
