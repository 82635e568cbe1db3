"""Trace families, the SSD calibration and the .npz format (sim/traces/families.py)."""

import math

import numpy as np
import pytest

from sim.casting.counts import classify
from sim.casting.underflow import flushed_share
from sim.traces.families import (
    FAMILIES,
    SSD_ZERO_SHARE,
    drifting_trace,
    lognormal_binade_shares,
    lognormal_trace,
    make_trace,
    nan_trace,
    sample_values,
    spiky_trace,
    ssd_binade_shares,
    ssd_trace,
)
from updater.trace import EXP_MAX, EXP_MIN, FORMAT_VERSION, NBINS, Trace, binade_histogram

STEPS = 400


def _top_binade(counts):
    return NBINS - 1 - np.argmax(counts[:, ::-1] > 0, axis=1) + EXP_MIN


def _mean_log2(counts):
    centers = np.arange(NBINS) + EXP_MIN + 0.5
    return (counts * centers).sum(axis=1) / counts.sum(axis=1)


@pytest.mark.parametrize("family", sorted(FAMILIES))
def test_family_shapes_totals_and_absmax_agree_with_counts(family):
    t = make_trace(family, steps=STEPS, seed=3)
    assert t.counts.shape == (STEPS, NBINS) and t.steps == STEPS and t.name == family
    per_step = t.counts.sum(axis=1) + t.zeros
    assert np.all(per_step == per_step[0])  # every step holds values_per_step values
    assert per_step[0] == (2**20 if family == "ssd" else 2**16)
    # the largest magnitude lies in the highest nonempty binade
    assert np.array_equal(np.floor(np.log2(t.absmax)).astype(int), _top_binade(t.counts))


@pytest.mark.parametrize("family", sorted(FAMILIES))
def test_family_seeds_reproduce_and_differ(family):
    a = make_trace(family, steps=200, seed=11)
    b = make_trace(family, steps=200, seed=11)
    c = make_trace(family, steps=200, seed=12)
    for name in ("counts", "zeros", "absmax", "nonfinite"):
        assert np.array_equal(getattr(a, name), getattr(b, name))
    assert not np.array_equal(a.counts, c.counts)


def test_stationary_is_stationary_and_matches_its_shares():
    t = lognormal_trace(steps=2000, log2_mean=-10.0, log2_std=3.0, seed=1)
    means = _mean_log2(t.counts)
    assert abs(means[:200].mean() - means[-200:].mean()) < 0.05
    pooled = t.counts.sum(axis=0) / t.counts.sum()
    expected = lognormal_binade_shares(-10.0, 3.0, tail_z=3.0)
    assert np.abs(pooled - expected).max() < 2e-3
    # the cut at +3 std: nothing at or above 2**(-10 + 9)
    assert t.absmax.max() <= 2.0**-1


def test_lognormal_shares_match_sampled_values():
    rng = np.random.default_rng(0)
    values = np.exp2(rng.normal(-20.0, 4.0, 400_000))
    counts, zeros, _, _ = binade_histogram(values)
    shares = lognormal_binade_shares(-20.0, 4.0)
    assert zeros == 0 and math.isclose(shares.sum(), 1.0)
    assert np.abs(counts / counts.sum() - shares).max() < 3e-3


def test_drifting_shrinks_by_the_requested_binades():
    t = drifting_trace(steps=1000, log2_mean_start=-10.0, log2_mean_end=-24.0, seed=2)
    means = _mean_log2(t.counts)
    drop = means[:50].mean() - means[-50:].mean()
    assert 13.0 < drop < 15.0  # mean of log2|g| falls by ~14 binades
    assert np.all(np.diff(np.log2(t.absmax[::100])) < 0)  # the largest value shrinks too
    # late-training underflow: at scale 8, far more is flushed at the end than at the start
    share = flushed_share(t, np.full(t.steps, 8.0))
    assert share[-1] > 0.2 > 0.01 > share[0]


def test_spikes_multiply_the_largest_values():
    base = lognormal_trace(steps=3000, seed=5, name="spikes")
    t = spiky_trace(steps=3000, seed=5, spike_prob=0.01, spike_log2_factor=10, spike_values=16)
    spiked = np.flatnonzero(t.absmax != base.absmax)
    assert 10 <= spiked.size <= 60  # ~30 expected
    assert np.allclose(t.absmax[spiked], base.absmax[spiked] * 2.0**10)
    for s in spiked[:5]:
        moved = t.counts[s] - base.counts[s]
        assert moved[moved > 0].sum() == 16 and moved.sum() == 0
        assert moved[_top_binade(t.counts[s : s + 1])[0] - EXP_MIN] > 0
    same = np.setdiff1d(np.arange(3000), spiked)
    assert np.array_equal(t.counts[same], base.counts[same])


def test_nan_family_has_bad_steps_and_others_have_none():
    t = nan_trace(steps=5000, nan_prob=0.004, seed=7)
    assert 8 <= t.nonfinite.sum() <= 35  # ~20 expected
    for family in ("stationary", "drifting", "spikes", "ssd"):
        assert not make_trace(family, steps=300).nonfinite.any()


