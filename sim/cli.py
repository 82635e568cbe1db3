"""``dls``: command line for the float16 loss-scaling simulator and the nnabla demo.

Thin: parses arguments, calls :mod:`sim.run`, :mod:`sim.report`, :mod:`sim.plots` (or
``updater.demo`` for ``train``) and writes files. Everything that can be checked before the work
is checked first (settings, trace files, output paths, the memory a simulation needs); a bad
argument exits with status 2 and a one-line message, as argparse does.

Progress goes to stderr (:class:`StageProgress`): tqdm bars on a terminal, one status line per
stage otherwise (a file or a pipe), so long commands are never silent.
"""

from __future__ import annotations

import argparse
import csv
import itertools
import os
import re
import sys
import tempfile
import textwrap
import time
import zipfile
from pathlib import Path
from typing import Dict, List, Sequence

from sim.provenance import current_commit
from sim.run import simulate, simulate_many
from sim.tables import format_value, markdown_table
from sim.traces import FAMILIES, Trace, make_trace
from updater.files import atomic_write_text
from updater.presets import PRESETS, make_policy, setting_types

POLICY_HELP = (
    f"a preset ({', '.join(PRESETS)}) or a class (StaticScale, DynamicScale, NnablaLegacy, "
    "HeadroomScale)"
)
SUMMARY_COLUMNS = [
    "label",
    "trace",
    "runs",
    "overflows",
    "skipped",
    "mean_flushed",
    "signal_lost",
    "steps_to_safe",
    "never_safe",
    "below_half_safe",
    "final_scale",
]
PERCENT_COLUMNS = ("mean_flushed", "signal_lost", "below_half_safe")
TRACE_HINT = "expected an .npz trace written by GradientRecorder or Trace.save"
MEMORY_SHARE = 0.5
"""Largest share of physical memory a simulation may need before ``dls`` refuses to start it."""


