"""MPI communicator for data-parallel training on CPU workers (mpi4py + MPICH).

:class:`MPICommunicator` offers the part of nnabla's communicator interface that
:class:`updater.DynamicLossScalingUpdater` uses (``rank``, ``size``, ``local_rank``,
``all_reduce``, ``barrier``), so the same training script runs on CPU workers under
``mpiexec -n 4 python train.py`` and on GPUs with nnabla-ext-cuda's
``MultiProcessDataParallelCommunicator``.

How ``all_reduce`` works:

* Every array, float16 or float32, is summed in float32. MPI has no portable float16 type, and
  summing in float32 then rounding once to float16 is more accurate than a float16 sum that
  rounds after every addition (as a reduction in the half type itself does). A sum that does
  not fit in float16 (>= 65520 after rounding) becomes inf, so an overflow is still seen as one;
  with ``division=True`` the mean is taken in float32 before rounding, so a sum that only
  overflows before dividing stays finite.
* ``inplace=False`` (the default, as in nnabla) packs all arrays into one reusable float32
  buffer and runs ONE ``MPI_Allreduce`` for the whole list. ``inplace=True`` reduces the arrays
  one by one in their own memory (float32 arrays with ``MPI_IN_PLACE``, no packing copy; float16
  arrays through a float32 copy of each). This is the meaning nnabla-ext-cuda gives the flag
  (packed = fast, in place = less memory). Either way the results land in the given arrays and
  each array keeps its dtype.
* Before reducing, the ranks check that they all passed the same thing: each rank hashes its
  call signature (the dtype and shape of every array, and the two flags), and one
  ``MPI_Allreduce`` (MAX) of two int64 words tells every rank whether all hashes agree. When
  they differ, the ranks gather the signatures and raise the same ``ValueError`` on every rank,
  naming the first difference, instead of hanging in (or reading past) a mismatched
  ``MPI_Allreduce``. The check runs on every call: caching "already verified" signatures is
  unsound, because a rank that switches to another verified signature would skip the check
  while the others enter it, and the job would hang. ``MPICommunicator(check_arguments=False)``
  drops this extra small collective (then mismatched calls hang or corrupt, as in plain MPI).

* Every rank gets the same bits back. The MPI standard only recommends this for
  ``MPI_Allreduce``; MPICH does it here (the tests compare all ranks bit for bit with 2 and 4
  ranks), and the updater's "identical parameters on every rank" rests on it.

Failures: a Python exception on one rank does not end an MPI job by itself; the other ranks wait
in their next collective forever. Constructing an :class:`MPICommunicator` therefore installs
:func:`abort_on_exception` (an unhandled exception on any rank prints its traceback and ends the
whole job with a non-zero exit status) and an exit watch (:mod:`updater.runtime.exit_watch`):
a rank that ends (``sys.exit(0)``, fewer steps, the end of its script) tells the others, and a
rank waiting for it in ``all_reduce``, ``barrier`` or ``check_same`` (the updater's settings
check at its first update; all run non-blocking, polling for that word) aborts the job
``exit_grace`` seconds later, naming it. A rank in none of these collectives is never aborted:
it may work on after the others ended (rank 0 evaluating, saving) as long as it needs.
"""

from __future__ import annotations

import hashlib
import pickle
import sys
from typing import Any, Dict, Mapping, Set

import nnabla as nn
import numpy as np

from ..common.validation import check_bool, check_positive
from ..driver.arrays import array_dtype, host_view
from .exit_watch import AbortingExcepthook, ExitWatch

_INSTALL_HINT = (
    "install the project's 'mpi' extra, which brings mpi4py and MPICH (with mpiexec): "
    "pip install -e .[mpi]"
)
_FLOAT_DTYPES = (np.dtype(np.float16), np.dtype(np.float32))


def _import_mpi():
    try:
        from mpi4py import MPI
    except ImportError as exc:
        raise ImportError(
            f"MPICommunicator needs mpi4py, which is not installed; {_INSTALL_HINT}"
        ) from exc
    return MPI


def _describe(entry) -> str:
    kind, shape = entry
    return kind if shape is None else f"{kind.name} array of shape {shape}"


