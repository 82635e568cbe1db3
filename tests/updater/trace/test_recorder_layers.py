"""GradientRecorder(per_parameter=True): one histogram per parameter array, matched by name, and
the trace's checks of its per-layer fields."""

import numpy as np
import pytest

from tests.updater.trace.test_recorder import SPIKE, _f16
from updater.trace import EXP_MAX, EXP_MIN, NBINS, Trace
from updater.trace.format import FORMAT_VERSION
from updater.trace.recorder import GradientRecorder

# ---------------------------------------------------------------- per-parameter histograms


def _layered(*calls):
    """A per-parameter trace from ``record`` calls given as (grads, names, scale) tuples."""
    rec = GradientRecorder("unused.npz", per_parameter=True)
    rec._exit_hook.detach()
    for step, (grads, names, scale) in enumerate(calls):
        rec.record(step, grads, scale, names=names)
    return rec.trace()


def test_per_parameter_histograms_sum_to_the_global_one_and_names_are_matched_by_name():
    a, b = [_f16(1.0, 0.0, 2.0**-20)], [_f16(4.0, 4.0)]
    t = _layered(
        (a, ["a"], 1.0),  # "b" is added at step 1: step 0 gets zero counts for it
        (a + b, ["a", "b"], 1.0),
        (b + a, ["b", "a"], 1.0),  # another order: matched by name
        (b, ["b"], 1.0),  # "a" missing: zero counts at this step
    )
    assert t.has_layers and t.layer_names == ("a", "b")
    assert t.layer_counts.shape == (4, 2, NBINS) and t.layer_zeros.shape == (4, 2)
    np.testing.assert_array_equal(t.layer_counts.sum(axis=1), t.counts)
    np.testing.assert_array_equal(t.layer_zeros.sum(axis=1), t.zeros)
    assert (t.layer_counts.sum(axis=2) + t.layer_zeros).tolist() == [[3, 0], [3, 2], [3, 2], [0, 2]]
    assert t.layer_absmax.tolist() == [[1.0, 0.0], [1.0, 4.0], [1.0, 4.0], [0.0, 4.0]]
    assert t.layer_counts[1, 1, 2 - EXP_MIN] == 2  # 4.0 is in binade 2


def test_an_overflowed_array_gets_the_bound_and_the_others_keep_their_largest_value():
    s = 2.0**10
    t = _layered(([_f16(0.5 * s, np.inf), _f16(2.0**-3 * s)], ["hot", "cold"], s))
    assert t.overflow_scale.tolist() == [s]
    assert t.layer_absmax.tolist() == [[65520.0 / s, 2.0**-3]]
    assert t.absmax.tolist() == [65520.0 / s]


@pytest.mark.parametrize(
    "names, error, match",
    [
        (None, ValueError, "names must list the parameter names"),
        (["a"], ValueError, "2 distinct names"),
        (["a", "b", "c"], ValueError, "2 distinct names"),
        (["a", "a"], ValueError, "2 distinct names"),
        (["a", 3], TypeError, "names must be a list of str"),
        ("ab", TypeError, "names must be a list of str"),
    ],
)
def test_per_parameter_record_rejects_missing_or_wrong_names(tmp_path, names, error, match):
    rec = GradientRecorder(tmp_path / "x.npz", per_parameter=True)
    with pytest.raises(error, match=match):
        rec.record(0, [np.ones(2, np.float16), np.ones(3, np.float16)], 1.0, names=names)
    assert rec.steps == [] and rec._layer_names == []


def test_without_per_parameter_names_are_ignored_and_no_layers_kept(tmp_path):
    rec = GradientRecorder(tmp_path / "x.npz")
    rec.record(0, [np.ones(2, np.float16)], 1.0, names=["a", "extra"])
    assert not rec.trace().has_layers
    with pytest.raises(TypeError, match="per_parameter must be a bool"):
        GradientRecorder(tmp_path / "y.npz", per_parameter=1)


