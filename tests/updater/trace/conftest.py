"""Fixtures of the recorder's tests."""

import pytest


@pytest.fixture
def tiny():
    """Factory of TinyClassifier models (cpu:half) with fresh parameters."""
    nn = pytest.importorskip("nnabla")
    from tests.nnabla_models import TinyClassifier

    nn.clear_parameters()
    yield lambda scope="rec", **kw: TinyClassifier(scope, **kw)
    nn.clear_parameters()
