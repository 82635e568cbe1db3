"""examples/gan_digits.py: two losses, two solvers, one updater per loss, on cpu:half.

One 400-step training run (seed 0) is shared by the training tests; the graph tests build the
example's graphs and take single steps; the script runs once through its command line.
"""

import importlib.util
import subprocess
import sys

import nnabla as nn
import numpy as np
import pytest

from tests.paths import ROOT

pytestmark = [pytest.mark.nnabla, pytest.mark.slow]


SCRIPT = ROOT / "examples" / "gan_digits.py"
STEPS = 400
MAX_SKIP_SHARE = 0.1
CONSTANT_IMAGE_DISTANCE = 0.26  # the data's overall mean intensity on every pixel scores 0.261


def _load_example():
    spec = importlib.util.spec_from_file_location("gan_digits", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


gan_digits = _load_example()


@pytest.fixture(scope="module")
def trained():
    return gan_digits.train(STEPS, seed=0, eval_every=STEPS)


@pytest.fixture
def gan():
    built = gan_digits.build(seed=0)
    yield built
    gan_digits.clear_parameters()


def assert_generator_learned(result):
    """G's samples moved toward the data: checks an untrained generator fails."""
    data, initial, final = result["data"], result["initial"], result["final"]
    # per-pixel means: at least twice as close as at step 0, and closer than any constant
    # image can get (so G learned where the strokes are, not only how bright they are)
    assert final["distance"] <= 0.5 * initial["distance"], (initial, final)
    assert final["distance"] < 0.75 * CONSTANT_IMAGE_DISTANCE, final
    # overall intensity and spread: the gaps to the data's at least halved
    for key in ("mean", "std"):
        before, after = abs(initial[key] - data[key]), abs(final[key] - data[key])
        assert after <= 0.5 * before, (key, initial, final, data)


def test_losses_stay_finite_at_every_step(trained):
    assert trained["losses"].shape == (STEPS, 2)
    assert np.isfinite(trained["losses"]).all()
    assert trained["loss_finite"] is True
    assert 0.1 < trained["loss_d"] < 5 and 0.1 < trained["loss_g"] < 5


@pytest.mark.parametrize("key", ["d", "g"])
def test_each_updater_skips_few_steps_and_counts_them(trained, key):
    u = trained[key]
    assert u["skips"] <= MAX_SKIP_SHARE * STEPS
    assert u["skips"] + u["updates_applied"] == STEPS
    assert len(u["skipped_at"]) == u["skips"] and u["overflows"] >= u["skips"]
    assert u["scales"].shape == (STEPS,) and (u["scales"] >= 1).all()
    assert u["grad_absmax_median"] is None  # "dynamic" does not measure |g| max


def test_generator_samples_move_toward_the_data(trained):
    assert trained["data"]["distance"] == 0.0
    assert_generator_learned(trained)


def test_the_learning_check_fails_for_an_untrained_generator(trained):
    untrained = {**trained, "final": trained["initial"]}
    with pytest.raises(AssertionError):
        assert_generator_learned(untrained)


def test_the_untrained_generator_is_far_from_the_data(trained):
    initial = trained["initial"]
    assert initial["distance"] > CONSTANT_IMAGE_DISTANCE
    assert initial["mean"] > trained["data"]["mean"] + 0.1  # sigmoid outputs near 0.5


def test_training_leaves_no_parameters_behind(trained):
    assert not any(k.startswith(gan_digits.SCOPE + "/") for k in nn.get_parameters(grad_only=False))


def _values(solver):
    return {k: np.array(v.d, copy=True) for k, v in solver.get_parameters().items()}


def _assert_equal(a, b):
    assert a.keys() == b.keys()
    for k in a:
        np.testing.assert_array_equal(a[k], b[k], err_msg=k)


def test_each_solver_holds_only_its_own_network(gan):
    assert gan.solver_d.get_parameters() and gan.solver_g.get_parameters()
    assert all(k.startswith("dis/") for k in gan.solver_d.get_parameters())
    assert all(k.startswith("gen/") for k in gan.solver_g.get_parameters())


def test_g_step_writes_into_d_gradients_which_d_step_discards(gan):
    """G's backward runs through D, so it accumulates (scaled) gradients into D's parameters.
    G's solver must not apply them, and D's next update must start from zero: even NaN left
    there does not skip D's step or change its result."""
    d_before, g_before = _values(gan.solver_d), _values(gan.solver_g)
    record = gan.updater_g.update()
    assert record.update_applied
    _assert_equal(_values(gan.solver_d), d_before)  # G's step did not move D
    g_after = _values(gan.solver_g)
    assert any((g_after[k] != g_before[k]).any() for k in g_before)  # but it moved G
    assert any(np.abs(p.g).max() > 0 for p in gan.solver_d.get_parameters().values())
    for p in gan.solver_d.get_parameters().values():
        p.g = np.full(p.shape, np.nan)  # the worst G's backward could leave behind
    assert gan.updater_d.update().update_applied
    _assert_equal(_values(gan.solver_g), g_after)  # D's step did not move G
    d_poisoned = _values(gan.solver_d)

    clean = gan_digits.build(seed=0)  # same seeds, D's gradients left as G's step left them
    assert clean.updater_g.update().update_applied
    assert clean.updater_d.update().update_applied
    _assert_equal(_values(clean.solver_d), d_poisoned)
    assert any((d_poisoned[k] != d_before[k]).any() for k in d_before)  # D did train


def test_an_overflow_in_d_skips_only_d(gan):
    """D's backward overflows (real images x16: at scale 2**15 the gradient of D's output
    weights passes 65504, the loss stays finite); D's step is skipped and its scale halves,
    while G still updates that iteration at its own, unchanged scale."""
    feed = gan.updater_d.data_feeder

    def spiked():
        feed()
        gan.x_real.d = gan.x_real.d * 16.0

    gan.updater_d.data_feeder = spiked
    g_before = _values(gan.solver_g)
    rec_d, rec_g = gan.updater_d.update(), gan.updater_g.update()
    assert not rec_d.update_applied and rec_d.new_scale == rec_d.scale / 2
    assert rec_d.loss_finite is not False  # a gradient overflow, not a non-finite loss
    assert rec_g.update_applied and rec_g.new_scale == rec_g.scale == 2.0**15
    assert gan.updater_d.skips == 1 and gan.updater_g.skips == 0
    assert any((_values(gan.solver_g)[k] != g_before[k]).any() for k in g_before)


@pytest.mark.parametrize(
    "kwargs,error,fragment",
    [
        ({"steps": 0}, ValueError, "steps must be an int >= 1, got 0"),
        ({"steps": 2.5}, TypeError, "steps must be an int >= 1, got 2.5"),
        ({"seed": -1}, ValueError, "seed must be an int >= 0, got -1"),
        ({"lr": float("nan")}, ValueError, "lr must be a finite number > 0, got nan"),
    ],
)
def test_bad_arguments_raise_before_training(kwargs, error, fragment):
    with pytest.raises(error, match=fragment):
        gan_digits.train(**{"steps": 1, **kwargs})


def test_help_explains_the_options(capsys):
    with pytest.raises(SystemExit) as exit_info:
        gan_digits.main(["--help"])
    assert exit_info.value.code == 0
    text = capsys.readouterr().out
    for option in ("--steps", "--seed", "--batch", "--lr", "--policy", "--context"):
        assert option in text
    assert "own scale" in text and "headroom" in text


def test_bad_command_line_exits_with_usage(capsys):
    with pytest.raises(SystemExit) as exit_info:
        gan_digits.main(["--steps", "0"])
    assert exit_info.value.code == 2
    assert "--steps and --batch must be >= 1" in capsys.readouterr().err


def test_script_runs_from_the_command_line():
    done = subprocess.run(
        [sys.executable, str(SCRIPT), "--steps", "10", "--seed", "1"],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=120,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    lines = done.stdout.splitlines()
    assert len(lines) == 6, done.stdout
    assert lines[0].startswith("steps: 10 (") and "all losses finite: True" in lines[0]
    assert lines[1].startswith("D updater: skipped steps ")
    assert lines[2].startswith("G updater: skipped steps ")
    assert lines[3].startswith("data") and "per-pixel-mean distance to the data 0.0000" in lines[3]
    assert lines[4].startswith("G at step 0") and lines[5].startswith("G at the end")
