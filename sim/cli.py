"""``dls``: command line for the float16 loss-scaling simulator and the nnabla demo.

Thin: parses arguments, calls :mod:`sim.run`, :mod:`sim.report`, :mod:`sim.plots` (or
``updater.demo`` for ``train``) and writes files. Bad arguments exit with status 2 and a message.
"""

from __future__ import annotations

import argparse
import csv
import itertools
import re
import sys
from pathlib import Path
from typing import Dict, List, Sequence

from sim.run import (
    PRESETS,
    make_policy,
    markdown_table,
    setting_types,
    simulate,
    simulate_many,
)
from sim.traces import FAMILIES, Trace, make_trace

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


def _is_tty() -> bool:
    return sys.stderr.isatty()


def _parse_number(text: str) -> float:
    """Parse ``1000``, ``0.5``, ``1e-3``, ``2**15`` or ``2^15``."""
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


def _settings(parser, policy: str, pairs: Sequence[str]) -> Dict[str, object]:
    try:
        types = setting_types(policy)
    except ValueError as e:
        parser.error(str(e))
    out = {}
    for pair in pairs or ():
        key, sep, text = pair.partition("=")
        if not sep:
            parser.error(f"--set needs KEY=VALUE (e.g. growth_interval=200), got {pair!r}")
        out[key.strip()] = _convert(parser, policy, key.strip(), text, types)
    return out


def _policy(parser, name: str, settings: Dict[str, object]):
    try:
        return make_policy(name, **settings)
    except (ValueError, TypeError) as e:
        parser.error(str(e))


def _trace(parser, spec: str, steps: int, seed: int) -> Trace:
    if spec in FAMILIES:
        return make_trace(spec, steps=steps, seed=seed)
    path = Path(spec)
    if not path.suffix == ".npz" and not path.exists():
        parser.error(
            f"--trace must be a family ({', '.join(FAMILIES)}) or a .npz file, got {spec!r}"
        )
    if not path.is_file():
        parser.error(f"trace file not found: {spec}")
    try:
        return Trace.load(path)
    except (ValueError, OSError, KeyError) as e:
        parser.error(f"cannot read trace file {spec}: {e}")


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


def _formatted(rows: List[Dict[str, object]]) -> List[Dict[str, object]]:
    out = []
    for r in rows:
        r = dict(r)
        for k in ("mean_flushed", "signal_lost", "below_half_safe"):
            if k in r and isinstance(r[k], float):
                r[k] = f"{100 * r[k]:.4g}%"
        out.append(r)
    return out


# ---------------------------------------------------------------- subcommands


def _cmd_simulate(parser, args) -> int:
    policy = _policy(parser, args.policy, _settings(parser, args.policy, args.set))
    trace = _trace(parser, args.trace, args.steps, args.seed)
    result = simulate(
        policy,
        trace,
        runs=args.runs,
        seed=args.seed,
        jitter=args.jitter,
        label=args.policy,
        progress=_is_tty(),
    )
    print(f"policy: {policy.state_dict()}")
    print(f"trace: {trace.name} ({trace.steps} steps), runs: {args.runs}, jitter: {args.jitter}")
    print(markdown_table(_formatted([result.summary()]), SUMMARY_COLUMNS))
    if args.plot:
        from sim.plots import plot_trajectory, save_figure

        save_figure(plot_trajectory(result), args.plot)
        print(f"wrote {args.plot}")
    return 0


