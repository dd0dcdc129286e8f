"""trainpace: measure and explain the speed of PyTorch training.

The public API is what ``__all__`` lists; every other module is private and may change.
"""

from trainpace._version import __version__
from trainpace.errors import (
    ConfigError,
    MissingDependencyError,
    RunFolderError,
    TraceFormatError,
    TrainpaceError,
)
from trainpace.meter import Meter
from trainpace.summary import Summary

__all__ = [
    "ConfigError",
    "Meter",
    "MissingDependencyError",
    "RunFolderError",
    "Summary",
    "TraceFormatError",
    "TrainpaceError",
    "__version__",
]
