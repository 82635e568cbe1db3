"""The updater's own cost per update(): host reads on each check path, the Python time with
nnabla's work stubbed out, and the solver's parameter reads."""

from __future__ import annotations

import copy
import time

import numpy as np

from benchmarks.common import Model, mlp

PATHS = ("numpy", "solver", "nnabla")
"""The ``finite_check`` paths compared."""


def _without_nnabla_calls(u, solver, loss) -> None:
    """Give the updater's collaborators stand-ins that call no nnabla function (and the
    concatenating graphs a forward that runs nothing), so only its Python remains."""
    check = u._work.check
    check.solver = solver
    stand_in = copy.copy(u._live.record)  # the record the collaborators read, with the stand-ins
    for name, value in (("solver", solver), ("loss", loss)):
        object.__setattr__(stand_in, name, value)
    u._live.record = stand_in
    if getattr(check, "flat", None) is not None:
        check.flat.forward = lambda graph: graph.output.data


def host_reads_per_update(steps=10, seed=0):
    """Host reads per ``update()`` (:func:`updater.driver.arrays.host_reads`) on each check path, on
    a 16-16-16-10 MLP in cpu:float (six parameter arrays, as 784-512-512-10): finite steps with the
    default policy, with HeadroomScale and clipping, and steps whose input is inf."""
    import nnabla as nn
    from nnabla.ext_utils import get_extension_context

    from updater import DynamicLossScalingUpdater, HeadroomScale
    from updater.driver.arrays import host_reads

    nn.set_default_context(get_extension_context("cpu", type_config="float"))
    configs = {
        "finite steps": ({}, None),
        "HeadroomScale + clip_grad_norm": (
            {"policy": HeadroomScale(), "clip_grad_norm": 1e-3},
            None,
        ),
        "inf input (every step skipped)": ({"max_consecutive_nonfinite": 10**6}, float("inf")),
    }
    out = {}
    for name, (kwargs, poison) in configs.items():
        for path in PATHS:
            nn.clear_parameters()
            m = Model(f"reads_{path}", 16, [16, 16, 10], 8, np.random.default_rng(seed))
            m.poison = poison
            u = DynamicLossScalingUpdater(
                m.solver, m.loss, data_feeder=m.feed, finite_check=path, **kwargs
            )
            u.update()  # builds the device graph
            before = host_reads()
            for _ in range(steps):
                u.update()
            out[(name, path)] = (host_reads() - before) / steps
    return out


class _NoSolver:
    """A solver whose calls do nothing; ``get_parameters`` returns the real parameters."""

    def __init__(self, params):
        self.params = params

    def get_parameters(self):
        return self.params

    def check_inf_or_nan_grad(self):
        return False

    def zero_grad(self):
        pass

    def scale_grad(self, factor):
        pass

    def weight_decay(self, decay):
        pass

    def update(self):
        pass


class _NoLoss:
    """A loss whose forward and backward do nothing; ``data`` is the real loss array."""

    def __init__(self, loss):
        self.data = loss.data

    def forward(self, **kwargs):
        pass

    def backward(self, *args, **kwargs):
        pass

    def visit(self, func):
        pass  # no graph: nothing a forward pass writes


class _NoForward:
    """The device check's graph output with ``forward`` doing nothing."""

    def __init__(self, output):
        self.data = output.data

    def forward(self, **kwargs):
        pass


def python_cost(calls=2000, rounds=5, seed=0, layers=3):
    """Microseconds of Python per ``update()`` with nnabla's work stubbed out.

    A 16-wide MLP in cpu:float (``2 * layers`` parameter arrays; 3 layers give six, as
    784-512-512-10, with values too few for the array work to matter) runs one real
    forward/backward; then the updater's solver and loss are replaced by objects whose calls do
    nothing (and the concatenating graphs' forward too), so what is timed is the updater's own
    Python, its NumPy calls and nnabla's per-array calls (``p.grad``, ``data_ptr``, ``hash``;
    timed alone as "views"). Configurations are timed in interleaved rounds of ``calls``
    updates; the best and the median round are reported.
    """
    import nnabla as nn
    from nnabla.ext_utils import get_extension_context

    from updater import DynamicLossScalingUpdater, HeadroomScale

    nn.set_default_context(get_extension_context("cpu", type_config="float"))
    nn.clear_parameters()
    m = Model(f"python{layers}", 16, [16] * (layers - 1) + [10], 8, np.random.default_rng(seed))
    m.feed()
    m.loss.forward()
    m.loss.backward()
    configs = {
        '"numpy", DynamicScale': {"finite_check": "numpy"},
        '"numpy", HeadroomScale': {"finite_check": "numpy", "policy": HeadroomScale()},
        '"numpy", clip_grad_norm': {"finite_check": "numpy", "clip_grad_norm": 1.0},
        '"nnabla", DynamicScale': {"finite_check": "nnabla"},
        '"solver", DynamicScale': {"finite_check": "solver"},
    }
    updaters = {}
    for name, kwargs in configs.items():
        u = DynamicLossScalingUpdater(m.solver, m.loss, **kwargs)
        u.update()  # builds the concatenating graphs
        _without_nnabla_calls(u, _NoSolver(m.solver.get_parameters()), _NoLoss(m.loss))
        for _ in range(100):
            u.update()
        updaters[name] = u
    by_array = updaters['"numpy", DynamicScale']._work.check.by_array
    params = m.solver.get_parameters()
    times = {name: [] for name in [*configs, "views"]}
    for _ in range(rounds):
        for name, u in updaters.items():
            t0 = time.perf_counter()
            for _ in range(calls):
                u.update()
            times[name].append(1e6 * (time.perf_counter() - t0) / calls)
        t0 = time.perf_counter()
        for _ in range(calls):
            _gradient_calls(params, by_array)
        times["views"].append(1e6 * (time.perf_counter() - t0) / calls)
    out = {name: (min(v), float(np.median(v))) for name, v in times.items()}
    return {"arrays": len(params), "by_array": by_array, "times": out}


def _gradient_calls(params, by_array):
    """The nnabla calls the "numpy" path makes on each gradient per ``update()``: array by
    array a host pointer each, else the arrays and their hashes for the concatenation."""
    from updater.driver.arrays import _host_context

    if not by_array:
        return tuple(map(hash, [p.grad for p in params.values()]))
    context = _host_context()
    for p in params.values():
        g = p.grad
        if not g.zeroing and g.size:
            g.data_ptr(np.dtype(g.dtype), context, False)


def parameter_read_cost(repeats=2000):
    """Microseconds per ``solver.get_parameters()`` call (the updater reads it once per step
    on the paths that need it) for models with 6 and 300 parameter arrays."""
    import nnabla as nn
    import nnabla.solvers as S
    from nnabla.ext_utils import get_extension_context

    nn.set_default_context(get_extension_context("cpu", type_config="float"))
    out = {}
    for layers in (3, 150):
        nn.clear_parameters()
        mlp(nn.Variable((1, 8)), [8] * layers, f"read{layers}")
        solver = S.Momentum(0.01, 0.9)
        solver.set_parameters(nn.get_parameters())
        t0 = time.perf_counter()
        for _ in range(repeats):
            solver.get_parameters()
        out[2 * layers] = 1e6 * (time.perf_counter() - t0) / repeats
    return out
