"""The Meter's hot path inside the user's loop: the step context and the loader wrapper.

Everything here runs once per batch or per step, so it is kept short: a few clock reads, the
recorder's bookkeeping, and nothing that can raise into the training loop (a failure of ours
is reported once, and the loop goes on). It knows the Meter only through :class:`Loop`, the
training thread's side of it, which the Meter builds; it never imports the Meter.
"""

from __future__ import annotations

import threading
from _thread import get_ident
from collections.abc import Callable, Iterable, Iterator
from types import TracebackType
from typing import Any

import torch

from trainpace.config import half_window
from trainpace.measure.batch import is_pinned, move_to
from trainpace.measure.recorder import StepRecorder
from trainpace.meter.log_once import LogOnce
from trainpace.meter.probes import StepProbes


class Loop:
    """The training thread's side of a Meter.

    ``hand_over(final, flush, ends_window)`` runs twice a window (halfway, and at its end)
    and where a window ends early: it lets the writer have the steps closed so far (on the
    host clock the writer takes them itself; on a device clock they are read back and handed
    over) and waits for a writer more than half a window behind, so that the run folder is
    never more than a window behind the loop (a SIGKILL loses at most one window); it returns
    True when every step closed may now be taken;
    ``first_step()`` runs when the first step begins (the sampler starts then, and returns a
    FLOP counter for that step, or None). ``hand_over`` is the
    :class:`~trainpace.meter.handover.WriterHandOver`'s, ``first_step`` the Meter's. Their
    time is the loop's: it is in the step times (or the time outside the steps) like any
    other work between two steps.
    """

    def __init__(self, *, recorder: StepRecorder, probes: StepProbes, log_once: LogOnce,
                 window: int, hand_over: Callable[[bool, bool, bool], bool],
                 first_step: Callable[[], Any]) -> None:
        self.recorder = recorder
        self.probes = probes
        self.log_once = log_once
        self.window = window
        self.handed_over = 0  # the steps the writer may take all of
        # (step, its end on the run's clock) at each step closed: the job's progress map
        self.step_closed: Callable[[int, float], None] | None = None
        self.window_start = 0  # the steps closed when the open window began
        # the steps closed at which the next hand-over is due (read at every step)
        self.next_hand_over = _halfway(0, window)
        self.started = False
        self.finished = False
        self._loader_end = 0  # the steps closed when the metered loader last ran out
        self._hand_over = hand_over
        self._first_step = first_step
        self.context = StepContext(self)

    def boundary(self, *, final: bool = False, flush: bool = False) -> None:
        """Halfway through a window, or at its end (``flush``: the window ends now and its
        record goes to the sinks at once): the hand-over (see the class)."""
        closed = self.recorder.steps_closed
        ends_window = final or flush or closed - self.window_start >= self.window
        if self._hand_over(final, flush, ends_window):
            self.handed_over = closed
        if ends_window:
            self.window_start = closed
            self.next_hand_over = _halfway(closed, self.window)
        else:
            self.next_hand_over = self.window_start + self.window

    def begin_run(self) -> None:
        self.started = True
        counter = self._first_step()
        if counter is not None:
            # FLOPs and bytes are counted on the first step: warm-up, never measured.
            self.probes.count_flops(counter)

    def loader_exhausted(self) -> None:
        """The metered loader ran out. The open window ends here when another epoch as long
        as this one would not fit in it: the writer sends it at its next look (console line
        included), not after the next epoch's steps, and nothing here waits for that.
        Otherwise it goes on into the next epoch, so windows end at epochs' ends and hold as
        many whole epochs as fit (25-step epochs, window 100: a record per 100 steps, not one
        per epoch; 60-step epochs: one per epoch), and a run of short epochs makes a window
        record (and, under DDP, an exchange) per window. The rule counts steps only, so the
        ranks of a job, whose loaders run out at the same steps, cut alike."""
        closed = self.recorder.steps_closed
        epoch, self._loader_end = closed - self._loader_end, closed
        if closed > self.handed_over and closed - self.window_start + epoch > self.window:
            self.boundary(flush=True)

    def profile_begin(self) -> None:
        rec = self.recorder
        if not rec.in_step:
            self.probes.step_begin(rec.steps_closed)

    def fault(self, where: str, exc: BaseException) -> None:
        self.log_once.report(where, exc)

    def off_the_step_thread(self, call: str) -> bool:
        """Whether the calling thread is not the one whose steps are recorded (once a step
        was opened; before it, any thread's batches are the first step's). The first time,
        one line says that what such a thread does is not recorded."""
        rec = self.recorder
        if rec.step_thread is None or rec.step_thread == get_ident():
            return False
        self.log_once.warn_once(
            f"off-thread {call}", f"{call} in thread {threading.current_thread().name!r}: the "
            f"steps are thread {rec.step_thread_name!r}'s, and its data wait and values are "
            "what is recorded; this thread's are not (they would be added to steps they are "
            f"not part of): call {call} in the thread that runs meter.step()")
        return True


