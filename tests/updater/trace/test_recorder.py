"""GradientRecorder (updater/recorder.py): overflow versus bad batch, and replays of its traces.

A recorded overflow (finite loss, inf/NaN gradients at scale s) must replay as an overflow at
scales >= s and as a normal step below; a non-finite loss (bad data) is skipped at every scale.
The unit tests call ``record`` directly on synthetic arrays; the ``nnabla`` ones record real
cpu:half runs through ``DynamicLossScalingUpdater(recorder=...)``.
"""

import math

import numpy as np
import pytest

from sim.replay.run import simulate
from updater import DynamicScale, StaticScale
from updater.trace import EXP_MIN, NBINS, Trace
from updater.trace.recorder import GradientRecorder

SPIKE = 1e3  # loss weight of a spike batch: TinyClassifier overflows float16 from scale 2**7
SPIKE_OVERFLOWS_FROM = 2.0**7  # measured below (test_spike_threshold_of_the_tiny_model)


def _trace(*calls):
    """A trace from ``record`` calls given as (grads, scale, kwargs) tuples (no file written)."""
    rec = GradientRecorder("unused.npz")
    rec._exit_hook.detach()  # only the in-memory trace is wanted
    for step, (grads, scale, kwargs) in enumerate(calls):
        rec.record(step, grads, scale, **kwargs)
    return rec.trace()


def _f16(*values):
    with np.errstate(over="ignore"):
        return np.array(values, np.float64).astype(np.float16)


# ---------------------------------------------------------------- record(), no nnabla


def test_inf_gradients_with_a_finite_loss_are_an_overflow_at_the_scale_used():
    s = 2.0**10
    t = _trace(
        ([_f16(0.5 * s, 0.0), _f16(2.0**-3 * s)], s, {}),  # a normal step
        ([_f16(0.5 * s, np.inf, 0.0), _f16(np.nan, -(2.0**-3) * s)], s, {}),  # overflowed
        ([_f16(0.5 * s)], s, {"loss_finite": True}),
    )
    assert t.nonfinite.tolist() == [False, False, False]
    assert t.overflow_scale.tolist() == [math.inf, s, math.inf]
    # the overflowed step keeps its finite values only; absmax is the bound 65520 / s
    assert (t.counts[1].sum(), t.zeros[1]) == (2, 1)
    assert t.counts[1][[-1 - EXP_MIN, -3 - EXP_MIN]].tolist() == [1, 1]
    assert t.absmax.tolist() == [0.5, 65520.0 / s, 0.5]


def test_float32_gradients_keep_a_finite_absmax_above_the_bound():
    t = _trace(([np.array([1e6, np.inf], np.float32)], 1.0, {}))
    assert t.overflow_scale.tolist() == [1.0] and t.absmax.tolist() == [1e6]


def test_a_non_finite_loss_is_a_bad_batch_and_replays_skipped_at_every_scale():
    s = 8.0
    good = [_f16(0.25 * s, -1.0 * s)]
    t = _trace(
        (good, s, {}),
        ([_f16(np.nan, 0.25 * s), _f16(np.nan)], s, {"loss_finite": False}),
        (good, s, {"loss_finite": False}),  # finite gradients: a bad batch all the same
        (good, s, {"loss_finite": None}),  # not checked: counts as finite
    )
    assert t.nonfinite.tolist() == [False, True, True, False]
    assert np.isinf(t.overflow_scale).all()
    assert (t.counts[1].sum(), t.absmax[1]) == (1, 0.25)  # the finite values, no bound
    for scale in (2.0**-10, 1.0, 8.0, 2.0**15):
        r = simulate(StaticScale(scale), t, runs=1, jitter=0.0)
        assert r.skipped[:, 0].tolist() == [False, True, True, False], scale
        assert r.overflow[1, 0] == (scale * 0.25 >= 65520)  # gradient overflow, not counted
        assert r.metrics["overflows"][0] == 0 and r.metrics["skipped"][0] == 2


