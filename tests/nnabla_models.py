"""Tiny real nnabla models and data feeders for tests (cpu:half by default).

``TinyClassifier`` builds ``weight * mean(softmax_cross_entropy(affine(tanh(affine(x)))))`` in
its own parameter scope, with deterministic initial weights, and a solver over exactly its
parameters. ``weight`` is an input variable the feeder sets per batch: a batch with weight 1e4
multiplies every gradient by 1e4, so it overflows float16 at scales above ~8 while ordinary
batches (weight 1) are finite up to 2**15. ``Feeder`` counts its calls and injects such spikes
and NaN inputs on a schedule. tanh (not relu) keeps NaN inputs visible in the loss: nnabla's relu
maps NaN to 0.
"""

from __future__ import annotations

from typing import Dict, Iterable, Mapping

import nnabla as nn
import nnabla.functions as F
import nnabla.initializer as I
import nnabla.parametric_functions as PF
import nnabla.solvers as S
import numpy as np
from nnabla.ext_utils import get_extension_context


def cpu_context(type_config: str = "half"):
    """nnabla CPU context with ``type_config`` ("half" or "float")."""
    return get_extension_context("cpu", type_config=type_config)


class TinyClassifier:
    """A two-layer classifier on random data; a few dozen parameters.

    Args:
        scope (str): parameter scope name (unique per model in one test).
        batch, in_dim, hidden, classes (int): sizes.
        seed (int): seed of the initial weights.
        type_config (str): "half" or "float".
        solver (str): "momentum", "adam" or "sgd".
        lr (float): learning rate.
        batchnorm (bool): BatchNormalization after fc1 (``bn1``), and the solver set over
            every parameter, running statistics included (``grad_only=False``).
        depth (int): hidden ``hidden``-wide tanh layers between fc1 and fc2 (``deep0``, ...),
            two more parameter arrays each.
    """

    def __init__(
        self,
        scope: str = "tiny",
        batch: int = 8,
        in_dim: int = 4,
        hidden: int = 8,
        classes: int = 3,
        seed: int = 0,
        type_config: str = "half",
        solver: str = "momentum",
        lr: float = 0.05,
        batchnorm: bool = False,
        depth: int = 0,
    ):
        self.scope = scope
        self.batch, self.in_dim, self.classes = batch, in_dim, classes
        self.ctx = cpu_context(type_config)
        rng = np.random.RandomState(seed)
        with nn.context_scope(self.ctx), nn.parameter_scope(scope):
            self.x = nn.Variable((batch, in_dim))
            self.t = nn.Variable((batch, 1))
            self.weight = nn.Variable(())
            self.weight.d = 1.0
            w1 = I.NormalInitializer(0.5, rng=rng)
            w2 = I.NormalInitializer(0.5, rng=rng)
            h = PF.affine(self.x, hidden, w_init=w1, name="fc1")
            if batchnorm:
                h = PF.batch_normalization(h, batch_stat=True, name="bn1")
            for i in range(depth):
                h = PF.affine(F.tanh(h), hidden, w_init=w1, name=f"deep{i}")
            y = PF.affine(F.tanh(h), classes, w_init=w2, name="fc2")
            self.loss = F.mean(F.softmax_cross_entropy(y, self.t)) * self.weight
            self.params = nn.get_parameters(grad_only=not batchnorm)
            makers = {
                "momentum": lambda: S.Momentum(lr, 0.9),
                "adam": lambda: S.Adam(lr),
                "sgd": lambda: S.Sgd(lr),
            }
            self.solver = makers[solver]()
            self.solver.set_parameters(self.params)

    def feeder(self, seed: int = 1, **schedule) -> Feeder:
        """Return a :class:`Feeder` writing into this model's inputs."""
        return Feeder(self, seed=seed, **schedule)


class Feeder:
    """Counting data feeder: call ``k`` (0-based) writes batch ``k`` of a seeded stream.

    Args:
        model (TinyClassifier): whose ``x`` and ``t`` to fill.
        seed (int): seed of the data stream; batch ``k`` is the same for any schedule.
        weights (mapping call -> float): loss weights per call (default 1.0); 1e4 makes a spike.
        nan_calls (iterable of int or None): calls whose first input value is NaN; None means
            every call.
    """

    def __init__(
        self,
        model: TinyClassifier,
        seed: int = 1,
        weights: Mapping[int, float] | None = None,
        nan_calls: Iterable[int] | None = (),
    ):
        self.model = model
        self.seed = seed
        self.weights = dict(weights or {})
        self.nan_calls = None if nan_calls is None else set(nan_calls)
        self.calls = 0

    def batch(self, k: int):
        """Return ``(x, t, weight)`` of call ``k`` without feeding it."""
        rng = np.random.RandomState(self.seed * 100003 + k)
        m = self.model
        x = rng.randn(m.batch, m.in_dim)
        t = rng.randint(0, m.classes, (m.batch, 1))
        if self.nan_calls is None or k in self.nan_calls:
            x[0, 0] = np.nan
        return x, t, self.weights.get(k, 1.0)

    def __call__(self) -> None:
        x, t, w = self.batch(self.calls)
        self.model.x.d = x
        self.model.t.d = t
        self.model.weight.d = w
        self.calls += 1


