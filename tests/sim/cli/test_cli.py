"""The ``dls`` command line (sim/cli/main.py) and the report it writes (sim/report/build.py)."""

import csv
import dataclasses
import re
import subprocess
import sys
import tempfile
import types
from importlib import metadata
from pathlib import Path

import matplotlib.image as mpimg
import pytest

from sim.cli.main import main
from sim.report.tables import format_value, markdown_table
from sim.traces.families import make_trace
from tests.paths import ROOT
from updater.policy import POLICIES, StaticScale
from updater.policy.presets import PRESETS
from updater.policy.presets import names as policy_names

REPO = ROOT
DLS = Path(sys.executable).parent / "dls"


def _words(out: str):
    """The lines of a terminal table, each cell separated by one space."""
    return [" ".join(line.split()) for line in out.splitlines()]


def test_simulate_prints_metrics_and_writes_a_plot(tmp_path, capsys):
    plot = tmp_path / "traj.png"
    argv = "simulate --policy dynamic --set growth_interval=50 --set init_scale=2**12"
    code = main([*argv.split(), *"--trace spikes --steps 300 --runs 3 --plot".split(), str(plot)])
    out = capsys.readouterr().out
    assert code == 0
    assert "growth_interval=50" in out and "init_scale=2^12" in out
    assert any(line.startswith("dynamic spikes 3 ") for line in _words(out))
    assert mpimg.imread(plot).shape[:2] == (450, 800)


def test_simulate_takes_a_bool_setting(capsys):
    argv = ["simulate", "--set", "hysteresis=2", "--set", "consecutive_hysteresis=True"]
    assert main([*argv, "--steps", "50", "--runs", "1"]) == 0
    assert "consecutive_hysteresis=True" in capsys.readouterr().out


def test_simulate_replays_a_recorded_trace_file(tmp_path, capsys):
    path = make_trace("nan", steps=200, seed=1, nan_prob=0.05).save(tmp_path / "rec.npz")
    assert main(["simulate", "--policy", "headroom", "--trace", str(path), "--runs", "2"]) == 0
    out = capsys.readouterr().out
    assert "trace: nan (200 steps)" in out


def test_simulate_takes_a_shipped_trace_by_name_from_any_folder(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)  # no digits_conv_bn file here: the package's is used
    assert main(["simulate", "--trace", "digits_conv_bn", "--runs", "2"]) == 0
    assert "trace: digits_conv_bn (800 steps)" in capsys.readouterr().out
    with pytest.raises(SystemExit):
        main(["simulate", "--help"])
    assert "(digits_mlp, digits_conv_bn, sequence_lstm, sequence_attention; <model>.order1" in (
        " ".join(capsys.readouterr().out.split())
    )


