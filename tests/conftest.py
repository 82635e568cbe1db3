"""Shared pytest set-up: Hypothesis profiles (``default`` quick, ``ci`` thorough), and Ctrl-C as
a terminal delivers it."""

import os
import signal

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

# A suite started in the background of a shell without job control (``cmd &`` in a script, as a
# CI runner may start it) inherits SIGINT ignored, and so would every process a test starts: a
# Python started so never raises KeyboardInterrupt, and the tests that send a real SIGINT would
# fail or pass without testing it. With Python's handler here, the processes tests start get
# SIGINT's default, as a program run from a terminal does.
if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
    signal.signal(signal.SIGINT, signal.default_int_handler)

# Scripts that tests launch under mpiexec; importing them (for doctests) would run them.
collect_ignore = ["updater/runtime/mpi_scripts"]