class MPICommunicator:
    """Data-parallel communicator over an MPI communicator, for nnabla NdArrays on CPUs.

    Creating one is collective: every rank of ``comm`` must construct it (it splits ``comm``
    by node to find ``local_rank``).

    Args:
        comm (mpi4py.MPI.Intracomm or None): the ranks that train together; default ``None``
            means ``MPI.COMM_WORLD``.
        check_arguments (bool, default True): check on every ``all_reduce`` call, with one
            extra two-word reduction, that all ranks passed the same shapes, dtypes and flags,
            and raise ``ValueError`` on every rank when not. False skips it.
        exit_grace (float, default 60.0): seconds a rank waiting in ``all_reduce``,
            ``barrier`` or ``check_same`` keeps waiting after another rank ended, before it
            aborts the job (that rank may have ended right after its part of the collective;
            see the module doc); > 0. It does not limit a rank's work outside them.

    Attributes:
        rank (int): this process's rank in ``comm``, in [0, size).
        size (int): number of ranks in ``comm``, >= 1.
        local_rank (int): rank among the processes on this node (shared-memory domain).
        local_size (int): number of ranks of ``comm`` on this node.

    Raises:
        ImportError: mpi4py is not installed (the message says how to install it).
        TypeError: ``comm`` is not an mpi4py intra-communicator, or ``check_arguments`` is not
            a bool.
    """

    def __init__(self, comm=None, check_arguments: bool = True, exit_grace: float = 60.0):
        MPI = _import_mpi()
        self._MPI = MPI
        if comm is None:
            comm = MPI.COMM_WORLD
        if not isinstance(comm, MPI.Intracomm):
            raise TypeError(
                f"comm must be an mpi4py.MPI.Intracomm (e.g. MPI.COMM_WORLD) or None, "
                f"got {type(comm).__name__}"
            )
        self.check_arguments = check_bool("check_arguments", check_arguments)
        self._comm = comm
        self._node_comm = comm.Split_type(MPI.COMM_TYPE_SHARED)
        self.rank = comm.Get_rank()
        self.size = comm.Get_size()
        self.local_rank = self._node_comm.Get_rank()
        self.local_size = self._node_comm.Get_size()
        self._hashes: Dict[tuple, int] = {}  # signature -> int64 hash (a memo of a pure function)
        self._valid: Set[tuple] = set()  # signatures whose types were checked
        self._check_words = np.zeros(2, dtype=np.int64)
        self._buffer = np.empty(0, dtype=np.float32)
        self.exit_grace = check_positive("exit_grace", exit_grace)
        abort_on_exception(comm)
        self._watch = ExitWatch(comm, self.exit_grace)

    @property
    def mpi_comm(self):
        """The underlying ``mpi4py.MPI.Intracomm``."""
        return self._comm

    def init(self) -> None:
        """Do nothing; present so scripts written for nnabla's communicators (which need
        ``comm.init()``) run unchanged."""

    def barrier(self) -> None:
        """Block until every rank has called ``barrier``."""
        self._watch.wait(self._comm.Ibarrier(), "barrier")

    def abort(self, exit_code: int = 1) -> None:
        """End every rank of the job at once with ``exit_code`` (``MPI_Abort``)."""
        self._comm.Abort(exit_code)

    def all_reduce(self, data, division: bool = False, inplace: bool = False) -> None:
        """Sum ``data`` over all ranks and write the result back into the same arrays.

        Collective: every rank must call it with arrays of the same shapes and dtypes, in the
        same order, and the same flags.

        Args:
            data (nnabla.NdArray or list/tuple of nnabla.NdArray): float16 or float32 arrays;
                each keeps its dtype. An array that has no dtype yet (never written, as a
                gradient cleared before its first backward) is read and written as float32.
            division (bool, default False): divide the sum by ``size`` (the mean over ranks).
            inplace (bool, default False): False packs every array into one float32 buffer
                and makes a single MPI call; True reduces array by array in their own memory
                (less memory, one MPI call per array). The results are the same.

        With one rank the sum is the input, so the arrays are left as they are (after the
        type checks).

        Raises:
            TypeError: ``data`` is not an NdArray or a list/tuple of them, an array's dtype is
                not float16/float32, or a flag is not a bool (raised on every rank when every
                rank passes the same thing).
            ValueError: the ranks passed different numbers, shapes or dtypes of arrays, or
                different flags (raised on every rank, naming the first difference; only when
                ``check_arguments`` is True).
        """
        arrays = _as_list(data)
        signature = (
            _flag_entry(division),
            _flag_entry(inplace),
            _data_entry(data) if arrays is None else tuple(_array_entry(a) for a in arrays),
        )
        if self.check_arguments and self.size > 1:
            self._check_same_on_all_ranks(signature)
        if signature not in self._valid:
            _check_types(signature)
            self._valid.add(signature)
        if not arrays or self.size == 1:  # one rank: the sum (and the mean) is the input
            return
        if inplace:
            for array in arrays:
                self._reduce_one(array, division)
        else:
            self._reduce_packed(arrays, division)

    def check_same(self, settings: Mapping[str, Any], what: str = "settings") -> None:
        """Collective (an ``allgather``, under the exit watch: a rank that ended before it
        aborts the job after ``exit_grace``, named): ``ValueError`` on every rank, naming the
        first setting that differs (in the order of rank 0's ``settings``), unless every rank
        passed equal ``settings``."""
        every = self._allgather(dict(settings), f"the check of the {what}") if self.size > 1 else []
        for rank, other in enumerate(every):
            for key in [*every[0], *(k for k in other if k not in every[0])]:
                if other.get(key) != every[0].get(key):
                    raise ValueError(
                        f"ranks run different {what}: {key} is {other.get(key)!r} on rank "
                        f"{rank} and {every[0].get(key)!r} on rank 0; every rank must run the "
                        "same (they would train different models)"
                    )

    # ------------------------------------------------------------------ internals

    def _check_same_on_all_ranks(self, signature) -> None:
        digest = self._hashes.get(signature)
        if digest is None:
            if len(self._hashes) > 4096:
                self._hashes.clear()
            raw = hashlib.blake2b(repr(signature).encode(), digest_size=8).digest()
            digest = self._hashes[signature] = int.from_bytes(raw, "little", signed=True)
        words = self._check_words
        words[0], words[1] = digest, ~digest
        self._allreduce(words, self._MPI.MAX)
        if words[0] == digest and words[1] == ~digest:  # max(h) == h and max(~h) == ~min(h)
            return
        signatures = self._allgather(signature, "all_reduce")
        reference = signatures[0]
        for rank, other in enumerate(signatures):
            if other != reference:
                raise ValueError(_mismatch_message(0, reference, rank, other))

    def _allgather(self, value, what: str) -> list:
        """mpi4py's ``allgather`` (every rank's ``value``, by rank), non-blocking under the
        exit watch: the sizes, then the pickled values (of this job's own ranks)."""
        data = np.frombuffer(pickle.dumps(value), np.uint8)
        sizes = np.zeros(self.size, np.int64)
        self._watch.wait(self._comm.Iallgather(np.array([data.size], np.int64), sizes), what)
        counts, starts = sizes.tolist(), (np.cumsum(sizes) - sizes).tolist()
        gathered = np.empty(sum(counts), np.uint8)
        spec = [gathered, counts, starts, self._MPI.BYTE]
        self._watch.wait(self._comm.Iallgatherv(data, spec), what)
        return [pickle.loads(gathered[a : a + n].tobytes()) for a, n in zip(starts, counts)]

    def _allreduce(self, buffer, op) -> None:
        """``MPI_Allreduce`` in place, non-blocking under the exit watch (a rank that ended
        without joining it aborts the job instead of hanging it)."""
        self._watch.wait(self._comm.Iallreduce(self._MPI.IN_PLACE, buffer, op=op), "all_reduce")

    def _reduce_packed(self, arrays, division: bool) -> None:
        sizes = [a.size for a in arrays]
        total = sum(sizes)
        if self._buffer.size < total:
            self._buffer = np.empty(total, dtype=np.float32)
        buffer = self._buffer[:total]
        dtypes = [array_dtype(a) for a in arrays]
        offset = 0
        for array, dtype, n in zip(arrays, dtypes, sizes):
            if n:
                buffer[offset : offset + n] = host_view(array, dtype)
            offset += n
        self._allreduce(buffer, self._MPI.SUM)
        if division:
            buffer /= self.size
        offset = 0
        with np.errstate(over="ignore"):  # float16 results >= 65520 become inf, as they should
            for array, dtype, n in zip(arrays, dtypes, sizes):
                if n:
                    host_view(array, dtype, write_only=True)[...] = buffer[offset : offset + n]
                offset += n

    def _reduce_one(self, array, division: bool) -> None:
        if array.size == 0:
            return
        dtype = array_dtype(array)
        view = host_view(array, dtype)
        work = view if dtype == np.float32 else view.astype(np.float32)
        self._allreduce(work, self._MPI.SUM)
        if division:
            work /= self.size
        if work is not view:
            with np.errstate(over="ignore"):
                view[...] = work


