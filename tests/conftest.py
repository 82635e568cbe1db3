"""Shared pytest set-up: Hypothesis profiles (``default`` quick, ``ci`` thorough)."""

import os

from hypothesis import HealthCheck, settings

settings.register_profile(
    "default", max_examples=50, deadline=None, suppress_health_check=[HealthCheck.too_slow]
)
settings.register_profile(
    "ci",
    max_examples=300,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
    print_blob=True,
)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "default"))

# Scripts that tests launch under mpiexec; importing them (for doctests) would run them.
collect_ignore = ["updater/runtime/mpi_scripts"]
