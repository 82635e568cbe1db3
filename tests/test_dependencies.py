"""What an updater-only install gets (issue 30): the updater trains without the simulator's
dependencies (the ``sim`` extra: matplotlib, tqdm) and without ``sim``; ``dls`` says which extra
to install when they are missing. Each test runs a real subprocess in which those imports fail,
as in an environment without the extra: a ``sitecustomize`` on ``PYTHONPATH`` puts None in
``sys.modules`` for them (``import`` raises ``ModuleNotFoundError``, ``find_spec`` gives None)."""

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.paths import ROOT

TRAIN = """
import sys
import nnabla as nn, nnabla.functions as F, nnabla.parametric_functions as PF
import nnabla.solvers as S
import numpy as np
from updater import DynamicLossScalingUpdater, get_context, load_checkpoint, save_checkpoint
nn.set_default_context(get_context("cpu:half"))
x, t = nn.Variable((4, 3)), nn.Variable((4, 1))
h = F.tanh(PF.affine(x, 5, name="fc1"))
loss = F.mean(F.softmax_cross_entropy(PF.affine(h, 2, name="fc2"), t))
solver = S.Sgd(0.1)
solver.set_parameters(nn.get_parameters())
def feed():
    x.d = np.random.randn(*x.shape)
    t.d = np.random.randint(0, 2, t.shape)
u = DynamicLossScalingUpdater(solver, loss, feed, policy="dynamic")
for _ in range(3):
    assert u.update().update_applied
save_checkpoint("run.ckpt.npz", u)
load_checkpoint("run.ckpt.npz", u)
print(sorted(m for m in ("matplotlib", "tqdm", "sim") if sys.modules.get(m) is not None))
"""


def without(tmp_path: Path, *modules: str) -> dict:
    """An environment in which importing ``modules`` fails."""
    site = tmp_path / "site"
    site.mkdir()
    (site / "sitecustomize.py").write_text(
        f"import sys\nsys.modules.update(dict.fromkeys({list(modules)!r}))\n"
    )
    return {**os.environ, "PYTHONPATH": f"{site}{os.pathsep}{ROOT}"}


@pytest.mark.nnabla
def test_the_updater_trains_and_checkpoints_without_the_sim_extra(tmp_path):
    env = without(tmp_path, "matplotlib", "tqdm", "sim")
    proc = subprocess.run(
        [sys.executable, "-c", TRAIN], cwd=tmp_path, env=env, capture_output=True, text=True
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "[]"  # none of them imported (they could not be)


def test_dls_without_the_sim_extra_names_the_extra_to_install(tmp_path):
    env = without(tmp_path, "matplotlib")
    dls = Path(sys.executable).parent / "dls"
    proc = subprocess.run([dls, "simulate"], env=env, capture_output=True, text=True)
    assert proc.returncode == 1
    assert proc.stderr == (
        "dls: error: dls needs matplotlib, which the sim extra installs: pip install "
        "'nnabla-dls[sim]' (the updater alone needs neither)\n"
    )
    assert "Traceback" not in proc.stderr


@pytest.mark.parametrize("flag", ["--help", "-h"])
def test_dls_help_and_version_answer_without_the_sim_extra(tmp_path, flag):
    """Issue 41: both failed with the install error."""
    env = without(tmp_path, "matplotlib", "tqdm")
    dls = Path(sys.executable).parent / "dls"
    version = subprocess.run([dls, "--version"], env=env, capture_output=True, text=True)
    with_extra = subprocess.run([dls, "--version"], capture_output=True, text=True)
    assert version.returncode == 0 and version.stdout == with_extra.stdout
    help_ = subprocess.run([dls, flag], env=env, capture_output=True, text=True)
    assert help_.returncode == 0 and help_.stderr == ""
    assert help_.stdout.startswith("usage: dls {simulate,sweep,tune,report,train} ...")
    assert "dls needs matplotlib and tqdm, which the sim extra installs" in help_.stdout


def test_the_commands_named_without_the_extra_are_the_clis():
    import argparse

    from sim.cli.entry import COMMANDS
    from sim.cli.main import build_parser

    parser = build_parser()
    sub = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)][0]
    assert tuple(sub.choices) == COMMANDS


def test_dls_with_the_sim_extra_runs(tmp_path):
    dls = Path(sys.executable).parent / "dls"
    proc = subprocess.run([dls, "--version"], capture_output=True, text=True)
    assert proc.returncode == 0 and proc.stdout.startswith("dls (nnabla-dls)")
