"""``trainpace demo``: a small real training run on the CPU, measured and explained."""

from __future__ import annotations

import argparse
import sys

HELP = "train a tiny transformer on the CPU under the Meter, then show the report"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The demo's flags."""
    parser.add_argument("--steps", type=int, default=300, metavar="N",
                        help="optimizer steps to train (default: 300)")
    parser.add_argument("--workers", type=int, default=0, metavar="K",
                        help="DataLoader worker processes (default: 0)")
    parser.add_argument("--slow-data", type=float, default=0.0, metavar="MS",
                        help="extra milliseconds to load each sample (default: 0)")
    parser.add_argument("--batch-size", type=int, default=32, metavar="B",
                        help="samples per batch (default: 32)")
    parser.add_argument("--out", default="runs/demo", metavar="DIR",
                        help="run folder to write (default: runs/demo; never overwritten)")
    parser.add_argument("--json", action="store_true",
                        help="print the summary as one JSON object on stdout")


def run(args: argparse.Namespace) -> int:
    """Train, measure, report."""
    from trainpace.cli._output import print_json
    from trainpace.demo import DemoSettings, run_demo

    settings = DemoSettings(steps=args.steps, workers=args.workers, slow_data_ms=args.slow_data,
                            batch_size=args.batch_size)
    # With --json, stdout carries exactly the JSON; the progress lines and report go to stderr.
    stream = sys.stderr if args.json else sys.stdout
    print(f"trainpace demo: {settings.steps} steps of a tiny transformer on Macbeth, "
          f"batch {settings.batch_size}, {settings.workers} DataLoader workers, "
          f"+{settings.slow_data_ms:g} ms per sample", file=stream, flush=True)
    summary, folder = run_demo(settings, out=args.out, stream=stream)
    if args.json:
        print_json(summary.to_dict())
    else:
        print(f"run folder: {folder}  (see it again: trainpace report {folder})", file=stream)
    return 0
