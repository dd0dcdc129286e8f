"""trainpace: measure and explain the speed of PyTorch training.

The public API is what ``__all__`` lists; every other module is private and may change.
"""

from __future__ import annotations

from trainpace.errors import (
    ConfigError,
    MissingDependencyError,
    RunFolderError,
    TraceFormatError,
    TrainpaceError,
)
from trainpace.summary import Summary

__version__ = "0.1.0"

__all__ = [
    "ConfigError",
    "MissingDependencyError",
    "RunFolderError",
    "Summary",
    "TraceFormatError",
    "TrainpaceError",
    "__version__",
]
