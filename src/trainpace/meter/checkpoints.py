"""Checkpoint saves and loads timed into the job's ledger: ``torch.save``, ``torch.load`` and
``torch.distributed.checkpoint``'s ``save`` / ``load``, wrapped while installed.

Installed by ``trainpace run`` (which owns its process) and by ``Meter(checkpoints=True)``
(asked for: a library does not replace what the user did not ask it to); undone by
:meth:`CheckpointPatches.remove`, which restores each function it replaced unless someone
replaced it again since.

``torch.distributed.checkpoint`` takes seconds to import: it is never imported for this. When
it is not imported yet, an import hook (on ``sys.meta_path`` while installed) wraps its
functions as soon as the script imports it.

A save or load inside another one (``torch.distributed.checkpoint`` writes through
``torch.save``) is part of the outer one, not an event of its own. Saves to and loads from a
buffer without a name (``io.BytesIO``: a state sent elsewhere) are not checkpoints and are not
timed. The wrapper costs a thread-local check and two clock reads per call: nothing on the
step path, which never calls them.
"""

from __future__ import annotations

import contextlib
import functools
import importlib.abc
import importlib.machinery
import logging
import sys
import threading
from collections.abc import Callable, Sequence
from contextlib import AbstractContextManager
from types import ModuleType
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
        self._hook: _AfterImport | None = None

    def install(self) -> None:
        for module_name in dict.fromkeys(target[0] for target in TARGETS):
            if module_name in sys.modules:
                self._patch(module_name)
            else:
                self._hook = _AfterImport(module_name, self._patch)
                sys.meta_path.insert(0, self._hook)

    def _patch(self, module_name: str) -> None:
        module = sys.modules[module_name]
        for name_of_module, attribute, kind, source, position, name in TARGETS:
            original = getattr(module, attribute, None) if name_of_module == module_name else None
            if original is None:
                continue
            wrapper = self._wrap(original, kind, source, position, name)
            setattr(module, attribute, wrapper)
            self._replaced.append((module, attribute, original, wrapper))

    def remove(self) -> None:
        if self._hook is not None:
            with contextlib.suppress(ValueError):
                sys.meta_path.remove(self._hook)
            self._hook = None
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


class _AfterImport(importlib.abc.MetaPathFinder):
    """Calls ``then(name)`` once the module ``name`` is imported (the import itself is left
    to the finders after this one)."""

    def __init__(self, name: str, then: Callable[[str], None]) -> None:
        self.name = name
        self.then = then

    def find_spec(self, fullname: str, path: Sequence[str] | None,
                  target: ModuleType | None = None) -> importlib.machinery.ModuleSpec | None:
        if fullname != self.name:
            return None
        for finder in [finder for finder in sys.meta_path if finder is not self]:
            find = getattr(finder, "find_spec", None)
            spec: importlib.machinery.ModuleSpec | None = (
                find(fullname, path, target) if find is not None else None)
            if spec is not None:
                if spec.loader is not None and hasattr(spec.loader, "exec_module"):
                    _then_after(spec.loader, lambda: self.then(fullname))
                return spec
        return None


def _then_after(loader: Any, then: Callable[[], None]) -> None:
    """``then()`` after ``loader`` has executed the module it loads."""
    execute = loader.exec_module

    def exec_module(module: ModuleType) -> None:
        execute(module)
        try:
            then()
        except Exception as exc:  # noqa: BLE001 - never breaks the user's import
            logger.debug("trainpace: timing %s failed: %s", module.__name__, exc)

    loader.exec_module = exec_module
