"""Measured-run files (sim.replay.measured): the shipped ones load; broken ones raise an
OSError (missing, a folder) or a ValueError naming the file and the problem (issue 20)."""

import json
import shutil

import numpy as np
import pytest

from sim.replay.measured import MeasuredRun, measured_paths, run_path
from sim.traces.real import MODELS
from tests.broken_files import ARCHIVE_BREAKAGES, drop_array, set_array
from tests.paths import SHIPPED_TRACES

BROKEN = {
    **ARCHIVE_BREAKAGES,
    "no scale": (drop_array("scale"), "lacks the array 'scale': not a measured run"),
    "string losses": (
        set_array("loss", np.full(800, "x")),
        "array 'loss' has dtype <U1, expected a number",
    ),
    "applied of another length": (
        set_array("applied", np.ones(799, bool)),
        "the per-step arrays must be 1-d of one length",
    ),
    "bad policy JSON": (set_array("policy", np.array("{")), "array 'policy' is not valid JSON"),
    "unknown policy": (
        set_array("policy", np.array(json.dumps({"name": "Magic"}))),
        "array 'policy' does not describe a policy",
    ),
    "negative batch order": (set_array("order", np.array(-1)), "array 'order' must be a batch"),
    "batch order as a float": (
        set_array("order", np.array(1.5)),
        "array 'order' has dtype <f8, expected an integer array",
    ),
    "accuracy as text": (
        set_array("accuracy", np.array("high")),
        "array 'accuracy' has dtype <U4, expected a number",
    ),
}


@pytest.fixture
def run_file(tmp_path):
    path = tmp_path / "digits_conv_bn.recorded.run.npz"
    shutil.copy(run_path(SHIPPED_TRACES, "digits_conv_bn", "recorded"), path)
    return path


def test_every_shipped_run_loads_and_saves_back_the_same(tmp_path):
    for model in MODELS:
        for path in measured_paths(SHIPPED_TRACES, model):
            run = MeasuredRun.load(path)
            assert run_path(SHIPPED_TRACES, run.model, run.label, run.order) == path
            again = MeasuredRun.load(run.save(tmp_path / "again.run.npz"))
            assert again.summary() == run.summary() and again.policy == run.policy


@pytest.mark.parametrize("case", list(BROKEN))
def test_a_broken_run_raises_value_error_naming_file_and_problem(case, run_file):
    make, message = BROKEN[case]
    make(run_file)
    with pytest.raises(ValueError) as err:
        MeasuredRun.load(run_file)
    text = str(err.value)
    assert text.startswith(f"measured run {run_file}: ") and message in text, text


def test_a_missing_run_or_a_folder_raises_os_error_naming_it(tmp_path):
    missing = tmp_path / "missing.run.npz"
    with pytest.raises(FileNotFoundError, match=f"cannot read measured run {missing}"):
        MeasuredRun.load(missing)
    with pytest.raises(IsADirectoryError, match="Is a directory"):
        MeasuredRun.load(tmp_path)
