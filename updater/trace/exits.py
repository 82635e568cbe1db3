"""How a process that records a trace ends: its recorders' exit hooks run at interpreter exit
(after Ctrl-C too), and a SIGTERM (what job schedulers send at a time limit) is handled as
Ctrl-C is: it raises :class:`Terminated`, a ``KeyboardInterrupt``, in the main thread, so the
program unwinds (``with`` blocks close their recorders), the exit hooks write what is left, and
then the process ends by SIGTERM's default action (exit status 143 in a shell)."""

from __future__ import annotations

import atexit
import os
import signal
import sys
import threading
import weakref
from typing import List

EXITING: List[bool] = []
"""True once the interpreter exits."""
_HOOKS: List[weakref.finalize] = []  # the exit hooks of the recorders made, alive or done
_TERMINATED: List[bool] = []  # a SIGTERM arrived
_WATCHING: List[bool] = []  # _at_exit is registered
_INSTALLED: List[int] = []  # the process that installed the SIGTERM handler


class Terminated(KeyboardInterrupt):
    """Raised in the main thread by a SIGTERM while a ``GradientRecorder`` lives: handled as
    Ctrl-C is, then the process ends by SIGTERM (see the module doc)."""


def watch_exit(hook: weakref.finalize) -> None:
    """Watch the interpreter's exit for the recorder exit hook ``hook`` (call it after making
    the ``weakref.finalize``: ``atexit`` runs the last registered first, and finalizers run from
    the hook ``weakref`` registered when the first one was made, so :func:`_at_exit` runs
    before them). In the main thread, with SIGTERM's default action in place, SIGTERM is
    handled from now on (a handler the program set is left alone)."""
    _HOOKS[:] = [h for h in _HOOKS if h.alive] + [hook]
    if not _WATCHING:
        _WATCHING.append(True)
        atexit.register(_at_exit)
    main = threading.current_thread() is threading.main_thread()
    if main and not _INSTALLED and signal.getsignal(signal.SIGTERM) is signal.SIG_DFL:
        _INSTALLED.append(os.getpid())
        signal.signal(signal.SIGTERM, _on_sigterm)


def _on_sigterm(signum, frame) -> None:
    if os.getpid() != _INSTALLED[0]:  # a forked child: the default action
        _default_action()
    if _TERMINATED:
        return  # a second SIGTERM while unwinding or writing: the writing goes on
    _TERMINATED.append(True)
    if not any(h.alive for h in _HOOKS):
        _default_action()
    raise Terminated("SIGTERM: the recorders' traces are written, then the process ends by SIGTERM")


def _at_exit() -> None:
    EXITING.append(True)
    if _TERMINATED:
        for hook in reversed(_HOOKS):
            hook()  # writes what the recorder holds (once: a finalizer runs at most once)
        _default_action()


def _default_action() -> None:
    """End the process by SIGTERM, as if no handler had been set."""
    sys.stdout.flush()
    sys.stderr.flush()
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    os.kill(os.getpid(), signal.SIGTERM)
