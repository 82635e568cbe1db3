"""A forward pass of the loss run outside the updater between its steps, refused where it moves
state twice.

The updater runs ``loss.forward()`` itself in every round. A script without a data feeder that
also calls it (the habit of a hand-written nnabla loop: set the inputs, ``loss.forward()``,
``updater.update()``) runs two forward passes per step, and every function that writes state in
its forward (BatchNormalization's running mean and variance, ...: the
:data:`updater.driver.function_roles.FORWARD_STATE` inputs, and any function that reads a
``forward_state`` Variable) moves it twice. Only a forward that ran such a function is refused:
one of a part of the graph upstream of them (``feat.forward()`` for logging) or of another head
that shares the trunk moves no state and runs. With a data feeder nothing is watched: the feeder
sets the inputs, and a forward run there or before the call is taken as meant (a GAN's generator
run for the discriminator's step moves its statistics on purpose).

How it is seen: with ``clear_buffer=True`` (the default) the updater's backward pass frees the
buffers of the graph's intermediate Variables, which nnabla marks ``clear_called``; a forward pass
that runs a function fills its outputs again (any forward but one with ``clear_buffer=True``,
which frees them as it goes). The Variables watched are the outputs of the functions that write
state and of the functions that read those, those freed after the updater's last step. Reading
``.d`` of one of them also fills it (and reads freed memory). With ``clear_buffer=False``
nothing is freed and nothing is seen; a forward meant to move the state runs with
``clear_buffer=True`` and is not seen either.
"""

from __future__ import annotations

from typing import Dict, List

import nnabla as nn

from .function_roles import state_writers


def state_function_outputs(loss, given=()) -> List[nn.Variable]:
    """The intermediate (non-persistent) outputs of the functions of the graph of ``loss`` that
    write state there (those the table names and those that read one of ``given``, the
    ``forward_state`` Variables) and of the functions that read those outputs (a forward with
    ``clear_no_need_grad`` frees a writer's output that no backward needs, not both); each
    once."""
    given = {hash(v) for v in given}
    writers = {hash(f.outputs[0]) for f in state_writers(loss)}
    written = set()  # hashes of the writers' outputs
    found: Dict[int, nn.Variable] = {}

    def visit(func):
        if hash(func.outputs[0]) in writers or any(hash(v) in given for v in func.inputs):
            written.update(hash(v) for v in func.outputs)
        elif not any(hash(v) in written for v in func.inputs):
            return
        for v in func.outputs:
            if not v.persistent and hash(v) != hash(loss):
                found.setdefault(hash(v), v)

    loss.visit(visit)
    return list(found.values())


UPDATER_FORWARDS = [0]
"""Forward passes run by the updaters of this process, any of them: :meth:`Rounds.run
<updater.driver.rounds.Rounds.run>` adds one per pass (an item write, no call)."""


def watches(options) -> bool:
    """Whether a forward pass run outside the updater can be seen with the options ``options``:
    without a data feeder and with ``clear_buffer`` (module doc); else nothing is watched."""
    return options.clear_buffer and options.data_feeder is None


class OutsideForward:
    """Watches the graph of ``loss`` for a forward pass run between the updater's steps.

    Args:
        loss (nnabla.Variable): the updater's loss.
        options (LiveOptions): nothing is watched unless :func:`watches` its record; its
            ``forward_state`` is read with the graph.

    Attributes:
        watched (list of nnabla.Variable): the outputs freed at the end of the last step, which
            :meth:`check` reads; empty: nothing to check.
    """

    def __init__(self, loss, options) -> None:
        self.loss = loss
        self.options = options
        self._candidates: List[nn.Variable] | None = None  # found on first use
        self.watched: List[nn.Variable] = []
        self._forwards = 0  # updaters' forward passes counted at the end of the last step

    def after_step(self) -> None:
        """Called after the updater's own passes: watch the candidates they left freed (none
        unless :func:`watches` the options)."""
        if not watches(self.options.record):
            self.watched = []
            return
        if self._candidates is None:
            self._candidates = state_function_outputs(self.loss, self.options.record.forward_state)
        self.watched = [v for v in self._candidates if v.data.clear_called]
        self._forwards = UPDATER_FORWARDS[0]

    def check(self) -> None:
        """``RuntimeError`` when a watched Variable was filled since :meth:`after_step`."""
        filled = [v for v in self.watched if not v.data.clear_called]
        if filled and self._forwards != UPDATER_FORWARDS[0]:  # another updater ran it
            filled = self.watched = []
        if filled:
            self.watched = []
            ran = f"{filled[0].parent.info.type_name} '{filled[0].parent.name}'"
            raise RuntimeError(
                f"loss.forward() ran outside the updater since its last step (it ran {ran}, "
                "which writes state; or that function's output's .d was read): the updater "
                "runs the forward pass itself in update() and backward(), so this graph's "
                "state (running statistics, forward_state) would move twice per step. Remove "
                "the loss.forward() call before update()/backward(): set the inputs by hand "
                "before the call (or in data_feeder) and read the loss in loss.d after it. A "
                "forward meant to move the statistics runs with clear_buffer=True"
            )