def test_overflow_scale_of_earlier_attempts_is_kept_and_the_smallest_wins():
    finite = [_f16(0.5 * 2.0**6, 2.0**-10)]
    t = _trace(
        (finite, 2.0**6, {"overflow_scale": 2.0**7}),  # retry: 2**7 overflowed, 2**6 did not
        ([_f16(np.inf)], 2.0**8, {"overflow_scale": 2.0**9}),  # the last attempt overflowed too
        ([_f16(np.inf)], 2.0**8, {"overflow_scale": 2.0**7}),  # inconsistent: smallest kept
        (finite, 2.0**6, {"overflow_scale": math.inf}),
        (finite, 2.0**6, {"overflow_scale": None}),
    )
    assert t.overflow_scale.tolist() == [2.0**7, 2.0**8, 2.0**7, math.inf, math.inf]
    assert t.absmax[0] == 0.5  # a finite recorded attempt keeps its measured absmax
    assert not t.nonfinite.any()
    below = simulate(StaticScale(2.0**6), t, runs=1, jitter=0.0)
    at = simulate(StaticScale(2.0**7), t, runs=1, jitter=0.0)
    assert below.overflow[:, 0].tolist() == [False] * 5
    assert at.overflow[:, 0].tolist() == [True, False, True, False, False]
    assert at.metrics["overflows"][0] == 2


@pytest.mark.parametrize(
    "kwargs, name",
    [
        ({"scale": 0.0}, "scale"),
        ({"scale": math.nan}, "scale"),
        ({"scale": math.inf}, "scale"),
        ({"overflow_scale": 0.0}, "overflow_scale"),
        ({"overflow_scale": -4.0}, "overflow_scale"),
        ({"overflow_scale": math.nan}, "overflow_scale"),
        ({"overflow_scale": "8"}, "overflow_scale"),
        ({"overflow_scale": True}, "overflow_scale"),
    ],
)
def test_record_rejects_bad_scales(tmp_path, kwargs, name):
    rec = GradientRecorder(tmp_path / "x.npz")
    args = dict({"scale": 1.0}, **kwargs)
    with pytest.raises(ValueError, match=name):
        rec.record(0, [np.ones(2, np.float16)], **args)
    assert rec.steps == []


def test_written_file_holds_the_overflow_scale(tmp_path):
    path = tmp_path / "r.npz"
    with GradientRecorder(path) as rec:
        rec.record(0, [_f16(1.0)], 4.0)
        rec.record(1, [_f16(np.inf)], 4.0)
    back = Trace.load(path)
    assert back.overflow_scale.tolist() == [math.inf, 4.0] and back.counts.shape == (2, NBINS)


@pytest.mark.parametrize("every", [0, -2, 1.5])
def test_recorder_rejects_bad_every(tmp_path, every):
    with pytest.raises(ValueError, match="every"):
        GradientRecorder(tmp_path / "x.npz", every=every)


# ---------------------------------------------------------------- real nnabla runs


def _run(model, feed, policy, steps, **kwargs):
    from updater import DynamicLossScalingUpdater

    u = DynamicLossScalingUpdater(model.solver, model.loss, feed, policy=policy, **kwargs)
    return [u.update() for _ in range(steps)]


@pytest.mark.nnabla
def test_spike_threshold_of_the_tiny_model(tiny):
    """The spike batch overflows from scale 2**7 on (in an intermediate value: the parameter
    gradients' largest magnitude, 234.6, would allow 2**8)."""
    for scale, finite in ((SPIKE_OVERFLOWS_FROM / 2, True), (SPIKE_OVERFLOWS_FROM, False)):
        m = tiny(solver="sgd", lr=0.0)
        (rec,) = _run(m, m.feeder(weights={0: SPIKE}), StaticScale(scale), 1)
        assert rec.update_applied is finite and rec.loss_finite is not False


@pytest.mark.nnabla
def test_recorder_writes_a_trace_the_simulator_loads(tmp_path, tiny):
    from updater import DynamicLossScalingUpdater

    m = tiny()
    feed = m.feeder(weights={2: SPIKE})
    path = tmp_path / "grads.npz"
    with GradientRecorder(path, every=1, name="tiny") as rec:
        u = DynamicLossScalingUpdater(m.solver, m.loss, feed, scale=2.0**12, recorder=rec)
        records = [u.update() for _ in range(4)]
    trace = Trace.load(path)
    n_values = sum(p.size for p in m.params.values())
    assert trace.steps == 4 and trace.name == "tiny"
    assert [r.update_applied for r in records] == [True, True, False, True]
    assert not trace.nonfinite.any()  # the spike is an overflow, not a bad batch
    assert trace.overflow_scale.tolist() == [math.inf, math.inf, records[2].scale, math.inf]
    assert trace.absmax[2] >= 65520.0 / records[2].scale
    finite_rows = np.isinf(trace.overflow_scale)
    assert (trace.counts.sum(axis=1)[finite_rows] + trace.zeros[finite_rows] == n_values).all()
    for r, counts, absmax in zip(records, trace.counts, trace.absmax):
        if not r.update_applied:
            continue
        # unscaled: absmax * scale is the float16 value the backward pass produced
        scaled = absmax * r.scale
        assert scaled > 1.0 and float(np.float16(scaled)) == scaled
        # and it sits in the highest nonempty binade
        top_bin = np.flatnonzero(counts).max()
        assert math.floor(math.log2(absmax)) == EXP_MIN + top_bin


