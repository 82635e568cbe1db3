"""``dls sweep``: a grid of one policy's settings over trace families and recorded traces."""

from __future__ import annotations

import csv
import io
import itertools

from sim.cli.evidence import flush_cells, flush_word, table_notes
from sim.cli.names import resolve
from sim.cli.options import FORMATTER, MEMORY_NOTE, add_run_options, finish
from sim.cli.preflight import check_memory, check_output_file, trace_for
from sim.cli.progress import StageProgress
from sim.cli.settings import build_policy, parse_grid, parse_settings, policy_help, policy_list
from sim.replay.metrics import SUMMARY_COLUMNS, csv_head, csv_value
from sim.replay.pool import pool_by_name
from sim.replay.sweep import grid_points, labelled, run_sweep
from sim.report.tables import describe_policy, format_value, na_notes, summary_table
from sim.tables import terminal_text
from sim.traces.families import FAMILIES, make_trace
from sim.traces.named import family_name, trace_file
from updater.common.names import shown
from updater.common.writing import write_text
from updater.policy.presets import names


def add_parser(subparsers) -> None:
    """Register ``sweep`` on ``dls``'s subparsers."""
    p = subparsers.add_parser(
        "sweep",
        help="run a grid of settings of one policy across trace families",
        description="Run every combination of the --grid settings of one policy on each "
        "family; print a table and optionally write CSV. Each setting is either swept "
        "(one --grid with all its values) or fixed (one --set): repeating a setting, or "
        "giving it to both, is an error. " + MEMORY_NOTE,
        epilog="examples:\n  dls sweep --policy dynamic --grid growth_interval=500,1000,2000 "
        "--grid hysteresis=1,2 --families stationary,nan --csv sweep.csv\n"
        "  dls sweep --grid growth_interval=500,2000 --families '' --trace run.npz\n"
        "  dls sweep --policy dynamic --grid init_scale=2**10,2**15 --set hysteresis=2\n\n",
        epilog_tail=policy_list,
        formatter_class=FORMATTER,
    )
    p.add_argument("--policy", default="dynamic", help=policy_help("dynamic"))
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
        help=f"comma list of families (default {','.join(FAMILIES)}; '' for none)",
    )
    p.add_argument(
        "--trace",
        action="append",
        default=[],
        metavar="FILE",
        help="also a recorded trace (.npz) or a shipped real model's name; repeatable",
    )
    add_run_options(p, steps_default=5000, runs_default=16)
    p.add_argument(
        "--csv", metavar="FILE.csv", help="also write every row as CSV (the folder must exist)"
    )
    finish(p, run, policies=names())


def run(args) -> int:
    """The ``sweep`` subcommand: check, sweep, print (and write CSV)."""
    parser = args.subparser
    grid = parse_grid(parser, args.policy, args.grid)
    if not grid:
        parser.error("sweep needs at least one --grid KEY=V1,V2,...")
    fixed = parse_settings(parser, args.policy, args.set)
    both = [k for k in fixed if k in grid]
    if both:
        k = both[0]
        parser.error(
            f"--set {k} conflicts with --grid {k}: a setting is either fixed (--set) or swept "
            "(--grid), not both"
        )
    combos = grid_points(grid)
    policies = [build_policy(parser, args.policy, {**fixed, **c}) for c in combos]
    families, recorded, inputs = _traces(args)
    steps = max([args.steps] * bool(families) + [t.training_steps for t in recorded])
    check_memory(parser, steps, args.runs, len(policies))
    synthetic = (make_trace(f, steps=args.steps, seed=args.seed) for f in families)
    traces = itertools.chain(synthetic, recorded)
    names = families + [t.name for t in recorded]
    with StageProgress("sweep", quiet=args.verbosity < 0) as progress:
        progress.start(len(names))
        rows = run_sweep(
            policies,
            combos,
            traces,
            runs=args.runs,
            seed=args.seed,
            jitter=args.jitter,
            progress=progress,
        )
    rows = labelled(rows, args.policy)
    columns = [*grid, "trace", *(c for c in SUMMARY_COLUMNS if c not in ("label", "trace"))]
    print(terminal_text(describe_policy(args.policy, policies[0], swept=grid), first="policy: "))
    print(terminal_text(_grid_line(args, grid, len(combos), names, bool(families))))
    print(summary_table([flush_cells(r) for r in rows], columns))
    for note in na_notes(rows):
        print(note)
    for note in table_notes(rows, {t.name: t for t in recorded}):
        print(terminal_text(note, first="note: "))
    if args.csv is not None:
        write_csv(args.csv, rows, columns, args.force, inputs)
        print(f"wrote {shown(args.csv)}")
    return 0


