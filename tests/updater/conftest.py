"""Shared set-up of the updater's tests."""

import nnabla as nn
import pytest


@pytest.fixture(autouse=True)
def fresh_parameters():
    """Every test starts and ends with an empty nnabla parameter registry."""
    nn.clear_parameters()
    yield
    nn.clear_parameters()
