"""``dls``: command line for the float16 loss-scaling simulator and the nnabla demo.

Thin: parses arguments, calls :mod:`sim.replay.run`, :mod:`sim.report.build`, :mod:`sim.plots.runs`
(or :mod:`sim.nnabla_studies.demo` for ``train``) and writes files. Everything that can be checked
before the work is checked first (:mod:`sim.cli.preflight`: settings, trace files, output paths, the
memory a simulation needs); a bad argument exits with status 2 and a one-line message, as
argparse does. Policies and their settings come from :mod:`sim.cli.settings` (the ``--policy``
help is generated from :mod:`updater.policy.presets`), printed output from :mod:`sim.report.tables`.

Progress goes to stderr (:class:`sim.cli.progress.StageProgress`): tqdm bars on a terminal, one
status line per stage otherwise (a file or a pipe), so long commands are never silent.
"""

from __future__ import annotations

import argparse
import dataclasses
import sys
import textwrap
from pathlib import Path

from sim.argtypes import positive_int, seed_int
from sim.cli import sweep as sweep_cmd
from sim.cli import tune as tune_cmd
from sim.cli.parsing import add_verbosity, log, parse_args, setup_logging
from sim.cli.preflight import (
    MEMORY_SHARE,
    TRAIN_MAX_STEP_RUNS,
    check_figure,
    check_memory,
    check_output_dir,
    check_work,
    jitter_value,
    trace_for,
)
from sim.cli.progress import StageProgress
from sim.cli.settings import build_policy, parse_settings, policy_help, policy_list
from sim.cli.version import version_line
from sim.replay.metrics import SUMMARY_COLUMNS
from sim.replay.pool import NAME_RULE, pool_by_name, simulate_pooled
from sim.report.provenance import provenance
from sim.report.tables import describe_policy, na_notes, summary_table
from sim.traces.families import FAMILIES
from sim.traces.named import family_name, trace_file
from sim.traces.real import MODELS, SHIPPED
from updater.common.writing import UnsafeOutputError, write_text
from updater.policy.presets import names

# ---------------------------------------------------------------- subcommands


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


def _cmd_simulate(parser, args) -> int:
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
    summary = result.summary()
    print(f"policy: {describe_policy(args.policy, policy)}")
    steps = f"{trace.training_steps} steps"
    print(f"trace: {trace.name} ({steps}), runs: {args.runs}, jitter: {args.jitter}")
    print(summary_table([summary], SUMMARY_COLUMNS))
    for note in na_notes([summary]):
        print(note)
    if args.plot is not None:
        from sim.plots.common import save_figure
        from sim.plots.trajectories import plot_trajectory

        save_figure(plot_trajectory(result), args.plot, overwrite=args.force)
        print(f"wrote {args.plot}")
    return 0


def _cmd_report(parser, args) -> int:
    from sim.report.build import QUICK, ReportConfig, build_report
    from sim.report.experiments import check_real_traces

    check_output_dir(parser, "--out", args.out)
    config = QUICK if args.quick else ReportConfig()
    real = None if args.real_traces == "none" else args.real_traces
    config = dataclasses.replace(config, real_traces=real)
    try:
        check_real_traces(config)
    except FileNotFoundError as e:
        parser.error(f"--real-traces: {e}")
    with StageProgress("report", quiet=args.verbosity < 0) as progress:
        result = build_report(args.out, config, progress=progress, overwrite=args.force)
    for path in result["files"]:
        print(f"wrote {path}")
    return 0