def _traces(args) -> tuple:
    """The families, the recorded traces (pooled by name) and the input files of ``--families``
    and ``--trace``, checked before any work (with the ``--csv`` output)."""
    parser = args.subparser
    given = [f.strip() for f in args.families.split(",") if f.strip()]
    families = [resolve(parser, "--families", f, list(FAMILIES), "family") for f in given]
    if not (families or args.trace):
        parser.error(f"--families must name at least one of {', '.join(FAMILIES)} without --trace")
    try:  # recordings of one model (one name) pool
        recorded = pool_by_name([trace_for(parser, s, args.steps, args.seed) for s in args.trace])
    except ValueError as e:
        parser.error(f"--trace: {e}")
    if args.runs < max([len(getattr(t, "traces", [t])) for t in recorded], default=1):
        parser.error("--runs must be at least the number of recordings of one model")
    inputs = [trace_file(s) for s in args.trace if family_name(s) is None]
    if args.csv is not None:
        check_output_file(parser, "--csv", args.csv, args.force, inputs, kind="csv")
    return families, recorded, inputs


def _grid_line(args, grid, settings: int, names, synthetic: bool) -> str:
    """The line under the policy: the grid's values, the traces, runs and jitter."""
    values = "; ".join(
        f"{k}={','.join(format_value(v, name=k) for v in vs)}" for k, vs in grid.items()
    )
    steps = f", synthetic steps: {args.steps}" if synthetic else ""
    return (
        f"grid: {values} ({settings} settings), traces: {','.join(names)}{steps}, "
        f"runs: {args.runs}, jitter: {args.jitter}"
    )


FLUSH_CSV = {
    "signal_lost_low": "signal lost, low (%)",
    "signal_lost_high": "signal lost, high (%)",
    "flushing": "flushing",
}
"""The CSV's columns after ``columns``: the bounds of signal lost and what the flushed share
rests on (:func:`sim.cli.evidence.flush_word`: measured, exact, bounded or not measured)."""


def write_csv(path, rows, columns, force: bool = False, inputs=()) -> None:
    """Every row as CSV: each column under its one name with its unit
    (:func:`sim.replay.metrics.csv_head`: shares in percent, ``signal lost (%)``), then
    :data:`FLUSH_CSV`, text cells made inert for spreadsheets (:func:`inert_cell`), written by
    :func:`updater.common.writing.write_text` (``force``, ``inputs``: its rules)."""
    text = io.StringIO()
    writer = csv.writer(text, lineterminator="\n")
    writer.writerow([inert_cell(csv_head(c)) for c in columns] + list(FLUSH_CSV.values()))
    for r in rows:
        cells = [csv_value(c, r[c]) for c in columns]
        cells += [100.0 * r["signal_lost_low"], 100.0 * r["signal_lost_high"], flush_word(r)]
        writer.writerow([inert_cell(c) for c in cells])
    write_text(path, text.getvalue(), force, inputs, csv=True)


FORMULA_STARTS = ("=", "+", "-", "@", "\t", "\r")
"""How a cell that a spreadsheet would run as a formula starts (OWASP's CSV injection list)."""


def inert_cell(value):
    """``value`` for a CSV cell: a text starting like a formula gets a leading ``'``, which
    spreadsheets show as text; numbers (negative ones too) stay numbers.

    >>> inert_cell("=HYPERLINK(0)"), inert_cell("-x"), inert_cell(-2.5), inert_cell("spikes")
    ("'=HYPERLINK(0)", "'-x", -2.5, 'spikes')
    """
    if isinstance(value, str) and value.startswith(FORMULA_STARTS):
        return "'" + value
    return value