def test_layers_save_load_round_trip_and_exit_hook(tmp_path):
    path = tmp_path / "t.npz"
    rec = GradientRecorder(path, per_parameter=True)
    rec.record(0, [_f16(1.0, 0.0), _f16(2.0**-10)], 8.0, names=["fc/W", "fc/b"])
    rec.record(1, [_f16(np.inf, 1.0), _f16(3.0)], 8.0, names=["fc/W", "fc/b"])
    rec._exit_hook()  # what interpreter exit runs
    back = Trace.load(path)
    t = rec.trace()
    assert back.layer_names == ("fc/W", "fc/b")
    for name in ("counts", "zeros", "absmax", "layer_counts", "layer_zeros", "layer_absmax"):
        np.testing.assert_array_equal(getattr(back, name), getattr(t, name))
    with np.load(path) as z:
        assert int(z["format_version"]) == FORMAT_VERSION == 6
    plain = Trace(t.counts, t.zeros, t.absmax, t.nonfinite)
    assert not Trace.load(plain.save(tmp_path / "plain.npz")).has_layers


def test_a_version_2_file_loads_without_layers(tmp_path):
    t = _layered(([_f16(1.0, 0.0)], ["w"], 1.0), ([_f16(2.0)], ["w"], 1.0))
    old = {
        "format_version": 2,
        "exp_min": EXP_MIN,
        "exp_max": EXP_MAX,
        "counts": t.counts,
        "zeros": t.zeros,
        "absmax": t.absmax,
        "nonfinite": t.nonfinite,
        "overflow_scale": t.overflow_scale,
        "name": "v2",
    }
    np.savez(tmp_path / "v2.npz", **old)
    back = Trace.load(tmp_path / "v2.npz")
    assert back.name == "v2" and back.steps == 2 and not back.has_layers
    assert back.layer_counts is None and back.layer_names is None


def test_trace_checks_its_layer_fields():
    t = _layered(([_f16(1.0, 0.0), _f16(3.0)], ["w", "b"], 1.0), ([_f16(2.0)], ["w"], 1.0))
    base = (t.counts, t.zeros, t.absmax, t.nonfinite, "x", None)
    layers = dict(
        layer_names=t.layer_names,
        layer_counts=t.layer_counts,
        layer_zeros=t.layer_zeros,
        layer_absmax=t.layer_absmax,
    )
    assert Trace(*base, **layers).has_layers
    with pytest.raises(ValueError, match="must be given together"):
        Trace(*base, layer_names=("w", "b"))
    with pytest.raises(ValueError, match=r"layer_zeros must have shape \(2, 2\)"):
        Trace(*base, **dict(layers, layer_zeros=np.zeros((2, 3), int)))
    with pytest.raises(ValueError, match="must equal counts and zeros at every step; step 1"):
        Trace(*base, **dict(layers, layer_zeros=[[1, 0], [1, 0]]))
    with pytest.raises(ValueError, match="layer_names must be distinct"):
        Trace(*base, **dict(layers, layer_names=("w", "w")))
    with pytest.raises(TypeError, match="layer_names must be a sequence of str"):
        Trace(*base, **dict(layers, layer_names="wb"))


@pytest.mark.nnabla
@pytest.mark.parametrize("finite_check", ["numpy", "solver"])
def test_the_updater_records_each_parameter_under_its_name(tmp_path, tiny, finite_check):
    """Through the updater on cpu:half, with a spike that overflows at step 2: each array's
    histogram covers exactly that parameter's values (the names follow the gradients' order),
    and the per-array histograms add up to the global one."""
    from updater import DynamicLossScalingUpdater

    m = tiny()
    path = tmp_path / "layers.npz"
    with GradientRecorder(path, per_parameter=True) as rec:
        u = DynamicLossScalingUpdater(
            m.solver,
            m.loss,
            m.feeder(weights={2: SPIKE}),
            scale=2.0**12,
            recorder=rec,
            finite_check=finite_check,
        )
        records = [u.update() for _ in range(4)]
    assert [r.update_applied for r in records] == [True, True, False, True]
    t = Trace.load(path)
    sizes = {name: p.size for name, p in m.params.items()}
    assert sorted(t.layer_names) == sorted(sizes) and len(sizes) == 4
    np.testing.assert_array_equal(t.layer_counts.sum(axis=1), t.counts)
    np.testing.assert_array_equal(t.layer_zeros.sum(axis=1), t.zeros)
    totals = t.layer_counts.sum(axis=2) + t.layer_zeros
    for step in (0, 1, 3):
        assert totals[step].tolist() == [sizes[n] for n in t.layer_names]
        assert t.layer_absmax[step].max() == t.absmax[step]
    assert t.overflow_scale[2] == records[2].scale
    assert t.layer_absmax[2].max() == t.absmax[2] >= 65520.0 / records[2].scale