def _cmd_train(parser, args) -> int:
    import sim.nnabla_studies.demo as demo

    check_work(parser, args.steps, len(demo.VARIANTS), TRAIN_MAX_STEP_RUNS)
    check_output_dir(parser, "--out", args.out, ("train.md", demo.PLOT_NAME), args.force)
    try:
        demo.load_data(args.seed)  # needs scikit-learn: say so before any work
    except ImportError as e:
        parser.error(str(e))
    with StageProgress("train", quiet=args.verbosity < 0) as progress:
        rows = demo.run_comparison(
            steps=args.steps,
            seed=args.seed,
            out_dir=args.out,
            progress=progress,
            overwrite=args.force,
        )
    print(demo.format_table(rows, terminal=True))
    path = Path(args.out) / "train.md"
    write_text(
        path,
        f"# `dls train --steps {args.steps} --seed {args.seed}`\n\n"
        f"Generated with {provenance(args.out)}. "
        "Digits (scikit-learn's bundled 8x8 set), the same MLP trained four ways (wall times "
        "are printed on the terminal only, so a rerun writes the same file).\n\n"
        f"{demo.format_table(rows)}\n\n![scale trajectories]({demo.PLOT_NAME})\n",
        overwrite=args.force,
    )
    print(f"wrote {path}")
    return 0