@pytest.mark.nnabla
def test_recorder_every_records_every_kth_step(tmp_path, tiny):
    from updater import DynamicLossScalingUpdater

    m = tiny()
    rec = GradientRecorder(tmp_path / "t.npz", every=3)
    u = DynamicLossScalingUpdater(m.solver, m.loss, m.feeder(), recorder=rec)
    for _ in range(7):
        u.update()
    rec.close()
    assert rec.steps == [0, 3, 6] and Trace.load(tmp_path / "t.npz").steps == 3


@pytest.mark.nnabla
def test_recorded_spikes_replay_as_overflows_at_and_above_their_scale_and_normal_below(
    tmp_path, tiny
):
    """Record a run whose spike batches overflow; replaying the trace reproduces that run, a
    real run at low scales (where the spikes do not overflow) and one at a high static scale.

    lr=0 keeps the parameters fixed, so every run sees the same gradients and the replays are
    exact."""
    spikes = {2: SPIKE, 6: SPIKE}
    steps = 9
    recorded_policy = DynamicScale(
        init_scale=2.0**10, growth_interval=2, hysteresis=1, max_scale=2.0**12
    )
    m = tiny(solver="sgd", lr=0.0)
    with GradientRecorder(tmp_path / "run.npz") as rec:
        records = _run(m, m.feeder(weights=spikes), recorded_policy, steps, recorder=rec)
    trace = Trace.load(tmp_path / "run.npz")
    overflowed = [not r.update_applied for r in records]
    assert overflowed == [t in spikes for t in range(steps)]
    assert all(r.loss_finite is not False for r in records)
    assert not trace.nonfinite.any()
    expected = [r.scale if o else math.inf for r, o in zip(records, overflowed)]
    assert trace.overflow_scale.tolist() == expected
    assert trace.overflow_scale[2] == 2.0**11 > SPIKE_OVERFLOWS_FROM

    # the recording run itself
    replay = simulate(recorded_policy, trace, runs=2, jitter=0.0)
    assert replay.scale[:, 0].tolist() == [r.scale for r in records]
    assert replay.overflow[:, 0].tolist() == overflowed == replay.skipped[:, 0].tolist()
    assert replay.metrics["final_scale"][0] == records[-1].new_scale
    assert replay.metrics["overflows"][0] == 2 and replay.metrics["skipped"][0] == 2

    # below the recorded overflow scale (and below the real threshold): normal steps
    low = DynamicScale(init_scale=2.0**4, growth_interval=2, hysteresis=1, max_scale=2.0**6)
    m = tiny(scope="low", solver="sgd", lr=0.0)
    real = _run(m, m.feeder(weights=spikes), low, steps)
    assert all(r.update_applied for r in real) and len({r.scale for r in real}) == 3
    replay = simulate(low, trace, runs=1, jitter=0.0)
    assert replay.scale[:, 0].tolist() == [r.scale for r in real]
    assert not replay.skipped.any() and replay.metrics["overflows"][0] == 0
    assert replay.metrics["final_scale"][0] == real[-1].new_scale

    # at and above the recorded overflow scale: overflows, counted as such
    for scale in (2.0**11, 2.0**12):
        m = tiny(scope=f"static{int(scale)}", solver="sgd", lr=0.0)
        real = _run(m, m.feeder(weights=spikes), StaticScale(scale), steps)
        replay = simulate(StaticScale(scale), trace, runs=1, jitter=0.0)
        assert replay.overflow[:, 0].tolist() == [not r.update_applied for r in real] == overflowed
        assert replay.metrics["overflows"][0] == 2 and replay.metrics["skipped"][0] == 2


