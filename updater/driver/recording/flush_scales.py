"""The scales at which ``Probes(flush=True)`` measures a recorded step's flushing: the same
scales whatever policy the run was recorded under, from the highest a policy could choose down
(NumPy only).

A replay under another policy reads flushing at its own scale (:mod:`sim.replay.flush_basis`):
a recording under nnabla-legacy (scale 8) that measured only 8 and below knew nothing of the
default's 2**15. So the measured scales are a fixed grid anchored at the top of the probe bounds
(:func:`updater.driver.recording.probes.probe_bounds`: the policy's ``max_scale``, 2**15 for a
float16 seed): ``top``, ``top / 2**4``, ``top / 2**8``, ``top / 2**12`` (2**15 down to 2**3;
those below the bounds' lowest are left out). The step's own seed takes the place of the grid
scale nearest it below the top, or fills a place the bounds left (its pass is the recorded
attempt, free), so the probes cost the same three passes as before, and a recording under the
default (2**15) and one under nnabla-legacy (8) measure the same four scales. A scale above
the step's overflow threshold measures nothing (NaN), and a replay there skips the step anyway.
"""

from __future__ import annotations

import math

import numpy as np

FLUSH_GRID = (0, -4, -8, -12)
"""Powers of two, relative to the top of the probe bounds, at which flushing is measured (the
trace's ``flush_*`` width)."""


def flush_scales(seed: float, bounds: tuple) -> np.ndarray:
    """The scales, ascending, at which a step recorded at ``seed`` measures flushing (module
    doc): ``len(FLUSH_GRID)`` of them, NaN for a grid scale below ``bounds`` or a seed of 0.

    Args:
        seed (float): the recorded attempt's seed, >= 0.
        bounds (tuple): ``(lowest, highest)`` scale a policy could choose, 0 < lowest <= highest.

    >>> (np.log2(flush_scales(8.0, (1.0, 2.0**15)))).tolist()
    [3.0, 7.0, 11.0, 15.0]
    >>> (np.log2(flush_scales(2.0**13, (1.0, 2.0**15)))).tolist()
    [3.0, 7.0, 13.0, 15.0]
    """
    low, high = bounds
    top = math.floor(math.log2(high))
    grid = np.array([top + k for k in FLUSH_GRID if top + k >= math.log2(low)], np.float64)
    scales = np.full(len(FLUSH_GRID), np.nan)
    if not seed > 0:  # a seed of 0 in float16 scales nothing
        return scales
    own = math.log2(seed)
    if own not in grid and grid.size < scales.size:  # room left by the bounds
        grid = np.append(grid, own)
    elif own not in grid:  # the seed replaces its nearest grid scale below the top
        grid[1 + np.argmin(np.abs(grid[1:] - own))] = own
    scales[: grid.size] = np.sort(np.exp2(grid))
    return scales
