"""What every model family of the matrix is made of: :class:`Part` (one loss, its solver and the
function that writes batch ``k`` into its inputs) and :class:`Family` (its parts and every
parameter a checkpoint holds), with the helpers the builders share.

A family is built in its own parameter scope (cleared first, so a rebuild starts from the same
initial weights), from seeded initializers and seeded batches: the same family built twice, in
one process or in two, computes the same numbers bit for bit.
"""

from __future__ import annotations

from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any, Callable, Dict, List

import nnabla as nn
import nnabla.initializer as I
import numpy as np

from tests.nnabla_models import cpu_context


@dataclass
class Part:
    """One loss of a family, trained by one updater.

    Attributes:
        name (str): "main", or the GAN's "dis" and "gen".
        loss (nnabla.Variable): the scalar loss the updater scales.
        solver (nnabla.solvers.Solver): over this part's trainable parameters.
        feed (callable k -> None): writes batch ``k`` (0-based) into the loss's inputs; the
            same ``k`` always writes the same values.
    """

    name: str
    loss: nn.Variable
    solver: Any
    feed: Callable[[int], None]


@dataclass
class Family:
    """A model family built once: its parts, and the parameters a checkpoint saves and a run
    compares (trainable ones and running statistics, by name).

    Attributes:
        name (str): the family's name (its parameter scope).
        parts (list of Part): one per updater (two for the GAN, discriminator first).
        params (dict name -> nnabla.Variable): ``nn.get_parameters(grad_only=False)`` of the
            family's scope, taken when it was built.
        extra (dict): what one family's own check reads (the language model's ``ids``).
    """

    name: str
    parts: List[Part]
    params: Dict[str, nn.Variable]
    extra: Dict[str, Any] = field(default_factory=dict)


@contextmanager
def scope(name: str, type_config: str):
    """The family's parameter scope, emptied first, in ``cpu:<type_config>``."""
    with nn.parameter_scope(name):
        nn.clear_parameters()
    with nn.parameter_scope(name), nn.context_scope(cpu_context(type_config)):
        yield


def scoped_parameters(name: str) -> Dict[str, nn.Variable]:
    """Every parameter (running statistics too) of the scope :func:`scope` entered, by full
    name (``name/...``); call it inside that scope."""
    return {f"{name}/{k}": v for k, v in nn.get_parameters(grad_only=False).items()}


def normal(rng: np.random.RandomState, std: float) -> I.NormalInitializer:
    """A seeded normal initializer (nnabla's defaults draw from NumPy's global generator)."""
    return I.NormalInitializer(std, rng=rng)


def batch_rng(seed: int, k: int) -> np.random.RandomState:
    """The generator of batch ``k`` of the stream ``seed``."""
    return np.random.RandomState(seed * 100003 + k)
