"""``dls tune``: the report's selection rule applied to the user's own recorded traces."""

from __future__ import annotations

import sys

from sim.cli.evidence import flush_cells, flush_notes, interval_text
from sim.cli.options import FORMATTER, add_run_options, finish
from sim.cli.preflight import check_memory, trace_for
from sim.cli.progress import StageProgress
from sim.replay.pool import NAME_RULE, pool_by_name
from sim.replay.tune import TUNED, tune
from sim.report.tables import summary_table
from sim.tables import terminal_text
from sim.traces.named import family_name


def add_parser(subparsers) -> None:
    """Register ``tune`` on ``dls``'s subparsers."""
    p = subparsers.add_parser(
        "tune",
        help="tune a policy's settings on your own recorded traces",
        description="Run the report's grid of one policy's settings on your recorded traces "
        "(GradientRecorder files, or the shipped real models by name), pick with the report's "
        "selection rule (lowest signal lost averaged over the traces, then the best worst case, "
        "then the setting closest to the current default), and print the choice next to the "
        "default with their predicted skipped steps and signal lost (bounded where the traces did "
        "not measure flushing at the replayed scales) and predictive intervals, and the line to "
        "paste into your script.",
        epilog="examples:\n  dls tune --trace run.npz\n"
        "  dls tune --trace a.npz --trace b.npz --policy headroom --runs 32\n"
        "  dls tune --trace digits_conv_bn",
        formatter_class=FORMATTER,
    )
    p.add_argument(
        "--trace",
        action="append",
        required=True,
        metavar="FILE",
        help="a recorded trace (.npz), a shipped real model's name or a trace family "
        "(--steps long); repeatable",
    )
    p.add_argument("--policy", default="dynamic", help=f"the policy to tune: {', '.join(TUNED)}")
    add_run_options(p, runs_default=16)
    finish(p, run, force=False, policies=list(TUNED))


def run(args) -> int:
    """The ``tune`` subcommand: check, tune, print."""
    traces = _traces(args)
    steps = max(t.training_steps for t in traces.values())
    check_memory(args.subparser, steps, args.runs, len(TUNED[args.policy][1]) * 8)
    with StageProgress("tune", quiet=args.verbosity < 0) as progress:
        progress.start(len(traces))
        found = tune(traces, args.policy, args.runs, args.seed, args.jitter, progress)
    _print_table(args, traces, found)
    _print_notes(traces, found)
    print(found["line"])
    return 0


def _traces(args) -> dict:
    """The traces of ``--trace`` by name, recordings of one model pooled; the command's error
    for too few runs to draw across them."""
    parser = args.subparser
    if any(family_name(spec) for spec in args.trace):
        check_memory(parser, args.steps, args.runs, len(TUNED[args.policy][1]) * 8)
    loaded = [trace_for(parser, spec, args.steps, args.seed) for spec in args.trace]
    try:  # recordings of one model (one name) pool: their runs are drawn across them
        traces = {t.name: t for t in pool_by_name(loaded)}
    except ValueError as e:
        parser.error(f"--trace: {e}")
    if len(traces) > 1:  # several models: say how the files were grouped
        print(
            f"note: tuning over {len(traces)} models, averaged ({', '.join(traces)}): {NAME_RULE}",
            file=sys.stderr,
        )
    if args.runs < max(len(getattr(t, "traces", [t])) for t in traces.values()):
        parser.error("--runs must be at least the number of recordings of one model")
    return traces


def _print_table(args, traces: dict, found: dict) -> None:
    """The chosen and the default settings' table (and per trace, with several)."""
    settings = list(TUNED[args.policy][1])
    rows = [{"which": "chosen", **found["chosen"]}, {"which": "default", **found["default"]}]
    for r in rows:
        r.update(signal_lost=r["lost_mean"], skipped=r["skipped_mean"])
    print(
        f"{args.policy}: {len(found['rows'])} settings x {len(traces)} trace(s) "
        f"({', '.join(traces)}), {args.runs} runs, jitter {args.jitter}, seed {args.seed}"
    )
    print(
        summary_table(
            [flush_cells(r) for r in rows], ["which", *settings, "signal_lost", "skipped"]
        )
    )
    if len(traces) > 1:  # what the rows above average
        print("per trace:")
        columns = ["trace", "which", "signal_lost", "skipped"]
        print(
            summary_table([flush_cells(r) for r in found["by_trace"]], columns, with_legend=False)
        )


def _print_notes(traces: dict, found: dict) -> None:
    """The notes of the tuning, of each trace's flushing and its intervals."""
    for note in found["notes"]:
        print(terminal_text(note))
    said = set()  # the chosen's and the default's notes on one trace often read the same
    for r in found["by_trace"]:
        for note in flush_notes(r, traces[r["trace"]]):
            if (r["trace"], note) not in said:
                said.add((r["trace"], note))
                print(terminal_text(f"{r['which']}, {r['trace']}: {note}", first="note: "))
    for each in found["intervals"]:
        text = interval_text(each["intervals"])
        print(terminal_text(f"{each['which']}, {each['trace']}: {text}", first="interval: "))
