"""What the three scripts share: their arguments, the optional Meter, the loop's own timer.

Each script is a plain training loop. Run bare (``python mnist.py``) it imports nothing of
trainpace; ``--meter`` wraps its loader and steps in a Meter, as the getting-started page
shows; under ``trainpace run -- mnist.py`` it is the bare script, patched from outside.
``--timing FILE`` makes it write when each step ended (``perf_counter``, from the start of its
training loop, after the model and the data are built), the process CPU time of the loop, and
when the loop began and ended on the wall clock (``time.time``, which the benchmark reads too),
and which steps took an epoch's first batch: for the benchmark to tell the first step
(trainpace counts its FLOPs) from the others, the process's start (imports, the Meter) from
its end (``finish()``, the report, the exit), and the steps that waited for a loader's start.
``--alternate`` (with ``--meter``) meters only the second and third step of every four (their
batches through the Meter's loader, their steps in its step), the others run bare, in the same
process a few milliseconds apart: the benchmark's measure of what the Meter costs a step,
which differences between processes and between seconds on a shared machine would drown.
``--thread-clocks PREFIX`` (with ``--timing``) also writes, at each step's end, the CPU time
so far of the threads whose names start with PREFIX (``trainpace``: the Meter's sampler and
writer), for the benchmark to tell the steps those threads ran in from the others.
``--burn-ms MS`` starts a control thread, ``control-burn``, that spins MS milliseconds of its
CPU in Python (holding the GIL, as the writer's work does) twice a second: a known cost for
that measure to find (``--burn-ms 0``: it wakes and does nothing, a cost of about none);
``--burn-in c``: in C with the GIL released (hashing), for the cost of the CPU alone.
``--persistent-workers``: ``dcgan``'s DataLoader keeps its worker from one epoch to the next,
as trainpace's report on it advises (the others have no workers).
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import json
import threading
import time
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any


def arguments(description: str, steps: int) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("--steps", type=int, default=steps, help="optimizer steps to run")
    parser.add_argument("--meter", metavar="DIR", help="measure with trainpace.Meter(out=DIR)")
    parser.add_argument("--timing", metavar="FILE", help="write the loop's times to FILE")
    parser.add_argument("--alternate", action="store_true",
                        help="with --meter: meter steps 1 and 2 of every 4, the others bare")
    parser.add_argument("--thread-clocks", metavar="PREFIX",
                        help="write the CPU time of the threads named PREFIX* at each step's end")
    parser.add_argument("--burn-ms", type=float, metavar="MS",
                        help="a control thread spins MS ms of CPU twice a second (0: it only "
                             "wakes)")
    parser.add_argument("--persistent-workers", action="store_true",
                        help="a DataLoader with workers keeps them from one epoch to the next "
                             "(trainpace's advice for dcgan)")
    parser.add_argument("--burn-in", choices=("python", "c"), default="python",
                        help="the control thread spins in Python (holding the GIL) or in C "
                             "(the GIL released)")
    return parser.parse_args()


class Watch:
    """The Meter when ``--meter`` asked for one, else pass-throughs; and the loop's timer."""

    def __init__(self, args: argparse.Namespace) -> None:
        self._args = args
        self.meter: Any = None
        if args.meter:
            import trainpace

            self.meter = trainpace.Meter(out=args.meter, console=False, report=False)
        self._alternate = bool(args.meter and args.alternate)
        self._metered_now = False
        self._ends_s: list[float] = []
        self._cpu_ends_s: list[float] = []  # the process's CPU time at each step's end
        self._epoch_starts: list[int] = []  # the steps that took an epoch's first batch
        self._start_epoch_s = time.time()  # the benchmark's clock across processes
        self._start_s = time.perf_counter()
        self._start_cpu_s = time.process_time()
        # the watched threads' CPU clocks (found once their threads run: the sampler starts
        # with the first step) and their CPU time at each step's end
        self._clocks: list[int] | None = None
        self._threads_cpu_ends_s: list[float] = []
        if args.burn_ms is not None:
            threading.Thread(target=_burn, args=(args.burn_ms / 1e3, args.burn_in == "c"),
                             name="control-burn", daemon=True).start()

    def loader(self, batches: Iterable[Any]) -> Iterator[Any]:
        # an epoch begins: the next step waits for the loader's start (its workers')
        self._epoch_starts.append(len(self._ends_s))
        if self.meter is None:
            return iter(batches)
        if not self._alternate:
            return iter(self.meter.loader(batches))
        return self._alternating(batches)

    def _alternating(self, batches: Iterable[Any]) -> Iterator[Any]:
        """The batches of the metered steps come through the Meter's loader, the others
        straight from the same iterator: its cost per batch is in the metered steps too."""
        bare = iter(batches)
        metered = iter(self.meter.loader(bare))  # the same iterator, each next() timed
        while True:
            try:
                yield next(metered if len(self._ends_s) % 4 in (1, 2) else bare)
            except StopIteration:
                return

    def step(self, batch: Any) -> contextlib.AbstractContextManager[Any]:
        # ABBA: of every four steps the middle two are metered, so that a drift of the
        # machine's speed within the four falls on both kinds alike
        self._metered_now = self.meter is not None and (
            not self._alternate or len(self._ends_s) % 4 in (1, 2))
        return self.meter.step(batch) if self._metered_now else contextlib.nullcontext()

    def observe(self, loss: Any) -> None:
        if self._metered_now:
            self.meter.observe(loss=loss)

    def tick(self) -> None:
        """A step has ended (called after it, outside the Meter's step)."""
        self._ends_s.append(time.perf_counter() - self._start_s)
        self._cpu_ends_s.append(time.process_time() - self._start_cpu_s)
        if self._args.thread_clocks:
            if len(self._ends_s) <= 2:  # the first two ends: every watched thread runs
                self._clocks = thread_clocks(self._args.thread_clocks)
            self._threads_cpu_ends_s.append(sum(map(time.clock_gettime, self._clocks or ())))

    def done(self) -> None:
        loop_s = time.perf_counter() - self._start_s
        loop_cpu_s = time.process_time() - self._start_cpu_s
        threads = thread_cpu_s()  # before finish(): trainpace's threads are still running
        if self.meter is not None:
            self.meter.finish()
        if self._args.timing:
            Path(self._args.timing).write_text(json.dumps(
                {"loop_s": loop_s, "loop_cpu_s": loop_cpu_s, "ends_s": self._ends_s,
                 "cpu_ends_s": self._cpu_ends_s, "alternate": self._alternate,
                 "epoch_starts": self._epoch_starts,
                 "threads_cpu_ends_s": self._threads_cpu_ends_s,
                 "threads_cpu_s": threads, "loop_start_epoch_s": self._start_epoch_s,
                 "loop_end_epoch_s": self._start_epoch_s + loop_s}))


