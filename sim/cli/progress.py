"""Progress of a long command on stderr, stage by stage (:class:`StageProgress`).

``dls`` passes a :class:`StageProgress` as the ``progress`` argument of library functions
(:func:`sim.replay.run.simulate`, :func:`sim.report.build.build_report`,
:func:`sim.nnabla_studies.demo.run_comparison`): tqdm bars on a terminal, one status line per
stage otherwise (a file or a pipe), so long commands are never silent. While bars are drawn,
log lines are written above them (``tqdm.contrib.logging.logging_redirect_tqdm``), never into a
bar's line.
"""

from __future__ import annotations

import sys
import time


def seconds_text(t: float) -> str:
    """A duration as people say it, rounded to the second first.

    >>> seconds_text(59.4), seconds_text(119.6), seconds_text(3600.2)
    ('59 s', '2 min 0 s', '60 min 0 s')
    """
    whole = round(t)
    return f"{whole} s" if whole < 60 else f"{whole // 60} min {whole % 60} s"


class StageProgress:
    """Progress of one ``dls`` command on stderr, stage by stage.

    On a terminal: an overall tqdm bar (stages done out of all, the current stage's name) that
    stays on screen, and a bar for each stage's inner loop that is erased when the stage ends.
    Otherwise (a file or a pipe): one status line per stage, e.g.
    ``dls report: [3/22] policy comparison on spikes (12 s so far)``, and one at the end.

    Library functions take it as their ``progress`` argument: they call ``start(total)`` once,
    ``stage(name)`` as each stage begins and wrap inner loops in ``bar(iterable, total, desc)``
    (``sim.replay.run`` does; bools and None keep their meaning there).

    Args:
        command (str): the subcommand, shown in every line.
        stream (file, optional): default ``sys.stderr``.
        tty (bool, optional): draw bars; default: whether ``stream`` is a terminal.
        quiet (bool, default False): show nothing (``dls -q``).
    """

    def __init__(self, command: str, stream=None, tty: bool | None = None, quiet: bool = False):
        self.command = command
        self.stream = sys.stderr if stream is None else stream
        self.quiet = quiet
        self.tty = not quiet and (bool(self.stream.isatty()) if tty is None else tty)
        self._logs = None
        self.total: int | None = None
        self.index = 0
        self.name = ""
        self._overall = None
        self._t0 = time.monotonic()

    def start(self, total: int) -> None:
        """Announce the number of stages."""
        self.total = int(total)

    def stage(self, name: str) -> None:
        """A stage begins."""
        self.index += 1
        self.name = name
        of = f"/{self.total}" if self.total else ""
        if self.quiet:
            return
        if not self.tty:
            elapsed = seconds_text(time.monotonic() - self._t0)
            print(
                f"dls {self.command}: [{self.index}{of}] {name}; {elapsed} so far",
                file=self.stream,
                flush=True,
            )
            return
        from tqdm.auto import tqdm

        if self._overall is None:
            from tqdm.contrib.logging import logging_redirect_tqdm

            self._logs = logging_redirect_tqdm()  # log lines above the bars from now on
            self._logs.__enter__()
            self._overall = tqdm(
                total=self.total,
                desc=f"dls {self.command}",
                unit="stage",
                leave=True,
                file=self.stream,
                position=0,
            )
        self._overall.n = self.index - 1
        self._overall.set_postfix_str(f"[{self.index}{of}] {name}", refresh=True)

    def bar(self, iterable, total: int, desc: str = ""):
        """Wrap a stage's inner loop: a bar on a terminal (erased at its end), else as is."""
        if not self.tty:
            return iterable
        from tqdm.auto import tqdm

        labels = desc.split("+")
        if len(labels) > 3:  # sim.replay.run joins the labels of policies advancing together
            desc = f"{len(labels)} settings"
        return tqdm(
            iterable,
            total=total,
            desc=desc or self.name,
            leave=False,
            mininterval=0.5,
            file=self.stream,
            position=1 if self._overall is not None else 0,
        )

    def close(self, done: bool = True) -> None:
        """The command is done: complete the overall bar (left on screen) or say so; with
        ``done=False`` (it stopped: an error, Ctrl-C) only close the bar, saying nothing."""
        elapsed = seconds_text(time.monotonic() - self._t0)
        if self._logs is not None:
            self._logs.__exit__(None, None, None)
            self._logs = None
        if self._overall is not None:
            if done:
                self._overall.n = self.total or self.index
                self._overall.set_postfix_str(f"done in {elapsed}", refresh=True)
            self._overall.close()
            self._overall = None
        elif done and not self.tty and not self.quiet and self.index:
            print(f"dls {self.command}: done in {elapsed}", file=self.stream, flush=True)

    def __enter__(self) -> StageProgress:
        return self

    def __exit__(self, error, *exc) -> None:
        self.close(done=error is None)
