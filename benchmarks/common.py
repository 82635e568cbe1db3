"""What the updater benchmarks share: the MLP they time, the interleaved timing loop, and the
command line and report writing of a benchmark's ``main`` (:func:`benchmark_main`)."""

from __future__ import annotations

import argparse
import gc
import re
import sys
import time
from collections import Counter
from pathlib import Path
from typing import Callable, Tuple

import numpy as np


def mlp(x, sizes, scope):
    import nnabla as nn
    import nnabla.functions as F
    import nnabla.parametric_functions as PF

    h = x
    with nn.parameter_scope(scope):
        for i, n in enumerate(sizes):
            h = PF.affine(h, n, name=f"fc{i}")
            if i < len(sizes) - 1:
                h = F.relu(h)
    return h


class Model:
    """One copy of the model: graph, solver and a counting data feeder."""

    def __init__(self, scope, in_dim, sizes, batch, rng):
        import nnabla as nn
        import nnabla.functions as F
        import nnabla.solvers as S

        self.x = nn.Variable((batch, in_dim))
        self.t = nn.Variable((batch, 1))
        self.loss = F.mean(F.softmax_cross_entropy(mlp(self.x, sizes, scope), self.t))
        with nn.parameter_scope(scope):
            params = nn.get_parameters()
        self.solver = S.Momentum(0.01, 0.9)
        self.solver.set_parameters(params)
        self.rng = rng
        self.sizes = sizes
        self.batches = 0
        self.poison = None

    def feed(self):
        self.batches += 1
        self.x.d = self.rng.standard_normal(self.x.shape)
        self.t.d = self.rng.integers(0, self.sizes[-1], self.t.shape)
        if self.poison is not None:
            self.x.d.flat[0] = self.poison

    def bare_step(self):
        self.solver.zero_grad()
        self.feed()
        self.loss.forward(clear_no_need_grad=True)
        self.loss.backward(clear_buffer=True)
        self.solver.update()


def interleaved_blocks(steps, iters, blocks, warmup, clock=time.perf_counter, shuffle=None):
    """Per block, the median seconds per call of each of ``steps`` (name -> callable): after
    ``warmup`` rounds, ``iters`` rounds calling every variant once, the order rotating each
    round so that the machine's load hits all alike. ``clock`` (default
    :func:`time.perf_counter`, wall time) reads the seconds; :func:`time.process_time` counts
    this process's CPU only. ``shuffle`` (an int seed, default None): each round in an order of
    its own, drawn from it, instead of rotated (a rotation keeps each variant behind the same
    one, whose leftovers in the processor's caches then bias it the same way every round)."""
    names = list(steps)
    rng = None if shuffle is None else np.random.default_rng(shuffle)
    for _ in range(warmup):
        for n in names:
            steps[n]()
    medians = []
    for _ in range(blocks):
        times = {n: [] for n in names}
        for i in range(iters):
            if rng is None:
                k = i % len(names)
                order = names[k:] + names[:k]
            else:
                order = [names[j] for j in rng.permutation(len(names))]
            for n in order:
                t0 = clock()
                steps[n]()
                times[n].append(clock() - t0)
        medians.append({n: float(np.median(v)) for n, v in times.items()})
    return medians


UPDATER_FOLDER = str(Path(__file__).resolve().parents[1] / "updater")
"""The folder whose Python calls :class:`Counted` counts."""


def _module(code) -> str | None:
    """The module of ``updater/`` that ``code`` belongs to (its path under the package), or
    None outside it."""
    filename = code.co_filename
    if not filename.startswith(UPDATER_FOLDER):
        return None
    return filename[len(UPDATER_FOLDER) - len("updater") :].removesuffix(".py")