def test_simulate_pools_the_shipped_recordings_of_a_model_by_name(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    argv = ["simulate", "--trace", "digits_conv_bn", "--trace", "Digits_Conv_BN.order1"]
    assert main([*argv, "--runs", "2"]) == 0
    assert "trace: digits_conv_bn (2 recordings) (800 steps)" in capsys.readouterr().out
    with pytest.raises(SystemExit):
        main(["simulate", "--trace", "digits_conv_bn.order9"])
    assert "did you mean" in capsys.readouterr().err.lower()


def test_sweep_prints_and_writes_csv(tmp_path, capsys):
    out_csv = tmp_path / "sweep.csv"
    argv = "sweep --policy dynamic --grid growth_interval=20,200 --grid hysteresis=1,2"
    sizes = "--families stationary,nan --steps 300 --runs 2 --csv"
    code = main([*argv.split(), *sizes.split(), str(out_csv)])
    assert code == 0
    rows = list(csv.DictReader(out_csv.open()))
    assert len(rows) == 2 * 2 * 2
    assert {(r["growth_interval"], r["hysteresis"], r["trace"]) for r in rows} == {
        (g, h, f) for g in ("20", "200") for h in ("1", "2") for f in ("stationary", "nan")
    }
    # a short growth interval probes (and overflows) more often than a long one
    skipped = {(r["growth_interval"], r["trace"]): float(r["skipped"]) for r in rows}
    assert skipped[("20", "stationary")] > skipped[("200", "stationary")]
    words = _words(capsys.readouterr().out)
    assert any(w.startswith("growth_interval hysteresis trace runs ") for w in words)


@pytest.mark.parametrize(
    "argv, message",
    [
        (["simulate", "--trace", "missing_file.npz"], "trace file not found"),
        (["simulate", "--trace", "weird"], "--trace must be a family"),
        (["simulate", "--set", "growth_interval=0"], "growth_interval must be an int >= 1"),
        (["simulate", "--set", "growth_interval=1.5"], "needs an int"),
        (["simulate", "--set", "growth_interval=1e30"], "needs an int from -2**63 to 2**63 - 1"),
        (["simulate", "--set", "margin=2"], "unknown setting 'margin'"),
        *[
            (["simulate", "--set", f"{key}={text}"], f"{key} needs a finite number")
            for key in ("growth_interval", "min_scale")
            for text in ("nan", "inf", "-inf", "1e400", "10**400", "0**-1")
        ],
        (["train", "--seed", str(2**32)], "needs an int in [0, 4294967295], got '4294967296'"),
        (["simulate", "--seed", str(2**64)], "needs an int in [0, 4294967295]"),
        (["simulate", "--set", "hysteresis"], "KEY=VALUE"),
        (["simulate", "--set", "consecutive_hysteresis=1"], "needs true or false"),
        (["simulate", "--policy", "magic"], "unknown policy 'magic'"),
        (["simulate", "--runs", "0"], "--runs"),
        (["simulate", "--jitter", "-1"], "--jitter"),
        (["sweep", "--families", "stationary"], "at least one --grid"),
        (["sweep", "--grid", "hysteresis=1", "--families", "moon"], "--families"),
        (["fly"], "unknown command 'fly'"),
        ([], "required"),
    ],
)
def test_bad_arguments_exit_2_with_a_message(argv, message, capsys):
    with pytest.raises(SystemExit) as exc:
        main(argv)
    assert exc.value.code == 2
    assert message in capsys.readouterr().err


@pytest.mark.parametrize("command", ["simulate", "sweep", "report", "train"])
def test_help_has_description_and_examples(command, capsys):
    with pytest.raises(SystemExit) as exc:
        main([command, "--help"])
    assert exc.value.code == 0
    text = capsys.readouterr().out
    assert f"dls {command}" in text and "example" in text


@pytest.mark.parametrize("command", ["simulate", "sweep"])
def test_policy_help_lists_every_preset_and_class_with_its_settings(command, capsys):
    # issue 10: the --policy help is generated from updater.policy.presets, not written by hand
    with pytest.raises(SystemExit) as exc:
        main([command, "--help"])
    assert exc.value.code == 0
    text = capsys.readouterr().out
    for name in policy_names():
        assert name in text, name
    lines = [line.strip() for line in text.splitlines()]
    for name, policy in PRESETS.items():
        head = f"{name} = {type(policy).__name__}("
        assert any(line.startswith(head) for line in lines), head
    for name in POLICIES:
        assert any(line.startswith(f"{name}(") for line in lines), name
    assert "pytorch = DynamicScale(init_scale=2^15, " in text  # as people write settings


@dataclasses.dataclass(frozen=True)
class _PinnedScale(StaticScale):
    """A stand-in for a policy class added to updater.policy after the CLI was written."""

    scale: float = 2.0**-3


def test_a_new_preset_or_policy_class_needs_no_cli_edit(monkeypatch, capsys):
    monkeypatch.setitem(PRESETS, "tiny-static", StaticScale(2.0**-6))
    monkeypatch.setitem(POLICIES, "_PinnedScale", _PinnedScale)
    with pytest.raises(SystemExit):
        main(["sweep", "--help"])
    text = capsys.readouterr().out
    assert "tiny-static = StaticScale(scale=2^-6)" in text
    assert "_PinnedScale(scale=2^-3)" in text
    for policy in ("tiny-static", "_PinnedScale"):
        assert main(["simulate", "--policy", policy, "--steps", "20", "--runs", "1"]) == 0
    out = capsys.readouterr().out
    assert "policy: tiny-static = StaticScale(scale=2^-6)" in out
    assert "policy: _PinnedScale(scale=2^-3)" in out


@pytest.mark.nnabla
def test_train_runs_the_demo(tmp_path, capsys):
    pytest.importorskip("nnabla")
    pytest.importorskip("sim.nnabla_studies.demo")
    assert main(["train", "--steps", "3", "--seed", "1", "--out", str(tmp_path)]) == 0
    out, err = capsys.readouterr()
    assert "variant" in out and "float16 + this updater" in out and "legend:" in out
    # issue 10: not on a terminal, one status line per variant (stage) on stderr
    assert "dls train: [1/4] float32: 3 steps" in err
    assert "dls train: [4/4] float16 + this updater: 3 steps" in err
    assert list(tmp_path.glob("*.png"))
    written = (tmp_path / "train.md").read_text()
    assert "| float16 + this updater |" in written and "train_scale_trajectory.png" in written


def test_train_refuses_steps_that_would_not_finish(tmp_path):
    cmd = [str(DLS), "train", "--steps", str(10**12), "--out", str(tmp_path / "out")]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2 and proc.stdout == "", proc.stderr
    assert proc.stderr.splitlines()[-1] == (
        "dls train: error: --steps 1000000000000 x 4 runs is 4,000,000,000,000 step-runs, more "
        "than the limit of 4,000,000; use at most --steps 1000000"
    )
    assert not (tmp_path / "out").exists()


# ---------------------------------------------------------------- issue 10 part B: the CLI in use


def test_counts_print_as_integers_and_scales_as_powers_of_two(capsys):
    # 16 overflows printed as 2^4 before; a scale of 16 is still 2^4
    row = {"overflows": 16.0, "skipped": 32.0, "steps_to_safe": 64.0, "final_scale": 16.0}
    table = markdown_table([row], list(row))
    assert table.splitlines()[-1] == "| 16 | 32 | 64 | 2^4 |"
    assert format_value(2.0**15, name="init_scale") == "2^15"
    assert format_value(1024.0, name="skipped") == "1024"
    # every step overflows at 2^15 and 2^14: 16 steps give 16 overflows, 16 skipped steps
    argv = ["sweep", "--policy", "static", "--grid", "scale=2**15,2**14", "--steps", "16"]
    assert main([*argv, "--runs", "1", "--families", "stationary"]) == 0
    out = capsys.readouterr().out
    assert any(line.startswith("2^15 stationary 1 16 16 ") for line in _words(out))
    assert any(line.startswith("2^14 stationary 1 16 16 ") for line in _words(out))


def test_simulate_explains_mean_flushed_when_no_step_was_applied(capsys):
    # every step overflows at 2^15: no applied step, so the mean over applied steps is 0/0
    argv = ["simulate", "--policy", "static", "--set", "scale=2**15", "--steps", "100"]
    assert main([*argv, "--runs", "2"]) == 0
    out = capsys.readouterr().out
    assert "nan%" not in out
    assert any(line.startswith("static stationary 2 100 100 n/a 100% ") for line in _words(out))
    assert "flushed (applied steps) n/a: every step of every run was skipped" in out


@pytest.fixture
def no_work(monkeypatch):
    """Make any simulation, trace, report or training fail loudly: checks must come first."""

    def work(*args, **kwargs):
        raise AssertionError("the work started before the arguments were checked")

    monkeypatch.setattr("sim.cli.simulate.simulate_pooled", work)
    monkeypatch.setattr("sim.cli.preflight.make_trace", work)
    monkeypatch.setattr("sim.replay.sweep.simulate_pooled", work)
    monkeypatch.setattr("sim.report.build.build_report", work)
    demo = types.ModuleType("sim.nnabla_studies.demo")
    demo.run_comparison = demo.load_data = work
    monkeypatch.setitem(sys.modules, "sim.nnabla_studies.demo", demo)


def _unwritable_folder(tmp_path) -> Path:
    """A folder this process cannot create files in (root ignores permission bits; /sys
    refuses even root)."""
    folder = tmp_path / "readonly"
    folder.mkdir()
    folder.chmod(0o555)
    for candidate in (folder, Path("/sys")):
        try:
            with tempfile.TemporaryFile(dir=candidate):
                pass
        except OSError:
            return candidate
    pytest.skip("no folder this process cannot write into")


@pytest.mark.parametrize(
    "argv, message",
    [
        (["simulate", "--plot", "{tmp}/missing/t.png"], "missing does not exist (create it first)"),
        (["simulate", "--plot", "{tmp}"], "is a folder; give a file name"),
        (["simulate", "--plot", "{tmp}/t.xyz"], "cannot write '.xyz' files"),
        (["simulate", "--plot", "{ro}/t.png"], "cannot write into"),
        (["sweep", "--grid", "hysteresis=1", "--csv", "{tmp}/missing/s.csv"], "does not exist"),
        (["sweep", "--grid", "hysteresis=1", "--csv", "{file}/s.csv"], "is a file, not a folder"),
        (["sweep", "--grid", "hysteresis=1", "--csv", "{ro}/s.csv"], "cannot write into"),
        (["report", "--out", "{file}"], "is an existing file, not a folder"),
        (["report", "--out", "{file}/sub"], "cannot create it"),
        (["report", "--out", "{ro}/rep"], "cannot write into"),
        (["train", "--out", "{file}"], "is an existing file, not a folder"),
        (["train", "--out", "{ro}"], "cannot write into"),
    ],
)
def test_bad_output_paths_fail_before_any_work(argv, message, tmp_path, capsys, no_work):
    (tmp_path / "file").write_text("x")
    paths = {"tmp": tmp_path, "file": tmp_path / "file"}
    if any("{ro}" in a for a in argv):
        paths["ro"] = _unwritable_folder(tmp_path)
    with pytest.raises(SystemExit) as exc:
        main([a.format(**paths) for a in argv])
    err = capsys.readouterr().err
    assert exc.value.code == 2, err
    assert message in err and len(err.strip().splitlines()[-1]) > 0
    assert "Traceback" not in err


def test_checks_do_not_create_the_output_folder(tmp_path, no_work):
    with pytest.raises(AssertionError, match="work started"):
        main(["report", "--out", str(tmp_path / "a" / "b")])  # passes the checks
    assert not (tmp_path / "a").exists()


def test_a_setting_given_twice_or_both_swept_and_fixed_is_rejected(capsys):
    cases = [
        (["sweep", "--grid", "hysteresis=1,2", "--grid", "hysteresis=3"], "given twice"),
        (["sweep", "--grid", "hysteresis=1,2", "--set", "hysteresis=3"], "conflicts with --grid"),
        (["simulate", "--set", "hysteresis=1", "--set", "hysteresis=2"], "given twice"),
    ]
    for argv, message in cases:
        with pytest.raises(SystemExit) as exc:
            main(argv)
        assert exc.value.code == 2 and message in capsys.readouterr().err
    with pytest.raises(SystemExit):
        main(["sweep", "--help"])
    assert "giving it to both, is an error" in " ".join(capsys.readouterr().out.split())


def test_simulate_refuses_a_run_that_does_not_fit_in_memory(capsys, no_work):
    with pytest.raises(SystemExit) as exc:
        main(["simulate", "--steps", str(10**9)])
    err = capsys.readouterr().err.strip().splitlines()[-1]
    assert exc.value.code == 2
    assert re.search(r"10\d+ steps x 64 runs needs about [\d.]+ TiB of memory \(estimate\)", err)
    assert "more than the limit" in err and "of this machine's" in err
    with pytest.raises(SystemExit) as exc:
        main(["sweep", "--grid", "hysteresis=1,2", "--steps", str(10**9)])
    assert "x 2 settings needs about" in capsys.readouterr().err


def test_version_is_the_installed_distributions(capsys):
    with pytest.raises(SystemExit) as exc:
        main(["--version"])
    assert exc.value.code == 0
    assert capsys.readouterr().out.strip() == f"dls (nnabla-dls) {metadata.version('nnabla-dls')}"


@pytest.mark.parametrize("command", [[], ["report"], ["train"]])
def test_help_examples_do_not_overwrite_the_committed_reports(command, capsys):
    with pytest.raises(SystemExit):
        main([*command, "--help"])
    text = capsys.readouterr().out
    assert "--out reports" not in text
    if command == ["train"]:
        flat = " ".join(text.split())
        assert "folder for train.md" in flat and "the folder for the plot" not in flat


def test_simulate_prints_settings_as_people_write_them(capsys):
    assert main(["simulate", "--policy", "pytorch", "--steps", "20", "--runs", "1"]) == 0
    lines = capsys.readouterr().out.split("\ntrace:")[0].splitlines()  # wrapped at 100
    first = " ".join(line.strip() for line in lines)
    assert first == (
        "policy: pytorch = DynamicScale(init_scale=2^15, growth_factor=2, backoff_factor=0.5, "
        "growth_interval=2000, min_scale=2^-24, max_scale=2^15, hysteresis=1, "
        "consecutive_hysteresis=False)"
    )


def test_train_without_scikit_learn_says_what_to_install(tmp_path):
    """The digits demo's one extra dependency: a one-line error before any work."""
    import subprocess
    import sys

    code = (
        "import sys\n"
        "sys.modules['sklearn'] = None  # as if scikit-learn were not installed\n"
        "from sim.cli.main import main\n"
        f"main(['train', '--steps', '5', '--out', {str(tmp_path)!r}])\n"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert proc.returncode == 2
    assert "pip install 'nnabla-dls[demo]'" in proc.stderr
    assert "Traceback" not in proc.stderr
    assert list(tmp_path.iterdir()) == []


def test_a_bare_train_does_not_overwrite_the_committed_report():
    from sim.cli.main import build_parser

    assert build_parser().parse_args(["train"]).out == "train_out"
    assert build_parser().parse_args(["train", "--out", "reports"]).out == "reports"