def test_ssd_calibration_matches_the_paper_numbers():
    """66.8% zeros; fp16 at scale 1 flushes 94.7% of the nonzero values (31.4% of all, the
    guide's "another 31%", 5.3% of nonzero left); at 2**15 all but 0.1% survive, no overflow;
    [2**-27, 2**-24) survives at scale 8; ~4% of all values in [2**-32, 2**-30)."""
    values = sample_values(ssd_binade_shares(), 2**19, SSD_ZERO_SHARE, seed=4)
    at1, at8, at32k = (classify(values, s) for s in (1.0, 8.0, 2.0**15))
    assert abs(at1.zeros_in / at1.total - 0.668) < 0.003
    assert abs(at1.share_flushed - 0.947) < 0.003
    assert abs(at1.flushed / at1.total - 0.31) < 0.01
    assert abs((1 - at1.share_flushed) - 0.053) < 0.003
    assert abs(at32k.share_flushed - 0.001) < 0.0003 and at32k.overflow == 0
    a = np.abs(values.astype(np.float64))
    band = values[(a >= 2.0**-27) & (a < 2.0**-24)]
    assert band.size > 1000
    assert classify(band, 8.0).share_flushed == 0.0
    assert classify(band, 1.0).share_flushed > 0.75
    assert abs(np.mean((a >= 2.0**-32) & (a < 2.0**-30)) - 0.04) < 0.005
    assert at8.share_flushed < at1.share_flushed


def test_ssd_trace_binade_model_agrees_with_exact_counts_and_never_overflows_at_32k():
    t = ssd_trace(steps=300, seed=1)
    assert abs(t.zeros.sum() / (t.zeros.sum() + t.counts.sum()) - SSD_ZERO_SHARE) < 0.002
    assert np.all(t.absmax * 2.0**15 < 65520)
    for scale, exact in ((1.0, 0.947), (8.0, 0.7575), (2.0**15, 0.001)):
        share = flushed_share(t, np.full(t.steps, scale)).mean()
        assert abs(share - exact) < 0.002, scale


def test_sample_values_follow_the_shares():
    shares = lognormal_binade_shares(-5.0, 2.0)
    v = sample_values(shares, 200_000, zero_share=0.25, seed=9)
    counts, zeros, _, finite = binade_histogram(v)
    assert finite and abs(zeros / v.size - 0.25) < 0.005
    assert np.abs(counts / counts.sum() - shares).max() < 5e-3
    assert (v < 0).any() and (v > 0).any()


def test_save_load_round_trip(tmp_path):
    t = make_trace("nan", steps=500, seed=3)
    t.nonfinite[:3] = True
    t.overflow_scale[[5, 7, 11]] = [2.0**12, 3.0, 2.0**-3]
    path = t.save(tmp_path / "t.npz")
    assert path.exists() and not list(tmp_path.glob("*.tmp*"))
    back = Trace.load(path)
    assert back.name == "nan"
    for name in ("counts", "zeros", "absmax", "nonfinite", "overflow_scale"):
        assert np.array_equal(getattr(back, name), getattr(t, name))
    assert back.overflow_scale.dtype == np.float64
    assert np.isinf(np.delete(back.overflow_scale, [5, 7, 11])).all()
    with np.load(path) as z:
        assert int(z["format_version"]) == FORMAT_VERSION == 6


def test_overflow_scale_defaults_to_inf_and_is_validated():
    t = Trace.from_steps([[1.0], [np.inf], [2.0]])
    assert t.overflow_scale.tolist() == [math.inf] * 3  # from_steps: inf is a bad batch
    assert t.nonfinite.tolist() == [False, True, False]
    given = np.array([math.inf, 8.0, math.inf])
    t2 = Trace(t.counts, t.zeros, t.absmax, t.nonfinite, "x", given)
    assert t2.overflow_scale.tolist() == [math.inf, 8.0, math.inf]
    given[1] = 1.0
    assert t2.overflow_scale[1] == 8.0  # copied, not shared
    for bad in ([math.inf, 0.0, math.inf], [math.inf, -2.0, 4.0], [math.nan] * 3):
        with pytest.raises(ValueError, match="overflow_scale must hold numbers > 0"):
            Trace(t.counts, t.zeros, t.absmax, t.nonfinite, overflow_scale=bad)
    with pytest.raises(ValueError, match=r"overflow_scale must have shape \(3,\)"):
        Trace(t.counts, t.zeros, t.absmax, t.nonfinite, overflow_scale=[1.0, 2.0])


def test_version_1_file_loads_with_no_recorded_overflow_and_newer_is_refused(tmp_path):
    t = make_trace("nan", steps=20, seed=1, nan_prob=0.3)
    old = {
        "format_version": 1,
        "exp_min": EXP_MIN,
        "exp_max": EXP_MAX,
        "counts": t.counts,
        "zeros": t.zeros,
        "absmax": t.absmax,
        "nonfinite": t.nonfinite,
        "name": "old",
    }
    np.savez(tmp_path / "v1.npz", **old)
    back = Trace.load(tmp_path / "v1.npz")
    assert back.name == "old" and np.isinf(back.overflow_scale).all()
    assert np.array_equal(back.nonfinite, t.nonfinite)  # version 1 overflows stay bad batches
    np.savez(tmp_path / "v9.npz", **dict(old, format_version=9))
    with pytest.raises(ValueError, match="format_version 9"):
        Trace.load(tmp_path / "v9.npz")