def _cmd_sweep(parser, args) -> int:
    types_policy = args.policy
    try:
        types = setting_types(types_policy)
    except ValueError as e:
        parser.error(str(e))
    grid: Dict[str, List[object]] = {}
    for spec in args.grid or ():
        key, sep, values = spec.partition("=")
        key = key.strip()
        if not sep or not values.strip():
            parser.error(
                f"--grid needs KEY=V1,V2,... (e.g. growth_interval=200,1000), got {spec!r}"
            )
        grid[key] = [_convert(parser, args.policy, key, v, types) for v in values.split(",")]
    if not grid:
        parser.error("sweep needs at least one --grid KEY=V1,V2,...")
    fixed = _settings(parser, args.policy, args.set)
    combos = [dict(zip(grid, values)) for values in itertools.product(*grid.values())]
    policies = [_policy(parser, args.policy, {**fixed, **c}) for c in combos]
    families = [f.strip() for f in args.families.split(",") if f.strip()]
    bad = [f for f in families if f not in FAMILIES]
    if bad or not families:
        parser.error(
            f"--families must be a comma list of {', '.join(FAMILIES)}, got {args.families!r}"
        )
    rows = []
    for family in families:
        trace = make_trace(family, steps=args.steps, seed=args.seed)
        results = simulate_many(
            policies,
            trace,
            runs=args.runs,
            seed=args.seed,
            jitter=args.jitter,
            labels=[str(i) for i in range(len(policies))],
            progress=_is_tty(),
        )
        for combo, result in zip(combos, results):
            row = {**combo, **result.summary()}
            row["label"] = args.policy
            rows.append(row)
    columns = [*grid, "trace", *(c for c in SUMMARY_COLUMNS if c not in ("label", "trace"))]
    print(f"policy: {args.policy}, fixed: {fixed}, grid: {grid}, steps: {args.steps}")
    print(markdown_table(_formatted(rows), columns))
    if args.csv:
        with open(args.csv, "w", newline="") as fh:
            writer = csv.DictWriter(fh, fieldnames=columns, extrasaction="ignore")
            writer.writeheader()
            writer.writerows(rows)
        print(f"wrote {args.csv}")
    return 0


def _cmd_report(parser, args) -> int:
    from sim.report import QUICK, ReportConfig, build_report

    config = QUICK if args.quick else ReportConfig()
    result = build_report(args.out, config, progress=_is_tty())
    for path in result["files"]:
        print(f"wrote {path}")
    return 0


def _cmd_train(parser, args) -> int:
    try:
        import updater.demo as demo
    except ImportError as e:
        print(f"dls train needs nnabla and updater.demo: {e}", file=sys.stderr)
        return 1
    rows = demo.run_comparison(
        steps=args.steps, seed=args.seed, out_dir=args.out, progress=_is_tty()
    )
    table = demo.format_table(rows)
    print(table)
    path = Path(args.out) / "train.md"
    path.write_text(
        f"# `dls train --steps {args.steps} --seed {args.seed}`\n\n"
        "Digits (scikit-learn's bundled 8x8 set), the same MLP trained four ways; the time "
        "column is wall time on the machine that ran it, not a benchmark.\n\n"
        f"{table}\n\n![scale trajectories]({demo.PLOT_NAME})\n"
    )
    print(f"wrote {path}")
    return 0


# ---------------------------------------------------------------- parser