def _as_list(data):
    """``data`` as a list of items, or None when it is neither an NdArray nor a list/tuple."""
    if isinstance(data, nn.NdArray):
        return [data]
    if isinstance(data, (list, tuple)):
        return list(data)
    return None


def _data_entry(data) -> str:
    return f"data of type {type(data).__name__}"


def _flag_entry(value):
    return value if isinstance(value, bool) else ("not a bool", repr(value))


def _array_entry(array):
    if not isinstance(array, nn.NdArray):
        return (f"a {type(array).__name__} (not an nnabla.NdArray)", None)
    return (array_dtype(array), array.shape)


def _check_types(signature) -> None:
    """Type checks; after the cross-rank check every rank has the same signature, so every
    rank raises the same error."""
    for name, flag in zip(("division", "inplace"), signature[:2]):
        if not isinstance(flag, bool):
            raise TypeError(f"{name} must be a bool, got {flag[1]}")
    if isinstance(signature[2], str):
        raise TypeError(
            f"data must be an nnabla.NdArray or a list/tuple of them, got {signature[2]}"
        )
    for i, (kind, shape) in enumerate(signature[2]):
        if shape is None:
            raise TypeError(f"data[{i}] must be an nnabla.NdArray, got {kind}")
        if kind not in _FLOAT_DTYPES:
            raise TypeError(
                f"data[{i}] has dtype {kind.name}; all_reduce accepts float16 and float32 arrays"
            )


