"""``dls`` as users know command lines (issue 30): errors from the subcommand's own parser,
"did you mean", KEY=VALUE hints, -q/-v, logs around the bars, ``python -m sim``, one name and
one unit per metric, and provenance. Every test runs ``dls`` as a subprocess."""

import csv
import os
import pty
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from sim.replay.metrics import METRICS
from tests.paths import ROOT

DLS = [sys.executable, "-m", "sim"]


def dls(*argv, cwd=None, **kwargs):
    return subprocess.run(
        [*DLS, *argv], capture_output=True, text=True, cwd=cwd, timeout=600, **kwargs
    )


SUBCOMMAND_USAGE = "usage: dls simulate [-h]"


@pytest.mark.parametrize(
    "argv, message",
    [
        (["simulate", "--stpes", "5"], "unknown option --stpes (did you mean '--steps'"),
        (["simulate", "--set", "growth_interval", "500"], "write --set growth_interval=500"),
        (["simulate", "--set=growth_interval", "500"], "write --set growth_interval=500"),
        (["simulate", "--set", "growth_interval"], "write --set growth_interval=VALUE"),
        (["simulate", "--policy", "dynamik"], "unknown policy 'dynamik' (did you mean 'dynamic'"),
        (["simulate", "--trace", "digits_conv"], "(did you mean 'digits_conv_bn'"),
        (["simulate", "--trace", "spkes"], "(did you mean 'spikes'"),
        (["simulate", "--set", "growth_intervall=5"], "(did you mean 'growth_interval'"),
    ],
)
def test_errors_come_from_the_subcommand_with_a_suggestion(argv, message):
    done = dls(*argv)
    assert done.returncode == 2
    assert done.stderr.startswith(SUBCOMMAND_USAGE), done.stderr
    assert "usage: dls [-h] [--version]" not in done.stderr
    assert message in done.stderr.splitlines()[-1]


def test_an_unknown_command_suggests_the_closest():
    done = dls("simulat")
    assert done.returncode == 2
    assert "unknown command 'simulat' (did you mean 'simulate'?)" in done.stderr


def test_sweep_suggests_a_family_and_a_grid_key_value():
    done = dls("sweep", "--grid", "hysteresis=1,2", "--families", "spkes")
    assert done.returncode == 2 and "usage: dls sweep" in done.stderr
    assert "unknown family 'spkes' (did you mean 'spikes'?)" in done.stderr
    done = dls("sweep", "--grid", "hysteresis", "1,2")
    assert "write --grid hysteresis=1,2" in done.stderr