class StepContext:
    """``with meter.step(batch):`` — reused for every step (no allocation on the hot path).

    Nested blocks count once: an inner ``with meter.step()`` is ignored (the Meter warns).
    """

    __slots__ = ("_loop", "_rec", "accumulate", "batch", "depth")

    def __init__(self, loop: Loop) -> None:
        self._loop = loop
        self._rec = loop.recorder
        self.batch: Any = None
        self.accumulate = 1
        # Step blocks open now (nonzero: a nested ``meter.step()`` must not change batch or
        # accumulate). An attribute, not a property: it is read at every step.
        self.depth = 0

    def __enter__(self) -> StepContext:
        if self.depth:  # nested: the outer block is the step
            self.depth += 1
            return self
        loop, rec = self._loop, self._rec
        try:
            self.depth = 1
            if rec.steps_closed >= loop.next_hand_over:
                loop.boundary()
            if loop.probes.active:
                loop.profile_begin()
            rec.enter(self.accumulate)
            if not loop.started:
                loop.begin_run()
        except Exception as exc:  # noqa: BLE001 - monitoring never breaks training
            loop.fault("starting a step", exc)
        except BaseException:
            # A Ctrl-C (or SystemExit) inside the entry: the ``with`` body never runs and
            # __exit__ is never called, so no step is open. A loop that catches it and goes on
            # gets its next step recorded.
            self.depth = 0
            rec.abandon()
            raise
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        depth = self.depth = self.depth - 1
        if depth:
            if depth < 0:  # an exit without its enter (a hand-driven context): nothing open
                self.depth = 0
            return
        loop, rec = self._loop, self._rec
        try:
            closed = rec.exit(self.batch, exc_type is not None)
        except Exception as error:  # noqa: BLE001 - monitoring never breaks training
            loop.fault("ending a step", error)
            closed = False
        except BaseException:
            rec.abandon()  # a Ctrl-C inside the exit: that step is lost, the next ones are not
            raise
        finally:
            self.batch = None  # do not keep the batch alive until the next step
        if closed and loop.step_closed is not None:
            try:
                loop.step_closed(rec.steps_closed, rec.last_closed.end_s)  # type: ignore[union-attr]
            except Exception as error:  # noqa: BLE001 - monitoring never breaks training
                loop.fault("keeping the job's progress", error)
        if rec.fault is not None:
            loop.fault(*rec.fault)
            rec.fault = None
        if loop.probes.active:  # always reached: a capture never outlives its step
            try:
                loop.probes.step_end(closed, rec.steps_closed, exc_type, exc, tb)
            except Exception as error:  # noqa: BLE001 - monitoring never breaks training
                loop.fault("ending a capture", error)


class NullStep:
    """The step context after ``finish()``: it records nothing."""

    __slots__ = ()

    def __enter__(self) -> NullStep:
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        return None


NULL_STEP = NullStep()


class MeteredLoader:
    """An iterable of batches whose every ``next()`` is timed."""

    def __init__(self, loop: Loop, iterable: Iterable[Any], device: torch.device | None,
                 non_blocking: bool | None) -> None:
        self._loop = loop
        self._iterable = iterable
        self._device = device
        self._non_blocking = non_blocking

    def __iter__(self) -> Iterator[Any]:
        loop = self._loop
        if loop.finished:
            return iter(self._iterable)
        if loop.off_the_step_thread("meter.loader() iteration"):
            return MeteredIterator(loop, iter(self._iterable), self._device, self._non_blocking)
        rec = loop.recorder
        started = _contained(loop, "timing the loader", rec.fetch_started)
        iterator = iter(self._iterable)  # DataLoader workers start here: that is waiting too
        if started is not None:
            _contained(loop, "timing the loader", rec.fetch_done, started, None, False)
        return MeteredIterator(loop, iterator, self._device, self._non_blocking)

    def __len__(self) -> int:
        return len(self._iterable)  # type: ignore[arg-type]


class MeteredIterator:
    __slots__ = ("_device", "_fetch", "_iterator", "_loop", "_non_blocking", "_rec")

    def __init__(self, loop: Loop, iterator: Iterator[Any], device: torch.device | None,
                 non_blocking: bool | None) -> None:
        self._loop = loop
        self._rec = loop.recorder
        self._fetch = loop.recorder.fetch
        self._iterator = iterator
        self._device = device
        self._non_blocking = non_blocking

    def __iter__(self) -> MeteredIterator:
        return self

    def __next__(self) -> Any:
        loop = self._loop
        step_thread = self._rec.step_thread
        if step_thread is not None and step_thread != get_ident() and \
                loop.off_the_step_thread("meter.loader() iteration"):
            # Another thread's fetch (a prefetching thread, a second loop): its wait is not
            # the training thread's. Its batch is handed on as asked, untimed and uncounted.
            batch = next(self._iterator)
            return self._move_untimed(batch) if self._device is not None else batch
        if loop.probes.active:
            _contained(loop, "profiling", loop.profile_begin)
        try:
            batch = self._fetch(self._iterator)
        except StopIteration:
            if not loop.finished:
                _contained(loop, "ending the loader's window", loop.loader_exhausted)
            raise
        finally:
            rec = self._rec
            if rec.fault is not None:
                loop.fault(*rec.fault)
                rec.fault = None
        if self._device is not None:
            batch = self._move(batch)
        return batch

    def _move_untimed(self, batch: Any) -> Any:
        device = self._device
        assert device is not None
        non_blocking = self._non_blocking
        if non_blocking is None:
            non_blocking = device.type == "cuda" and is_pinned(batch)
        return move_to(batch, device, non_blocking)

    def _move(self, batch: Any) -> Any:
        rec = self._rec
        device = self._device
        assert device is not None
        non_blocking = self._non_blocking
        if non_blocking is None:
            non_blocking = device.type == "cuda" and is_pinned(batch)
        started = _contained(self._loop, "timing the copy", rec.copy_started)
        moved = move_to(batch, device, non_blocking)
        if started is not None:
            _contained(self._loop, "timing the copy", rec.copy_done, started)
        return moved


def _halfway(start: int, window: int) -> int:
    """The steps closed at the first hand-over of a window that begins after ``start``."""
    return start + half_window(window)


def _contained(loop: Loop, where: str, fn: Callable[..., Any], *args: Any) -> Any:
    try:
        return fn(*args)
    except Exception as exc:  # noqa: BLE001 - monitoring never breaks training
        loop.fault(where, exc)
        return None
