"""``dls simulate``: one policy over one trace (or the pooled recordings of one model)."""

from __future__ import annotations

from sim.cli.evidence import flush_cells, flush_notes, interval_text
from sim.cli.options import FORMATTER, MEMORY_NOTE, add_run_options, finish
from sim.cli.preflight import check_figure, check_memory, trace_for
from sim.cli.progress import StageProgress
from sim.cli.settings import build_policy, parse_settings, policy_help, policy_list
from sim.replay.intervals import replay_intervals
from sim.replay.metrics import SUMMARY_COLUMNS
from sim.replay.pool import NAME_RULE, pool_by_name, simulate_pooled
from sim.report.tables import describe_policy, na_notes, summary_table
from sim.tables import terminal_text
from sim.traces.families import FAMILIES
from sim.traces.named import family_name, trace_file
from sim.traces.real import MODELS
from updater.common.names import shown
from updater.policy.presets import names


def add_parser(subparsers) -> None:
    """Register ``simulate`` on ``dls``'s subparsers."""
    p = subparsers.add_parser(
        "simulate",
        help="run one policy over one trace and print its metrics",
        description="Run one policy over a synthetic trace family, a real model's trace "
        "shipped in the package or a recorded .npz trace, "
        "many runs at once, and print run-averaged metrics (flushing bounded or 'not measured' "
        "where the trace did not measure it at the replayed scales) and the predictive interval "
        "of skipped steps and of the below-half share. Settings print as people write "
        "them (2^-24, 0.5, 2000). " + MEMORY_NOTE,
        epilog="examples:\n  dls simulate --policy headroom --trace spikes --plot traj.png\n"
        "  dls simulate --policy nnabla-legacy --trace digits_conv_bn\n"
        "  dls simulate --policy DynamicScale --set init_scale=2**15 --set hysteresis=2 "
        "--trace run.npz\n"
        "  dls simulate --policy static --set scale=2**10 --steps 2000 --runs 8\n\n",
        epilog_tail=policy_list,  # from updater.policy.presets: new presets show by themselves
        formatter_class=FORMATTER,
    )
    p.add_argument("--policy", default="dynamic", help=policy_help("dynamic"))
    p.add_argument(
        "--set",
        action="append",
        metavar="KEY=VALUE",
        help="change one setting of the policy, e.g. growth_interval=200 or "
        "init_scale=2**15 (repeatable, each setting once)",
    )
    p.add_argument(
        "--trace",
        action="append",
        help=f"a family ({', '.join(FAMILIES)}), a real model's trace shipped in the package "
        f"({', '.join(MODELS)}; <model>.order1: the same model in another batch order) or an "
        ".npz trace written by GradientRecorder or Trace.save (default stationary); repeated, "
        "recordings of one model (traces of one name, e.g. other batch orders) pooled: the "
        "runs are drawn across them",
    )
    add_run_options(p)
    p.add_argument(
        "--plot",
        metavar="FILE.png",
        help="also write the scale trajectory of run 0 (the extension names the format: png, "
        "pdf, svg, ...; the folder must exist)",
    )
    finish(p, run, policies=names())


def _one_model(parser, traces, runs):
    """The trace, or the pool of several recordings of one model (:mod:`sim.replay.pool`,
    pooled by :func:`sim.replay.pool.pool_by_name`, as ``dls sweep`` and ``dls tune`` pool)."""
    try:
        pooled = pool_by_name(traces)
    except ValueError as e:
        parser.error(f"--trace: {e}")
    if len(pooled) > 1:
        parser.error(
            "--trace given more than once must name recordings of one model (traces of one "
            f"name: {NAME_RULE}), got {', '.join(t.name for t in pooled)}"
        )
    if runs < len(getattr(pooled[0], "traces", [])):
        parser.error(f"--runs must be at least the number of recordings ({len(traces)})")
    return pooled[0]


def run(args) -> int:
    """The ``simulate`` subcommand: check, simulate, print (and plot)."""
    parser = args.subparser
    settings = parse_settings(parser, args.policy, args.set)
    policy = build_policy(parser, args.policy, settings)
    specs = args.trace or ["stationary"]
    inputs = [trace_file(s) for s in specs if family_name(s) is None]
    if args.plot is not None:
        check_figure(parser, "--plot", args.plot, args.force, inputs)
    if len(specs) == 1 and family_name(specs[0]):
        check_memory(parser, args.steps, args.runs)
    traces = [trace_for(parser, s, args.steps, args.seed) for s in specs]
    trace = _one_model(parser, traces, args.runs)
    check_memory(parser, trace.training_steps, args.runs)
    with StageProgress("simulate", quiet=args.verbosity < 0) as progress:
        progress.start(1)
        progress.stage(
            f"{args.policy} on {trace.name}: {args.runs} runs x {trace.training_steps} steps"
        )
        result = simulate_pooled(
            [policy], trace, args.runs, args.seed, args.jitter, [args.policy], progress
        )[0]
        intervals = replay_intervals(policy, trace, seed=args.seed)
    summary = result.summary()
    print(terminal_text(describe_policy(args.policy, policy), first="policy: "))
    steps = f"{trace.training_steps} steps"
    print(f"trace: {trace.name} ({steps}), runs: {args.runs}, jitter: {args.jitter}")
    print(summary_table([flush_cells(summary)], SUMMARY_COLUMNS))
    for note in na_notes([summary]):
        print(note)
    for note in flush_notes(summary, trace):
        print(terminal_text(note, first="note: "))
    print(terminal_text(interval_text(intervals), first="interval: "))
    if args.plot is not None:
        from sim.plots.common import save_figure
        from sim.plots.trajectories import plot_trajectory

        save_figure(plot_trajectory(result), args.plot, overwrite=args.force)
        print(f"wrote {shown(args.plot)}")
    return 0
