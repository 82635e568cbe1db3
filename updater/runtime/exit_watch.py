"""What keeps an MPI job from hanging when one rank ends early (``sys.exit(0)``, fewer steps,
the end of its script while the others still train).

The watch acts only on a rank that waits in one of
:class:`updater.runtime.comm.MPICommunicator`'s collectives (``all_reduce``, ``barrier``,
``check_same``: the updater's settings check at its first update).
A rank that ends tells every other rank so (a small message on a duplicate of the
communicator), then waits for every rank to end too, as long as they take (a rank that works
on, e.g. rank 0 evaluating and saving after training, is never aborted). A rank waiting in a
collective polls for that message and, when the collective is still not done ``grace`` seconds
after it came, aborts the whole job, naming the rank that ended: it would wait for it forever.
A rank waiting in a collective outside the communicator (a plain mpi4py ``Barrier``) is not
watched: it waits as in plain MPI. A rank's unhandled exception ends the job at once
(:class:`AbortingExcepthook`).
"""

from __future__ import annotations

import atexit
import sys
import time

import numpy as np

ABORT_PAUSE_S = 0.3
"""MPI_Abort tears down mpiexec's output forwarding at once; a short pause lets the message just
written reach the terminal first (seen cut off without it)."""
_ENDED = 7  # the message tag of "this rank ended"


def abort_job(comm, message: str) -> None:
    """Write ``message`` to stderr and end every rank of ``comm``'s job (``MPI_Abort``, 1)."""
    sys.stderr.write(message + "\n")
    sys.stderr.flush()
    time.sleep(ABORT_PAUSE_S)
    comm.Abort(1)


class AbortingExcepthook:
    """The ``sys.excepthook`` that :func:`updater.runtime.comm.abort_on_exception` installs: the
    ``previous`` hook prints the exception, then every rank of ``target``'s job ends
    (``MPI_Abort`` with ``exit_code``) after a pause (:data:`ABORT_PAUSE_S`)."""

    def __init__(self, previous, target, exit_code: int):
        self.previous, self.target, self.exit_code = previous, target, exit_code

    def __call__(self, exc_type, exc, tb) -> None:
        try:
            self.previous(exc_type, exc, tb)
        finally:
            sys.stdout.flush()
            sys.stderr.flush()
            time.sleep(ABORT_PAUSE_S)
            self.target.Abort(self.exit_code)


class ExitWatch:
    """The watch of one communicator (see the module doc); made by ``MPICommunicator``.

    Args:
        comm (mpi4py.MPI.Intracomm): the ranks that train together (duplicated here).
        grace (float): seconds a collective may still take to complete after another rank
            said it ended (that rank may have ended right after its part of it).
    """

    def __init__(self, comm, grace: float):
        from mpi4py import MPI

        self._MPI = MPI
        self._comm = comm.Dup()
        self.rank, self.size, self.grace = comm.Get_rank(), comm.Get_size(), grace
        self._status = MPI.Status()
        atexit.register(self._at_exit)

    def wait(self, request, what: str) -> None:
        """Wait for the non-blocking collective ``request`` (this rank's part of ``what``);
        abort the job when another rank ended without joining it (told so, and the collective
        still not done ``grace`` seconds later: a rank that ended after its part of the last
        collective stays in its exit barrier meanwhile, so that one completes)."""
        settled = None
        while not request.Test():
            if settled is None and self._comm.Iprobe(self._MPI.ANY_SOURCE, _ENDED, self._status):
                settled = time.monotonic() + self.grace
            if settled is not None and time.monotonic() > settled:
                abort_job(
                    self._comm,
                    f"MPICommunicator: rank {self._status.Get_source()} ended while rank "
                    f"{self.rank} waits for it in {what} (it would wait forever; still not done "
                    f"{self.grace:g} s after it ended): aborting the job",
                )

    def _at_exit(self) -> None:
        rank = np.array([self.rank], np.int32)
        told = [self._comm.Isend(rank, r, _ENDED) for r in range(self.size) if r != self.rank]
        everyone = self._comm.Ibarrier()  # the others may work on as long as they need
        while not everyone.Test():
            time.sleep(0.01)
        other = np.empty(1, np.int32)
        while self._comm.Iprobe(self._MPI.ANY_SOURCE, _ENDED):  # the others' notes: read them
            self._comm.Recv(other, self._MPI.ANY_SOURCE, _ENDED)
        self._MPI.Request.Waitall(told)
        self._comm.Free()
