"""The collaborators of :class:`updater.DynamicLossScalingUpdater`, built from its options
(:class:`updater.driver.options.LiveOptions`) and its policy: at construction, and again at the
next step after an option that chooses a structure (:data:`updater.driver.options.REBUILDS`) was
assigned, or an option or a policy that changes the finite check's path (:func:`check_path`).
They share the updater's :class:`Counters` and its :class:`LiveOptions`, whose record each reads
at each use, so none keeps a setting of its own. The plan of an iteration (:func:`plan_step`) is
made again at the next step after any option is assigned."""

from __future__ import annotations

from typing import List, NamedTuple

from .arrays import seed_dtype
from .attempts import Attempts, StepPlan
from .checks import choose_check, resolve_path
from .forward_state import ForwardState
from .gradient_work import GradientWork, StepReads
from .options import LiveOptions, UpdaterOptions
from .outside_forward import watches
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


def _sizes(o: UpdaterOptions) -> List[int]:
    return [p.size for p in o.solver.get_parameters().values()]


def _flag_only(o: UpdaterOptions, policy) -> bool:
    """Whether steps read only the finite flag: no |g| max for the policy, no ``clip_grad_norm``,
    no ``recorder``."""
    return not (policy.needs_grad_absmax or o.clip_grad_norm is not None or o.recorder is not None)


def check_path(o: UpdaterOptions, policy) -> str:
    """The finite check's path (:func:`updater.driver.checks.resolve_path`) for the options ``o``
    and ``policy``."""
    sizes = _sizes(o)
    return resolve_path(o.finite_check, _flag_only(o, policy), sum(sizes), len(sizes))


def path_changed(live: LiveOptions, policy, work: GradientWork) -> bool:
    """Whether the options ``live`` and ``policy`` now give a finite-check path other than the
    one ``work`` was built with (``"auto"`` reads the policy, ``clip_grad_norm`` and
    ``recorder``: :func:`check_path`)."""
    return check_path(live.record, policy) != work.check.name


def plan_step(o: UpdaterOptions) -> StepPlan:
    """The plan of an iteration (:class:`~updater.driver.attempts.StepPlan`) with the options
    ``o``."""
    return StepPlan(
        watch_outside=watches(o),
        retry=o.on_overflow == "retry",
        clip=o.clip_grad_norm is not None,
    )


def assemble(live: LiveOptions, policy, counters: Counters) -> Parts:
    """The collaborators for the options ``live`` and ``policy`` (module doc)."""
    o = live.record
    seed_type = seed_dtype(o.loss)
    check = choose_check(o.finite_check, _flag_only(o, policy), _sizes(o), o.solver, o.loss)
    work = GradientWork(live, check)
    state = ForwardState(live, check, counters)
    rounds = Rounds(live, check, work.params, counters, lambda: state.written)
    reads = StepReads(rounds, state, check)
    recording = None if o.recorder is None else Recording(live, reads, work, seed_type)
    attempts = Attempts(
        options=live,
        reads=reads,
        work=work,
        counters=counters,
        seed_type=seed_type,
        recording=recording,
    )
    monitor = None if o.monitor is None else Monitor(o.monitor)
    return Parts(
        seed_type=seed_type,
        monitor=monitor,
        work=work,
        forward_state=state,
        rounds=rounds,
        attempts=attempts,
    )
