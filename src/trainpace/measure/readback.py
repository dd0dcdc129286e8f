"""Device steps read back without a synchronization: their event times and device values.

On a device with an event timer (CUDA) a step's time is the device's, from the events the
recorder put around it, and its losses, metrics and token counts may still be device tensors.
:class:`DeviceReadback` turns closed steps into records only once their events have
completed and their values have reached the host through one asynchronous copy, so the
training loop never waits for the device (except at the end of the run, ``final``).
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass
from typing import Any

import torch

from trainpace.measure.clock import DeviceTimer, Marker
from trainpace.measure.steprow import StepRow, as_float, records_of
from trainpace.records import StepValues


class DeviceReadback:
    """The device side of the recorder: resolves closed rows into records, oldest first."""

    def __init__(self, timer: DeviceTimer) -> None:
        self.timer = timer
        self._reading: deque[StepRow] = deque()  # device values being copied to the host
        self._copy: _Copy | None = None  # the one copy in flight

    def take(self, pending: deque[StepRow], *, final: bool, t0: float,
             metered: bool) -> list[StepValues]:
        """The records of ``pending``'s steps that can be read now (all of them, waiting for
        the device, with ``final``); the rows taken leave ``pending``."""
        timer = self.timer
        ready: list[StepRow] = []
        while pending:
            row = pending[0]
            marker = row.end_marker
            if marker is not None and not timer.ready(marker):
                if not final:
                    break
                timer.wait(marker)
            pending.popleft()
            row.device_times = self._resolve_times(row)
            ready.append(row)
        self._reading.extend(ready)
        self._start_copy(ready)
        return self._finish_copy(final, t0, metered)

    def _resolve_times(self, row: StepRow) -> tuple[float, float | None, float | None]:
        """The step's time, exposed wait and copy time, from its events where it has them."""
        step_s = row.cycle_s
        exposed: float | None = None
        h2d = row.h2d_s
        timer = self.timer
        if row.end_marker is not None and row.start_marker is not None:
            step_s = timer.elapsed_s(row.start_marker, row.end_marker)
            exposed = sum(timer.elapsed_s(a, b) for a, b in row.wait_markers)
            if row.h2d_markers:
                h2d = sum(timer.elapsed_s(a, b) for a, b in row.h2d_markers)
            # Each end marker is the next step's start marker: release it as a start, once.
            for marker in [row.start_marker, *(m for pair in row.wait_markers for m in pair),
                           *(m for pair in row.h2d_markers for m in pair)]:
                timer.release(marker)
            # the device ran the work done outside the step (an evaluation) in that time too
            return max(step_s - row.outside_s, 0.0), exposed, h2d
        return step_s - row.outside_s, exposed, h2d

    def _start_copy(self, rows: list[StepRow]) -> None:
        """Fill host values now; start one async copy for the values still on a CUDA device."""
        device_values: list[torch.Tensor] = []
        slots: list[tuple[list[Any], int]] = []
        blocked: set[int] = set()
        for row in rows:
            for kept in (row.tokens, row.losses, row.metrics):
                if not isinstance(kept, list):
                    continue
                values: list[Any] = kept  # device values are replaced by floats once read
                for i, value in enumerate(values):
                    if isinstance(value, torch.Tensor) and value.device.type == "cuda":
                        device_values.append(value.float().reshape(-1).mean())
                        slots.append((values, i))
                        blocked.add(id(row))
                    elif isinstance(value, torch.Tensor):
                        values[i] = as_float(value)  # MPS or CPU: no async copy; read now
        if not device_values:
            return
        if self._copy is not None:  # one copy in flight at a time: land the older first
            self.timer.wait(self._copy.marker)
            self._copy.apply()
        # Copy into pinned memory without blocking; read it once its marker has passed.
        stacked = torch.stack(device_values)
        host = torch.empty(stacked.shape, dtype=stacked.dtype, pin_memory=True)
        host.copy_(stacked, non_blocking=True)
        self._copy = _Copy(self.timer.mark(), host, slots, blocked)

    def _finish_copy(self, final: bool, t0: float, metered: bool) -> list[StepValues]:
        copy = self._copy
        if copy is not None:
            if final:
                self.timer.wait(copy.marker)
            if final or self.timer.ready(copy.marker):
                copy.apply()
                self._copy = copy = None
        blocked = copy.rows if copy is not None else set()
        ready: list[StepRow] = []
        while self._reading and id(self._reading[0]) not in blocked:
            row = self._reading.popleft()
            assert row.device_times is not None
            ready.append(row)
        return records_of(ready, t0, metered)


@dataclass
class _Copy:
    """Device values being copied to pinned host memory, and where each one goes."""

    marker: Marker
    host: torch.Tensor
    slots: list[tuple[list[Any], int]]
    rows: set[int]

    def apply(self) -> None:
        for (values, i), value in zip(self.slots, self.host.tolist(), strict=True):
            values[i] = value
