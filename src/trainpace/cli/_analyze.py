"""``trainpace analyze TRACE...``: breakdowns and findings from PyTorch profiler traces."""

from __future__ import annotations

import argparse
import sys

from trainpace.cli._args import number

HELP = ("analyze PyTorch profiler traces (Kineto JSON or .json.gz, one per rank): where the "
        "time went, why the device idled, which kernels, and the findings")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The verb's arguments."""
    parser.add_argument("traces", nargs="+", metavar="TRACE",
                        help="trace files (.json, .json.gz) or folders of them, one per rank")
    parser.add_argument("--json", action="store_true",
                        help="print one JSON object: traces, per-rank breakdowns, findings")
    parser.add_argument("--html", metavar="FILE",
                        help="also write a self-contained HTML page with plots to FILE")
    parser.add_argument("--gap-us", type=number(float, above=0), default=1000.0, metavar="US",
                        help="list device-idle gaps at least this long, in µs (default 1000)")
    parser.add_argument("--top", type=number(int, above=0), default=10, metavar="N",
                        help="kernels listed per rank (default 10)")
    parser.add_argument("--workers", type=number(int, above=0), default=None, metavar="N",
                        help="processes reading traces (default: one per trace, within the "
                        "CPUs and the memory available)")


def run(args: argparse.Namespace) -> int:
    """Analyze, then render the JSON, the console report and/or the HTML page."""
    from trainpace.trace import analyze_traces

    analysis = analyze_traces(args.traces, gap_threshold_us=args.gap_us, top=args.top,
                              workers=args.workers)
    if args.html:
        from trainpace.report.html import write_page
        from trainpace.report.trace_html import trace_page

        path = write_page(args.html, trace_page(analysis))
        print(f"trainpace analyze: wrote {path}", file=sys.stderr)
    if args.json:
        from trainpace.cli._output import print_json

        print_json(analysis.to_dict())
    else:
        from trainpace.report.trace_console import print_analysis

        print_analysis(analysis)
    return 0
