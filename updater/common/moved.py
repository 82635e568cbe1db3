"""Old module paths that still import: a module that moved keeps its old name as an alias,
which warns ``DeprecationWarning`` once (on its first import) naming the new path and then is
the new module itself (same objects, same ``sys.modules`` entry).

A package lists its moved modules in one table (old path -> new path) and calls
:func:`alias_moved` once at its import: ``updater`` for the library's modules
(:data:`updater.MOVED`), ``sim`` for the testbed's.

The aliases are found through the packages they live in, never through ``sys.meta_path``:
each package that holds an old path gets one more entry on its ``__path__`` (a name, not a
folder) whose finder knows the table, so only an import inside those packages can ask it, once
per module; an unrelated import (nnabla tries to import the missing ``nnabla.nnabla_ext`` on
every step) never does.
"""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.machinery
import importlib.util
import sys
import warnings
from typing import Dict, Mapping, Set


class _Alias(importlib.abc.Loader):
    """The path entry of the packages holding old paths: finds an old path (loading it warns and
    puts the new module in its place) and gives each package below that holds old paths the
    entry on its ``__path__`` as it is imported."""

    ENTRY = "<updater.common.moved aliases>"

    def __init__(self):
        self.moved: Dict[str, str] = {}
        self.packages: Set[str] = set()  # those whose ``__path__`` has the entry

    def add(self, moved: Mapping[str, str]) -> None:
        """Alias the old paths of ``moved``: the entry goes on the package each one's parent
        turns out to be (the new module of a parent that moved) and on the packages above it."""
        self.moved.update(moved)
        for old in moved:
            parent = old.rpartition(".")[0]
            names = self.moved.get(parent, parent).split(".")
            self.packages.update(".".join(names[:n]) for n in range(1, len(names) + 1))
        for name in self.packages:
            if name in sys.modules:
                self.enter(name, sys.modules[name].__path__)

    def enter(self, package: str, path) -> None:
        """Put the entry on ``path`` (the ``__path__`` of ``package``) if it needs it."""
        if self.ENTRY not in path and package in self.packages:
            path.insert(0, self.ENTRY)  # first: a folder may hold the new module's file

    def find_spec(self, fullname, target=None):
        if fullname in self.moved:
            return importlib.util.spec_from_loader(fullname, self)
        if fullname not in self.packages:
            return None
        parent = sys.modules[fullname.rpartition(".")[0]].__path__
        path = [entry for entry in parent if entry != self.ENTRY]
        spec = importlib.machinery.PathFinder.find_spec(fullname, path)
        if spec is not None and spec.submodule_search_locations is not None:
            self.enter(fullname, spec.submodule_search_locations)
        return spec

    def invalidate_caches(self) -> None:
        """Nothing cached (``importlib.invalidate_caches`` asks every path entry finder)."""

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


_ALIASES = _Alias()


def _hook(entry):
    """The path hook of the entry (``sys.path_importer_cache`` may be cleared)."""
    if entry != _Alias.ENTRY:
        raise ImportError(f"not {_Alias.ENTRY}")
    return _ALIASES


def alias_moved(moved: Mapping[str, str]) -> None:
    """Make every old path of ``moved`` (old module path -> new one) importable as an alias of
    its new module (module doc); called once per table."""
    if _hook not in sys.path_hooks:
        sys.path_hooks.append(_hook)  # last: asked only for an entry no other hook takes
    sys.path_importer_cache[_Alias.ENTRY] = _ALIASES
    _ALIASES.add(moved)
