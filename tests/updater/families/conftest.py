"""The matrix's runs, each computed once per test process, when a test first asks for it."""

from __future__ import annotations

import pytest

from . import runs


class Matrix:
    """The runs of :mod:`tests.updater.families.runs` by family (and path), each computed on
    first use and kept; the checkpoints of the path runs go in ``folder/<family>``."""

    def __init__(self, folder):
        self.folder = folder
        self.cache = {}

    def _once(self, key, compute):
        if key not in self.cache:
            self.cache[key] = compute()
        return self.cache[key]

    def _folder(self, name):
        folder = self.folder / name
        folder.mkdir(exist_ok=True)
        return folder

    def path_run(self, name: str, path: str) -> runs.Run:
        return self._once(
            ("path", name, path), lambda: runs.path_run(name, path, self._folder(name))
        )

    def nnabla_run(self, name: str) -> runs.Run:
        return self._once(("nnabla", name), lambda: runs.nnabla_run(name))

    def float_run(self, name: str) -> runs.Run:
        def compute():
            applied = [(s.part, s.batch) for s in self.nnabla_run(name).steps]
            return runs.float_run(name, applied)

        return self._once(("float", name), compute)

    def resumed(self, name: str) -> dict:
        for path in runs.PATHS:  # their checkpoints
            self.path_run(name, path)
        return self._once(("resumed", name), lambda: runs.resumed_runs(name, self._folder(name)))


@pytest.fixture(scope="session")
def matrix(tmp_path_factory):
    return Matrix(tmp_path_factory.mktemp("families"))
