"""Checkpoint saves and loads timed into the job's ledger: ``torch.save``, ``torch.load`` and
``torch.distributed.checkpoint``'s ``save`` / ``load``, wrapped while installed.

Installed by ``trainpace run`` (which owns its process) and by ``Meter(checkpoints=True)``
(asked for: a library does not replace what the user did not ask it to); undone by
:meth:`CheckpointPatches.remove`, which restores each function it replaced unless someone
replaced it again since.

A save or load inside another one (``torch.distributed.checkpoint`` writes through
``torch.save``) is part of the outer one, not an event of its own. Saves to and loads from a
buffer without a name (``io.BytesIO``: a state sent elsewhere) are not checkpoints and are not
timed. The wrapper costs a thread-local check and two clock reads per call: nothing on the
step path, which never calls them.
"""

from __future__ import annotations

import functools
import importlib
import logging
import threading
from collections.abc import Callable
from contextlib import AbstractContextManager
from typing import Any

from trainpace.meter.ledger import JobLedger, checkpoint_path

logger = logging.getLogger(__name__)

# (module, attribute, kind, source, where the target is: the argument's position and name)
TARGETS: tuple[tuple[str, str, str, str, int | None, str], ...] = (
    ("torch", "save", "save", "torch.save", 1, "f"),
    ("torch.serialization", "save", "save", "torch.save", 1, "f"),
    ("torch", "load", "load", "torch.load", 0, "f"),
    ("torch.serialization", "load", "load", "torch.load", 0, "f"),
    ("torch.distributed.checkpoint", "save", "save", "dcp", None, "checkpoint_id"),
    ("torch.distributed.checkpoint", "load", "load", "dcp", None, "checkpoint_id"),
)


def _target(args: tuple[Any, ...], kwargs: dict[str, Any], position: int | None,
            name: str) -> Any:
    if name in kwargs:
        return kwargs[name]
    if position is not None and len(args) > position:
        return args[position]
    storage = kwargs.get("storage_writer") or kwargs.get("storage_reader")
    return getattr(storage, "path", None)


class CheckpointPatches:
    """The wrappers of one Meter's ledger, installed over the library functions."""

    def __init__(self, ledger: JobLedger, *,
                 before_save: Callable[[], None] | None = None) -> None:
        self._ledger = ledger
        self._before_save = before_save  # (trainpace run: the step the save follows ends)
        self._inside = threading.local()
        self._replaced: list[tuple[Any, str, Any, Any]] = []  # (module, name, original, ours)

    def install(self) -> None:
        for module_name, attribute, kind, source, position, name in TARGETS:
            try:
                module = importlib.import_module(module_name)
                original = getattr(module, attribute)
            except (ImportError, AttributeError):
                continue  # torch.distributed not built in: nothing of it to time
            wrapper = self._wrap(original, kind, source, position, name)
            setattr(module, attribute, wrapper)
            self._replaced.append((module, attribute, original, wrapper))

    def remove(self) -> None:
        for module, attribute, original, wrapper in reversed(self._replaced):
            if getattr(module, attribute, None) is wrapper:
                setattr(module, attribute, original)
        self._replaced.clear()

    def _wrap(self, original: Callable[..., Any], kind: str, source: str, position: int | None,
              name: str) -> Callable[..., Any]:
        ledger, inside = self._ledger, self._inside

        @functools.wraps(original)
        def timed(*args: Any, **kwargs: Any) -> Any:
            if getattr(inside, "depth", 0):
                return original(*args, **kwargs)
            where = _target(args, kwargs, position, name)
            if checkpoint_path(where) is None:
                return original(*args, **kwargs)  # a buffer: not a checkpoint
            if kind == "save" and self._before_save is not None:
                try:
                    self._before_save()
                except Exception as exc:  # noqa: BLE001 - monitoring never breaks training
                    logger.debug("trainpace: before a checkpoint save: %s", exc)
            timing: AbstractContextManager[None] = (
                ledger.saving(where, source) if kind == "save" else ledger.loading(where, source))
            inside.depth = 1
            try:
                with timing:
                    return original(*args, **kwargs)
            finally:
                inside.depth = 0

        return timed
