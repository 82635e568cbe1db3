"""``dls`` never destroys a file it did not write: a user's files, links, inputs, a full disk.
Each case runs ``dls`` as a subprocess on real files."""

import os
import resource
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from updater.common.identity import written_by_dls

DLS = str(Path(sys.executable).parent / "dls")
SIMULATE = ["simulate", "--trace", "spikes", "--steps", "50", "--runs", "2"]


def dls(*args, cwd=None, limit_bytes=None):
    def limit():  # a file system that refuses writes past limit_bytes in any file
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
        resource.setrlimit(resource.RLIMIT_FSIZE, (limit_bytes, resource.RLIM_INFINITY))

    return subprocess.run(
        [DLS, *map(str, args)],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=300,
        preexec_fn=limit if limit_bytes else None,
    )


def _contents(folder):
    return {p.name: p.read_bytes() for p in sorted(folder.iterdir()) if not p.is_dir()}


@pytest.mark.parametrize(
    "command",
    [
        ["report", "--quick", "--real-traces", "none", "--out", "."],
        ["train", "--steps", "1", "--out", "."],
    ],
    ids=["report", "train"],
)
def test_a_users_files_in_the_output_folder_stop_the_command_before_any_work(tmp_path, command):
    (tmp_path / "README.md").write_text("# my project\n")
    (tmp_path / "train.md").write_text("my training notes\n")
    before = _contents(tmp_path)
    proc = dls(*command, cwd=tmp_path)
    assert proc.returncode == 2, proc.stderr
    last = proc.stderr.strip().splitlines()[-1]
    assert "not written by dls; not replacing it (--force" in last, proc.stderr
    assert "[1/" not in proc.stderr and "Traceback" not in proc.stderr  # no stage started
    assert _contents(tmp_path) == before


def test_report_force_replaces_the_users_readme(tmp_path):
    (tmp_path / "README.md").write_text("# my project\n")
    proc = dls("report", "--quick", "--real-traces", "none", "--out", tmp_path, "--force")
    assert proc.returncode == 0, proc.stderr
    assert (tmp_path / "README.md").read_text().startswith("# ")
    assert "my project" not in (tmp_path / "README.md").read_text()
    assert written_by_dls(tmp_path / "README.md")


def test_a_plot_it_wrote_is_replaced_a_users_plot_only_with_force(tmp_path):
    plot = tmp_path / "traj.png"
    assert dls(*SIMULATE, "--plot", plot).returncode == 0
    first = plot.read_bytes()
    assert dls(*SIMULATE, "--seed", "1", "--plot", plot).returncode == 0  # its own file
    assert plot.read_bytes() != first
    users = tmp_path / "mine.png"
    users.write_bytes(b"my figure")
    proc = dls(*SIMULATE, "--plot", users)
    assert proc.returncode == 2 and "--plot" in proc.stderr and "not written by dls" in proc.stderr
    assert users.read_bytes() == b"my figure"
    assert dls(*SIMULATE, "--plot", users, "--force").returncode == 0
    assert users.read_bytes().startswith(b"\x89PNG")


@pytest.mark.parametrize("dangling", [False, True], ids=["link", "dangling link"])
def test_plot_and_csv_never_write_through_a_link(tmp_path, dangling):
    target = tmp_path / "elsewhere" / "target.png"
    target.parent.mkdir()
    if not dangling:
        target.write_bytes(b"precious")
    for option, name in (("--plot", "traj.png"), ("--csv", "rows.csv")):
        link = tmp_path / name
        link.symlink_to(target)
        command = (
            SIMULATE
            if option == "--plot"
            else "sweep --grid hysteresis=1,2 --families spikes --steps 50 --runs 1".split()
        )
        proc = dls(*command, option, link)
        assert proc.returncode == 2 and "symbolic link" in proc.stderr, proc.stderr
        assert link.is_symlink()
        assert _contents(target.parent) == ({} if dangling else {"target.png": b"precious"})


def test_csv_never_overwrites_the_input_trace_even_with_force(tmp_path):
    from sim.traces.families import make_trace

    trace = make_trace("spikes", steps=50, seed=0).save(tmp_path / "run.npz")
    before = trace.read_bytes()
    proc = dls(
        "sweep",
        "--grid",
        "hysteresis=1,2",
        "--families",
        "",
        "--trace",
        trace,
        "--runs",
        "1",
        "--csv",
        trace,
        "--force",
    )
    assert proc.returncode == 2 and "an input of this command" in proc.stderr, proc.stderr
    assert trace.read_bytes() == before


@pytest.mark.parametrize("option", ["--plot", "--csv"])
def test_an_empty_output_name_is_an_error_not_ignored(option):
    command = SIMULATE if option == "--plot" else ["sweep", "--grid", "hysteresis=1,2"]
    proc = dls(*command, option, "")
    assert proc.returncode == 2 and f"{option}: needs a file name, got ''" in proc.stderr


def test_a_full_disk_keeps_the_previous_plot_and_prints_one_line(tmp_path):
    plot = tmp_path / "traj.png"
    assert dls(*SIMULATE, "--plot", plot).returncode == 0
    before = _contents(tmp_path)
    proc = dls(*SIMULATE, "--seed", "1", "--plot", plot, limit_bytes=2000)
    assert proc.returncode == 1, proc.stderr
    assert "Traceback" not in proc.stderr and "Exception ignored" not in proc.stderr
    assert proc.stderr.strip().splitlines()[-1] == (
        f"dls simulate: error: cannot write {plot}: File too large"
    )
    assert _contents(tmp_path) == before  # the old plot, the manifest, no temporary file


def test_the_docs_example_refuses_and_keeps_the_users_readme(tmp_path):
    from tests.paths import ROOT

    text = (ROOT / "docs" / "simulator" / "cli.md").read_text()
    block = text.split("## Your files", 1)[1].split("```bash\n", 1)[1].split("```", 1)[0]
    env = {**os.environ, "PATH": f"{Path(DLS).parent}{os.pathsep}{os.environ['PATH']}"}
    proc = subprocess.run(
        ["bash", "-e", "-c", block], cwd=tmp_path, env=env, capture_output=True, text=True
    )
    assert proc.returncode == 0 and proc.stdout == "refused (status 2): mine/README.md kept\n"
    assert _contents(tmp_path / "mine") == {"README.md": b"# my notes\n"}