def thread_clocks(prefix: str) -> list[int]:
    """The CPU clocks of the threads whose names start with ``prefix``."""
    return [time.pthread_getcpuclockid(thread.ident) for thread in threading.enumerate()
            if thread.name.startswith(prefix) and thread.ident is not None]


def _burn(burst_s: float, in_c: bool) -> None:
    """The control thread: ``burst_s`` of its CPU twice a second, in Python or in C (hashing
    64 kB at a time, about 30 µs, which releases the GIL)."""
    data = bytes(1 << 16)
    while True:
        time.sleep(0.5)
        start_s = time.thread_time()
        while time.thread_time() - start_s < burst_s:
            if in_c:
                hashlib.sha256(data)


def thread_cpu_s() -> dict[str, float]:
    """CPU seconds of each Python thread of this process so far, by name (from the threads'
    CPU clocks): the main thread runs the loop and trainpace's hooks, the others are
    trainpace's sampler and writer (torch's own threads are in none of them)."""
    out: dict[str, float] = {}
    for thread in threading.enumerate():
        if thread.ident is None:
            continue
        try:
            cpu_s = time.clock_gettime(time.pthread_getcpuclockid(thread.ident))
        except (AttributeError, OSError):  # not on this platform, or the thread has ended
            continue
        out[thread.name] = out.get(thread.name, 0.0) + cpu_s
    return out