def _version() -> str:
    """The installed distribution's version (nnabla-dls)."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("nnabla-dls")
    except PackageNotFoundError:
        return "unknown (nnabla-dls is not installed; run from a checkout)"


# ---------------------------------------------------------------- progress


def _seconds(t: float) -> str:
    return f"{t:.0f} s" if t < 60 else f"{int(t // 60)} min {t % 60:.0f} s"


class StageProgress:
    """Progress of one ``dls`` command on stderr, stage by stage.

    On a terminal: an overall tqdm bar (stages done out of all, the current stage's name) that
    stays on screen, and a bar for each stage's inner loop that is erased when the stage ends.
    Otherwise (a file or a pipe): one status line per stage, e.g.
    ``dls report: [3/22] policy comparison on spikes (12 s so far)``, and one at the end.

    Library functions take it as their ``progress`` argument: they call ``start(total)`` once,
    ``stage(name)`` as each stage begins and wrap inner loops in ``bar(iterable, total, desc)``
    (``sim.run`` does; bools and None keep their meaning there).

    Args:
        command (str): the subcommand, shown in every line.
        stream (file, optional): default ``sys.stderr``.
        tty (bool, optional): draw bars; default: whether ``stream`` is a terminal.
    """

    def __init__(self, command: str, stream=None, tty: bool | None = None):
        self.command = command
        self.stream = sys.stderr if stream is None else stream
        self.tty = bool(self.stream.isatty()) if tty is None else tty
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
        if not self.tty:
            elapsed = _seconds(time.monotonic() - self._t0)
            print(
                f"dls {self.command}: [{self.index}{of}] {name}; {elapsed} so far",
                file=self.stream,
                flush=True,
            )
            return
        from tqdm.auto import tqdm

        if self._overall is None:
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
        if len(labels) > 3:  # sim.run joins the labels of policies advancing together
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

    def close(self) -> None:
        """The command is done: complete the overall bar (left on screen) or say so."""
        elapsed = _seconds(time.monotonic() - self._t0)
        if self._overall is not None:
            self._overall.n = self.total or self.index
            self._overall.set_postfix_str(f"done in {elapsed}", refresh=True)
            self._overall.close()
            self._overall = None
        elif not self.tty and self.index:
            print(f"dls {self.command}: done in {elapsed}", file=self.stream, flush=True)

    def __enter__(self) -> StageProgress:
        return self

    def __exit__(self, *exc) -> None:
        self.close()


# ---------------------------------------------------------------- settings


def _parse_number(text: str) -> float:
    """Parse ``1000``, ``0.5``, ``1e-3``, ``2**15``, ``2^15`` or ``2**-24``."""
    m = re.fullmatch(r"\s*(\d+(?:\.\d*)?)\s*(?:\*\*|\^)\s*(-?\d+)\s*", text)
    if m:
        return float(m.group(1)) ** int(m.group(2))
    return float(text)


def _convert(parser, policy: str, key: str, text: str, types: Dict[str, type]):
    if key not in types:
        parser.error(f"unknown setting {key!r} for policy {policy}; accepted: {sorted(types)}")
    if types[key] is bool:
        if text.strip().lower() not in ("true", "false"):
            parser.error(f"setting {key} needs true or false, got {text!r}")
        return text.strip().lower() == "true"
    try:
        value = _parse_number(text)
    except ValueError:
        parser.error(f"setting {key} needs a number (e.g. 1000, 0.5, 2**15), got {text!r}")
    if types[key] is int:
        if value != int(value):
            parser.error(f"setting {key} needs an int, got {text!r}")
        return int(value)
    return value


def _types(parser, policy: str) -> Dict[str, type]:
    try:
        return setting_types(policy)
    except ValueError as e:
        parser.error(str(e))


def _settings(parser, policy: str, pairs: Sequence[str]) -> Dict[str, object]:
    """``--set KEY=VALUE`` pairs as a dict; a key given twice is an error."""
    types = _types(parser, policy)
    out: Dict[str, object] = {}
    given: Dict[str, str] = {}
    for pair in pairs or ():
        key, sep, text = pair.partition("=")
        key = key.strip()
        if not sep:
            parser.error(f"--set needs KEY=VALUE (e.g. growth_interval=200), got {pair!r}")
        if key in given:
            parser.error(f"--set {key} given twice ({given[key]} and {pair}); give it once")
        given[key] = pair
        out[key] = _convert(parser, policy, key, text, types)
    return out


def _grid(parser, policy: str, specs: Sequence[str]) -> Dict[str, List[object]]:
    """``--grid KEY=V1,V2,...`` specs as a dict of value lists; a key given twice is an error."""
    types = _types(parser, policy)
    grid: Dict[str, List[object]] = {}
    for spec in specs or ():
        key, sep, values = spec.partition("=")
        key = key.strip()
        if not sep or not values.strip():
            parser.error(
                f"--grid needs KEY=V1,V2,... (e.g. growth_interval=200,1000), got {spec!r}"
            )
        if key in grid:
            parser.error(
                f"--grid {key} given twice; list all its values in one --grid "
                f"(e.g. --grid {key}=1,2,3)"
            )
        grid[key] = [_convert(parser, policy, key, v, types) for v in values.split(",")]
    return grid


def _policy(parser, name: str, settings: Dict[str, object]):
    try:
        return make_policy(name, **settings)
    except (ValueError, TypeError) as e:
        parser.error(str(e))


def _describe(name: str, policy, swept: Sequence[str] = ()) -> str:
    """``dynamic = DynamicScale(init_scale=2^15, ...)``, values as people write them."""
    cls = type(policy).__name__
    parts = [
        f"{k}=<grid>" if k in swept else f"{k}={format_value(v, name=k)}"
        for k, v in policy.settings().items()
    ]
    head = cls if name == cls else f"{name} = {cls}"
    return f"{head}({', '.join(parts)})"


# ---------------------------------------------------------------- traces


def _trace_problem(path: Path, e: BaseException) -> str:
    """Trace.load's error, worded for the command line (without the path it repeats)."""
    text = str(e.args[0]) if isinstance(e, KeyError) and e.args else str(e)
    if isinstance(e, zipfile.BadZipFile):
        return f"a damaged .npz archive ({text})"
    if "allow_pickle" in text:
        return "it holds pickled Python objects, which a trace never does"
    m = re.fullmatch(r"(.+) is not a file in the archive", text)
    if m:  # numpy's KeyError for a missing array
        return f"missing array {m.group(1)!r}"
    for prefix in (f"{path}: ", f"{path} ", "is not a gradient trace: "):
        if text.startswith(prefix):
            text = text[len(prefix) :]
    return text


def _load_trace(parser, spec: str) -> Trace:
    path = Path(spec)
    if not path.exists():
        if path.suffix != ".npz":
            parser.error(
                f"--trace must be a family ({', '.join(FAMILIES)}) or an .npz trace file, "
                f"got {spec!r}"
            )
        parser.error(f"--trace {spec}: trace file not found")
    if path.is_dir():
        parser.error(f"--trace {spec}: is a folder, not a trace file ({TRACE_HINT})")
    if not path.is_file():
        parser.error(f"--trace {spec}: not a regular file ({TRACE_HINT})")
    try:
        is_zip = zipfile.is_zipfile(path)
    except OSError as e:
        parser.error(f"--trace {spec}: cannot read it: {e.strerror}")
    if not is_zip:
        with open(path, "rb") as fh:
            npy = fh.read(6) == b"\x93NUMPY"
        what = "a single NumPy array (.npy), not an .npz archive" if npy else "not an .npz archive"
        parser.error(f"--trace {spec}: {what} ({TRACE_HINT})")
    try:
        return Trace.load(path)
    except (ValueError, TypeError, KeyError, OSError, EOFError, zipfile.BadZipFile) as e:
        parser.error(
            f"--trace {spec}: not a gradient trace: {_trace_problem(path, e)} ({TRACE_HINT})"
        )


# ---------------------------------------------------------------- output paths


def _check_writable(parser, option: str, path: str, folder: Path) -> None:
    """Create and delete a temporary file in ``folder``: the honest test (permissions, a
    read-only file system, root's exemptions)."""
    try:
        with tempfile.TemporaryFile(dir=folder):
            pass
    except OSError as e:
        parser.error(f"{option} {path}: cannot write into {folder}: {e.strerror}")


def _check_output_file(parser, option: str, path: str) -> None:
    """An output file: its folder must exist and be writable; it must not be a folder."""
    p = Path(path)
    if p.is_dir():
        parser.error(f"{option} {path}: is a folder; give a file name")
    folder = p.parent
    if not folder.exists():
        parser.error(f"{option} {path}: folder {folder} does not exist (create it first)")
    if not folder.is_dir():
        parser.error(f"{option} {path}: {folder} is a file, not a folder")
    if p.exists() and not os.access(p, os.W_OK):
        parser.error(f"{option} {path}: the file exists and is read-only")
    _check_writable(parser, option, path, folder)


def _check_output_dir(parser, option: str, path: str) -> None:
    """An output folder (created if missing): not an existing file, and its nearest existing
    ancestor is a writable folder."""
    p = Path(path)
    if p.exists() and not p.is_dir():
        parser.error(f"{option} {path}: is an existing file, not a folder")
    existing = next(a for a in (p.absolute(), *p.absolute().parents) if a.exists())
    if not existing.is_dir():
        parser.error(f"{option} {path}: cannot create it: {existing} is a file")
    _check_writable(parser, option, path, existing)


def _check_figure(parser, option: str, path: str) -> None:
    _check_output_file(parser, option, path)
    from sim.plots import check_figure_path  # its extension names a format matplotlib writes

    try:
        check_figure_path(path)
    except (ValueError, TypeError) as e:
        parser.error(f"{option}: {e}")


# ---------------------------------------------------------------- memory


def memory_estimate(steps: int, runs: int, policies: int = 1) -> int:
    """Bytes a ``dls simulate`` or ``dls sweep`` run needs at its peak (an estimate).

    Per step about 7000 bytes: the trace (about 1000 bytes a step kept, 5800 while a synthetic
    family is drawn) and the per-step tables of the underflow model. Per step and run, 40 bytes
    (jitter factors, scales, flags, underflow shares and their temporaries) plus 32 bytes per
    policy advancing together (the stacked states and every policy's kept trajectories).
    Measured with tracemalloc; tests/test_cli.py checks it against the real peak.
    """
    return steps * (7000 + 40 * runs + 32 * policies * runs)


def _memory_limit():
    """``(limit, physical)`` in bytes, or ``(None, None)`` where the OS does not say."""
    try:
        physical = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (AttributeError, ValueError, OSError):
        return None, None
    return int(physical * MEMORY_SHARE), physical


def _size(n: float) -> str:
    for unit in ("bytes", "KiB", "MiB", "GiB", "TiB"):
        if n < 1024 or unit == "TiB":
            return f"{n:.0f} {unit}" if unit == "bytes" else f"{n:.1f} {unit}"
        n /= 1024
    raise AssertionError  # pragma: no cover


def _check_memory(parser, steps: int, runs: int, policies: int = 1) -> None:
    limit, physical = _memory_limit()
    need = memory_estimate(steps, runs, policies)
    if limit is not None and need > limit:
        what = f"{steps} steps x {runs} runs" + (f" x {policies} settings" if policies > 1 else "")
        parser.error(
            f"{what} needs about {_size(need)} of memory (estimate), more than the limit "
            f"{_size(limit)} ({MEMORY_SHARE:.0%} of this machine's {_size(physical)}); "
            "use fewer --steps or --runs"
        )


# ---------------------------------------------------------------- tables


def _formatted(rows: List[Dict[str, object]]) -> List[Dict[str, object]]:
    out = []
    for r in rows:
        r = dict(r)
        for k in PERCENT_COLUMNS:
            if k in r and isinstance(r[k], float):
                r[k] = format_value(r[k]) if r[k] != r[k] else f"{100 * r[k]:.4g}%"
        out.append(r)
    return out


def _na_notes(rows: List[Dict[str, object]]) -> List[str]:
    notes = []
    if any(r["mean_flushed"] != r["mean_flushed"] for r in rows):
        notes.append(
            "mean_flushed n/a: every step of every run was skipped (overflow or bad batch), so "
            "no applied step had values to flush; signal_lost counts those steps as lost."
        )
    if any(r["steps_to_safe"] != r["steps_to_safe"] for r in rows):
        notes.append(
            "steps_to_safe n/a: no run came within a factor 2 of the safe scale (never_safe)."
        )
    return notes


# ---------------------------------------------------------------- subcommands


def _cmd_simulate(parser, args) -> int:
    settings = _settings(parser, args.policy, args.set)
    policy = _policy(parser, args.policy, settings)
    if args.plot:
        _check_figure(parser, "--plot", args.plot)
    if args.trace in FAMILIES:
        _check_memory(parser, args.steps, args.runs)
        trace = make_trace(args.trace, steps=args.steps, seed=args.seed)
    else:
        trace = _load_trace(parser, args.trace)
        _check_memory(parser, trace.steps, args.runs)
    with StageProgress("simulate") as progress:
        progress.start(1)
        progress.stage(f"{args.policy} on {trace.name}: {args.runs} runs x {trace.steps} steps")
        result = simulate(
            policy,
            trace,
            runs=args.runs,
            seed=args.seed,
            jitter=args.jitter,
            label=args.policy,
            progress=progress,
        )
    summary = result.summary()
    print(f"policy: {_describe(args.policy, policy)}")
    print(f"trace: {trace.name} ({trace.steps} steps), runs: {args.runs}, jitter: {args.jitter}")
    print(markdown_table(_formatted([summary]), SUMMARY_COLUMNS))
    for note in _na_notes([summary]):
        print(note)
    if args.plot:
        from sim.plots import plot_trajectory, save_figure

        save_figure(plot_trajectory(result), args.plot)
        print(f"wrote {args.plot}")
    return 0


def _cmd_sweep(parser, args) -> int:
    grid = _grid(parser, args.policy, args.grid)
    if not grid:
        parser.error("sweep needs at least one --grid KEY=V1,V2,...")
    fixed = _settings(parser, args.policy, args.set)
    both = [k for k in fixed if k in grid]
    if both:
        k = both[0]
        parser.error(
            f"--set {k} conflicts with --grid {k}: a setting is either fixed (--set) or swept "
            "(--grid), not both"
        )
    combos = [dict(zip(grid, values)) for values in itertools.product(*grid.values())]
    policies = [_policy(parser, args.policy, {**fixed, **c}) for c in combos]
    families = [f.strip() for f in args.families.split(",") if f.strip()]
    bad = [f for f in families if f not in FAMILIES]
    if bad or not families:
        parser.error(
            f"--families must be a comma list of {', '.join(FAMILIES)}, got {args.families!r}"
        )
    if args.csv:
        _check_output_file(parser, "--csv", args.csv)
    _check_memory(parser, args.steps, args.runs, len(policies))
    rows = []
    with StageProgress("sweep") as progress:
        progress.start(len(families))
        for family in families:
            progress.stage(
                f"{family}: {len(policies)} settings x {args.runs} runs x {args.steps} steps"
            )
            trace = make_trace(family, steps=args.steps, seed=args.seed)
            results = simulate_many(
                policies,
                trace,
                runs=args.runs,
                seed=args.seed,
                jitter=args.jitter,
                labels=[str(i) for i in range(len(policies))],
                progress=progress,
            )
            for combo, result in zip(combos, results):
                row = {**combo, **result.summary()}
                row["label"] = args.policy
                rows.append(row)
            del trace, results
    columns = [*grid, "trace", *(c for c in SUMMARY_COLUMNS if c not in ("label", "trace"))]
    values = "; ".join(
        f"{k}={','.join(format_value(v, name=k) for v in vs)}" for k, vs in grid.items()
    )
    print(f"policy: {_describe(args.policy, policies[0], swept=grid)}")
    print(
        f"grid: {values} ({len(combos)} settings), families: {','.join(families)}, "
        f"steps: {args.steps}, runs: {args.runs}, jitter: {args.jitter}"
    )
    print(markdown_table(_formatted(rows), columns))
    for note in _na_notes(rows):
        print(note)
    if args.csv:
        with open(args.csv, "w", newline="") as fh:
            writer = csv.DictWriter(fh, fieldnames=columns, extrasaction="ignore")
            writer.writeheader()
            writer.writerows(rows)
        print(f"wrote {args.csv}")
    return 0


def _cmd_report(parser, args) -> int:
    from sim.report import QUICK, ReportConfig, build_report

    _check_output_dir(parser, "--out", args.out)
    config = QUICK if args.quick else ReportConfig()
    with StageProgress("report") as progress:
        result = build_report(args.out, config, progress=progress)
    for path in result["files"]:
        print(f"wrote {path}")
    return 0


def _cmd_train(parser, args) -> int:
    _check_output_dir(parser, "--out", args.out)
    import sim.demo as demo

    try:
        demo.load_data(args.seed)  # needs scikit-learn: say so before any work
    except ImportError as e:
        parser.error(str(e))
    with StageProgress("train") as progress:
        rows = demo.run_comparison(
            steps=args.steps, seed=args.seed, out_dir=args.out, progress=progress
        )
    table = demo.format_table(rows)
    print(table)
    path = Path(args.out) / "train.md"
    atomic_write_text(
        path,
        f"# `dls train --steps {args.steps} --seed {args.seed}`\n\n"
        f"Generated at commit {current_commit()}. "
        "Digits (scikit-learn's bundled 8x8 set), the same MLP trained four ways; the time "
        "column is wall time on the machine that ran it, not a benchmark.\n\n"
        f"{table}\n\n![scale trajectories]({demo.PLOT_NAME})\n",
    )
    print(f"wrote {path}")
    return 0


# ---------------------------------------------------------------- parser


def _int_at_least(low: int):
    """An argparse type: an int >= ``low``."""

    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            value = None
        if value is None or value < low:
            raise argparse.ArgumentTypeError(f"needs an int >= {low}, got {text!r}")
        return value

    return parse


_positive_int = _int_at_least(1)
_seed = _int_at_least(0)


def _jitter(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"needs a number in [0, 8], got {text!r}") from None
    if not 0 <= value <= 8:
        raise argparse.ArgumentTypeError(f"needs a number in [0, 8], got {text!r}")
    return value


PROGRESS_NOTE = (
    "Progress goes to stderr: bars on a terminal, one status line per stage otherwise. "
    "Output paths, settings and the memory needed are checked before any work."
)


def build_parser() -> argparse.ArgumentParser:
    """The ``dls`` argument parser (subcommands simulate, sweep, report, train)."""
    fmt = argparse.RawDescriptionHelpFormatter
    parser = argparse.ArgumentParser(
        prog="dls",
        description="Dynamic loss scaling for nnabla: float16 simulator, report and demo. "
        + PROGRESS_NOTE,
        epilog=(
            "examples:\n"
            "  dls simulate --policy dynamic --set growth_interval=200 --trace drifting\n"
            "  dls sweep --policy dynamic --grid growth_interval=500,1000,2000 "
            "--grid hysteresis=1,2\n"
            "  dls report --out my_report\n"
            "  dls train --steps 300 --out train_out\n"
            "(scripts/report.sh regenerates the committed reports/ folder)"
        ),
        formatter_class=fmt,
    )
    parser.add_argument("--version", action="version", version=f"dls (nnabla-dls) {_version()}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    sub.required = True

    def common(p, steps_default=10000, runs_default=64):
        p.add_argument(
            "--steps",
            type=_positive_int,
            default=steps_default,
            help=f"steps per synthetic trace (default {steps_default})",
        )
        p.add_argument(
            "--runs",
            type=_positive_int,
            default=runs_default,
            help=f"runs per setting, advanced together (default {runs_default})",
        )
        p.add_argument(
            "--seed", type=_seed, default=0, help="seed of traces and jitter (default 0)"
        )
        p.add_argument(
            "--jitter",
            type=_jitter,
            default=0.25,
            help="log2 std of the per-step, per-run gradient size factor; 0 replays "
            "the trace exactly (default 0.25)",
        )

    memory_note = (
        f"A run that would need more than {MEMORY_SHARE:.0%} of physical memory (estimated "
        "from the steps, runs and settings) is refused before it starts."
    )
    p = sub.add_parser(
        "simulate",
        help="run one policy over one trace and print its metrics",
        description="Run one policy over a synthetic trace family or a recorded .npz trace, "
        "many runs at once, and print run-averaged metrics. Settings print as people write "
        "them (2^-24, 0.5, 2000). " + memory_note,
        epilog="examples:\n  dls simulate --policy headroom --trace spikes --plot traj.png\n"
        "  dls simulate --policy DynamicScale --set init_scale=2**15 --set hysteresis=2 "
        "--trace run.npz\n"
        "  dls simulate --policy static --set scale=2**10 --steps 2000 --runs 8",
        formatter_class=fmt,
    )
    p.add_argument("--policy", default="dynamic", help=f"{POLICY_HELP} (default dynamic)")
    p.add_argument(
        "--set",
        action="append",
        metavar="KEY=VALUE",
        help="change one setting of the policy, e.g. growth_interval=200 or "
        "init_scale=2**15 (repeatable, each setting once)",
    )
    p.add_argument(
        "--trace",
        default="stationary",
        help=f"a family ({', '.join(FAMILIES)}) or an .npz trace written by GradientRecorder or "
        "Trace.save (default stationary)",
    )
    common(p)
    p.add_argument(
        "--plot",
        metavar="FILE.png",
        help="also write the scale trajectory of run 0 (the extension names the format: png, "
        "pdf, svg, ...; the folder must exist)",
    )
    p.set_defaults(handler=_cmd_simulate, subparser=p)

    p = sub.add_parser(
        "sweep",
        help="run a grid of settings of one policy across trace families",
        description="Run every combination of the --grid settings of one policy on each "
        "family; print a table and optionally write CSV. Each setting is either swept "
        "(one --grid with all its values) or fixed (one --set): repeating a setting, or "
        "giving it to both, is an error. " + memory_note,
        epilog="examples:\n  dls sweep --policy dynamic --grid growth_interval=500,1000,2000 "
        "--grid hysteresis=1,2 --families stationary,nan --csv sweep.csv\n"
        "  dls sweep --policy dynamic --grid init_scale=2**10,2**15 --set hysteresis=2",
        formatter_class=fmt,
    )
    p.add_argument("--policy", default="dynamic", help=f"{POLICY_HELP} (default dynamic)")
    p.add_argument(
        "--grid",
        action="append",
        metavar="KEY=V1,V2,...",
        help="all values of one setting to sweep (repeatable for other settings; the grid is "
        "their product)",
    )
    p.add_argument(
        "--set",
        action="append",
        metavar="KEY=VALUE",
        help="fix one setting (not one in --grid) for every grid point (repeatable)",
    )
    p.add_argument(
        "--families",
        default=",".join(FAMILIES),
        help=f"comma list of families (default {','.join(FAMILIES)})",
    )
    common(p, steps_default=5000, runs_default=16)
    p.add_argument(
        "--csv", metavar="FILE.csv", help="also write every row as CSV (the folder must exist)"
    )
    p.set_defaults(handler=_cmd_sweep, subparser=p)

    p = sub.add_parser(
        "report",
        help="regenerate the simulation report (figures + README.md)",
        description="Regenerate the report with fixed seeds: PNG figures and README.md "
        "comparing nnabla's legacy, PyTorch-style, DeepSpeed-style, DynamicScale and "
        "HeadroomScale on every trace family, the SSD reproduction and the default-setting "
        "sweeps. Same inputs, same files. About a minute on two cores.",
        epilog="examples:\n  dls report --out my_report\n"
        "  dls report --out /tmp/smoke --quick\n"
        "(scripts/report.sh regenerates the committed reports/ folder)",
        formatter_class=fmt,
    )
    p.add_argument(
        "--out",
        default="reports",
        help="output folder, created if missing (default reports: in a checkout, the "
        "committed report)",
    )
    p.add_argument(
        "--quick", action="store_true", help="small sizes for a smoke test (numbers not meaningful)"
    )
    p.set_defaults(handler=_cmd_report, subparser=p)

    p = sub.add_parser(
        "train",
        help="train the digits demo: float32 vs float16 without/with loss scaling",
        description="Train a small model on scikit-learn's 8x8 digits with nnabla: float32, "
        "float16 without scaling, float16 with nnabla's updater and with ours; print a table "
        "and write train.md (the table) and train_scale_trajectory.png into --out. "
        "300 steps take about half a minute on two cores.",
        epilog="example:\n  dls train --steps 300 --out train_out\n"
        "(scripts/report.sh regenerates the committed 600-step reports/train.md)",
        formatter_class=fmt,
    )
    p.add_argument("--steps", type=_positive_int, default=300, help="training steps (default 300)")
    p.add_argument("--seed", type=_seed, default=0, help="seed (default 0)")
    p.add_argument(
        "--out",
        default="reports",
        help="folder for train.md (the results table) and train_scale_trajectory.png, created "
        "if missing (default reports: in a checkout, the committed report)",
    )
    p.set_defaults(handler=_cmd_train, subparser=p)
    for p in (parser, *sub.choices.values()):  # the raw formatter keeps examples' lines
        p.description = textwrap.fill(p.description, width=88)
    return parser


def main(argv=None) -> int:
    """Entry point of ``dls``; returns the exit status (argument errors exit with 2)."""
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        return args.handler(args.subparser, args)
    except MemoryError:
        args.subparser.exit(
            1, f"{args.subparser.prog}: error: out of memory; use fewer --steps or --runs\n"
        )


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
