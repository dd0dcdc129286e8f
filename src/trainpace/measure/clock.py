"""Clocks: the host's ``perf_counter``, and device events resolved without synchronizing.

Device work is asynchronous: a host timer around a CUDA step measures how long it took to
*enqueue* it. The truthful step time on an accelerator is the time between events recorded on
the device's stream. Recording an event costs a few microseconds and never blocks; reading
it is done later, only once :meth:`DeviceTimer.ready` says the device has passed it.
"""

from __future__ import annotations

from typing import Any, Protocol

import torch

from trainpace.errors import DeviceError

Marker = Any  # a recorded device event (opaque to the callers)


class DeviceTimer(Protocol):
    """Records markers on the device's current stream and reads the time between them."""

    name: str  # the clock's name in the run: "cuda" or "mps"

    def mark(self) -> Marker:
        """Record a marker now on the current stream (never blocks)."""

    def ready(self, marker: Marker) -> bool:
        """True when the device has passed ``marker`` (never blocks)."""

    def elapsed_s(self, start: Marker, end: Marker) -> float:
        """Device seconds from ``start`` to ``end``; both must be ready."""

    def wait(self, marker: Marker) -> None:
        """Block until the device has passed ``marker`` (only at the end of a run)."""

    def release(self, marker: Marker) -> None:
        """Give a marker back for reuse once its times are read."""


class EventTimer:
    """A :class:`DeviceTimer` over ``torch.cuda.Event`` or ``torch.mps.Event`` with a pool."""

    def __init__(self, device: torch.device) -> None:
        self.name = device.type
        self._device = device
        if device.type not in ("cuda", "mps"):
            raise ValueError(f"no device events on {device.type}")
        self._pool: list[Any] = []

    def _make(self) -> Any:
        if self.name == "cuda":
            return torch.cuda.Event(enable_timing=True)  # type: ignore[no-untyped-call]
        return torch.mps.Event(enable_timing=True)

    def mark(self) -> Marker:
        event = self._pool.pop() if self._pool else self._make()
        event.record()
        return event

    def ready(self, marker: Marker) -> bool:
        return bool(marker.query())

    def elapsed_s(self, start: Marker, end: Marker) -> float:
        return float(start.elapsed_time(end)) / 1000.0  # elapsed_time is in milliseconds

    def wait(self, marker: Marker) -> None:
        marker.synchronize()

    def release(self, marker: Marker) -> None:
        if len(self._pool) < 4096:
            self._pool.append(marker)


def device_timer_for(device: torch.device) -> DeviceTimer | None:
    """The event timer of an accelerator device, or None for the CPU (the host clock is true)."""
    if device.type == "cuda" and torch.cuda.is_available():
        return EventTimer(device)
    if device.type == "mps" and _mps_events_available():
        return EventTimer(device)
    return None


def _mps_events_available() -> bool:
    backend = getattr(torch.backends, "mps", None)
    return bool(backend is not None and backend.is_available() and hasattr(torch, "mps")
                and hasattr(torch.mps, "Event"))


def resolve_device(requested: str | None) -> torch.device:
    """The device whose clock times the steps: the one asked for, else the accelerator present.

    A device this machine does not have is refused (timing a CUDA run with the host clock
    would time the enqueueing of its kernels, not their work).
    """
    if requested is not None:
        device = torch.device(requested)
        if device.type == "cuda":
            if not torch.cuda.is_available():
                raise DeviceError(f"device={requested!r}: CUDA is not available on this machine "
                                  "(torch.cuda.is_available() is False); pass device='cpu' or "
                                  "leave device unset")
            if (device.index or 0) >= torch.cuda.device_count():
                raise DeviceError(f"device={requested!r}: this machine has "
                                  f"{torch.cuda.device_count()} CUDA device(s); pass one of "
                                  f"cuda:0..cuda:{torch.cuda.device_count() - 1}")
        if device.type == "mps" and not _mps_events_available():
            raise DeviceError(f"device={requested!r}: MPS is not available on this machine; "
                              "pass device='cpu' or leave device unset")
        return device
    if torch.cuda.is_available():
        return torch.device("cuda", torch.cuda.current_device())
    if _mps_events_available():
        return torch.device("mps")
    return torch.device("cpu")
