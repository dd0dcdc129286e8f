"""``trainpace analyze TRACE...``: breakdowns and findings from PyTorch profiler traces.

Several large ranks are read in a pool of processes the command starts (it owns its process,
so the pool forks) and hands to the library call (:func:`trainpace.trace.analyze_traces`),
which starts none of its own. Measured with 4 ranks of 90 MB of JSON each: most of the
command's CPU time is the reading of the ranks, which the pool spreads over the cores (see
docs/guides/traces.md).
"""

from __future__ import annotations

import argparse
import os
import sys
import warnings
from typing import TYPE_CHECKING, Any

from trainpace.cli._args import number

if TYPE_CHECKING:
    from concurrent.futures import ProcessPoolExecutor

PARALLEL_MIN_BYTES = 32 << 20  # of JSON in all: below it, ranks are read one after the other

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
    analysis = _analyze(args.traces, gap_threshold_us=args.gap_us, top=args.top,
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


def _analyze(paths: list[str], *, gap_threshold_us: float, top: int,
             workers: int | None) -> Any:
    """The library's analysis; its ranks read in parallel processes when there are several
    and enough data to pay for the processes' start."""
    from trainpace.trace import analyze_traces
    from trainpace.trace.analyze import check_options
    from trainpace.trace.load import trace_files

    check_options(gap_threshold_us, top)
    files = trace_files(list(paths))
    processes = _processes(files, workers)
    if processes <= 1:
        return analyze_traces(files, gap_threshold_us=gap_threshold_us, top=top)
    with warnings.catch_warnings(), _pool(processes) as pool:  # forks as the ranks go in
        warnings.filterwarnings("ignore", message=".*fork.*", category=DeprecationWarning)
        return analyze_traces(files, gap_threshold_us=gap_threshold_us, top=top,
                              executor=pool)


def _processes(files: list[str], workers: int | None) -> int:
    """Processes to use: one per file, within the CPUs and the memory available; by default
    one in all when the traces are small (starting processes would cost more than it saves).
    Each file's size is read from its metadata (a FIFO's is unknown: it is not opened here);
    the library refuses a file too large for the memory before reading any."""
    from trainpace.trace.memory import available_memory, json_bytes, memory_needed

    sizes = {f: json_bytes(f) for f in files}
    if len(files) < 2 or (workers is None
                          and sum(size or 0 for size in sizes.values()) < PARALLEL_MIN_BYTES):
        return 1
    limit = workers if workers is not None else (os.cpu_count() or 1)
    free = available_memory()
    if free is not None:
        need = max(memory_needed(f, size=size) for f, size in sizes.items())
        limit = min(limit, max(1, int(free // need)))
    return max(1, min(limit, len(files)))


def _pool(processes: int) -> ProcessPoolExecutor:
    # imported here: a process pool's modules cost as much as analyzing a small trace
    import multiprocessing
    from concurrent.futures import ProcessPoolExecutor

    # fork: the worker only reads files and numpy arrays, and needs no re-import of __main__;
    # spawn only where fork does not exist.
    method = "fork" if "fork" in multiprocessing.get_all_start_methods() else "spawn"
    return ProcessPoolExecutor(processes, mp_context=multiprocessing.get_context(method))
