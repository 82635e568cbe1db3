"""Old module paths that still import: a module that moved keeps its old name as an alias,
which warns ``DeprecationWarning`` once (on its first import) naming the new path and then is
the new module itself (same objects, same ``sys.modules`` entry).

A package lists its moved modules in one table (old path -> new path) and calls
:func:`alias_moved` once at its import: ``updater`` for the library's modules
(:data:`updater.MOVED`), ``sim`` for the testbed's.
"""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.util
import sys
import warnings
from typing import Mapping


class _Alias(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Finds the old paths of one table; loading one warns and puts the new module in its place."""

    def __init__(self, moved: Mapping[str, str]):
        self.moved = dict(moved)

    def find_spec(self, fullname, path=None, target=None):
        if fullname not in self.moved:
            return None
        return importlib.util.spec_from_loader(fullname, self)

    def create_module(self, spec):
        return None  # a placeholder, replaced in sys.modules by exec_module

    def exec_module(self, module) -> None:
        old, new = module.__name__, self.moved[module.__name__]
        warnings.warn(
            f"{old} moved to {new}; import {new} (the old path will be removed)",
            DeprecationWarning,
            stacklevel=2,  # the importing line: warnings skips importlib's frames
        )
        sys.modules[old] = importlib.import_module(new)  # the import returns this entry


def alias_moved(moved: Mapping[str, str]) -> None:
    """Make every old path of ``moved`` (old module path -> new one) importable as an alias of
    its new module (module doc); called once per table."""
    sys.meta_path.insert(0, _Alias(moved))
