"""Weights & Biases: one history row per window in the active run (or one it starts), the
run's final figures in its summary.

Points are logged without W&B's own ``step=`` (a run shared with the Lightning or Hugging Face
logger has its own step counter, and a step behind it would be dropped); each row carries
``trainpace/step``, declared the x axis of trainpace's tags.
"""

from __future__ import annotations

import atexit
import contextlib
import os
import threading
import weakref
from collections.abc import Callable, Mapping
from typing import Any

from trainpace.errors import MissingDependencyError
from trainpace.runlog import Record
from trainpace.sinks._dropping import DroppingSink
from trainpace.sinks.names import (
    BOTTLENECK_TAG,
    STEP_TAG,
    WINDOW_TAGS,
    bottleneck,
    summary_scalars,
    window_scalars,
    window_step,
)

DEFAULT_PROJECT = "trainpace"
KILLED_SERVICE_WAIT_S = 2.0
"""At exit, how long the W&B calls still waiting on a killed service get to fail and return
(a connection closed fails at once): a thread still inside wandb when the interpreter
finalizes could abort the process."""


class WandbSink(DroppingSink):
    """Logs into ``run`` (a ``wandb`` run object; ``True``: the active run, else a run it
    starts).

    A run it starts is started on first use, on the sink's own thread: ``wandb.init`` waits
    for the server (over a minute when it cannot be reached), and the training must not.

    Nor must the process's exit, and a run never finished (no ``meter.finish()``) must end
    whole: at exit, :meth:`_end_at_exit` lets the W&B call in flight on the sink's thread end
    (a ``wandb.init`` included), then finishes a run it started, all within
    ``finish_timeout_s``; later records are ignored. A thread left inside wandb when the
    interpreter finalizes is unwound by force, which aborts the process (``FATAL: exception
    not rethrown``, exit -6) when the thread is in compiled code; and wandb's own exit hook
    waits for its service without a bound (97 s with an unreachable server). What is not sent
    by the bound is left behind, the service stopped.
    """

    label = "W&B"

    def __init__(self, run: Any = True, *, run_id: str | None = None,
                 finish_timeout_s: float = 5.0) -> None:
        super().__init__()
        try:
            import wandb
        except ImportError as exc:
            raise MissingDependencyError("W&B logging", "wandb") from exc
        self._wandb: Any = wandb
        self._name = run_id
        self._summary: Mapping[str, Any] | None = None
        self._owned = False
        self._finish_timeout_s = finish_timeout_s
        # one W&B call at a time: the sink thread's, or the exit's (which waits for it)
        self._calls = threading.Lock()
        self._exiting = False  # the exit hook has begun: nothing moves it any more
        self._ended = False  # finished (or ended at exit): every later record is ignored
        self.run: Any = None
        # registered now, so that an exit while the run is starting waits for it
        self._exit_hook = _at_exit_of(self)
        atexit.register(self._exit_hook)
        try:
            if run is True or run is None:
                run = wandb.run  # the user's own run, when there is one
            if run is not None:
                self._use(run)
        except Exception as exc:  # noqa: BLE001 - no dashboard is worth stopping the run
            self._drop("starting the W&B run", exc)

    def _use(self, run: Any) -> None:
        self.run = run
        run.define_metric(STEP_TAG)
        for group in sorted({tag.split("/")[0] for tag, _ in WINDOW_TAGS.values()}):
            run.define_metric(f"{group}/*", step_metric=STEP_TAG)

    def _started(self) -> Any:
        """The run, started now if there is none (as the user's own wandb.init() would,
        with the WANDB_* settings)."""
        if self.run is None:
            self._owned = True
            # The service starts here (a local process, no network), and with it wandb's exit
            # hook: this sink's is registered again after it, so that it runs first (atexit
            # runs the last one first) and removes wandb's. Once the exit has begun, the list
            # is the interpreter's: left alone.
            self._wandb.setup()
            if not self._exiting:
                atexit.unregister(self._exit_hook)
                atexit.register(self._exit_hook)
            self._use(self._wandb.init(
                project=os.environ.get("WANDB_PROJECT") or DEFAULT_PROJECT, name=self._name,
                reinit="create_new"))
        return self.run

    def _log(self, record: Record) -> None:
        with self._calls:
            if self._ended:
                return
            if record.kind == "window":
                figures = record.data["window"]
                row: dict[str, Any] = window_scalars(figures)
                if row:
                    row[STEP_TAG] = window_step(figures, record.step)
                    self._started().log(row)
            elif record.kind == "summary":
                self._summary = record.data  # the last one is the run's: written at close
            elif record.kind == "meta":
                self._started().config.update({"trainpace": _meta_config(record.data)},
                                              allow_val_change=True)

    def _close(self) -> None:
        with self._calls:
            if self._ended:
                return
            self._finish()
        atexit.unregister(self._exit_hook)  # finished: the exit has nothing to wait for

    def _finish(self) -> None:
        """The final figures in the run's summary; a run this sink started is finished."""
        self._ended = True
        if self._summary is not None and (self.run is not None or not self._exiting):
            final: dict[str, Any] = summary_scalars(self._summary)
            found = bottleneck(self._summary)
            if found is not None:
                final[BOTTLENECK_TAG] = found
            self._started().summary.update(final)
        if self._owned and self.run is not None:
            self.run.finish()

    def _end_at_exit(self) -> None:
        """At exit, a run never closed: :meth:`_end` on a thread of its own, waited for at
        most ``finish_timeout_s``. A run this sink started whose service is still busy after
        that (sending to an unreachable server) has its service killed, which ends the
        waiting calls; they are given a moment to leave the interpreter."""
        self._exiting = True
        service = _service_process() if self._owned else None  # before a teardown forgets it
        ending = threading.Thread(target=self._end, name="trainpace-wandb-end", daemon=True)
        ending.start()
        ending.join(self._finish_timeout_s)
        if ending.is_alive() and service is None and self._owned:
            service = _service_process()  # started meanwhile (the exit came during its start)
        if ending.is_alive() and service is not None:
            # Still sending to the server: it would outlive this process for a minute and
            # more, holding its stdout and stderr (a pipe reader, `| tee`, waits for it). It
            # ignores SIGTERM while it retries; what it wrote in the run's folder stays.
            with contextlib.suppress(Exception):  # the process is ending: nothing to tell
                service.kill()
            ending.join(KILLED_SERVICE_WAIT_S)

    def _end(self) -> None:
        with self._calls:  # the call in flight (a wandb.init) ends first
            if not (self.dropped or self._ended):
                with contextlib.suppress(BaseException):  # the process is ending: nothing to tell
                    self._finish()
            self._ended = True
        if self._owned:
            # wandb's exit hook is removed here: it would wait for its service unbounded
            with contextlib.suppress(BaseException):
                self._wandb.teardown()


def _at_exit_of(sink: WandbSink) -> Callable[[], None]:
    """An exit hook that does not keep the sink (and its run) alive."""
    ref = weakref.ref(sink)

    def hook() -> None:
        alive = ref()
        if alive is not None:
            alive._end_at_exit()

    return hook


def _service_process() -> Any:
    """The ``subprocess.Popen`` of wandb's service, when this process started it (wandb
    0.31's internals: None where they differ)."""
    try:
        from wandb.sdk import wandb_setup

        connection = getattr(wandb_setup.singleton(), "_connection", None)
        proc = getattr(connection, "_proc", None)
        process = getattr(proc, "_process", None)
    except Exception:  # noqa: BLE001 - another wandb version: no service to end
        return None
    return process if hasattr(process, "kill") else None


def _meta_config(meta: Mapping[str, Any]) -> dict[str, Any]:
    """The parts of meta.json that describe the run's setup (what a config panel shows)."""
    keys = ("run_id", "host", "world_size", "rank", "device", "versions", "config", "loader",
            "tokens_counted")
    return {key: meta.get(key) for key in keys if key in meta}
