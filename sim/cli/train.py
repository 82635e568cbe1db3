"""``dls train``: the digits demo, float32 against float16 without and with loss scaling."""

from __future__ import annotations

from pathlib import Path

from sim.argtypes import positive_int, seed_int
from sim.cli.options import FORMATTER, finish
from sim.cli.preflight import TRAIN_MAX_STEP_RUNS, check_output_dir, check_work
from sim.cli.progress import StageProgress
from sim.report.provenance import provenance
from updater.common.names import shown
from updater.common.writing import write_text


def add_parser(subparsers) -> None:
    """Register ``train`` on ``dls``'s subparsers."""
    p = subparsers.add_parser(
        "train",
        help="train the digits demo: float32 vs float16 without/with loss scaling",
        description="Train a small model on scikit-learn's 8x8 digits with nnabla: float32, "
        "float16 without scaling, float16 with nnabla's updater and with ours; print a table "
        "and write train.md (the table) and train_scale_trajectory.png into --out.",
        epilog="example:\n  dls train --steps 300 --out train_out\n"
        "(scripts/report.sh regenerates the committed 600-step reports/train.md)",
        formatter_class=FORMATTER,
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
    finish(p, run)


def run(args) -> int:
    """The ``train`` subcommand: check, train the four variants, print and write train.md."""
    import sim.nnabla_studies.demo as demo

    parser = args.subparser
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
    print(f"wrote {shown(path)}")
    return 0
