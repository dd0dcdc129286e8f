"""Where a benchmark leaves its figures for the documentation: ``docs/benchmarks/NAME.json``.

Each benchmark calls :func:`write_result` at the end of its ``main``; the site's performance
page renders the file (``docs/hooks/generate.py``), so the tables there are the last run's,
with the machine and the date they were measured on.
"""

from __future__ import annotations

import datetime
import json
import os
import platform
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

RESULTS = Path(__file__).resolve().parents[1] / "docs" / "benchmarks"


def _cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def machine(load_before: Sequence[float] | None = None) -> dict[str, Any]:
    """The machine a figure was measured on: cores, CPU model, load average, versions."""
    try:
        import torch

        torch_version: str | None = torch.__version__
    except ImportError:
        torch_version = None
    load_after = [round(x, 2) for x in os.getloadavg()] if hasattr(os, "getloadavg") else None
    return {
        "cores": os.cpu_count(),
        "cpu": _cpu_model(),
        "load_before": list(load_before) if load_before is not None else None,
        "load_after": load_after,
        "python": platform.python_version(),
        "torch": torch_version,
    }


def write_result(
    name: str,
    *,
    quick: bool,
    rows: Sequence[Mapping[str, Any]] = (),
    figures: Mapping[str, Any] | None = None,
    load_before: Sequence[float] | None = None,
) -> Path:
    """Write ``docs/benchmarks/NAME.json``: ``rows`` (one table, a dict per row, the keys its
    columns) and ``figures`` (name -> value), with the machine, the date and the command."""
    RESULTS.mkdir(parents=True, exist_ok=True)
    path = RESULTS / f"{name}.json"
    document = {
        "benchmark": name,
        "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
        "command": " ".join(["python", f"benchmarks/{name}.py", *sys.argv[1:]]),
        "quick": quick,
        "machine": machine(load_before),
        "rows": [dict(row) for row in rows],
        "figures": dict(figures or {}),
    }
    path.write_text(json.dumps(document, indent=2, default=str) + "\n")
    print(f"results written to {path}", file=sys.stderr)
    return path
