"""Timing a framework's own train DataLoader with ``Meter.loader``, without replacing it.

Lightning and the Hugging Face Trainer keep their loader in objects of their own (a combined
loader, a local variable of the training loop) and check its type and attributes (samplers
for DDP, ``set_epoch``, lengths). So the loader object stays the same object: only its class
is swapped for a subclass whose ``__iter__`` goes through the meter, and swapped back at the
end. Every attribute, ``isinstance`` check and ``len()`` is untouched.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from trainpace.meter import Meter
    from trainpace.meter.ledger import JobLedger

_METERED = "_trainpace_metered"  # the instance's MeteredLoader
_ITERATIONS = "_trainpace_iterations"  # the instance's Iterations (told of every fetch)
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
    iterations: Iterations | None = self.__dict__.get(_ITERATIONS)
    if iterations is None:
        return iter(self.__dict__[_METERED])
    return iterations.fetches(self.__dict__[_METERED])


def _set_class(obj: Any, cls: type) -> None:
    """``obj.__class__ = cls``, beneath a ``__class__`` property if the class has one
    (Accelerate's DataLoaderShard reports its inner DataLoader's class through one)."""
    object.__dict__["__class__"].__set__(obj, cls)


def meter_loader(loader: Any, meter: Meter, iterations: Iterations | None = None) -> bool:
    """Make every later ``iter(loader)`` a metered iteration (whose fetches end the
    ``iterations``' finished step, when given). False when the object's class cannot be
    swapped (a builtin or slotted iterable): the caller says so once."""
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
        if iterations is not None:
            loader.__dict__[_ITERATIONS] = iterations
        _set_class(loader, swapped)
    except TypeError:
        loader.__dict__.pop(_METERED, None)
        loader.__dict__.pop(_ITERATIONS, None)
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
    loader.__dict__.pop(_ITERATIONS, None)


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


class Iterations:
    """Trainpace's step as the framework's whole training iteration (Lightning, the HF Trainer).

    A step opens at the framework's hook before the user's work (``user_begins``) and, once the
    optimizer stepped (``user_ends(stepped=True)``), stays open until the next batch is fetched:
    whatever the framework does per iteration after the user's hooks (its logging, a
    collective before each batch, ...) is inside the step, as it is inside the wall time of the
    training. Only :meth:`interrupt` (an evaluation, a checkpoint save, the end of training)
    closes a finished step early, so that what follows is outside the steps. The job's progress
    map counts a step done from its optimizer step on (a kill before the next fetch loses no
    step the framework did), while its time runs on to the fetch.

    The time inside the user's hooks and inside the loader is timed on the same clock, so the
    rest of each iteration is measured, not guessed: the framework's own work per step
    (:meth:`framework_work`), past the first ``skip_steps`` steps (warm-up).
    """

    def __init__(self, meter: Meter, clock: Callable[[], float], *, skip_steps: int) -> None:
        self.meter = meter
        self.clock = clock
        self._step: Any = None  # the open step's context
        self._stepped = False  # its optimizer stepped: it ends at the next fetch
        self._since: float | None = None  # where the open iteration began (None: not yet)
        self._user_from: float | None = None
        self._user_s = 0.0  # inside the user's hooks, this iteration
        self._fetch_s = 0.0  # inside the loader, this iteration
        self._skip = skip_steps
        # the job's ledger (None: none, or not this rank's): told of each optimizer step
        self._ledger: JobLedger | None = meter._job_ledger
        self.closed = 0  # steps closed
        self.framework_s = 0.0  # past the skipped steps: the framework's own work
        self.iteration_s = 0.0  # past the skipped steps: the iterations, in all
        self.framework_steps: dict[int, int] = {}  # trainpace's step -> the framework's step

    @property
    def open(self) -> bool:
        """Whether a step is open (its optimizer may have stepped already)."""
        return self._step is not None

    def framework_step(self, step: int) -> int:
        """The framework's step for trainpace's ``step`` (its own number when unknown); the
        steps up to it are forgotten (windows come in order)."""
        at = self.framework_steps.get(step, step)
        for done in [key for key in self.framework_steps if key <= step]:
            del self.framework_steps[done]
        return at

    # -- the framework's hooks ------------------------------------------------------------

    def user_begins(self, batch: Any = None) -> None:
        """The framework is about to run the user's work for a batch: open the step at its
        first micro-batch (``batch`` is counted only when no loader batch of it was).

        A finished step still open here was not ended by a fetch: the batches came from a
        loader trainpace does not see (HF's resume skips its first batches through a loader
        of its own), so it ends now, without the fetch in it."""
        if self._stepped:
            self._close()
        if self._step is None:
            self._step = self.meter.step(batch)
            self._step.__enter__()
        self._user_from = self.clock()

    def user_ends(self, *, stepped: bool, framework_step: int) -> None:
        """The user's work for a batch is done; ``stepped``: the optimizer stepped, and the
        framework's loggers draw this step at ``framework_step``."""
        if self._user_from is not None:
            self._user_s += self.clock() - self._user_from
            self._user_from = None
        if stepped and self._step is not None:
            self._stepped = True
            self.framework_steps[self.closed + 1] = framework_step
            if self._ledger is not None:  # done for a kill from now, though still open
                self._ledger.optimizer_stepped()

    def interrupt(self) -> None:
        """Non-training work begins (evaluation, a checkpoint save, the end): a finished
        step ends here, and the time until the next fetch is outside the steps."""
        self._close()
        self._since = None

    def abandon(self, error: BaseException) -> None:
        """The fit ended inside a step that never reached its optimizer step: not a step."""
        if self._step is not None and not self._stepped:
            step, self._step = self._step, None
            step.__exit__(type(error), error, None)
        self.interrupt()

    # -- the loader's side ----------------------------------------------------------------

    def fetches(self, batches: Iterable[Any]) -> Iterator[Any]:
        """An iterator of ``batches`` whose every fetch first ends a finished step. It calls
        ``iter(batches)`` at its first fetch, as part of it: made ahead of the training (the
        fit loop's first iterators), it starts no clock before the first batch is asked for."""
        return _Fetches(self, batches)

    def _fetching(self) -> None:
        if self._stepped:
            self._close()
        if self._since is None:
            self._since = self.clock()

    def framework_work(self) -> dict[str, Any] | None:
        """The framework's own work per step (None before a step past the skipped ones)."""
        steps = self.closed - self._skip
        if steps <= 0 or self.iteration_s <= 0:
            return None
        return {"steps": steps, "work_s_per_step": self.framework_s / steps,
                "step_s_mean": self.iteration_s / steps,
                "work_pct": 100.0 * self.framework_s / self.iteration_s}

    def _close(self) -> None:
        if self._step is None or not self._stepped:
            return
        step, self._step = self._step, None
        self._stepped = False
        step.__exit__(None, None, None)
        now = self.clock()
        self.closed += 1
        if self._since is not None and self.closed > self._skip:
            iteration_s = now - self._since
            self.iteration_s += iteration_s
            self.framework_s += max(0.0, iteration_s - self._user_s - self._fetch_s)
        self._since = now
        self._user_s = self._fetch_s = 0.0


