"""A forward pass of the loss run outside the updater between its steps, refused where it moves
state twice.

The updater runs ``loss.forward()`` itself in every round. A script without a data feeder that
also calls it (the habit of a hand-written nnabla loop: set the inputs, ``loss.forward()``,
``updater.update()``) runs two forward passes per step, and every function that writes state in
its forward (BatchNormalization's running mean and variance, ...:
:func:`updater.driver.written.forward_written`) moves it twice. With a data feeder nothing is
watched: the feeder sets the inputs, and a forward run there or before the call is taken as
meant (a GAN's generator run for the discriminator's step moves its statistics on purpose).

How it is seen: with ``clear_buffer=True`` (the default) the updater's backward pass frees the
buffers of the graph's intermediate Variables, which nnabla marks ``clear_called``; a forward pass
run afterwards fills them again (any forward but one with ``clear_buffer=True``, which frees them
as it goes). The Variables watched are the intermediate inputs and outputs of the functions that
write state, those freed after the updater's last step. Reading ``.d`` of one of them also fills
it (and reads freed memory). With ``clear_buffer=False`` nothing is freed and nothing is seen;
a forward meant to move the state runs with ``clear_buffer=True`` and is not seen either.
"""

from __future__ import annotations

from typing import Callable, List

import nnabla as nn

from .written import WRITTEN_INPUTS


def state_function_variables(loss) -> List[nn.Variable]:
    """The intermediate (non-leaf, non-persistent) inputs and outputs of the functions of the
    graph of ``loss`` that write state in this graph (:data:`WRITTEN_INPUTS`), each once."""
    found = {}

    def visit(func):
        entry = WRITTEN_INPUTS.get(func.info.type_name)
        if entry is None or not entry.indices(func.info.args, len(func.inputs)):
            return
        for v in list(func.inputs) + list(func.outputs):
            if v.parent is not None and not v.persistent and hash(v) != hash(loss):
                found.setdefault(hash(v), v)

    loss.visit(visit)
    return list(found.values())


class OutsideForward:
    """Watches the graph of ``loss`` for a forward pass run between the updater's steps.

    Args:
        loss (nnabla.Variable): the updater's loss.
        rounds (Rounds): nothing is watched when its ``data_feeder`` is set or its
            ``clear_buffer`` is False.
        written (callable): returns the state the graph writes (nothing is watched without).
    """

    def __init__(self, loss, rounds, written: Callable[[], list]):
        self.loss = loss
        self.rounds = rounds
        self._written = written
        self._candidates: List[nn.Variable] | None = None  # found on first use
        self._watched: List[nn.Variable] = []  # freed at the end of the last step

    def after_step(self) -> None:
        """Called after the updater's own passes: watch the candidates they left freed."""
        if not self.rounds.clear_buffer or self.rounds.data_feeder is not None:
            self._watched = []
            return
        if self._candidates is None:
            self._candidates = state_function_variables(self.loss) if self._written() else []
        self._watched = [v for v in self._candidates if v.data.clear_called]

    def check(self) -> None:
        """``RuntimeError`` when a watched Variable was filled since :meth:`after_step`."""
        if any(not v.data.clear_called for v in self._watched):
            self._watched = []
            raise RuntimeError(
                "loss.forward() ran outside the updater since its last step (or an "
                "intermediate's .d was read): the updater runs the forward pass itself in "
                "update() and backward(), so this graph's running statistics "
                "(BatchNormalization's, ...) would move twice per step. Remove the "
                "loss.forward() call before update()/backward(): set the inputs by hand before "
                "the call (or in data_feeder) and read the loss in loss.d after it. A forward "
                "meant to move the statistics runs with clear_buffer=True"
            )
