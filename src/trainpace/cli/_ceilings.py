"""``trainpace ceilings``: measure this machine's memory bandwidth and matmul rates; cache them."""

from __future__ import annotations

import argparse
import contextlib
import sys
from collections.abc import Iterator

from trainpace.cli._args import cpu_cores, number

HELP = "measure this machine's real memory bandwidth and matmul TFLOP/s per dtype, and cache them"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The verb's arguments."""
    parser.add_argument("--device", default=None,
                        help="cpu, cuda or cuda:N (default: cuda when PyTorch sees one, else cpu)")
    parser.add_argument("--dtype", action="append", default=None, metavar="DTYPE",
                        help="measure only this dtype (float32, tf32, bfloat16, float16, float8); "
                        "repeatable")
    parser.add_argument("--threads", type=number(int, at_least=1, at_most=cpu_cores),
                        default=None, metavar="N",
                        help="CPU: measure with N torch threads (the run's "
                        "torch.set_num_threads); the cache keeps one entry per thread count")
    parser.add_argument("--quick", action="store_true",
                        help="small sizes and short budgets: seconds, less exact")
    parser.add_argument("--cached", action="store_true",
                        help="show the cached ceilings of the device instead of measuring")
    parser.add_argument("--no-save", action="store_true", help="do not write the cache")
    parser.add_argument("--json", action="store_true", help="print one JSON object")


@contextlib.contextmanager
def _torch_threads(threads: int) -> Iterator[None]:
    """torch's intra-op threads set to ``threads`` inside, restored after: the user asked for
    this count (``--threads``), so the verb sets it; the library measures with what it finds."""
    import torch

    previous = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        yield
    finally:
        torch.set_num_threads(previous)


def run(args: argparse.Namespace) -> int:
    """Measure (or read the cache), save, render."""
    import torch

    from trainpace.cli._output import print_json
    from trainpace.devices.ceilings import (
        cache_path,
        device_identity,
        load_ceilings,
        measure_ceilings,
        store_ceilings,
    )
    from trainpace.errors import DeviceError

    device = args.device or ("cuda" if torch.cuda.is_available() else "cpu")
    threads = args.threads if device_identity(device)[0] == "cpu" else None
    with contextlib.ExitStack() as stack:
        if threads is not None:
            stack.enter_context(_torch_threads(threads))
        kind, name, threads = device_identity(device)
        path = cache_path(kind, name, threads)
        warnings: tuple[str, ...] = ()
        kept = None
        if args.cached:
            ceilings = load_ceilings(device)
            if ceilings is None:
                again = f" --threads {threads}" if args.threads else ""
                raise DeviceError(f"{name}: no ceilings cached at {path}; run "
                                  f"`trainpace ceilings{again}`")
        else:
            where = f"{name} ({kind}" + (f", {threads} threads)" if threads else ")")
            print(f"trainpace ceilings: measuring {where}; "
                  f"{'a few seconds' if args.quick else 'about half a minute'}", file=sys.stderr)
            ceilings = measure_ceilings(device, dtypes=args.dtype, quick=args.quick)
            if not args.no_save:
                stored = store_ceilings(ceilings)
                warnings, path, kept = stored.warnings, stored.path, stored.ceilings
                for warning in warnings:
                    print(f"trainpace ceilings: warning: {warning}", file=sys.stderr)
    saved = args.cached or not args.no_save
    if args.json:
        print_json({**ceilings.to_dict(), "cache": str(path) if saved else None,
                    "provisional": ceilings.why_provisional,
                    "warnings": list(warnings),
                    "cached": kept.to_dict() if kept is not None and warnings else None})
        return 0
    threads_text = f", {ceilings.threads} threads" if ceilings.threads else ""
    quick = " (quick)" if ceilings.quick else ""
    print(f"ceilings of {ceilings.name} ({ceilings.kind}{threads_text}), "
          f"measured {ceilings.measured_at}{quick}")
    if ceilings.bandwidth_gb_s is not None:
        print(f"  memory bandwidth  {ceilings.bandwidth_gb_s:10.1f} GB/s      "
              f"({ceilings.method.get('bandwidth')})")
    from trainpace.units import UNKNOWN

    sizes = ceilings.method.get("matmul_n") or {}
    for dtype, tflops in ceilings.matmul_tflops.items():
        print(f"  matmul {dtype:<10} {tflops:10.4g} TFLOP/s   (n={sizes.get(dtype, UNKNOWN)})")
    for dtype, why in ceilings.skipped.items():
        print(f"  matmul {dtype:<10} not measured: {why}")
    provisional = ceilings.why_provisional
    if provisional is not None:
        print(f"provisional: {provisional}; cached as provisional, never used as this "
              "machine's peak: measure again when the machine is quiet")
    if saved and not warnings and provisional is not None:
        print(f"cached in {path} as provisional")
    elif saved and not warnings:
        print(f"cached in {path}; the meter uses these where the spec table has no entry")
    elif saved:
        print(f"the cache at {path} keeps its earlier figures where the warnings above say so")
    return 0
