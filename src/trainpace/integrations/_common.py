"""Timing a framework's own train DataLoader with ``Meter.loader``, without replacing it.

Lightning and the Hugging Face Trainer keep their loader in objects of their own (a combined
loader, a local variable of the training loop) and check its type and attributes (samplers
for DDP, ``set_epoch``, lengths). So the loader object stays the same object: only its class
is swapped for a subclass whose ``__iter__`` goes through the meter, and swapped back at the
end. Every attribute, ``isinstance`` check and ``len()`` is untouched.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from trainpace.meter import Meter

_METERED = "_trainpace_metered"  # the instance's MeteredLoader
_BASE = "_trainpace_base"  # on the swapped class: the class it stands in for


class _OwnIteration:
    """``iter()`` of a loader as its own class defines it (what the meter times).

    It names the loader under no attribute the meter looks into for DataLoader settings:
    those were read from the loader itself, with its real class name.
    """

    __slots__ = ("_base", "_target")

    def __init__(self, target: Any, base: type) -> None:
        self._target = target
        self._base = base

    def __iter__(self) -> Iterator[Any]:
        base: Any = self._base  # the loader's own class: its __iter__, not the swapped one
        it: Iterator[Any] = base.__iter__(self._target)
        return it

    def __len__(self) -> int:
        return len(self._target)


def _metered_iter(self: Any) -> Iterator[Any]:
    return iter(self.__dict__[_METERED])


def _set_class(obj: Any, cls: type) -> None:
    """``obj.__class__ = cls``, beneath a ``__class__`` property if the class has one
    (Accelerate's DataLoaderShard reports its inner DataLoader's class through one)."""
    object.__dict__["__class__"].__set__(obj, cls)


def meter_loader(loader: Any, meter: Meter) -> bool:
    """Make every later ``iter(loader)`` a metered iteration. False when the object's class
    cannot be swapped (a builtin or slotted iterable): the caller says so once."""
    if is_metered(loader):
        return True
    base = type(loader)
    if not hasattr(loader, "__dict__"):
        return False
    meter.loader(loader)  # reads the DataLoader settings (num_workers, ...) into meta.json
    swapped = type(base.__name__, (base,), {
        "__iter__": _metered_iter, _BASE: base,
        "__module__": base.__module__, "__qualname__": base.__qualname__,
    })
    try:
        loader.__dict__[_METERED] = meter.loader(_OwnIteration(loader, base))
        _set_class(loader, swapped)
    except TypeError:
        loader.__dict__.pop(_METERED, None)
        return False
    return True


def is_metered(loader: Any) -> bool:
    """True when ``loader``'s iterations go through a meter."""
    return _BASE in type(loader).__dict__


def unmeter_loader(loader: Any) -> None:
    """Give ``loader`` its own class back (idempotent)."""
    if not is_metered(loader):
        return
    _set_class(loader, type(loader).__dict__[_BASE])
    loader.__dict__.pop(_METERED, None)


def leaves(structure: Any) -> list[Any]:
    """The loaders in a loader, or a list, tuple or dict of them (Lightning's train loaders)."""
    if isinstance(structure, dict):
        return [leaf for value in structure.values() for leaf in leaves(value)]
    if isinstance(structure, (list, tuple)):
        return [leaf for value in structure for leaf in leaves(value)]
    return [] if structure is None else [structure]


def check_meter_options(options: dict[str, Any]) -> None:
    """Raise ConfigError for a keyword the Meter does not take (at the callback's creation,
    not at the start of training)."""
    import inspect

    from trainpace.errors import ConfigError
    from trainpace.meter import Meter

    accepted = inspect.signature(Meter.__init__).parameters
    for key, value in options.items():
        if key not in accepted or key == "self":
            raise ConfigError(key, value, "is not a trainpace.Meter keyword")


class WindowRelay:
    """A sink that hands each window's tags to the training thread, which logs them into the
    framework's own loggers between two steps (loggers are not all thread-safe, and the
    Meter's sinks run on its writer thread)."""

    reads_steps = False  # the window figures only (see trainpace.sinks.base.Sink)

    def __init__(self) -> None:
        import queue

        self._windows: queue.SimpleQueue[tuple[int, dict[str, float]]] = queue.SimpleQueue()

    def log(self, record: Any) -> None:
        """Keep a window's tags (other records are not for the framework's loggers)."""
        if record.kind != "window":
            return
        from trainpace.sinks.names import (  # noqa: TID251 - integrations are front-ends
            window_scalars,
            window_step,
        )

        figures = record.data["window"]
        scalars = window_scalars(figures)
        if scalars:
            self._windows.put((window_step(figures, record.step), scalars))

    def close(self) -> None:
        """Nothing to release: what is still queued is taken by :meth:`take`."""

    def take(self) -> list[tuple[int, dict[str, float]]]:
        """The windows published since the last call, oldest first: ``(last step, tags)``."""
        taken = []
        while not self._windows.empty():
            taken.append(self._windows.get_nowait())
        return taken
