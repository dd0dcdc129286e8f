"""``trainpace tune-loader MODULE:FACTORY``: find the DataLoader settings that hide the wait."""

from __future__ import annotations

import argparse
import sys

# no percent sign: argparse %-formats a verb's help but not its description
HELP = ("find the cheapest DataLoader settings (workers, prefetch, pinning) that keep the data "
        "wait under a tenth of the step, or show that none can")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The verb's arguments."""
    parser.add_argument("factory", metavar="MODULE:FACTORY",
                        help="a function (in an importable module, or path/to/file.py) that "
                        "returns your Dataset or DataLoader; a DataLoader keeps its sampler, "
                        "collate_fn, drop_last and batch size")
    step = parser.add_mutually_exclusive_group()
    step.add_argument("--step-ms", type=float, metavar="X",
                      help="the training step without its data wait, in ms")
    step.add_argument("--run", metavar="RUN",
                      help="take the step from a run folder (median step, data wait excluded)")
    parser.add_argument("--step-device", metavar="KIND", choices=("cpu", "cuda", "mps", "xpu"),
                        help="where the step computes: cpu (simulated as CPU work, which keeps "
                        "the cores from the workers) or an accelerator (simulated as a sleep); "
                        "default: the --run's device, else this machine's")
    parser.add_argument("--budget-s", type=float, default=60.0, metavar="S",
                        help="time to spend searching (default 60)")
    parser.add_argument("--batch-size", type=int, default=None, metavar="B",
                        help="batch size for a Dataset (default 1), or to override a DataLoader's")
    parser.add_argument("--memory-gb", type=float, default=None, metavar="GB",
                        help="memory the workers and queued batches may use (default: half of "
                        "what is available)")
    parser.add_argument("--json", action="store_true",
                        help='print one JSON object {"recommended", "wait_pct", "reachable", ...}')


def run(args: argparse.Namespace) -> int:
    """Load the factory, tune, render."""
    from trainpace.cli._output import print_json
    from trainpace.errors import ConfigError
    from trainpace.report.tune_console import print_tune, tune_progress
    from trainpace.tune import load_factory, tune_loader
    from trainpace.tune.steptime import step_device_of_run, step_from_run

    step_s: float | None = None
    source: str | None = None
    device: str | None = args.step_device
    if args.step_ms is not None:
        if not args.step_ms > 0:
            raise ConfigError("--step-ms", args.step_ms, "must be > 0")
        step_s, source = args.step_ms / 1000.0, "--step-ms"
    elif args.run is not None:
        step_s, source = step_from_run(args.run)
        device = device or step_device_of_run(args.run)
    made, spec = load_factory(args.factory)
    with tune_progress(sys.stderr) as progress:
        result = tune_loader(made, batch_size=args.batch_size, step_s=step_s,
                             budget_s=args.budget_s, memory_budget_gb=args.memory_gb,
                             progress=progress, name=spec, step_source=source,
                             step_device=device)
    if args.json:
        print_json(result.to_dict())
    else:
        print_tune(result)
    return 0