def param_values(params: Mapping[str, nn.Variable]) -> Dict[str, np.ndarray]:
    """Copies of parameter values (float32 view of the master values)."""
    return {k: p.data.get_data("r", dtype=np.float32).copy() for k, p in params.items()}


def solver_state_values(solver) -> Dict[str, np.ndarray]:
    """Copies of every solver state array and step count, keyed ``param/state``."""
    out = {}
    for name, st in solver.get_states().items():
        for key, var in st.pstate.items():
            out[f"{name}/{key}"] = var.data.get_data("r", dtype=np.float32).copy()
        out[f"{name}/t"] = np.array(st.t)
    return out


def assert_same_values(a: Mapping[str, np.ndarray], b: Mapping[str, np.ndarray]) -> None:
    """Assert two value dicts have the same keys and bit-identical arrays."""
    assert sorted(a) == sorted(b)
    for k in a:
        assert a[k].dtype == b[k].dtype, k
        assert np.array_equal(a[k].reshape(-1).view(np.uint8), b[k].reshape(-1).view(np.uint8)), k


class TinyBNClassifier(TinyClassifier):
    """``TinyClassifier`` with BatchNormalization after the first affine layer.

    Its solver is set over ``nn.get_parameters(grad_only=False)``, so the running mean and
    variance (``need_grad`` False, changed by the forward pass only) have solver states that the
    solver never writes. Same arguments as :class:`TinyClassifier` (default scope ``"tinybn"``,
    6 hidden units).
    """

    def __init__(self, scope: str = "tinybn", hidden: int = 6, **kwargs):
        super().__init__(scope, hidden=hidden, batchnorm=True, **kwargs)


GRADIENT_CASES = {
    "finite": {},
    "inf": {"fc2/affine/W": ("inf", (0, 1))},
    "-inf": {"fc1/affine/b": ("-inf", (3,))},
    "nan": {"fc1/affine/W": ("nan", (2, 5))},
    "65504": {"fc2/affine/b": (65504.0, (1,))},
    "-65504": {"fc1/affine/W": (-65504.0, (0, 0))},
    "subnormal": {"fc2/affine/b": (2.0**-24, (0,))},
    # float32 only: finite, but its square overflows a float32 dot product or sum of squares
    "3e38": {"fc1/affine/W": (3e38, (1, 1)), "fc2/affine/W": (-3e38, (0, 0))},
}
"""Special gradient values planted in a TinyClassifier's gradients: name -> where, what."""
GRADIENT_RUNS = [
    (c, t) for c in sorted(GRADIENT_CASES) for t in ("half", "float") if (c, t) != ("3e38", "half")
]
"""(case, type_config) pairs of :data:`GRADIENT_CASES` (3e38 does not exist in float16)."""


def gradient_values(model, case: str, dtype, seed: int = 3) -> Dict[str, np.ndarray]:
    """Random gradients (std 100) of ``model``'s parameters with ``case``'s values planted."""
    rng = np.random.RandomState(seed)
    values = {n: (rng.randn(*p.shape) * 100).astype(dtype) for n, p in model.params.items()}
    for name, (v, idx) in GRADIENT_CASES[case].items():
        values[name][idx] = float(v)
    return values


def set_grads(model, values_by_name: Mapping[str, np.ndarray]) -> None:
    """Write ``values_by_name`` into the gradients of ``model``'s parameters (zeros for the
    parameters not named)."""
    for name, p in model.params.items():
        p.g = values_by_name.get(name, np.zeros(p.shape, np.float16))


def iterate(updater, steps: int, staged: bool) -> list:
    """Run ``steps`` iterations of ``updater``: ``update()``, or with ``staged`` its three
    stages ``backward(); unscale(); step()``; return the step records."""
    records = []
    for _ in range(steps):
        if staged:
            updater.backward()
            updater.unscale()
            records.append(updater.step())
        else:
            records.append(updater.update())
    return records


def inspect(updater, seed=None):
    """The updater's facts of the gradients as they are now (a ``StepFacts``), as a step asks
    them: with ``seed``, the check fused with unscaling by ``1/seed`` (and the sum of squares
    when clipping)."""
    work = updater._work
    work.new_step()
    factor = None if seed is None else 1.0 / seed
    clip = seed is not None and updater.clip_grad_norm is not None
    reads = updater._attempts.reads.plan()
    return work.facts(reads, updater.policy.needs_grad_absmax, factor, clip)


def inspected(updater, seed=None) -> tuple:
    """``(arrays, finite, absmax, bad)`` of :func:`inspect`: the gradients' facts."""
    found = inspect(updater, seed)
    return found.arrays, found.finite, found.absmax, found.bad
