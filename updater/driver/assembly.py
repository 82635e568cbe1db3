"""The collaborators of :class:`updater.DynamicLossScalingUpdater`, built from its options record
(:class:`updater.driver.options.UpdaterOptions`) and its policy: at construction, and again at the
next step after an option they are built from (or the policy) was assigned. They share the
updater's :class:`Counters`; each takes the record and reads the options it uses from it, only
those it is built from (:data:`updater.driver.options.REBUILDS`; the updater reads the others
live), so none keeps a setting of its own."""

from __future__ import annotations

from typing import NamedTuple

from .arrays import seed_dtype
from .attempts import Attempts
from .checks import choose_check
from .forward_state import ForwardState
from .gradient_work import GradientWork
from .options import UpdaterOptions
from .recording import Recording
from .records import Counters, Monitor
from .rounds import Rounds


class Parts(NamedTuple):
    """The collaborators of one build."""

    seed_type: type  # the loss's precision (np.float16 or np.float32)
    monitor: Monitor | None
    work: GradientWork
    forward_state: ForwardState
    rounds: Rounds
    attempts: Attempts


def assemble(o: UpdaterOptions, policy, counters: Counters) -> Parts:
    """The collaborators for the options ``o`` and ``policy`` (module doc)."""
    seed_type = seed_dtype(o.loss)
    reads = policy.needs_grad_absmax or o.clip_grad_norm is not None or o.recorder is not None
    sizes = [p.size for p in o.solver.get_parameters().values()]
    check = choose_check(o.finite_check, not reads, sizes, o.solver, o.loss)
    work = GradientWork(o, check)
    state = ForwardState(o, check, counters)
    rounds = Rounds(o, check, work.params, counters, lambda: state.written)
    recording = None if o.recorder is None else Recording(o, rounds, work, state, seed_type)
    attempts = Attempts(o, rounds, work, state, counters, seed_type, recording)
    monitor = None if o.monitor is None else Monitor(o.monitor)
    return Parts(seed_type, monitor, work, state, rounds, attempts)
