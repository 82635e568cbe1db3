"""nnabla's own parameter file of the weights in a checkpoint, for an inference script:
``nn.load_parameters`` reads ``.h5`` and ``.protobuf`` files, not the ``.npz`` that
:func:`updater.runtime.checkpoint.save_checkpoint` writes (it loads nothing from one)."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Union

import nnabla as nn

from ..common.names import shown
from ..common.npz import read_npz
from ..common.writing import write_file
from .checkpoint import _nonfinite, _updater_state

SUFFIXES = (".h5", ".protobuf")
"""The parameter file formats of ``nn.save_parameters``, by the file's suffix."""

_log = logging.getLogger(__name__)


class _NoFileObjectLine(logging.Filter):
    """Drops nnabla's "Parameter save" line, which names the temporary file object
    (``<_io.BufferedWriter name=4>``) ``write_file`` hands it, not the file written."""

    def filter(self, record: logging.LogRecord) -> bool:
        return not record.getMessage().startswith("Parameter save")


def export_parameters(
    checkpoint: Union[str, Path],
    path: Union[str, Path],
    max_bytes: int | None = None,
    overwrite: bool = False,
) -> Path:
    """Write the parameters saved in ``checkpoint`` to ``path`` as nnabla's own parameter
    file, which ``nn.load_parameters(path)`` reads; no graph, solver or updater is needed.

    The values are the float32 master values the checkpoint holds, under their names there and
    in its order. Every parameter is written with ``need_grad=True`` (a checkpoint does not
    keep it; nnabla's parametric functions set their own when the graph is built). The
    checkpoint's ``state/`` entries (statistics made with ``nn.Variable``, ``forward_state``)
    are left out: they are no parameters, and under the checkpoint's names for them
    ``nn.load_parameters`` would register parameters no graph looks up.

    Args:
        checkpoint (str or Path): a file written by ``save_checkpoint``, read and checked as
            ``load_checkpoint`` reads it.
        path (str or Path): the output, ending in ``.h5`` or ``.protobuf``; written by
            :func:`updater.common.writing.write_file` (atomic, never the checkpoint).
        max_bytes (int or None, default None): as in ``load_checkpoint``.
        overwrite (bool, default False): replace an existing file at ``path``. An ``.h5`` or
            ``.protobuf`` file cannot say that dls wrote it (:mod:`updater.common.identity`),
            so an export over an earlier one needs it too.

    Returns:
        Path: ``path``.

    Raises:
        ValueError: ``path`` has another suffix; the checkpoint is not one (as
            ``load_checkpoint``), holds no parameter, or a parameter holding inf/NaN.
        OSError: the checkpoint cannot be read or ``path`` cannot be written.
    """
    path = Path(path)
    if path.suffix not in SUFFIXES:
        raise ValueError(
            f"path must end in .h5 or .protobuf (nnabla's parameter files), got {str(path)!r}"
        )
    z = read_npz(checkpoint, "checkpoint", max_bytes)
    _updater_state(z)  # written by save_checkpoint, in a format this version reads
    params = {}
    for key in [k for k in z.arrays if k.startswith("param/")]:
        name = key[len("param/") :]
        values = z.array(key, "float", f"parameter {name!r}")
        if what := _nonfinite(values):
            raise z.error(f"parameter {name!r} holds {what}; an inference graph would use it")
        params[name] = nn.Variable(values.shape, need_grad=True)
        params[name].d = values
    if not params:
        raise z.error("holds no parameters")
    quiet = _NoFileObjectLine()
    nnabla_log = logging.getLogger("nnabla")
    nnabla_log.addFilter(quiet)
    try:
        written = write_file(
            path,
            lambda f: nn.save_parameters(f, params, extension=path.suffix),
            overwrite,
            inputs=[checkpoint],
            kind=path.suffix[1:],
        )
    finally:
        nnabla_log.removeFilter(quiet)
    _log.info("Parameter save (%s): %s", path.suffix, shown(path))
    return written