class Counted:
    """Calls into ``updater/`` while the block runs: ``calls`` (by module), ``hops`` (calls
    whose caller is in another module, or outside the package); :meth:`feeder` wraps a data
    feeder so that its own work is not counted. Garbage made before the block is collected on
    entry and the cyclic collector is paused inside it: an earlier object's finalizer (a
    recorder collected with steps unwritten writes its trace) is not the block's call."""

    def __init__(self):
        self.calls: Counter = Counter()
        self.generated = 0
        self.hops = 0
        self._collecting = False

    def _profile(self, frame, event, arg) -> None:
        if event != "call":
            return
        module, caller = _module(frame.f_code), _module(frame.f_back.f_code)
        if module is not None:
            self.calls[module] += 1
            self.hops += caller != module
        elif caller is not None and frame.f_code.co_filename.startswith("<"):
            self.generated += 1  # a record's generated __init__ or __new__

    @property
    def total(self) -> int:
        """Every call counted, the generated methods included."""
        return sum(self.calls.values()) + self.generated

    def feeder(self, feed):
        """``feed`` with the counting paused while it runs."""

        def paused():
            profile = sys.getprofile()
            sys.setprofile(None)
            feed()
            sys.setprofile(profile)

        return paused

    def __enter__(self) -> Counted:
        self._collecting = gc.isenabled()
        gc.collect()
        gc.disable()
        sys.setprofile(self._profile)
        return self

    def __exit__(self, *exc) -> None:
        sys.setprofile(None)
        if self._collecting:
            gc.enable()


def python_calls(call, times: int) -> float:
    """Python calls inside ``updater/`` per ``call()`` (:class:`Counted`: the generated
    methods of its records included), over ``times`` calls (so never while timing: the
    profile hook slows every call)."""
    with Counted() as counted:
        for _ in range(times):
            call()
    return counted.total / times


def benchmark_provenance(out) -> str:
    """The provenance line of a benchmark's report written to ``out``: the commit counts the
    benchmark scripts too, since they make its numbers."""
    from pathlib import Path

    from sim.report.provenance import provenance

    return provenance(Path(out), also=("benchmarks",))


SPHINX_ROLE = re.compile(r":(?:py:)?(?:meth|class|func|data|attr|mod|exc|obj|const):(`[^`]+`)")
"""A Sphinx cross-reference role in a docstring; a report shows its name as code."""


def write_markdown(
    out, title: str, command: str, started: float, text: str, doc: str = "", force: bool = False
) -> None:
    """Write a benchmark's markdown ``text`` to ``out`` under ``# title``, the command that made
    it (``command --out out``), its provenance, the seconds since ``started`` and ``doc`` (a
    module docstring: its paragraphs after the first, joined); ``force`` replaces a file dls did
    not write."""

    from updater.common.writing import write_text

    about = doc.split("\n\n", 1)[1].replace("\n", " ").strip() + "\n\n" if "\n\n" in doc else ""
    about = SPHINX_ROLE.sub(r"\1", about)  # a docstring's :mod:`x` is `x` in a report
    head = (
        f"# {title}\n\nGenerated by `{command} --out {out}` with {benchmark_provenance(out)} in "
        f"{time.time() - started:.0f} s.\n\n" + about
    )
    write_text(out, head + text + "\n", overwrite=force)


def benchmark_main(
    argv,
    doc: str,
    add_options: Callable[[argparse.ArgumentParser], object],
    make_text: Callable[[argparse.Namespace], str],
    report: Callable[[argparse.Namespace], Tuple[str, str]],
    about: bool = True,
) -> None:
    """A benchmark's ``main``: parse ``argv`` (None: the command line) with the script's options
    and ``--out``/``--force``, print its markdown, and with ``--out`` write it
    (:func:`write_markdown`, the seconds counted from the parse).

    Args:
        argv (list of str or None): the arguments.
        doc (str): the script's module docstring: its first line describes the command.
        add_options (callable): ``add_options(parser)`` adds the script's own options.
        make_text (callable): ``make_text(args)``: the markdown (the benchmark's run).
        report (callable): ``report(args)``: ``(title, command)`` of the written report.
        about (bool, default True): the report carries ``doc``'s later paragraphs.
    """
    parser = argparse.ArgumentParser(description=doc.splitlines()[0])
    add_options(parser)
    parser.add_argument("--out", default=None, help="also write the markdown to this file")
    parser.add_argument(
        "--force", action="store_true", help="replace an --out file dls did not write"
    )
    args = parser.parse_args(argv)
    started = time.time()
    text = make_text(args)
    print(text)
    if args.out is not None:
        title, command = report(args)
        write_markdown(args.out, title, command, started, text, doc if about else "", args.force)
