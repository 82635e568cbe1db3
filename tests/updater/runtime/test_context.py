"""Context selection: auto picks cuDNN half with a GPU, cpu:half without; explicit kinds work."""

import logging

import nnabla as nn
import numpy as np
import pytest

from updater.runtime.context import cuda_device_count, get_context

pytestmark = pytest.mark.nnabla

HAS_GPU = cuda_device_count() > 0


def test_auto_picks_what_this_machine_has_and_logs_it_at_debug_only(caplog):
    with caplog.at_level(logging.INFO, logger="updater.runtime.context"):
        get_context()
    assert caplog.records == []  # scripts call it often: no INFO lines (issue 30)
    with caplog.at_level(logging.DEBUG, logger="updater.runtime.context"):
        ctx = get_context()
    expected = "cudnn:half" if HAS_GPU else "cpu:half"
    assert ctx.backend[0] == expected
    assert expected.split(":")[0] in caplog.text and "type_config=half" in caplog.text


@pytest.mark.parametrize(
    "kind,backend",
    [
        ("cpu", "cpu:half"),
        ("cpu:half", "cpu:half"),
        ("CPU-half", "cpu:half"),
        ("cpu:float", "cpu:float"),
        ("cpu-float", "cpu:float"),
    ],
)
def test_explicit_cpu_kinds(kind, backend):
    assert get_context(kind).backend[0] == backend


def test_cpu_half_context_computes_in_float16():
    with nn.context_scope(get_context("cpu")):
        x = nn.Variable.from_numpy_array(np.array([1.0, 2.0**-25, 70000.0]))
        y = x * 1.0
        y.forward()
    assert y.d.dtype == np.float16
    assert y.d.tolist() == [1.0, 0.0, float("inf")]


@pytest.mark.skipif(HAS_GPU, reason="a GPU is visible here")
@pytest.mark.parametrize("kind", ["cuda", "cudnn", "cudnn:float"])
def test_gpu_kinds_without_a_gpu_say_how_to_get_one(kind):
    with pytest.raises(RuntimeError, match=r"nnabla-ext-cuda.*pip install 'nnabla-dls\[cuda\]'"):
        get_context(kind)


@pytest.mark.parametrize(
    "kind,exc", [("gpu", ValueError), ("cpu:double", ValueError), ("", ValueError), (3, TypeError)]
)
def test_unknown_kinds_are_refused_with_the_accepted_list(kind, exc):
    with pytest.raises(exc, match="kind must be .*'auto', 'cudnn', 'cuda' or 'cpu'"):
        get_context(kind)


@pytest.mark.parametrize("device_id,exc", [(-1, ValueError), ("0", TypeError), (True, TypeError)])
def test_bad_device_id(device_id, exc):
    with pytest.raises(exc, match="device_id must be an int >= 0"):
        get_context("cpu", device_id=device_id)
