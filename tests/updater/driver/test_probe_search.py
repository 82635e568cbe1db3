"""The overflow search of the probes (updater/driver/recording/probes.py, issue 32 item 2):
started at the previous step's threshold it finds the same thresholds and brackets as the walk
outward from the step's scale, in fewer passes; on a scripted step (any threshold, seed and
guess), on a real nnabla graph, and on the shipped models' recording code."""

import math

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from updater.driver.recording.probes import probe_step


class _Scripted:
    """A step that overflows from ``limit`` on (monotonic), for :func:`probe_step`."""

    rounds_per_attempt = 1

    def __init__(self, limit):
        self.limit, self.scale = limit, None

    def with_gradients(self):
        return []

    def host_grads(self):
        return [np.array([self.scale])]

    def probe(self, scale):
        self.scale = scale
        return scale < self.limit

    def save_forward_state(self, slot):
        return self

    def restore(self):
        pass


def _search(limit, seed, guess, bounds=(1.0, 2.0**15)):
    return probe_step(_Scripted(limit), seed, seed < limit, math.inf, True, False, bounds, guess)


@given(
    limit=st.floats(0.5, 2.0**17),
    seed_k=st.integers(0, 15),
    guess_k=st.one_of(st.none(), st.integers(-3, 18)),
)
def test_any_guess_finds_the_walks_bracket(limit, seed_k, guess_k):
    seed = 2.0**seed_k
    walk = _search(limit, seed, None)
    found = _search(limit, seed, None if guess_k is None else 2.0**guess_k)
    assert (found.threshold, found.finite_scale) == (walk.threshold, walk.finite_scale)
    assert found.finite_seed == walk.finite_seed
    if found.finite_grads is not None:  # the gradients of the largest finite probe
        assert found.finite_grads[0].tolist() == [found.finite_seed]


def test_a_good_guess_costs_one_or_two_passes_and_a_censored_step_one():
    # threshold 2**13 (limit between 2**12 and 2**13), seed 2**8: the walk goes 2**9..2**13
    assert _search(5000.0, 2.0**8, None).passes == 5
    assert _search(5000.0, 2.0**8, 2.0**13).passes == 2  # 2**13 overflows, 2**12 finite
    assert _search(5000.0, 2.0**12, 2.0**13).passes == 1  # the seed is the finite end
    assert _search(5000.0, 2.0**14, 2.0**13).passes == 2  # overflowed: 2**13, then 2**12
    censored = _search(math.inf, 2.0**10, 2.0**15)
    assert censored.passes == 1 and censored.threshold == math.inf
    assert censored.finite_scale == 2.0**15
    assert _search(math.inf, 2.0**10, None).passes == 5
    low = _search(0.5, 4.0, 2.0)  # overflows down to min_scale: no finite end
    assert (low.threshold, low.finite_scale, low.finite_seed) == (1.0, 0.0, None)


@pytest.mark.nnabla
def test_a_real_run_records_the_same_thresholds_with_fewer_passes(tmp_path):
    """|grad| = 4 * seed overflows from 2**14; DynamicScale from 2**8 grows every step and
    backs off on the overflows."""
    from tests.updater.driver.test_probes import _sum_model
    from updater import DynamicLossScalingUpdater, DynamicScale, GradientRecorder, Probes

    found = {}
    for previous in (False, True):
        solver, loss = _sum_model(f"search_{previous}", [4.0, -1.0, 0.5])
        recorder = GradientRecorder(tmp_path / f"{previous}.npz")
        probes = Probes(overflow=True, from_previous=previous)
        policy = DynamicScale(init_scale=2.0**8, growth_interval=1, hysteresis=1)
        upd = DynamicLossScalingUpdater(
            solver, loss, None, policy=policy, recorder=recorder, probes=probes
        )
        for _ in range(12):
            upd.update()
        found[previous] = (recorder.trace(), recorder.probe_passes)
    (walk, walk_passes), (guessed, passes) = found[False], found[True]
    assert walk.overflow_scale.tolist() == guessed.overflow_scale.tolist() == [2.0**14] * 12
    np.testing.assert_array_equal(walk.finite_scale, guessed.finite_scale)
    assert walk.finite_scale.tolist() == [2.0**13] * 12
    assert passes < walk_passes
    assert passes <= 2 * 12


@pytest.mark.nnabla
@pytest.mark.parametrize(
    "model, steps",
    [
        ("digits_mlp", 6),
        ("sequence_lstm", 6),
        ("sequence_attention", 3),
        pytest.param("digits_conv_bn", 110, marks=pytest.mark.slow),  # thresholds from step 47
    ],
)
def test_the_shipped_models_record_the_same_thresholds_either_way(tmp_path, model, steps):
    pytest.importorskip("sklearn")
    from sim.nnabla_studies.real_traces import record_model, recording_probes
    from updater.trace import Trace

    traces, passes = [], []
    for previous in (False, True):
        options = dict(recorder_options=dict(per_parameter=False))
        options.update(probes=recording_probes(flush=False, from_previous=previous))
        row = record_model(model, tmp_path / str(previous), steps=steps, **options)
        traces.append(Trace.load(row["path"]))
        passes.append(row["probe_passes"])
    walk, guessed = traces
    np.testing.assert_array_equal(walk.overflow_scale, guessed.overflow_scale)
    np.testing.assert_array_equal(walk.finite_scale, guessed.finite_scale)
    np.testing.assert_array_equal(walk.absmax, guessed.absmax)
    assert (walk.finite_scale > 0).all()  # every step bracketed or censored
    assert passes[1] <= passes[0]
    if model == "digits_conv_bn":
        assert np.isfinite(walk.overflow_scale).sum() >= 5  # the search had work to do
