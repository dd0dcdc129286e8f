"""The one exception hierarchy of trainpace.

::

    TrainpaceError                 anything trainpace raises on purpose
     ├── ConfigError               a bad setting: names the key, the value and the constraint
     ├── RunFolderError            a run folder that is missing, unreadable or of another schema
     ├── TraceFormatError          a profiler trace that cannot be read (names the file)
     ├── MissingDependencyError    an optional extra is not installed (names the pip command)
     ├── DeviceError               a device that cannot be used for the asked measurement
     ├── OutputError               a file trainpace was asked to write cannot be written
     ├── DatasetError              the user's dataset or loader failed while the tuner ran it
     └── TargetError               a script or module ``trainpace run`` cannot run

Messages name the input, what is wrong with it, and the fix. The CLI prints them on one line
and exits 1; it prints a traceback only for errors that are not a ``TrainpaceError`` (our bugs).

An *unavailable metric* is never an exception: it is ``None`` in the figures, logged once.
Every error class of the package lives here (a test walks the package to check it), except
private ones that carry control flow inside one module and never reach a caller.
"""

from __future__ import annotations

__all__ = [
    "ConfigError",
    "DatasetError",
    "DeviceError",
    "MissingDependencyError",
    "OutputError",
    "RunFolderError",
    "TargetError",
    "TraceFormatError",
    "TrainpaceError",
]


class TrainpaceError(Exception):
    """Base of every error trainpace raises on purpose."""


class ConfigError(TrainpaceError, ValueError):
    """A setting has a bad value. The message names the key, the value and the constraint."""

    def __init__(self, key: str, value: object, constraint: str) -> None:
        self.key = key
        self.value = value
        self.constraint = constraint
        super().__init__(f"{key} {constraint}, got {value!r}")


class RunFolderError(TrainpaceError):
    """A run folder (or a file in it) is missing, unreadable, or written in another schema."""


class TraceFormatError(TrainpaceError):
    """A profiler trace cannot be read. The message names the file and what is wrong."""


class MissingDependencyError(TrainpaceError, ImportError):
    """An optional integration was asked for but its extra is not installed."""

    def __init__(self, what: str, extra: str) -> None:
        self.extra = extra
        super().__init__(f"{what} needs the '{extra}' extra: pip install 'trainpace[{extra}]'")


class DeviceError(TrainpaceError):
    """A device cannot be used for the asked measurement (absent, or not supported)."""


class OutputError(TrainpaceError):
    """A file trainpace was asked to write (a report, a page) cannot be written."""


class DatasetError(TrainpaceError):
    """The dataset (or the loader around it) failed while the tuner ran it: names the item."""


class TargetError(TrainpaceError):
    """A script or module that cannot be run. ``usage``: the command line named something that
    does not exist (exit 2); else its content is at fault (a syntax error; exit 1)."""

    def __init__(self, message: str, *, usage: bool) -> None:
        super().__init__(message)
        self.usage = usage
