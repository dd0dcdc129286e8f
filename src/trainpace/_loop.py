"""The Meter's hot path inside the user's loop: the loader wrapper and the step context.

Everything here runs once per batch or per step, so it is kept short: a few clock reads, the
recorder's bookkeeping, and nothing that can raise into the training loop (a failure of ours
is reported through ``Meter._fault`` once, and the loop goes on).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from types import TracebackType
from typing import TYPE_CHECKING, Any

import torch

from trainpace.measure.batch import is_pinned, move_to

if TYPE_CHECKING:
    from trainpace.meter import Meter


class StepContext:
    """``with meter.step(batch):`` — reused for every step (no allocation on the hot path)."""

    __slots__ = ("accumulate", "batch", "meter")

    def __init__(self, meter: Meter) -> None:
        self.meter = meter
        self.batch: Any = None
        self.accumulate = 1

    def __enter__(self) -> StepContext:
        meter = self.meter
        rec = meter._recorder
        try:
            # The previous window is written here, between steps, and its cost kept out of
            # the step times (it is reported as trainpace's own overhead).
            if rec.steps_closed - meter._flushed_step >= meter._window and not rec.in_step:
                started = meter._clock()
                meter._boundary()
                rec.exclude_from_cycle(meter._clock() - started)
            if meter._profile is not None:
                meter._profile_begin()
            if not rec.enter(self.accumulate):
                meter._fault("a nested meter.step()", RuntimeError("steps do not nest"))
            elif not meter._vitals_started:
                meter._start_vitals()
                if meter._vitals is not None:
                    # FLOPs and bytes are counted on the first step: warm-up, never measured.
                    meter._flop_count = meter._vitals.flop_counter(samples=rec.open_samples or None)
                    meter._flop_count.__enter__()
        except Exception as exc:  # noqa: BLE001 - monitoring never breaks training
            meter._fault("starting a step", exc)
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        meter = self.meter
        try:
            closed = meter._recorder.exit(self.batch, exc_type is not None)
        except Exception as error:  # noqa: BLE001 - monitoring never breaks training
            meter._fault("ending a step", error)
            closed = False
        self.batch = None  # do not keep the batch alive until the next step
        if meter._profile is not None or meter._flop_count is not None:
            self._end_capture(closed, exc_type, exc, tb)

    def _end_capture(self, closed: bool, exc_type: type[BaseException] | None,
                     exc: BaseException | None, tb: TracebackType | None) -> None:
        """The step's profiler span and its FLOP count, when either is running."""
        meter = self.meter
        if closed and meter._profile is not None:
            meter._profile.step_end(meter._recorder.steps_closed)
        counting = meter._flop_count
        if counting is not None and (closed or exc_type is not None):
            meter._flop_count = None
            try:
                counting.__exit__(exc_type, exc, tb)
            except Exception as error:  # noqa: BLE001 - monitoring never breaks training
                meter._fault("counting FLOPs", error)


class MeteredLoader:
    """An iterable of batches whose every ``next()`` is timed."""

    def __init__(self, meter: Meter, iterable: Iterable[Any], device: torch.device | None,
                 non_blocking: bool | None) -> None:
        self._meter = meter
        self._iterable = iterable
        self._device = device
        self._non_blocking = non_blocking

    def __iter__(self) -> Iterator[Any]:
        rec = self._meter._recorder
        started = _contained(self._meter, "timing the loader", rec.fetch_started)
        iterator = iter(self._iterable)  # DataLoader workers start here: that is waiting too
        if started is not None:
            _contained(self._meter, "timing the loader", rec.fetch_done, started, None, False)
        return MeteredIterator(self._meter, iterator, self._device, self._non_blocking)

    def __len__(self) -> int:
        return len(self._iterable)  # type: ignore[arg-type]


class MeteredIterator:
    __slots__ = ("_device", "_iterator", "_meter", "_non_blocking", "_rec")

    def __init__(self, meter: Meter, iterator: Iterator[Any], device: torch.device | None,
                 non_blocking: bool | None) -> None:
        self._meter = meter
        self._rec = meter._recorder
        self._iterator = iterator
        self._device = device
        self._non_blocking = non_blocking

    def __iter__(self) -> MeteredIterator:
        return self

    def __next__(self) -> Any:
        meter, rec = self._meter, self._rec
        if meter._profile is not None:
            _contained(meter, "profiling", meter._profile_begin)
        try:
            batch = rec.fetch(self._iterator)
        finally:
            if rec.fault is not None:
                meter._fault(*rec.fault)
                rec.fault = None
        if self._device is not None:
            batch = self._move(batch)
        return batch

    def _move(self, batch: Any) -> Any:
        rec = self._rec
        device = self._device
        assert device is not None
        non_blocking = self._non_blocking
        if non_blocking is None:
            non_blocking = device.type == "cuda" and is_pinned(batch)
        started = _contained(self._meter, "timing the copy", rec.copy_started)
        moved = move_to(batch, device, non_blocking)
        if started is not None:
            _contained(self._meter, "timing the copy", rec.copy_done, started)
        return moved


def _contained(meter: Meter, where: str, fn: Callable[..., Any], *args: Any) -> Any:
    try:
        return fn(*args)
    except Exception as exc:  # noqa: BLE001 - monitoring never breaks training
        meter._fault(where, exc)
        return None