def build_parser() -> argparse.ArgumentParser:
    """The ``dls`` argument parser (subcommands simulate, sweep, report, train)."""
    fmt = argparse.RawDescriptionHelpFormatter
    parser = argparse.ArgumentParser(
        prog="dls",
        description="Dynamic loss scaling for nnabla: float16 simulator, report and demo.",
        epilog=(
            "examples:\n"
            "  dls simulate --policy dynamic --set growth_interval=200 --trace drifting\n"
            "  dls sweep --policy dynamic --grid growth_interval=500,1000,2000 "
            "--grid hysteresis=1,2\n"
            "  dls report --out reports\n"
            "  dls train --steps 300 --out reports"
        ),
        formatter_class=fmt,
    )
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

    p = sub.add_parser(
        "simulate",
        help="run one policy over one trace and print its metrics",
        description="Run one policy over a synthetic trace family or a recorded .npz trace, "
        "many runs at once, and print run-averaged metrics.",
        epilog="examples:\n  dls simulate --policy headroom --trace spikes --plot traj.png\n"
        "  dls simulate --policy DynamicScale --set init_scale=2**15 --set hysteresis=2 "
        "--trace run.npz",
        formatter_class=fmt,
    )
    p.add_argument("--policy", default="dynamic", help=f"{POLICY_HELP} (default dynamic)")
    p.add_argument(
        "--set",
        action="append",
        metavar="KEY=VALUE",
        help="change one setting of the policy, e.g. growth_interval=200 or "
        "init_scale=2**15 (repeatable)",
    )
    p.add_argument(
        "--trace",
        default="stationary",
        help=f"a family ({', '.join(FAMILIES)}) or a recorded .npz trace (default stationary)",
    )
    common(p)
    p.add_argument("--plot", metavar="FILE.png", help="also write the scale trajectory of run 0")
    p.set_defaults(handler=_cmd_simulate, subparser=p)

    p = sub.add_parser(
        "sweep",
        help="run a grid of settings of one policy across trace families",
        description="Run every combination of the --grid settings of one policy on each "
        "family; print a table and optionally write CSV.",
        epilog="example:\n  dls sweep --policy dynamic --grid growth_interval=500,1000,2000 "
        "--grid hysteresis=1,2 --families stationary,nan --csv sweep.csv",
        formatter_class=fmt,
    )
    p.add_argument("--policy", default="dynamic", help=f"{POLICY_HELP} (default dynamic)")
    p.add_argument(
        "--grid",
        action="append",
        metavar="KEY=V1,V2,...",
        help="values of one setting to sweep (repeatable; the grid is their product)",
    )
    p.add_argument(
        "--set",
        action="append",
        metavar="KEY=VALUE",
        help="fix one setting for every grid point (repeatable)",
    )
    p.add_argument(
        "--families",
        default=",".join(FAMILIES),
        help=f"comma list of families (default {','.join(FAMILIES)})",
    )
    common(p, steps_default=5000, runs_default=16)
    p.add_argument("--csv", metavar="FILE.csv", help="also write every row as CSV")
    p.set_defaults(handler=_cmd_sweep, subparser=p)

    p = sub.add_parser(
        "report",
        help="regenerate the simulation report (figures + README.md)",
        description="Regenerate the report with fixed seeds: PNG figures and README.md "
        "comparing nnabla's legacy, PyTorch-style, DeepSpeed-style, DynamicScale and "
        "HeadroomScale on every trace family, the SSD reproduction and the default-setting "
        "sweeps. Same inputs, same files.",
        epilog="example:\n  dls report --out reports",
        formatter_class=fmt,
    )
    p.add_argument("--out", default="reports", help="output folder (default reports)")
    p.add_argument(
        "--quick", action="store_true", help="small sizes for a smoke test (numbers not meaningful)"
    )
    p.set_defaults(handler=_cmd_report, subparser=p)

    p = sub.add_parser(
        "train",
        help="train the digits demo: float32 vs float16 without/with loss scaling",
        description="Train a small model on scikit-learn's 8x8 digits with nnabla: float32, "
        "float16 without scaling, float16 with nnabla's updater and with ours; print a table "
        "and write a scale-trajectory plot.",
        epilog="example:\n  dls train --steps 300 --out reports",
        formatter_class=fmt,
    )
    p.add_argument("--steps", type=_positive_int, default=300, help="training steps (default 300)")
    p.add_argument("--seed", type=_seed, default=0, help="seed (default 0)")
    p.add_argument("--out", default="reports", help="folder for the plot (default reports)")
    p.set_defaults(handler=_cmd_train, subparser=p)
    return parser


def main(argv=None) -> int:
    """Entry point of ``dls``; returns the exit status (argument errors exit with 2)."""
    parser = build_parser()
    args = parser.parse_args(argv)
    return args.handler(args.subparser, args)


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
