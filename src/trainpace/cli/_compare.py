"""``trainpace compare RUN_A RUN_B``: which run trains faster, by time to target."""

from __future__ import annotations

import argparse

from trainpace.cli._args import number

HELP = "compare two runs: throughput, steps and time to a target loss, and the winner"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The verb's arguments."""
    parser.add_argument("run_a", metavar="RUN_A", help="the first run folder (A)")
    parser.add_argument("run_b", metavar="RUN_B", help="the second run folder (B)")
    parser.add_argument("--target-loss", type=number(float, what="the loss both runs are timed to"),
                        metavar="X",
                        help="time both runs to this loss (default: their own common target)")
    parser.add_argument("--price-per-hour", type=number(float, what="a price per device-hour"),
                        metavar="P",
                        help="price of one device-hour: each run's cost, and what the winner "
                        "saves (per run to the target, per million tokens)")
    parser.add_argument("--json", action="store_true",
                        help='print one JSON object {"winner", "by", "reason", "runs", ...}')


def run(args: argparse.Namespace) -> int:
    """Read both runs, compare, render."""
    from trainpace.cli._output import print_json
    from trainpace.comparison import compare_runs
    from trainpace.report.compare import print_comparison
    from trainpace.runlog import read_run

    comparison = compare_runs(read_run(args.run_a), read_run(args.run_b),
                              target_loss=args.target_loss,
                              price_per_hour=args.price_per_hour)
    if args.json:
        print_json(comparison.to_dict())
    else:
        print_comparison(comparison)
    return 0
