"""The step recorder: what happens on the training loop's hot path.

It timestamps loader fetches and step boundaries, counts the samples and tokens of each
batch, keeps observed losses as they are (device tensors stay on the device), and turns
finished steps into ``steps.jsonl`` records once their device events and values can be read
without a synchronization. It does no I/O and never prints.

A *step* is an optimizer step. Its cycle runs from the end of the previous step to its own
end, so the wait for its batch, fetched before ``with meter.step(...)``, is inside it. When
the loop pulls its batches through the metered loader, the part of the cycle before the
step's first fetch (an evaluation, a checkpoint between steps) is its ``outside_s``, kept out
of its ``step_s``.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import deque
from collections.abc import Callable, Iterator
from functools import partial
from typing import Any

import torch

from trainpace.measure.batch import TokenCount, count_tokens, samples_in
from trainpace.measure.clock import DeviceTimer, Marker
from trainpace.measure.readback import DeviceReadback
from trainpace.measure.steprow import StepRow, as_float
from trainpace.records import StepValues

logger = logging.getLogger(__name__)
Clock = Callable[[], float]
_TENSOR = torch.Tensor


class StepRecorder:
    """Records steps on the hot path; hands out finished ``steps.jsonl`` records.

    ``samples``/``tokens`` override how a batch is counted. ``timer`` is the device's event
    timer (None on the CPU, where the host clock is the truth).
    """

    def __init__(
        self,
        *,
        clock: Clock = time.perf_counter,
        timer: DeviceTimer | None = None,
        samples: Callable[[Any], int] | None = None,
        tokens: Callable[[Any], int] | None = None,
    ) -> None:
        self.clock = clock
        self.timer = timer
        self._samples_fn = samples
        self._uncounted_warned = False
        self._tokens_fn = tokens
        self.tokens_counted: str | None = "custom" if tokens is not None else None
        self.t0: float | None = None  # clock() at the first data touch or step
        self._next_start_marker: Marker | None = None
        self._prev_end_s: float | None = None
        self._cur = StepRow()
        self.in_step = False  # inside a meter.step() block
        self._accumulate = 1
        self.steps_closed = 0  # optimizer steps recorded so far
        self._pending: deque[StepRow] = deque()  # closed, device times not read yet
        # on a device clock: its event times and values, read back without a synchronization
        self._readback = DeviceReadback(timer) if timer is not None else None
        self.last_closed: StepRow | None = None
        self._plain_batches = samples is None and tokens is None
        self._tensors_layout: tuple[type, ...] | None = None  # see _count
        self.fault: tuple[str, Exception] | None = None  # a failure of ours, to report
        # Time outside the steps (evaluation, checkpoints between steps) is measured only on
        # loops that pull their batches through the metered loader: without it, the time
        # between two steps may be the loop's own data loading, which belongs to the step.
        self._metered = False
        self._idle_since: float | None = None  # a step ended (or the loader ran out) here
        # The steps are one thread's: the first to open one. Steps opened by other threads
        # (a second training thread with its own model) would interleave with its steps and
        # be taken for nested ones; they are not recorded, and the threads are named.
        self.step_thread: int | None = None  # threading.get_ident() of that thread
        self.step_thread_name: str | None = None
        self.other_threads: dict[int, str] = {}  # ident -> name, of threads whose steps are not

    def from_other_thread(self) -> bool:
        """Whether the calling thread is not the one whose steps are recorded (the first one
        to ask is that thread). A thread that is not is remembered by name."""
        ident = threading.get_ident()
        if ident == self.step_thread:
            return False
        if self.step_thread is None:
            self.step_thread = ident
            self.step_thread_name = threading.current_thread().name
            return False
        if ident not in self.other_threads:
            self.other_threads[ident] = threading.current_thread().name
        return True

    # -- the loop's side ------------------------------------------------------------------

    def touch(self) -> None:
        """Start the run's clock at the first data touch (idempotent)."""
        if self.t0 is None:
            self.t0 = self.clock()
            self._prev_end_s = self.t0
            if self.timer is not None:
                self._next_start_marker = self.timer.mark()

    def fetch(self, iterator: Iterator[Any]) -> Any:
        """``next(iterator)``, timed (:meth:`fetch_started`, :meth:`fetch_done`) and its batch
        counted, in one call. Only the loader's own errors and its StopIteration come out; a
        failure of ours is kept in :attr:`fault` (where, error) for the caller to report, and
        the batch is returned all the same.
        """
        if self.timer is None and self.t0 is not None:
            return self._fetch_on_host(iterator)
        try:
            started = self.fetch_started()
        except Exception as exc:  # noqa: BLE001 - reported by the caller
            self.fault = ("timing the loader", exc)
            return next(iterator)
        try:
            batch = next(iterator)
        except StopIteration:
            try:
                self.fetch_done(started, None, got_batch=False)
            except Exception as exc:  # noqa: BLE001 - reported by the caller
                self.fault = ("timing the loader", exc)
            raise
        try:
            self.fetch_done(started, batch)
        except Exception as exc:  # noqa: BLE001 - reported by the caller
            self.fault = ("counting a batch", exc)
        return batch

    def _fetch_on_host(self, iterator: Iterator[Any]) -> Any:
        """:meth:`fetch` on the host clock once the run has started: :meth:`fetch_started` and
        :meth:`fetch_done` in one frame (this runs once per batch: three calls fewer)."""
        clock = self.clock
        try:
            started = clock()
            idle = self._idle_since
            if idle is not None:
                self._cur.outside_s += started - idle
                self._idle_since = None
            self._metered = True
        except Exception as exc:  # noqa: BLE001 - reported by the caller
            self.fault = ("timing the loader", exc)
            return next(iterator)
        try:
            batch = next(iterator)
        except StopIteration:
            try:
                now = clock()
                self._cur.wait_s += now - started
                if not self.in_step:
                    self._idle_since = now  # the loader ran out: what follows is outside
            except Exception as exc:  # noqa: BLE001 - reported by the caller
                self.fault = ("timing the loader", exc)
            raise
        try:
            row = self._cur
            row.wait_s += clock() - started
            row.fetched_since_micro += 1
            self._count(row, batch)  # last: a failing user counter leaves the timing intact
        except Exception as exc:  # noqa: BLE001 - reported by the caller
            self.fault = ("counting a batch", exc)
        return batch

    def fetch_started(self) -> tuple[float, Marker | None]:
        """Call right before ``next()`` on the loader."""
        if self.t0 is None:
            self.touch()
        marker = self.timer.mark() if self.timer is not None else None
        now = self.clock()
        idle = self._idle_since
        if idle is not None:
            self._cur.outside_s += now - idle
            self._idle_since = None
        self._metered = True
        return now, marker

    def fetch_done(self, started: tuple[float, Marker | None], batch: Any = None,
                   got_batch: bool = True) -> None:
        """Call right after ``next()`` returned (or raised StopIteration: ``got_batch=False``)."""
        t_start, m_start = started
        now = self.clock()
        row = self._cur
        row.wait_s += now - t_start
        if self.timer is not None and m_start is not None:
            pair = (m_start, self.timer.mark())
            if isinstance(row.wait_markers, list):
                row.wait_markers.append(pair)
            else:
                row.wait_markers = [pair]
        if got_batch:
            row.fetched_since_micro += 1
            self._count(row, batch)  # last: a failing user counter leaves the timing intact
        elif not self.in_step:
            self._idle_since = now  # the loader ran out: what follows is outside the steps

    def copy_started(self) -> tuple[float, Marker | None]:
        """Call right before moving a batch to the device."""
        marker = self.timer.mark() if self.timer is not None else None
        return self.clock(), marker

    def copy_done(self, started: tuple[float, Marker | None]) -> None:
        """Call right after the batch was moved."""
        t_start, m_start = started
        row = self._cur
        row.h2d_s = (row.h2d_s or 0.0) + (self.clock() - t_start)
        if self.timer is not None and m_start is not None:
            pair = (m_start, self.timer.mark())
            if isinstance(row.h2d_markers, list):
                row.h2d_markers.append(pair)
            else:
                row.h2d_markers = [pair]

    def enter(self, accumulate: int) -> bool:
        """A ``meter.step()`` block begins. Returns False when it is nested (ignored)."""
        if self.t0 is None:
            self.touch()
        if self.in_step:
            return False
        idle = self._idle_since
        if idle is not None:  # no fetch since the last step: what passed is outside
            self._cur.outside_s += self.clock() - idle
            self._idle_since = None
        self.in_step = True
        self._accumulate = accumulate
        return True

    def exit(self, batch: Any, failed: bool) -> bool:
        """A ``meter.step()`` block ended; True when it closed an optimizer step. Never
        raises: a failure to count the batch is kept in :attr:`fault` (the step is kept).

        Kept to few operations on purpose: it runs right after the step's own work, when
        little of trainpace is still in the CPU's caches.
        """
        if failed:
            self.abandon()
            return False
        self.in_step = False
        row = self._cur
        if row.fetched_since_micro:
            row.fetched_since_micro = 0
        elif batch is not None:
            try:  # no loader batch for this micro-step: count the argument
                self._count(row, batch)
            except Exception as exc:  # noqa: BLE001 - reported by the caller
                self.fault = ("counting a batch", exc)
        if self._accumulate != 1:
            row.micro_done += 1
            if row.micro_done < self._accumulate:
                return False
        now = self.clock()
        steps = self.steps_closed = self.steps_closed + 1
        row.step = steps
        row.end_s = now
        row.cycle_s = now - self._prev_end_s  # type: ignore[operator]  # set by touch()
        self._prev_end_s = now
        if self.timer is not None:
            row.end_marker = self.timer.mark()
            row.start_marker = self._next_start_marker
            self._next_start_marker = row.end_marker
        self._pending.append(row)
        self.last_closed = row
        self._cur = StepRow()
        if self._metered:
            self._idle_since = now
        return True

    def observe(self, loss: Any = None, metric: Any = None) -> None:
        """Keep a loss or metric for the open step (or the last closed one, outside a step)."""
        last = self.last_closed
        # Outside a step (an eval after it, say) the value belongs to the step just closed,
        # unless that one was already written out; then it goes to the next step.
        row = last if not self.in_step and last is not None and not last.emitted else self._cur
        if loss is not None:
            if isinstance(row.losses, list):
                row.losses.append(_keep(loss))
            else:
                row.losses = [_keep(loss)]
        if metric is not None:
            if isinstance(row.metrics, list):
                row.metrics.append(_keep(metric))
            else:
                row.metrics = [_keep(metric)]

    def abandon(self) -> None:
        """The open step raised (or was interrupted): it never finished, so it is not a step.
        Start afresh from now."""
        self.in_step = False
        self._cur = StepRow()
        if self.t0 is None:
            return
        self._prev_end_s = now = self.clock()
        if self._metered:
            self._idle_since = now
        if self.timer is not None:
            self._next_start_marker = self.timer.mark()

    def uncount(self, batch: Any) -> None:
        """Take ``batch``, the last one counted into the open step, back out of its counts
        (samples, tokens, batches): the loop fetched it and never trained on it. Counted
        again into a scratch row, so the hot path keeps no per-batch counts for this rare
        case. Its wait stays in the step (the loop waited for it all the same)."""
        row, taken = self._cur, StepRow()
        self._count(taken, batch)
        row.batches -= taken.batches
        row.samples -= taken.samples
        for tokens in taken.tokens:  # minus its count: a device count stays on the device
            _add_tokens(row, -tokens)
        if not row.batches:  # no batch of the step left that could not be counted
            row.samples_unknown = False

    @property
    def open_samples(self) -> int:
        """Samples counted so far for the step being recorded."""
        return self._cur.samples

    def _count(self, row: StepRow, batch: Any) -> None:
        row.batches += 1
        if self._plain_batches:
            # The common batches, counted with one read of torch: a tensor, or a tuple or list
            # of tensors laid out like one already counted in full, e.g. (images, labels).
            # Right after a long step little of this is in the CPU's caches, and each read
            # of torch or walk through the batch costs tens of µs.
            kind = type(batch)
            if kind is _TENSOR:
                shape = batch.shape
                if shape:
                    row.samples += shape[0]
                return
            if (kind is tuple or kind is list) and tuple(map(type, batch)) == self._tensors_layout:
                shape = batch[0].shape
                if shape:  # else the general count, which looks further into the batch
                    row.samples += shape[0]
                    return
        samples: int | None
        if self._samples_fn is not None:
            samples = self._samples_fn(batch)
        else:
            counted = samples_in(batch)
            samples = counted.samples
            if samples is None and not self._uncounted_warned:
                self._uncounted_warned = True  # once a run: the reason is the same each step
                logger.warning("trainpace: %s", counted.reason)
        if samples is None:
            row.samples_unknown = True  # a step with a batch not counted: its samples unknown
        else:
            row.samples += int(samples)
        if self._tokens_fn is not None:
            _add_tokens(row, int(self._tokens_fn(batch)))
            return
        tokens, how = count_tokens(batch)
        if tokens is not None:
            _add_tokens(row, tokens)
            if self.tokens_counted is None:
                self.tokens_counted = how
        elif type(batch) in (tuple, list) and batch and samples is not None:
            layout = tuple(map(type, batch))
            if all(kind is _TENSOR for kind in layout) and batch[0].dim() > 0:
                self._tensors_layout = layout  # its samples: the first tensor's first dimension

    # -- the writer's side ----------------------------------------------------------------

    @property
    def metered(self) -> bool:
        """Whether the loop pulls its batches through the metered loader (the time outside
        the steps is measured)."""
        return self._metered

    def close_newest(self) -> None:
        """Training thread, on the host clock, as the next step begins (or the loop ends):
        the newest closed step may be taken too (:meth:`take_closed`); a value observed from
        now on goes to the next step."""
        last = self.last_closed
        if last is not None:
            last.emitted = True

    def take_closed(self) -> list[StepRow]:
        """Writer thread, on the host clock: the closed steps that the training thread no
        longer writes into, oldest first, taken out: all but the newest (a loss observed
        after its step is still its), and the newest once :meth:`close_newest` said so. The
        training thread only appends closed steps; this is the one call that takes them
        out, so the two need no lock."""
        pending = self._pending
        rows = []
        while len(pending) > 1 or (pending and pending[0].emitted):
            rows.append(pending.popleft())
        return rows

    # -- the window boundary's side, on a device clock ---------------------------------------

    def take_ready(self, *, final: bool = False) -> Callable[[], list[StepValues]]:
        """On a device clock, on the training thread (it issues the copies of the steps'
        device values): finished ``steps.jsonl`` records (their values:
        :data:`~trainpace.records.StepValues`), oldest first (those whose values can be read
        now), made by whoever calls the function returned. Without ``final`` it never blocks:
        a step whose device events have not completed, or whose device values are still being
        copied, waits for a later call. With ``final`` (end of run) it waits for the device
        and returns everything. (On the host clock the writer takes the steps:
        :meth:`take_closed`.)"""
        if self._readback is None:
            raise RuntimeError("take_ready() reads a device clock's steps back; on the host "
                               "clock the writer takes them with take_closed()")
        t0 = self.t0 if self.t0 is not None else 0.0  # None: no step closed, none pending
        records = self._readback.take(self._pending, final=final, t0=t0, metered=self._metered)
        return partial(list, records)


def _add_tokens(row: StepRow, tokens: TokenCount) -> None:
    if isinstance(row.tokens, list):
        row.tokens.append(tokens)
    else:
        row.tokens = [tokens]


def _keep(value: Any) -> Any:
    """A loss/metric as kept until its step's record is made: a float, or a detached device
    tensor (read at the boundary's copy: no device sync in the step).

    A CPU tensor is read at once, though ``item()`` right after a step costs about 14 µs (on
    13 ms steps of a CPU training loop; ``benchmarks/cold_calls.py``) and a ``detach()`` 4:
    a kept CPU tensor holds its small block of the process's heap until the writer reads it,
    half a window later, in the middle of the memory the next steps' large tensors are carved
    from. In a word-language-model loop (``benchmarks/real_scripts``, 14 MB logits a step)
    the heap then grew instead of reusing that memory: 1,709-page runs of first-touch faults,
    steps of 48-148 ms where the median took 23-25 ms, 2-11 of them in 150 steps (four runs)
    against none (two runs) with the value read at once."""
    if isinstance(value, torch.Tensor):
        if not value.is_cpu:
            return value.detach()  # no autograd graph kept alive
        return as_float(value)  # a one-element tensor with item(), else its mean
    return float(value)