@pytest.mark.nnabla
def test_recorded_nan_loss_batch_stays_skipped_at_every_scale(tmp_path, tiny):
    """A NaN input makes the loss NaN: the updater passes loss_finite=False, the recorder marks
    a bad batch, and every replay skips it without counting an overflow."""
    m = tiny(solver="sgd", lr=0.0)
    policy = DynamicScale(init_scale=2.0**4, growth_interval=2, hysteresis=1, max_scale=2.0**6)
    with GradientRecorder(tmp_path / "nan.npz") as rec:
        records = _run(m, m.feeder(nan_calls=[3]), policy, 6, recorder=rec)
    assert [r.loss_finite is False for r in records] == [t == 3 for t in range(6)]
    trace = Trace.load(tmp_path / "nan.npz")
    assert trace.nonfinite.tolist() == [t == 3 for t in range(6)]
    assert np.isinf(trace.overflow_scale).all()
    replay = simulate(policy, trace, runs=1, jitter=0.0)
    assert replay.scale[:, 0].tolist() == [r.scale for r in records]
    assert replay.metrics["final_scale"][0] == records[-1].new_scale
    for replayed in (policy, StaticScale(2.0**-4), StaticScale(1.0), StaticScale(2.0**15)):
        r = simulate(replayed, trace, runs=1, jitter=0.0)
        assert r.skipped[:, 0].tolist() == trace.nonfinite.tolist()
        assert r.metrics["overflows"][0] == 0 and r.metrics["skipped"][0] == 1


@pytest.mark.nnabla
def test_retry_records_the_smallest_scale_an_earlier_attempt_overflowed_at(tmp_path, tiny):
    """on_overflow="retry" recomputes the spike batch at lower scales until it is finite; the
    recorded (finite) attempt carries the smallest scale that overflowed: 2**7."""
    m = tiny(solver="sgd", lr=0.0)
    policy = DynamicScale(init_scale=2.0**10, hysteresis=1)
    with GradientRecorder(tmp_path / "retry.npz") as rec:
        records = _run(
            m, m.feeder(weights={1: SPIKE}), policy, 3, recorder=rec, on_overflow="retry"
        )
    assert [r.attempts for r in records] == [1, 5, 1]  # 2**10, 2**9, 2**8, 2**7, 2**6
    assert records[1].update_applied and records[1].scale == SPIKE_OVERFLOWS_FROM / 2
    trace = Trace.load(tmp_path / "retry.npz")
    assert not trace.nonfinite.any()
    assert trace.overflow_scale.tolist() == [math.inf, SPIKE_OVERFLOWS_FROM, math.inf]
    below = simulate(StaticScale(SPIKE_OVERFLOWS_FROM / 2), trace, runs=1, jitter=0.0)
    at = simulate(StaticScale(SPIKE_OVERFLOWS_FROM), trace, runs=1, jitter=0.0)
    assert below.overflow[:, 0].tolist() == [False, False, False]
    assert at.overflow[:, 0].tolist() == [False, True, False]


def test_a_recorder_never_closed_writes_its_trace_at_exit(tmp_path):
    """README usage without close() or a with block: the steps reach the file anyway."""
    import subprocess
    import sys

    path = tmp_path / "grads.npz"
    code = (
        "import numpy as np\n"
        "from updater import GradientRecorder\n"
        f"rec = GradientRecorder({str(path)!r})\n"
        "rec.record(0, [np.array([1.0, 0.5], np.float16)], 8.0)\n"
        "rec.record(1, [np.array([2.0, 0.25], np.float16)], 8.0)\n"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    assert Trace.load(path).steps == 2


def test_closing_writes_once_and_the_exit_hook_adds_only_later_steps(tmp_path):
    rec = GradientRecorder(tmp_path / "t.npz")
    rec.record(0, [np.array([1.0], np.float32)], 1.0)
    assert rec.close() == tmp_path / "t.npz"
    first = (tmp_path / "t.npz").stat().st_mtime_ns
    rec._exit_hook()  # what interpreter exit runs: nothing new since close(), nothing written
    assert (tmp_path / "t.npz").stat().st_mtime_ns == first
    later = GradientRecorder(tmp_path / "u.npz")
    later.record(0, [np.array([1.0], np.float32)], 1.0)
    later.close()
    later.record(1, [np.array([2.0], np.float32)], 1.0)
    later._exit_hook()
    assert Trace.load(tmp_path / "u.npz").steps == 2


def test_repr_of_a_trace_is_one_short_line():
    values = [np.array([1.0, 2.0**-20, 0.0]), np.array([np.inf, 3.0, 1e-3])] * 50
    trace = Trace.from_steps(values, name="tiny")
    text = repr(trace)
    assert text == "Trace(name='tiny', steps=100, nonfinite_steps=50, overflow_scale=seen)"
