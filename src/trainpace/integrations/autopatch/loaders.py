"""``DataLoader.__iter__``, replaced: each DataLoader iterated with gradients on goes through
``meter.loader``, and its batches open the steps."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import torch
from torch.utils.data import DataLoader

from trainpace.integrations.autopatch.steps import Steps


class LoaderPatch:
    """Meters the training DataLoaders (one iterated under ``torch.no_grad()`` or
    ``torch.inference_mode()`` is taken for evaluation and left alone); a wrapper the script
    puts around a DataLoader iterates it, so it is covered too."""

    def __init__(self, steps: Steps) -> None:
        self._steps = steps
        self._original_iter: Callable[[Any], Iterator[Any]] | None = None
        self._entering = False  # inside meter.loader's own iter() of the DataLoader

    def install(self) -> None:
        self._original_iter = DataLoader.__iter__
        patch = self

        def __iter__(loader: DataLoader[Any]) -> Iterator[Any]:  # noqa: N807 - the patched dunder
            return patch._iterate(loader)

        DataLoader.__iter__ = __iter__  # type: ignore[method-assign,assignment]

    def remove(self) -> None:
        if self._original_iter is not None:
            DataLoader.__iter__ = self._original_iter  # type: ignore[method-assign,assignment]
            self._original_iter = None

    def _iterate(self, loader: DataLoader[Any]) -> Iterator[Any]:
        original = self._original_iter
        if original is None:  # removed while a reference to the patched method lived on
            return DataLoader.__iter__(loader)
        steps = self._steps
        if self._entering or steps.elsewhere():  # meter.loader's own iter(); another thread
            return original(loader)
        steps.new_iterator(loader)  # the loop left its iterator (a new epoch, an evaluation)
        if not torch.is_grad_enabled():
            steps.seen.loaders_skipped += 1
            return original(loader)
        steps.seen.loaders_metered += 1
        steps.loader_metered = True
        try:
            metered = steps.meter.loader(loader)  # its settings are read from the DataLoader
        except Exception as exc:  # noqa: BLE001 - monitoring never breaks training
            steps.fault("wrapping a DataLoader", exc)
            return original(loader)
        # The wrapper's iter() calls DataLoader.__iter__ again (that is timed: workers start
        # there); this time it must reach the original.
        self._entering = True
        try:
            iterator = iter(metered)
        finally:
            self._entering = False
        # From now on a step opens at its first batch, as `with meter.step()` right after the
        # fetch would; the forward hook is no longer needed.
        steps.disarm_forward()
        return self._opening(iterator, loader)

    def _opening(self, iterator: Iterator[Any], loader: DataLoader[Any]) -> Iterator[Any]:
        steps = self._steps
        try:
            while True:
                if steps.ended:  # the loop goes on: the step that ended is closed here
                    steps.close()
                try:
                    batch = next(iterator)
                except StopIteration:
                    return
                if steps.context is None:
                    steps.open()
                steps.untrained_from, steps.untrained_batch = loader, batch  # no backward() yet
                yield batch
        finally:  # exhausted, or the loop broke out (the iterator is finalized)
            if steps.ended:
                steps.close()
