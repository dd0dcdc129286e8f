"""``trainpace report RUN``: the five signs and the diagnosis of a run folder, or its JSON."""

from __future__ import annotations

import argparse
import dataclasses
import sys
from typing import Any

from trainpace.cli._args import number

HELP = ("show a run's five vital signs and diagnosis, and a job's goodput (--json: the "
        "summary; --html: a page)")


def _threshold(text: str) -> tuple[str, str]:
    key, sep, value = text.partition("=")
    if not sep or not key.strip() or not value.strip():
        raise argparse.ArgumentTypeError(f"expected KEY=VALUE, got {text!r}")
    number(float)(value.strip())  # NaN or infinity: refused here (the thresholds say which
    return key.strip(), value.strip()  # keys take integers)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The verb's arguments."""
    parser.add_argument("run", metavar="RUN", help="the run or job folder (Meter(out=...)); "
                        "JOB/runs/RUN for one earlier run of a job")
    parser.add_argument("--json", action="store_true",
                        help="print the trainpace.summary/1 JSON (diagnosis included)")
    parser.add_argument("--html", metavar="FILE",
                        help="write a self-contained HTML report with plots to FILE "
                        "(and print only its path)")
    for flag, what in (("--price-per-hour", "price of one device-hour: the run's cost, per "
                        "million samples and tokens, and to the target"),
                       ("--grid-g-per-kwh", "grid carbon intensity, gCO2/kWh: the CO2 figure"),
                       ("--rated-power-w", "a device's rated power, for an energy estimate "
                        "where nothing measured it (labelled an estimate)")):
        parser.add_argument(flag, type=number(float), metavar="X", help=what)
    parser.add_argument("--mtbf-hours", type=number(float, above=0.0), metavar="H",
                        help="mean time between failures of the job's machines, in hours: the "
                        "checkpoint interval advice uses it where the job has seen too few "
                        "failures to measure it")
    parser.add_argument("--threshold", metavar="KEY=VALUE", action="append", type=_threshold,
                        default=[], help="override a diagnosis threshold "
                        "(e.g. data_wait_warning_pct=5); repeatable")


def run(args: argparse.Namespace) -> int:
    """Read the run (and the job it is the latest run of), recompute what is missing,
    diagnose, render.

    With ``--html`` the page is the report: only its path is printed (stdout; stderr when
    ``--json`` holds stdout).
    """
    from trainpace.cli._output import print_json
    from trainpace.diagnosis import Thresholds, diagnose
    from trainpace.dist.folders import read_distributed
    from trainpace.errors import RunFolderError
    from trainpace.job.goodput import goodput
    from trainpace.job.ledger import Job, read_job
    from trainpace.measure.cost import cost_of, cost_of_run
    from trainpace.measure.summarize import summary_for_run
    from trainpace.report._text import safe_text
    from trainpace.report.console import print_report
    from trainpace.report.html import write_page
    from trainpace.report.run_html import run_page
    from trainpace.runlog import read_run

    thresholds = Thresholds.from_mapping(dict(args.threshold))
    ranks = read_distributed(args.run)  # a folder of rank{r}/ folders: merged
    job: Job | None = None
    if ranks is not None:
        notes = list(ranks.notes)
        summary, system, meta = ranks.summary, ranks.system, ranks.meta
        series = ranks.series
        source = str(args.run)
        try:
            job = read_job(args.run)
        except RunFolderError as exc:  # no top-level run: the ranks are reported, no goodput
            notes.append(f"no goodput: {exc}")
    else:
        folder = read_run(args.run)
        notes = [f"{name}: the last line was cut off (a run killed mid-write); it is left out"
                 for name in folder.truncated] + folder.notes
        summary = summary_for_run(folder)
        if len(folder.series) and (folder.summary is None or folder.summary_behind):
            notes.append(f"{args.run}: summary.json is missing or behind; the figures are "
                         f"recomputed from {len(folder.series)} steps in steps.jsonl "
                         "(measured so far)")
        series, system, meta, source = folder.series, folder.system, folder.meta, str(folder.path)
        job = read_job(args.run, top=folder)
    if job is not None:
        summary = dataclasses.replace(summary, goodput=goodput(job))
        notes += summary.goodput.notes
    for note in notes:
        print(f"trainpace report: {safe_text(note)}", file=sys.stderr)
    # The steps as columns: the diagnosis reads them as such, never a list of the whole run.
    steps: Any = series
    prices = {"price_per_hour": args.price_per_hour, "grid_g_per_kwh": args.grid_g_per_kwh,
              "rated_power_w": args.rated_power_w}
    if any(value is not None for value in prices.values()):
        # a job: every rank's measured power, not that of the rank whose steps are shown
        summary = dataclasses.replace(summary, cost=(
            cost_of(summary, energy=ranks.energy, **prices) if ranks is not None
            else cost_of_run(summary, series.column("t_s"), system, **prices)))
    mtbf_s = args.mtbf_hours * 3600.0 if args.mtbf_hours is not None else None
    diagnosis = diagnose(summary, steps=steps, system=system, meta=meta, thresholds=thresholds,
                         mtbf_s=mtbf_s)
    summary = dataclasses.replace(summary, diagnosis=diagnosis)
    if args.html:
        page = run_page(summary, series=series, system=system, meta=meta, source=source,
                        notes=notes)
        path = write_page(args.html, page)
        print(path, file=sys.stderr if args.json else sys.stdout)
    if args.json:
        print_json(summary.to_dict())
    elif not args.html:
        print_report(summary, file=sys.stdout)
    return 0