# ---------------------------------------------------------------- parser


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
    parser.add_argument("--version", action="version", version=version_line())
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    sub.required = True

    def common(p, steps_default=10000, runs_default=64):
        p.add_argument(
            "--steps",
            type=positive_int,
            default=steps_default,
            help=f"steps per synthetic trace (default {steps_default})",
        )
        p.add_argument(
            "--runs",
            type=positive_int,
            default=runs_default,
            help=f"runs per setting, advanced together (default {runs_default})",
        )
        p.add_argument(
            "--seed", type=seed_int, default=0, help="seed of traces and jitter (default 0)"
        )
        p.add_argument(
            "--jitter",
            type=jitter_value,
            default=0.25,
            help="log2 std of the per-step, per-run gradient size factor; 0 replays "
            "the trace exactly (default 0.25)",
        )

    memory_note = (
        f"A run that would need more than {MEMORY_SHARE:.0%} of physical memory (estimated "
        "from the steps, runs and settings) is refused before it starts."
    )
    policies = (
        policy_list()
    )  # generated from updater.policy.presets: new presets show up by themselves
    p = sub.add_parser(
        "simulate",
        help="run one policy over one trace and print its metrics",
        description="Run one policy over a synthetic trace family, a real model's trace "
        "shipped in the package or a recorded .npz trace, "
        "many runs at once, and print run-averaged metrics. Settings print as people write "
        "them (2^-24, 0.5, 2000). " + memory_note,
        epilog="examples:\n  dls simulate --policy headroom --trace spikes --plot traj.png\n"
        "  dls simulate --policy nnabla-legacy --trace digits_conv_bn\n"
        "  dls simulate --policy DynamicScale --set init_scale=2**15 --set hysteresis=2 "
        "--trace run.npz\n"
        "  dls simulate --policy static --set scale=2**10 --steps 2000 --runs 8\n\n" + policies,
        formatter_class=fmt,
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
    common(p)
    p.add_argument(
        "--plot",
        metavar="FILE.png",
        help="also write the scale trajectory of run 0 (the extension names the format: png, "
        "pdf, svg, ...; the folder must exist)",
    )
    p.set_defaults(handler=_cmd_simulate, subparser=p, policies=names())

    p = sub.add_parser(
        "sweep",
        help="run a grid of settings of one policy across trace families",
        description="Run every combination of the --grid settings of one policy on each "
        "family; print a table and optionally write CSV. Each setting is either swept "
        "(one --grid with all its values) or fixed (one --set): repeating a setting, or "
        "giving it to both, is an error. " + memory_note,
        epilog="examples:\n  dls sweep --policy dynamic --grid growth_interval=500,1000,2000 "
        "--grid hysteresis=1,2 --families stationary,nan --csv sweep.csv\n"
        "  dls sweep --grid growth_interval=500,2000 --families '' --trace run.npz\n"
        "  dls sweep --policy dynamic --grid init_scale=2**10,2**15 --set hysteresis=2\n\n"
        + policies,
        formatter_class=fmt,
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
    common(p, steps_default=5000, runs_default=16)
    p.add_argument(
        "--csv", metavar="FILE.csv", help="also write every row as CSV (the folder must exist)"
    )
    p.set_defaults(handler=sweep_cmd.run, subparser=p, policies=names())
    tune_cmd.add_parser(sub, common, fmt)

    p = sub.add_parser(
        "report",
        help="regenerate the simulation report (figures + README.md)",
        description="Regenerate the report with fixed seeds: PNG figures and README.md "
        "comparing nnabla's legacy, PyTorch-style, DeepSpeed-style, DynamicScale and "
        "HeadroomScale on every trace family (synthetic ones and four real nnabla models' "
        "recorded traces, shipped in the package), the SSD reproduction, the simulator's "
        "predictions from the real traces against real runs of other policies, the per-layer "
        "view and the default-setting sweeps. Same inputs, same files.",
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
    p.add_argument(
        "--real-traces",
        default=SHIPPED,
        metavar="DIR",
        help="folder of the real models' traces and measured runs, written by python -m "
        "sim.nnabla_studies.real_traces: 'shipped' (the default) for those shipped in the "
        "package (sim/traces/data), a folder (relative to the current one), or 'none' to "
        "leave the real models out",
    )
    p.set_defaults(handler=_cmd_report, subparser=p)

    p = sub.add_parser(
        "train",
        help="train the digits demo: float32 vs float16 without/with loss scaling",
        description="Train a small model on scikit-learn's 8x8 digits with nnabla: float32, "
        "float16 without scaling, float16 with nnabla's updater and with ours; print a table "
        "and write train.md (the table) and train_scale_trajectory.png into --out.",
        epilog="example:\n  dls train --steps 300 --out train_out\n"
        "(scripts/report.sh regenerates the committed 600-step reports/train.md)",
        formatter_class=fmt,
    )
    p.add_argument("--steps", type=positive_int, default=300, help="training steps (default 300)")
    p.add_argument("--seed", type=seed_int, default=0, help="seed (default 0)")
    p.add_argument(
        "--out",
        default="train_out",
        help="folder for train.md (the results table) and train_scale_trajectory.png, created "
        "if missing (default train_out; the committed 600-step report is reports/, written "
        "by scripts/report.sh)",
    )
    p.set_defaults(handler=_cmd_train, subparser=p)
    for name in ("simulate", "sweep", "report", "train"):
        sub.choices[name].add_argument(
            "--force",
            action="store_true",
            help="replace output files dls did not write (by default dls refuses to replace "
            "them: it replaces only files whose content says dls wrote them, unedited since)",
        )
    for p in sub.choices.values():
        add_verbosity(p)
    for p in (parser, *sub.choices.values()):  # the raw formatter keeps examples' lines
        p.description = textwrap.fill(p.description, width=88)
    return parser


def main(argv=None) -> int:
    """Entry point of ``dls``; returns the exit status (argument errors exit with 2). A name
    with bytes the terminal's encoding cannot show (a path that is not UTF-8) prints with
    replacement characters."""
    for stream in (sys.stdout, sys.stderr):
        if hasattr(stream, "reconfigure"):
            stream.reconfigure(errors="replace")
    parser = build_parser()
    args = parse_args(parser, argv)
    setup_logging(args.verbosity)
    shown = {k: v for k, v in vars(args).items() if k not in ("handler", "subparser", "policies")}
    log.debug("dls %s with %s", args.command, shown)
    try:
        return args.handler(args.subparser, args)
    except UnsafeOutputError as e:  # an output found unsafe once the work told its names
        args.subparser.error(str(e))
    except OSError as e:  # a write that failed (a full disk): the old file is intact
        why = f"{e.filename}: {e.strerror}" if e.filename else (e.strerror or str(e))
        args.subparser.exit(1, f"{args.subparser.prog}: error: {why}\n")
    except MemoryError:
        args.subparser.exit(
            1, f"{args.subparser.prog}: error: out of memory; use fewer --steps or --runs\n"
        )


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
