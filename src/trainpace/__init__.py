"""trainpace: measure and explain the speed of PyTorch training.

The public API is what ``__all__`` lists; every other module is private and may change.
Everything but the errors is imported on first use (:data:`_LAZY`), so the parts that need no
PyTorch (``trainpace analyze``, ``trainpace report``) start without loading it, and ``import
trainpace`` stays cheap.
"""

import importlib as _importlib
import typing as _typing

from trainpace._version import __version__
from trainpace.errors import (
    ConfigError,
    DeviceError,
    MissingDependencyError,
    OutputError,
    RunFolderError,
    TraceFormatError,
    TrainpaceError,
)

if _typing.TYPE_CHECKING:
    from trainpace.comparison import Comparison, compare_runs
    from trainpace.diagnosis import Thresholds, diagnose, threshold_table
    from trainpace.meter import Meter
    from trainpace.runlog import RunData, read_run
    from trainpace.series import StepSeries
    from trainpace.summary import Summary
    from trainpace.trace import TraceAnalysis, analyze_traces
    from trainpace.tune import tune_loader

# public name -> the module that defines it (imported when the name is first used)
_LAZY: dict[str, str] = {
    "Meter": "trainpace.meter",
    "read_run": "trainpace.runlog",
    "RunData": "trainpace.runlog",
    "StepSeries": "trainpace.series",
    "Summary": "trainpace.summary",
    "compare_runs": "trainpace.comparison",
    "Comparison": "trainpace.comparison",
    "diagnose": "trainpace.diagnosis",
    "threshold_table": "trainpace.diagnosis",
    "Thresholds": "trainpace.diagnosis",
    "analyze_traces": "trainpace.trace",
    "TraceAnalysis": "trainpace.trace",
    "tune_loader": "trainpace.tune",
}

__all__ = [
    "Comparison",
    "ConfigError",
    "DeviceError",
    "Meter",
    "MissingDependencyError",
    "OutputError",
    "RunData",
    "RunFolderError",
    "StepSeries",
    "Summary",
    "Thresholds",
    "TraceAnalysis",
    "TraceFormatError",
    "TrainpaceError",
    "__version__",
    "analyze_traces",
    "compare_runs",
    "diagnose",
    "read_run",
    "threshold_table",
    "tune_loader",
]


def __getattr__(name: str) -> _typing.Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'trainpace' has no attribute {name!r}")
    value = getattr(_importlib.import_module(module), name)
    globals()[name] = value  # later uses skip this hook
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_LAZY))