def test_names_are_case_insensitive():
    done = dls(
        "SIMULATE", "--policy", "Dynamic", "--trace", "Spikes", "--steps", "50", "--runs", "1", "-q"
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("policy: dynamic = DynamicScale(")
    assert "trace: spikes (50 steps)" in done.stdout
    done = dls("tune", "--policy", "HEADROOM", "--trace", "Digits_MLP", "--runs", "1", "-q")
    assert done.returncode == 0, done.stderr
    assert "policy=HeadroomScale(" in done.stdout


def test_tune_takes_a_trace_family():
    # refused before with a message that listed spikes as valid
    done = dls("tune", "--trace", "spikes", "--steps", "200", "--runs", "2", "-q")
    assert done.returncode == 0, done.stderr
    assert "30 settings x 1 trace(s) (spikes)" in done.stdout


@pytest.mark.parametrize("command", ["simulate", "sweep", "tune", "report", "train"])
def test_every_subcommand_takes_quiet_and_verbose(command):
    text = dls(command, "--help").stdout
    assert "-q, --quiet" in text and "-v, --verbose" in text


def test_quiet_prints_results_only_and_verbose_prints_debug_lines(tmp_path):
    argv = ["sweep", "--grid", "hysteresis=1,2", "--families", "nan", "--steps", "50", "--runs"]
    quiet = dls(*argv, "1", "-q")
    assert quiet.returncode == 0 and quiet.stderr == "" and "hysteresis" in quiet.stdout
    normal = dls(*argv, "1")
    assert "dls sweep: [1/1] nan" in normal.stderr and "DEBUG" not in normal.stderr
    verbose = dls(*argv, "1", "-v")
    assert "[dls][DEBUG]: dls sweep with" in verbose.stderr
    assert quiet.stdout == normal.stdout == verbose.stdout


def test_python_m_sim_runs_dls():
    done = subprocess.run([*DLS, "--version"], capture_output=True, text=True)
    assert done.returncode == 0 and done.stdout.startswith("dls (nnabla-dls) ")


def test_a_stage_time_never_prints_60_seconds():
    # 119.6 s printed as "1 min 60 s"
    from sim.cli.progress import seconds_text

    assert seconds_text(119.6) == "2 min 0 s"
    assert seconds_text(59.6) == "1 min 0 s"
    assert seconds_text(61.4) == "1 min 1 s" and seconds_text(3.2) == "3 s"


def test_one_name_and_one_unit_per_metric_in_terminal_and_csv(tmp_path):
    out_csv = tmp_path / "s.csv"
    done = dls(
        *"sweep --grid hysteresis=1,2 --families spikes --steps 300 --runs 2 --csv".split(),
        str(out_csv),
        "-q",
    )
    assert done.returncode == 0, done.stderr
    for raw in ("mean_flushed", "steps_to_safe", "below_half_safe", "signal_lost"):
        assert raw not in done.stdout  # the report's names, never the raw keys
    words = [" ".join(line.split()) for line in done.stdout.splitlines()]
    assert any(w.startswith("legend: ") for w in words)
    assert "signal lost = share of gradient values lost" in " ".join(words)
    table = [w for w in words if w.startswith("1 spikes 2 ") or w.startswith("2 spikes 2 ")]
    terminal_lost = [float(re.findall(r"([0-9.]+)%", w)[1]) for w in table]
    rows = list(csv.DictReader(out_csv.open()))
    assert "signal lost (%)" in rows[0] and "signal_lost" not in rows[0]
    assert METRICS["below_half_safe"].head + " (%)" in rows[0]
    csv_lost = [float(r["signal lost (%)"]) for r in rows]
    assert csv_lost == pytest.approx(terminal_lost, rel=5e-3)  # percent in both


def _copy_package(dest: Path) -> None:
    for name in ("sim", "updater"):
        shutil.copytree(
            ROOT / name, dest / name, ignore=shutil.ignore_patterns("__pycache__", "data")
        )


def test_a_package_inside_a_users_repository_names_no_commit(tmp_path):
    # a venv inside the user's repository recorded the user's commit
    repo = tmp_path / "user_repo"
    site = repo / ".venv" / "site-packages"
    _copy_package(site)
    git = ["git", "-c", "user.name=u", "-c", "user.email=u@x"]
    subprocess.run([*git, "init", "-q", str(repo)], check=True)
    (repo / "thesis.tex").write_text("x")
    subprocess.run([*git, "-C", str(repo), "add", "thesis.tex"], check=True)
    subprocess.run([*git, "-C", str(repo), "commit", "-qm", "mine"], check=True)
    code = "from sim.report.provenance import provenance; print(provenance())"
    env = {**os.environ, "PYTHONPATH": str(site)}
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, env=env, cwd=repo
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == f"nnabla-dls {_version()}"


def _version():
    from sim import __version__

    return __version__


@pytest.mark.slow
def test_train_logs_each_context_once_and_above_the_bars(tmp_path):
    # on a terminal, nnabla's log lines were written into the bar's line, and the context was
    # logged twice per stage (-v: the context lines show at INFO or DEBUG)
    leader, follower = pty.openpty()
    proc = subprocess.Popen(
        [*DLS, "train", "--steps", "3", "--out", str(tmp_path), "-v"],
        stdout=subprocess.PIPE,
        stderr=follower,
        cwd=tmp_path,
    )
    os.close(follower)
    chunks = []
    while True:
        try:
            chunk = os.read(leader, 65536)
        except OSError:
            break
        if not chunk:
            break
        chunks.append(chunk)
    proc.communicate(timeout=600)
    os.close(leader)
    assert proc.returncode == 0
    err = b"".join(chunks).decode(errors="replace")
    err = re.sub(r"\x1b\[[0-9;]*[A-Za-z]", "", err)
    pieces = [p for p in re.split(r"[\r\n]", err) if "][INFO]" in p or "][DEBUG]" in p]
    assert pieces, err
    assert not any("%|" in p or "stage/s" in p for p in pieces), pieces  # never in a bar's line
    contexts = [p for p in pieces if "nnabla context:" in p]
    assert len(contexts) == 2 and len(set(contexts)) == 2, contexts


@pytest.mark.slow
def test_rerunning_train_writes_the_same_files(tmp_path):
    # train.md held the wall time of every row: every rerun changed it
    first, second = tmp_path / "a", tmp_path / "b"
    for out in (first, second):
        assert dls("train", "--steps", "6", "--out", str(out), "-q").returncode == 0
    for path in first.iterdir():
        assert path.read_bytes() == (second / path.name).read_bytes(), path.name
    assert "time (s)" not in (first / "train.md").read_text()
