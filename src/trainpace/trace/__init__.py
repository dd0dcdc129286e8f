"""Analysis of PyTorch profiler (Kineto) traces: the evidence behind ``trainpace analyze``.

::

    analysis = analyze_traces(["rank0.json.gz", "rank1.json.gz"])
    analysis.ranks[0].idle_pct, analysis.findings, analysis.to_dict()

Loading streams the file into numpy columns (:mod:`.load`); the temporal breakdown and the
comm/compute overlap follow Holistic Trace Analysis 0.5, the step breakdown follows
torch-tb-profiler (:mod:`.breakdown`); idle causes (:mod:`.idle`), kernel categories and
launch-bound signs (:mod:`.kernels`); the findings come from ``trainpace.diagnosis`` over a
Summary built from the trace (:mod:`.evidence`). :mod:`.capture` records a trace for the Meter.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from trainpace.trace.analyze import analyze_columns, analyze_traces
    from trainpace.trace.findings import RankAnalysis, TraceAnalysis
    from trainpace.trace.load import TraceColumns, load_trace

# The package's names are loaded on first use (PEP 562): the Meter's trace capture
# (.capture) loads none of the analysis.
_HOMES = {
    "RankAnalysis": "trainpace.trace.findings",
    "TraceAnalysis": "trainpace.trace.findings",
    "TraceColumns": "trainpace.trace.load",
    "analyze_columns": "trainpace.trace.analyze",
    "analyze_traces": "trainpace.trace.analyze",
    "load_trace": "trainpace.trace.load",
}


def __getattr__(name: str) -> Any:
    home = _HOMES.get(name)
    if home is None:
        raise AttributeError(f"module 'trainpace.trace' has no attribute {name!r}")
    value = getattr(importlib.import_module(home), name)
    globals()[name] = value
    return value


__all__ = [
    "RankAnalysis",
    "TraceAnalysis",
    "TraceColumns",
    "analyze_columns",
    "analyze_traces",
    "load_trace",
]
