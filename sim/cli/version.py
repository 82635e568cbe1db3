"""What ``dls --version`` prints, with or without the ``sim`` extra (no dependency of it)."""

from __future__ import annotations


def version_line() -> str:
    """``dls (nnabla-dls) <version>``."""
    from sim import __version__

    return f"dls (nnabla-dls) {__version__}"