def _mismatch_message(rank_a, sig_a, rank_b, sig_b) -> str:
    hint = (
        "; every rank must pass the same arrays (same model, same grads list, same order) "
        "and the same division/inplace flags"
    )
    for name, a, b in zip(("division", "inplace"), sig_a[:2], sig_b[:2]):
        if a != b:
            return (
                f"all_reduce got {name}={a!r} on rank {rank_a} but {name}={b!r} on rank "
                f"{rank_b}{hint}"
            )
    arrays_a, arrays_b = sig_a[2], sig_b[2]
    if isinstance(arrays_a, str) or isinstance(arrays_b, str) or len(arrays_a) != len(arrays_b):
        return (
            f"all_reduce got {_count(arrays_a)} on rank {rank_a} but {_count(arrays_b)} "
            f"on rank {rank_b}{hint}"
        )
    for i, (a, b) in enumerate(zip(arrays_a, arrays_b)):
        if a != b:
            return (
                f"all_reduce got data[{i}] as {_describe(a)} on rank {rank_a} but as "
                f"{_describe(b)} on rank {rank_b}{hint}"
            )
    raise AssertionError("signatures differ but no difference was found")  # unreachable


def _count(arrays) -> str:
    return arrays if isinstance(arrays, str) else f"data with {len(arrays)} arrays"


def abort_on_exception(comm=None, exit_code: int = 1) -> None:
    """Make an unhandled exception on any rank end the whole MPI job with ``exit_code``.

    Installs a ``sys.excepthook`` that prints the traceback as usual, then calls
    ``MPI_Abort``, so the other ranks (which would otherwise wait in their next collective
    forever) are killed and ``mpiexec`` exits non-zero. Calling it again does nothing.
    Launching with ``python -m mpi4py script.py`` has the same effect.

    Args:
        comm (MPICommunicator, mpi4py.MPI.Comm or None): the job to abort; default ``None``
            means ``MPI.COMM_WORLD``.
        exit_code (int, default 1): exit status passed to ``MPI_Abort``; an int in [1, 255].

    Raises:
        ImportError: mpi4py is not installed.
        ValueError: ``exit_code`` is not an int in [1, 255].
    """
    if isinstance(exit_code, bool) or not isinstance(exit_code, int) or not 1 <= exit_code <= 255:
        raise ValueError(f"exit_code must be an int in [1, 255], got {exit_code!r}")
    MPI = _import_mpi()
    if isinstance(comm, MPICommunicator):
        comm = comm.mpi_comm
    target = MPI.COMM_WORLD if comm is None else comm
    if not isinstance(sys.excepthook, AbortingExcepthook):
        sys.excepthook = AbortingExcepthook(sys.excepthook, target, exit_code)
