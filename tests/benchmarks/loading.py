"""Importing a module of ``benchmarks/`` (not a package) for its tests."""

from __future__ import annotations

import importlib
import sys
from pathlib import Path
from typing import Any

BENCHMARKS = str(Path(__file__).resolve().parents[2] / "benchmarks")


def benchmark_module(name: str) -> Any:
    """The module ``benchmarks/<name>.py``, imported with that folder on the path for the
    import only: its sibling modules' names (``report``, ``results``) must not shadow the
    tests' packages."""
    sys.path.insert(0, BENCHMARKS)
    try:
        return importlib.import_module(name)
    finally:
        sys.path.remove(BENCHMARKS)
