"""Benchmark: the one-pass float16 sweep against casting once per scale, next to a memory copy.

Three variants run interleaved (a, b, c, a, b, c, ...) on the same float32 data, and the minimum
over the repeats is kept for each, so background noise hits all of them alike:

a. ``sim.casting.scales.sweep`` over ``n_scales`` power-of-two scales (one pass over the data);
b. the plain way: for each scale, ``(x * s).astype(np.float16)`` and count the fates;
c. ``x.copy()``, the physical reference (one read and one write of the data).

Run ``python -m benchmarks.bench_fp16 [--n N] [--scales K] [--repeats R]``; it prints a markdown
table. ``run()`` returns the numbers as a dict for the report writer.
"""

from __future__ import annotations

import argparse
import time
from typing import Dict

import numpy as np
from tqdm import tqdm

from sim.casting.scales import sweep
from sim.tables import markdown_grid
from updater.common.float16 import FP16_SMALLEST_NORMAL

GOAL_RATIO = 20.0
"""Required speed-up of the sweep over casting once per scale."""
FIRST_EXPONENT = -16
"""Scales swept are ``2**k`` for ``k`` from this up, ``n_scales`` of them."""


def gradient_like(n: int, seed: int = 0) -> np.ndarray:
    """float32 values shaped like gradients: 10% zeros, random signs, log-normal magnitudes
    (median 2**-20, spread about 4.3 binades per standard deviation)."""
    rng = np.random.default_rng(seed)
    x = np.exp2(rng.normal(-20.0, 4.3, n)).astype(np.float32)
    x[rng.random(n) < 0.5] *= -1
    x[rng.random(n) < 0.1] = 0
    return x


def cast_each_scale(x: np.ndarray, exponents, times=None) -> np.ndarray:
    """Counts ``(flushed, subnormal, normal, overflow)`` per scale by casting at each scale.

    Args:
        x (float32 array): the values.
        exponents (sequence of int): scales ``2**k``; ``2**k`` must be a normal float32.
        times (float array or None, default None): if given, ``times[i]`` is lowered to the
            time spent at ``exponents[i]`` when that is smaller.
    """
    zeros = int(np.count_nonzero(x == 0))
    rows = []
    with np.errstate(over="ignore"):
        for i, k in enumerate(exponents):
            start = time.perf_counter()
            h = np.abs((x * np.float32(2.0**k)).astype(np.float16))
            flushed = int(np.count_nonzero(h == 0)) - zeros
            overflow = int(np.count_nonzero(np.isinf(h)))
            normal = int(np.count_nonzero(h >= FP16_SMALLEST_NORMAL)) - overflow
            subnormal = x.size - zeros - flushed - normal - overflow
            rows.append((flushed, subnormal, normal, overflow))
            if times is not None:
                times[i] = min(times[i], time.perf_counter() - start)
    return np.array(rows, dtype=np.int64)


def _timed(fn):
    start = time.perf_counter()
    out = fn()
    return time.perf_counter() - start, out


