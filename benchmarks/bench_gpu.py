"""The GPU check's report: the machine's GPU, the versions, the gpu tests' summary and a short
benchmark of the updater on cuDNN.

``scripts/gpu_check.sh`` runs it after the tests marked ``gpu``. The benchmark is the updater
benchmark's model (784-512-512-10, batch 64) in ``cudnn:half`` and ``cudnn:float``: seconds per
iteration of a bare loop, nnabla's updater and ours, interleaved
(``benchmarks.bench_updater.overhead``). Without a GPU it stops with one line.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import time
from pathlib import Path


def gpu_line() -> str:
    """The GPU's name, memory and driver as ``nvidia-smi`` gives them, one line per GPU."""
    query = ["nvidia-smi", "--query-gpu=name,memory.total,driver_version", "--format=csv,noheader"]
    return subprocess.run(query, capture_output=True, text=True, check=True).stdout.strip()


def versions() -> str:
    from importlib.metadata import version

    names = ["nnabla", "nnabla-ext-cuda120", "nvidia-cuda-runtime-cu12", "nvidia-cudnn-cu12"]
    return ", ".join(f"{n} {version(n)}" for n in names)


def tests_summary(log: Path) -> str:
    """The last line of pytest's output in ``log`` (its counts), or why there is none."""
    lines = [x for x in log.read_text().splitlines() if x.strip()] if log.exists() else []
    return lines[-1].strip("= ") if lines else f"no test output in {log}"


def run(iters: int = 50) -> list:
    from benchmarks.bench_updater import overhead

    return [
        overhead(ctx, 784, [512, 512, 10], 64, iters, warmup=5, blocks=3)
        for ctx in ("cudnn:half", "cudnn:float")
    ]


def markdown(results: list) -> str:
    from sim.tables import markdown_grid

    cells = [
        [r["context"], r["model"], r["batch"]]
        + [f"{r['seconds'][k] * 1e3:.3f}" for k in ("bare", "nnabla", "ours")]
        + [f"{r['ratio_nnabla']:.3f}", f"{r['ratio_ours']:.3f}"]
        for r in results
    ]
    heads = ["context", "model", "batch", "bare ms/it", "nnabla ms/it", "ours ms/it"]
    return markdown_grid(heads + ["nnabla / bare", "ours / bare"], cells)


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tests", type=Path, required=True, help="the gpu tests' pytest output")
    parser.add_argument("--iters", type=int, default=50, help="iterations per block")
    parser.add_argument("--out", default="reports/gpu.md", help="markdown file to write")
    args = parser.parse_args(argv)
    from updater.runtime.context import cuda_device_count

    if cuda_device_count() == 0:
        sys.exit("bench_gpu: no GPU that nnabla-ext-cuda sees: nothing measured")
    started = time.time()
    text = (
        f"GPU: {gpu_line()}; {versions()}.\n\n"
        f"Tests marked gpu (`pytest -m gpu tests/gpu`): {tests_summary(args.tests)}.\n\n"
        + markdown(run(args.iters))
    )
    print(text)
    from benchmarks.common import write_markdown

    command = "python -m benchmarks.bench_gpu --tests LOG"  # as scripts/gpu_check.sh runs it
    write_markdown(args.out, "GPU check", command, started, text, __doc__)


if __name__ == "__main__":
    main()
