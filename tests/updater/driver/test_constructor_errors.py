"""Bad constructor arguments raise ``TypeError``/``ValueError`` naming the argument, the value and
the accepted range."""

import numpy as np
import pytest

from tests.updater.driver.test_updater import make
from updater import DynamicScale
from updater.driver.updater import DynamicLossScalingUpdater

pytestmark = pytest.mark.nnabla


def _bad_cases():
    # (name, kwargs or callable(model) -> kwargs, exception type, fragments in the message)
    return [
        ("scale=-1", {"scale": -1.0}, ValueError, ["scale", "-1.0", "> 0"]),
        ("scale=nan", {"scale": float("nan")}, ValueError, ["scale", "nan"]),
        ("scale=inf", {"scale": float("inf")}, ValueError, ["scale", "inf"]),
        ("scale='8'", {"scale": "8"}, TypeError, ["scale", "'8'"]),
        ("scale>max", {"scale": 2.0**16}, ValueError, ["scale", "65536", "max_scale"]),
        ("scaling_factor=1", {"scaling_factor": 1.0}, ValueError, ["scaling_factor", "1.0"]),
        ("scaling_factor=0.5", {"scaling_factor": 0.5}, ValueError, ["scaling_factor", "2.0"]),
        ("N=0", {"N": 0}, ValueError, ["N", "0", ">= 1"]),
        ("N=2.5", {"N": 2.5}, ValueError, ["N", "2.5", "whole number"]),
        ("N='2000'", {"N": "2000"}, TypeError, ["N", "'2000'"]),
        ("min_scale tiny", {"min_scale": 2.0**-26, "scale": 1.0}, ValueError, ["2**-24", "0"]),
        ("accum_grad=0", {"accum_grad": 0}, ValueError, ["accum_grad", "0", ">= 1"]),
        ("clear_buffer=1", {"clear_buffer": 1}, TypeError, ["clear_buffer", "1"]),
        ("weight_decay=-1", {"weight_decay": -0.1}, ValueError, ["weight_decay", "-0.1"]),
        ("data_feeder=3", {"data_feeder": 3}, TypeError, ["data_feeder", "3"]),
        ("on_overflow", {"on_overflow": "recurse"}, ValueError, ["on_overflow", "recurse"]),
        ("max_retries=-1", {"max_retries": -1}, ValueError, ["max_retries", "-1"]),
        ("max_consec=0", {"max_consecutive_nonfinite": 0}, ValueError, ["max_consecutive"]),
        ("clip=0", {"clip_grad_norm": 0.0}, ValueError, ["clip_grad_norm", "0.0"]),
        ("history=-1", {"history": -1}, ValueError, ["history", "-1"]),
        ("comm", {"comm": object()}, TypeError, ["comm", "all_reduce"]),
        ("grads", {"grads": [np.zeros(3)]}, TypeError, ["grads", "NdArray"]),
        ("monitor", {"monitor": "dir"}, TypeError, ["monitor", "str"]),
        ("recorder", {"recorder": 5}, TypeError, ["recorder", "int"]),
        ("finite_check", {"finite_check": "fast"}, ValueError, ["finite_check", "fast"]),
        ("min_scale=0", {"min_scale": 0.0}, ValueError, ["min_scale", "0.0"]),
        (
            "policy+scale",
            {"policy": DynamicScale(), "scale": 2.0},
            ValueError,
            ["policy", "scale", "not both"],
        ),
        ("policy=unknown name", {"policy": "dynamik"}, ValueError, ["'dynamik'", "'dynamic'"]),
        ("policy=class", {"policy": DynamicScale}, TypeError, ["class", "pass DynamicScale()"]),
        ("policy=int", {"policy": 3}, TypeError, ["preset name", "make_policy", "int"]),
        ("init_scale", {"init_scale": 1024.0}, TypeError, ["scale=1024.0", "init_scale=1024.0"]),
        (
            "growth_interval",
            {"growth_interval": 100, "growth_factor": 2.0},
            TypeError,
            ["policy=DynamicScale(growth_interval=100, growth_factor=2.0)"],
        ),
        (
            "backoff_factor",
            {"backoff_factor": 0.5},
            TypeError,
            ["DynamicScale(backoff_factor=0.5)"],
        ),
        ("typo", {"acum_grad": 2}, TypeError, ["'acum_grad'", "did you mean 'accum_grad'?"]),
        ("loss non-scalar", "nonscalar_loss", ValueError, ["loss", "scalar", "(8, 3)"]),
        ("loss numpy", "numpy_loss", TypeError, ["loss", "ndarray"]),
        ("solver empty", "empty_solver", ValueError, ["solver has no parameters"]),
    ]


@pytest.mark.parametrize(
    "kwargs,exc,fragments", [c[1:] for c in _bad_cases()], ids=[c[0] for c in _bad_cases()]
)
def test_bad_input_raises_a_clear_error(kwargs, exc, fragments):
    import nnabla.solvers as S

    m = make()
    args = {"solver": m.solver, "loss": m.loss}
    if kwargs == "nonscalar_loss":
        args["loss"] = m.loss.parent.inputs[0].parent.inputs[0].parent.inputs[0]
    elif kwargs == "numpy_loss":
        args["loss"] = np.zeros(())
    elif kwargs == "empty_solver":
        args["solver"] = S.Sgd(0.1)
    else:
        args.update(kwargs)
    with pytest.raises(exc) as info:
        DynamicLossScalingUpdater(**args)
    for fragment in fragments:
        assert fragment in str(info.value)


# ---------------------------------------------------------------- communicator path
