"""The commit a report names: the last one that changed the code making its numbers, the
benchmark scripts included for a benchmark's report, ``+dirty`` while those differ from it."""

import os
import shutil
import subprocess
import sys

from tests.paths import ROOT

GIT = ["git", "-c", "user.name=u", "-c", "user.email=u@x"]
NAMES = (
    "from sim.report.provenance import code_commit; "
    "print(code_commit(), code_commit(also=('benchmarks',)))"
)


def _git(repo, *args) -> str:
    done = subprocess.run([*GIT, "-C", str(repo), *args], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    return done.stdout.strip()


def _commit_all(repo, message) -> str:
    _git(repo, "add", "-A")
    _git(repo, "commit", "-qm", message)
    return _git(repo, "log", "-1", "--format=%h")


def _named(repo) -> list:
    env = {**os.environ, "PYTHONPATH": str(repo)}
    done = subprocess.run(
        [sys.executable, "-c", NAMES], capture_output=True, text=True, env=env, cwd=repo
    )
    assert done.returncode == 0, done.stderr
    return done.stdout.split()


def test_a_benchmark_script_s_change_moves_the_benchmark_reports_commit_only(tmp_path):
    # a benchmark report named the last sim/updater commit although its scripts changed after
    repo = tmp_path / "checkout"
    ignore = shutil.ignore_patterns("__pycache__", "data")
    for name in ("sim", "updater", "benchmarks"):
        shutil.copytree(ROOT / name, repo / name, ignore=ignore)
    shutil.copy(ROOT / "pyproject.toml", repo / "pyproject.toml")
    _git(tmp_path, "init", "-q", str(repo))
    library = _commit_all(repo, "library and benchmarks")
    assert _named(repo) == [library, library]

    with (repo / "benchmarks" / "common.py").open("a") as f:
        f.write("\n# a changed benchmark\n")
    assert _named(repo) == [library, library + "+dirty"]
    bench = _commit_all(repo, "a benchmark script only")
    assert _named(repo) == [library, bench]

    (repo / "README.md").write_text("reports only\n")
    _commit_all(repo, "neither")
    assert _named(repo) == [library, bench]
