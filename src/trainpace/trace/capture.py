"""Record a profiler trace of a few steady steps, for ``Meter(profile_steps=(start, stop))``.

The Meter drives a :class:`ProfileWindow`: ``step_begin(n)`` at the start of step n's cycle
(before its batch is fetched, so the DataLoader shows inside the step) and ``step_end(n)``
when the step is done; ``ProfilerStep#n`` runs from one step's begin to the next one's, the
Meter's step cycle. Outside the window both are a comparison or two. Inside, the
profiler records the host and, where CUDA is available, the device; ``ProfilerStep#n`` spans
carry the Meter's own step numbers. At the end of the window the trace is written to
``out_dir`` as gzip, and :meth:`ProfileWindow.analyze` reads it back at the end of the run.

Nothing here raises into the training loop: a failure is logged once and the window gives up.
"""

from __future__ import annotations

import contextlib
import logging
from pathlib import Path
from typing import Any

from trainpace.errors import ConfigError
from trainpace.trace.findings import TraceAnalysis

logger = logging.getLogger(__name__)


def _rank() -> int:
    try:
        import torch.distributed as dist

        return int(dist.get_rank()) if dist.is_available() and dist.is_initialized() else 0
    except Exception:  # noqa: BLE001 - naming the file must never fail the window
        return 0


def _record_always(step: int) -> Any:
    from torch.profiler import ProfilerAction

    return ProfilerAction.RECORD


class ProfileWindow:
    """Profile the steps ``start_step <= n < stop_step`` (1-based, like the Meter's steps).

    Record three steps or more: like HTA, the analysis leaves out the last profiled step,
    whose device work may be cut off when the profiler stops.
    """

    def __init__(self, start_step: int, stop_step: int, out_dir: str | Path) -> None:
        if isinstance(start_step, bool) or start_step < 1:
            raise ConfigError("profile_steps start", start_step, "must be an int >= 1")
        if isinstance(stop_step, bool) or stop_step <= start_step:
            raise ConfigError("profile_steps stop", stop_step,
                              f"must be an int > the start ({start_step})")
        self.start_step = start_step
        self.stop_step = stop_step
        self.out_dir = Path(out_dir)
        self._profiler: Any = None
        self._state = "waiting"  # -> recording -> done | failed
        self._path: Path | None = None

    @property
    def trace_path(self) -> Path | None:
        """The trace written at the end of the window; None before, or if it failed."""
        return self._path

    @property
    def recording(self) -> bool:
        return self._state == "recording"

    def _give_up(self, what: str, exc: BaseException) -> None:
        logger.warning("trainpace: profile window disabled: %s failed (%s: %s)",
                       what, type(exc).__name__, exc)
        self._state = "failed"
        profiler, self._profiler = self._profiler, None
        if profiler is not None:
            with contextlib.suppress(Exception):  # already failed: stopping is best effort
                profiler.stop()

    def step_begin(self, step: int) -> None:
        """Start profiling at the window's first step; mark each later step's start."""
        if self._state == "recording":
            try:
                self._profiler.step()  # ends ProfilerStep#<step - 1>, opens #<step>
            except Exception as exc:  # noqa: BLE001 - never into the training loop
                self._give_up("recording the profile", exc)
            return
        if step != self.start_step or self._state != "waiting":
            return
        try:
            import torch
            from torch.profiler import ProfilerActivity, profile

            activities = [ProfilerActivity.CPU]
            if torch.cuda.is_available():
                activities.append(ProfilerActivity.CUDA)
            # A schedule (always RECORD) is what makes the profiler mark ProfilerStep#n spans.
            profiler = profile(activities=activities, record_shapes=False, with_stack=False,
                               schedule=_record_always)
            profiler.step_num = step  # ProfilerStep#<the Meter's step number>
            profiler.start()
            self._profiler = profiler
            self._state = "recording"
        except Exception as exc:  # noqa: BLE001 - never into the training loop
            self._give_up("starting torch.profiler", exc)

    def step_end(self, step: int) -> None:
        """Stop and write the trace after the window's last step."""
        if self._state != "recording" or step < self.stop_step - 1:
            return
        try:
            self._finish()
        except Exception as exc:  # noqa: BLE001 - never into the training loop
            self._give_up("writing the profile", exc)

    def close(self) -> None:
        """End a window the run did not reach the end of, keeping what was recorded."""
        if self._state == "recording":
            try:
                self._finish()
            except Exception as exc:  # noqa: BLE001 - never into the training loop
                self._give_up("writing the profile", exc)

    def _finish(self) -> None:
        profiler, self._profiler = self._profiler, None
        profiler.stop()
        self._state = "done"
        self.out_dir.mkdir(parents=True, exist_ok=True)
        path = self.out_dir / f"profile_rank{_rank()}.pt.trace.json.gz"
        profiler.export_chrome_trace(str(path))
        self._path = path

    def analyze(self, **options: Any) -> TraceAnalysis | None:
        """Analyze the recorded trace (``analyze_traces`` options); None if there is none or
        the analysis failed (logged)."""
        self.close()
        if self._path is None:
            return None
        try:
            from trainpace.trace.analyze import analyze_traces

            return analyze_traces([self._path], **options)
        except Exception as exc:  # noqa: BLE001 - the run's own results must still come out
            logger.warning("trainpace: could not analyze the profile %s (%s: %s)",
                           self._path, type(exc).__name__, exc)
            return None
