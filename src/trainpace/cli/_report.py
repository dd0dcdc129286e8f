"""``trainpace report RUN``: the five signs and the diagnosis of a run folder, or its JSON."""

from __future__ import annotations

import argparse
import dataclasses
import sys

HELP = "show a run's five vital signs and diagnosis (--json: the summary; --html: a page)"


def _threshold(text: str) -> tuple[str, str]:
    key, sep, value = text.partition("=")
    if not sep or not key or not value:
        raise argparse.ArgumentTypeError(f"expected KEY=VALUE, got {text!r}")
    return key.strip(), value.strip()


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The verb's arguments."""
    parser.add_argument("run", metavar="RUN", help="the run folder (Meter(out=...))")
    parser.add_argument("--json", action="store_true",
                        help="print the trainpace.summary/1 JSON (diagnosis included)")
    parser.add_argument("--html", metavar="FILE",
                        help="also write a self-contained HTML report with plots to FILE")
    parser.add_argument("--threshold", metavar="KEY=VALUE", action="append", type=_threshold,
                        default=[], help="override a diagnosis threshold "
                        "(e.g. data_wait_warning_pct=5); repeatable")


def run(args: argparse.Namespace) -> int:
    """Read the run, recompute what is missing, diagnose, render."""
    from trainpace.cli._output import print_json
    from trainpace.diagnose import Thresholds, diagnose
    from trainpace.dist.folders import read_distributed
    from trainpace.measure.summarize import summary_for_run
    from trainpace.report.console import print_report
    from trainpace.report.html import write_page
    from trainpace.report.run_html import run_page
    from trainpace.runlog import read_run

    thresholds = Thresholds.from_mapping(dict(args.threshold))
    ranks = read_distributed(args.run)  # a folder of rank{r}/ folders: merged
    if ranks is not None:
        for note in ranks.notes:
            print(f"trainpace report: {note}", file=sys.stderr)
        summary, steps, system, meta = ranks.summary, ranks.steps, ranks.system, ranks.meta
    else:
        folder = read_run(args.run)
        for name in folder.truncated:
            print(f"trainpace report: {name}: the last line was cut off (a run killed "
                  "mid-write); it is left out", file=sys.stderr)
        summary = summary_for_run(folder)
        if folder.summary is None or folder.summary.steps.total < summary.steps.total:
            print(f"trainpace report: {args.run}: summary.json is missing or behind; the "
                  f"figures are recomputed from {len(folder.steps)} steps in steps.jsonl "
                  "(measured so far)", file=sys.stderr)
        steps, system, meta = folder.steps, folder.system, folder.meta
    diagnosis = diagnose(summary, steps=steps, system=system, meta=meta, thresholds=thresholds)
    summary = dataclasses.replace(summary, diagnosis=diagnosis)
    if args.html:
        page = run_page(summary, steps=steps, system=system, meta=meta, source=str(args.run))
        path = write_page(args.html, page)
        print(f"trainpace report: wrote {path}", file=sys.stderr)
    if args.json:
        print_json(summary.to_dict())
    else:
        print_report(summary, file=sys.stdout)
    return 0