def warmup_steps(meter: Meter) -> int:
    """The steps a framework-work figure leaves out: the Meter's fixed warm-up, else the
    first step (start-up)."""
    warmup = meter.config.warmup
    return warmup if isinstance(warmup, int) else 1


def framework_note(name: str, iterations: Iterations) -> dict[str, Any]:
    """meta.json's ``framework``: which framework ran the loop and its measured work per step."""
    work = iterations.framework_work()
    return {"name": name, **work} if work is not None else {"name": name}


class _Fetches:
    """See :meth:`Iterations.fetches`."""

    __slots__ = ("_batches", "_iterations", "_iterator")

    def __init__(self, iterations: Iterations, batches: Iterable[Any]) -> None:
        self._iterations = iterations
        self._batches = batches
        self._iterator: Iterator[Any] | None = None

    def __iter__(self) -> _Fetches:
        return self

    def __next__(self) -> Any:
        iterations = self._iterations
        iterations._fetching()
        started = iterations.clock()
        try:
            if self._iterator is None:  # DataLoader workers start here: waiting too
                self._iterator = iter(self._batches)
            return next(self._iterator)
        finally:
            iterations._fetch_s += iterations.clock() - started


class WindowRelay:
    """A sink that hands each window's tags to the training thread, which logs them into the
    framework's own loggers between two steps (loggers are not all thread-safe, and the
    Meter's sinks run on its writer thread).

    The figures are those of the window records the Meter publishes to its sinks: the one
    place that decides what the framework's loggers get, under DDP too (rank 0's loggers get
    the job's merged windows, like the dashboards)."""

    reads_steps = False  # the window figures only (see trainpace.sinks.base.Sink)
    shows_job = True  # under DDP: the job's figures, at rank 0 (see trainpace.meter.outputs)

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
