"""``dls report``: regenerate the simulation report (figures and README.md) into a folder."""

from __future__ import annotations

import dataclasses

from sim.cli.options import FORMATTER, finish
from sim.cli.preflight import check_output_dir
from sim.cli.progress import StageProgress
from sim.traces.real import SHIPPED
from updater.common.names import shown


def add_parser(subparsers) -> None:
    """Register ``report`` on ``dls``'s subparsers."""
    p = subparsers.add_parser(
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
        formatter_class=FORMATTER,
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
    finish(p, run)


def run(args) -> int:
    """The ``report`` subcommand: check, build the report, name the files written."""
    from sim.report.build import QUICK, ReportConfig, build_report
    from sim.report.experiments import check_real_traces

    parser = args.subparser
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
        print(f"wrote {shown(path)}")
    return 0