def run(n: int = 10**7, n_scales: int = 64, repeats: int = 3, progress=None) -> Dict:
    """Time the sweep, the per-scale casts and a copy side by side.

    Args:
        n (int, default 10**7): number of float32 values, >= 1.
        n_scales (int, default 64): number of power-of-two scales, 1..127 (2**-16 upward).
        repeats (int, default 3): interleaved rounds; the minimum time of each variant is kept.
        progress (callable or None, default None): called with no argument after each round.

    Returns:
        dict with the settings, the times in seconds (``sweep_s``, ``cast_loop_s``,
        ``cast_per_scale_s``, ``copy_s``), ``cast_fastest_scale`` and ``cast_slowest_scale`` as
        ``(exponent, seconds)`` (casting cost depends on how many values land in the
        subnormal range), the ratios ``cast_loop_over_sweep`` (the goal is
        >= 20), ``sweep_over_copy`` and ``cast_per_scale_over_copy``, the sweep's and copy's
        throughput in GB/s, ``counts_match`` (both methods gave identical counts) and ``goal_met``.
    """
    for name, value, low, high in (
        ("n", n, 1, None),
        ("n_scales", n_scales, 1, 127),
        ("repeats", repeats, 1, None),
    ):
        if not isinstance(value, (int, np.integer)) or value < low or (high and value > high):
            bound = f"in [{low}, {high}]" if high else f">= {low}"
            raise ValueError(f"{name} must be an int {bound}, got {value!r}")
    x = gradient_like(n)
    exponents = list(range(FIRST_EXPONENT, FIRST_EXPONENT + n_scales))
    best = {"sweep": np.inf, "cast": np.inf, "copy": np.inf}
    per_scale = np.full(n_scales, np.inf)
    counts_match = True
    for _ in range(repeats):
        t, swept = _timed(lambda: sweep(x, exponents))
        best["sweep"] = min(best["sweep"], t)
        t, cast = _timed(lambda: cast_each_scale(x, exponents, per_scale))
        best["cast"] = min(best["cast"], t)
        t, _copy = _timed(x.copy)
        best["copy"] = min(best["copy"], t)
        by_sweep = np.stack([swept.flushed, swept.subnormal, swept.normal, swept.overflow], 1)
        counts_match &= bool(np.array_equal(by_sweep, cast))
        if progress is not None:
            progress()
    ratio = best["cast"] / best["sweep"]
    return {
        "n": n,
        "n_scales": n_scales,
        "repeats": repeats,
        "dtype": "float32",
        "exponents": (exponents[0], exponents[-1]),
        "sweep_s": best["sweep"],
        "cast_loop_s": best["cast"],
        "cast_per_scale_s": best["cast"] / n_scales,
        "cast_fastest_scale": (exponents[int(per_scale.argmin())], float(per_scale.min())),
        "cast_slowest_scale": (exponents[int(per_scale.argmax())], float(per_scale.max())),
        "copy_s": best["copy"],
        "cast_loop_over_sweep": ratio,
        "sweep_over_copy": best["sweep"] / best["copy"],
        "cast_per_scale_over_copy": best["cast"] / n_scales / best["copy"],
        "sweep_gb_per_s": x.nbytes / best["sweep"] / 1e9,
        "copy_gb_per_s": x.nbytes / best["copy"] / 1e9,
        "counts_match": counts_match,
        "goal_ratio": GOAL_RATIO,
        "goal_met": bool(counts_match and ratio >= GOAL_RATIO),
    }


def markdown(result: Dict) -> str:
    """A small markdown table of :func:`run`'s result."""
    r = result
    lo, hi = r["exponents"]
    lines = [
        f"float16 sweep: {r['n']:,} {r['dtype']} values, {r['n_scales']} scales "
        f"2**{lo}..2**{hi}, min of {r['repeats']} interleaved rounds",
        "",
    ]
    rows = [
        ["`sweep` (one pass, all scales)", r["sweep_s"], r["sweep_over_copy"]],
        ["cast once per scale (all scales)", r["cast_loop_s"], r["cast_loop_s"] / r["copy_s"]],
        ["cast, per scale (mean)", r["cast_per_scale_s"], r["cast_per_scale_over_copy"]],
    ]
    for label, (k, seconds) in (
        ("fastest", r["cast_fastest_scale"]),
        ("slowest", r["cast_slowest_scale"]),
    ):
        rows.append([f"cast, {label} scale (2^{k})", seconds, seconds / r["copy_s"]])
    rows = [[name, f"{t * 1e3:.1f} ms", f"{ratio:.1f}x"] for name, t, ratio in rows]
    rows.append(["`x.copy()` (reference)", f"{r['copy_s'] * 1e3:.2f} ms", "1.0x"])
    lines += [
        markdown_grid(["variant", "time", "time / copy"], rows),
        "",
        f"Sweep speed-up over casting: **{r['cast_loop_over_sweep']:.1f}x** "
        f"(goal >= {r['goal_ratio']:.0f}x: {'met' if r['goal_met'] else 'NOT met'}); "
        f"identical counts: {r['counts_match']}; sweep reads {r['sweep_gb_per_s']:.2f} GB/s, "
        f"copy {r['copy_gb_per_s']:.2f} GB/s.",
    ]
    return "\n".join(lines)


def main(argv=None) -> None:
    """Command line: run the benchmark and print the markdown table."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=10**7, help="number of values (default 1e7)")
    parser.add_argument("--scales", type=int, default=64, help="scales to sweep (default 64)")
    parser.add_argument("--repeats", type=int, default=3, help="interleaved rounds (default 3)")
    args = parser.parse_args(argv)
    with tqdm(total=args.repeats, desc="rounds", disable=None) as bar:
        result = run(args.n, args.scales, args.repeats, progress=bar.update)
    print(markdown(result))


if __name__ == "__main__":
    main()