def test_recorded_format_npz_loads(tmp_path):
    """A file with the recorder's arrays (no name) loads; its name is the file stem."""
    steps = [np.array([0.0, 1e-3, -2.0]), np.array([np.nan, 4.0, 2.0**-30])]
    rows = [binade_histogram(v) for v in steps]
    path = tmp_path / "recorded_run.npz"
    np.savez(
        path,
        format_version=1,
        exp_min=EXP_MIN,
        exp_max=EXP_MAX,
        counts=np.stack([r[0] for r in rows]),
        zeros=np.array([r[1] for r in rows]),
        absmax=np.array([r[2] for r in rows]),
        nonfinite=~np.array([r[3] for r in rows]),
    )
    t = Trace.load(path)
    assert t.name == "recorded_run" and t.steps == 2
    assert t.nonfinite.tolist() == [False, True]
    assert t.overflow_scale.tolist() == [math.inf, math.inf]
    assert t.absmax.tolist() == [2.0, 4.0] and t.zeros.tolist() == [1, 0]


def test_load_rejects_other_files(tmp_path):
    path = tmp_path / "other.npz"
    np.savez(path, x=np.zeros(3))
    with pytest.raises(ValueError, match="not a gradient trace"):
        Trace.load(path)


@pytest.mark.nnabla
def test_gradient_recorder_file_from_a_real_run_loads_and_replays(tmp_path):
    pytest.importorskip("nnabla")
    import nnabla as nn
    import nnabla.functions as F
    import nnabla.parametric_functions as PF
    import nnabla.solvers as S
    from nnabla.ext_utils import get_extension_context

    from sim.replay.run import simulate
    from updater import DynamicLossScalingUpdater, GradientRecorder
    from updater.policy import DynamicScale

    xs = [np.array([1.0, 0.5, -0.25, 2.0**-3]) for _ in range(6)]
    xs[2][0] = 4096.0  # overflows at scale 2**4 and above
    with nn.context_scope(get_extension_context("cpu", type_config="half")):
        with nn.parameter_scope("test_traces_recorder"):
            x = nn.Variable((4,))
            w = PF.affine(x.reshape((1, 4)), 1, with_bias=False, name="w")
            loss = F.sum(w)
            solver = S.Sgd(lr=0.0)
            solver.set_parameters(nn.get_parameters())
    feed = iter(xs)

    def feeder():
        x.d = next(feed)

    path = tmp_path / "run.npz"
    policy = DynamicScale(init_scale=2.0**5, growth_interval=2, max_scale=2.0**10)
    with GradientRecorder(path) as recorder:
        upd = DynamicLossScalingUpdater(
            solver, loss, data_feeder=feeder, policy=policy, recorder=recorder
        )
        records = [upd.update() for _ in xs]
    t = Trace.load(path)
    assert t.steps == len(xs) and t.name == "run"
    overflowed = [not r.update_applied for r in records]
    assert overflowed == [False, False, True, False, False, False]
    # an overflow (finite loss) is recorded as one, at the scale used: not as a bad batch
    assert not t.nonfinite.any()
    assert t.overflow_scale.tolist() == [records[2].scale if o else math.inf for o in overflowed]
    assert np.allclose(t.absmax[[0, 1, 3]], 1.0)  # |dL/dw| = |x|, largest 1.0
    replay = simulate(policy, t, runs=1, jitter=0.0)
    assert replay.overflow[:, 0].tolist() == overflowed
    assert replay.skipped[:, 0].tolist() == overflowed
    assert replay.scale[:, 0].tolist() == [r.scale for r in records]
    assert replay.metrics["final_scale"][0] == records[-1].new_scale
    assert replay.metrics["overflows"][0] == 1 and replay.metrics["skipped"][0] == 1


@pytest.mark.parametrize(
    "call, name",
    [
        (lambda: lognormal_trace(steps=0), "steps"),
        (lambda: lognormal_trace(log2_std=0.0), "log2_std"),
        (lambda: lognormal_trace(zero_share=1.5), "zero_share"),
        (lambda: lognormal_trace(seed=-1), "seed"),
        (lambda: lognormal_trace(tail_z=float("nan")), "tail_z"),
        (lambda: spiky_trace(spike_log2_factor=0), "spike_log2_factor"),
        (lambda: nan_trace(nan_prob=2.0), "nan_prob"),
        (lambda: ssd_trace(values_per_step=0), "values_per_step"),
        (lambda: make_trace("nope"), "family"),
        (lambda: sample_values(np.ones(3), 10), "shares"),
    ],
)
def test_bad_settings_raise_naming_the_setting(call, name):
    with pytest.raises(ValueError, match=name):
        call()
