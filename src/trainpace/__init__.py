"""trainpace: measure and explain the speed of PyTorch training.

The public API is what ``__all__`` lists; every other module is private and may change.
``Meter`` is imported on first use, so the parts that need no PyTorch (``trainpace analyze``,
``trainpace report``) start without loading it.
"""

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
from trainpace.summary import Summary

if _typing.TYPE_CHECKING:
    from trainpace.meter import Meter

__all__ = [
    "ConfigError",
    "DeviceError",
    "Meter",
    "MissingDependencyError",
    "OutputError",
    "RunFolderError",
    "Summary",
    "TraceFormatError",
    "TrainpaceError",
    "__version__",
]


def __getattr__(name: str) -> _typing.Any:
    if name == "Meter":
        from trainpace.meter import Meter

        return Meter
    raise AttributeError(f"module 'trainpace' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted(set(globals()) | {"Meter"})
