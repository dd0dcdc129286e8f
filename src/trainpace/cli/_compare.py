"""``trainpace compare RUN_A RUN_B``: which run trains faster, by time to target."""

from __future__ import annotations

import argparse

from trainpace.cli._args import number

HELP = ("compare two runs (or jobs): throughput, steps and time to a target loss, the winner, "
        "and the jobs' goodput")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The verb's arguments."""
    parser.add_argument("run_a", metavar="RUN_A", help="the first run or job folder (A)")
    parser.add_argument("run_b", metavar="RUN_B", help="the second run or job folder (B)")
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
    """Read both runs (and the jobs they are the latest runs of), compare, render."""
    from trainpace.cli._output import print_json
    from trainpace.comparison import compare_runs
    from trainpace.job.ledger import read_job
    from trainpace.report.compare import print_comparison
    from trainpace.runlog import read_run

    run_a, run_b = read_run(args.run_a), read_run(args.run_b)
    comparison = compare_runs(run_a, run_b, target_loss=args.target_loss,
                              price_per_hour=args.price_per_hour,
                              jobs=(read_job(args.run_a, top=run_a),
                                    read_job(args.run_b, top=run_b)))
    if args.json:
        print_json(comparison.to_dict())
    else:
        print_comparison(comparison)
    return 0
