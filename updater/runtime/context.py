"""Choosing nnabla's compute context: cuDNN/CUDA half precision when a GPU is there, else cpu:half.

Kinds (``kind`` argument of :func:`get_context`):

- ``"auto"``: ``cudnn`` with ``type_config="half"`` when ``nnabla_ext.cuda`` imports (installed
  by the ``cuda`` extra: ``pip install 'nnabla-dls[cuda]'``) and reports at least one GPU,
  otherwise ``cpu`` with ``type_config="half"`` (nnabla's emulated float16 on the CPU, slow but
  exact);
- ``"cudnn"``, ``"cuda"``, ``"cpu"``: that extension in half precision;
- any of them followed by ``":float"`` or ``"-float"`` (``"cpu:float"``, ``"cpu-float"``):
  float32; ``":half"`` / ``"-half"`` are accepted and mean the default.
"""

from __future__ import annotations

import importlib
import logging
from typing import TYPE_CHECKING, Tuple

from ..common.validation import check_int

if TYPE_CHECKING:
    from nnabla import Context

logger = logging.getLogger(__name__)

EXTENSIONS = ("cudnn", "cuda", "cpu")
TYPE_CONFIGS = ("half", "float")


def _parse(kind) -> Tuple[str, str]:
    accepted = (
        "'auto', 'cudnn', 'cuda' or 'cpu', optionally followed by ':half'/':float' "
        "(or '-half'/'-float'), e.g. 'cpu:float'"
    )
    if not isinstance(kind, str):
        raise TypeError(f"kind must be a str ({accepted}), got {kind!r}")
    text = kind.strip().lower().replace("-", ":")
    ext, _, type_config = text.partition(":")
    type_config = type_config or "half"
    if ext not in EXTENSIONS + ("auto",) or type_config not in TYPE_CONFIGS:
        raise ValueError(f"kind must be {accepted}, got {kind!r}")
    return ext, type_config


def cuda_device_count() -> int:
    """Number of GPUs nnabla's CUDA extension sees; 0 when ``nnabla_ext.cuda`` is missing."""
    try:
        cuda = importlib.import_module("nnabla_ext.cuda")
        return int(cuda.get_device_count())
    except Exception as exc:  # missing extension, no driver, no device
        logger.debug("nnabla_ext.cuda unavailable: %s", exc)
        return 0


def get_context(kind: str = "auto", device_id: int = 0) -> Context:
    """Return an nnabla context for ``kind`` and log which one was chosen (at DEBUG).

    Args:
        kind (str, default "auto"): "auto", "cudnn", "cuda" or "cpu", optionally with
            ":half" (default) or ":float" (also written "-float"); see the module docstring.
        device_id (int, default 0): GPU index, >= 0 (ignored on the CPU).

    Returns:
        nnabla.Context: pass it to ``nn.set_default_context`` or ``nn.context_scope``.

    Raises:
        ValueError / TypeError: unknown kind or bad ``device_id``.
        RuntimeError: "cuda"/"cudnn" asked for but nnabla-ext-cuda or a GPU is missing.

    >>> get_context("cpu:float").backend
    ['cpu:float']
    """
    from nnabla.ext_utils import get_extension_context

    ext, type_config = _parse(kind)
    device_id = check_int("device_id", device_id, 0)
    if ext == "auto":
        ext = "cudnn" if cuda_device_count() > 0 else "cpu"
        logger.debug("auto context: %s", "GPU found" if ext == "cudnn" else "no GPU, using CPU")
    elif ext in ("cuda", "cudnn"):
        count = cuda_device_count()
        if count == 0:
            raise RuntimeError(
                f"kind={kind!r} needs nnabla-ext-cuda and a visible GPU, found none; install "
                "the cuda extra (pip install 'nnabla-dls[cuda]') or use kind='cpu'"
            )
        if device_id >= count:
            raise ValueError(f"device_id must be in [0, {count - 1}], got {device_id}")
    if ext == "cpu":
        ctx = get_extension_context("cpu", type_config=type_config)
    else:
        ctx = get_extension_context(ext, device_id=str(device_id), type_config=type_config)
    logger.debug("nnabla context: %s type_config=%s (%s)", ext, type_config, ctx)
    return ctx
