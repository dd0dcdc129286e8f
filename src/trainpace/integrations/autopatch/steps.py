"""The steps of the training thread, opened and closed on the Meter as the patches see training.

A step opens at the first sign of training after the previous one ended (the patches say
which); it *ends* when its pacing call returns (an optimizer step, or a ``backward()``), and
is *closed*, ``with meter.step()``'s exit, when the loop goes on: what the loop does after
``optimizer.step()`` (``zero_grad()``, a print) is part of its step. Without a metered
DataLoader nothing says when the loop goes on, so a step is closed when it ends, and the next
opens at a module's forward with gradients on (a forward pre-hook, registered only while no
step is open: one call per step, not one per module).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import torch
from torch.nn.modules import module as _module

from trainpace.integrations.blind_spots import Seen

if TYPE_CHECKING:
    from trainpace.meter import Meter

logger = logging.getLogger(__name__)


class _StepMarker:
    """Counted at the end of a step that pulled no batch: ``--samples-per-step`` needs one."""

    __slots__ = ()


STEP_MARKER = _StepMarker()


class PerStep:
    """``Meter(samples=...)`` / ``tokens=`` for a count given per optimizer step: the first
    batch counted in a step (or the step's marker, when it pulled none) carries all of it."""

    def __init__(self, count: int) -> None:
        self.count = count
        self.counted = False

    def __call__(self, batch: Any) -> int:
        if self.counted:
            return 0
        self.counted = True
        return self.count


class Steps:
    """The open step (``meter.step()``'s context), the thread it belongs to, and the batch
    of it not trained on yet; failures of ours are logged once and the script goes on."""

    def __init__(self, meter: Meter, seen: Seen, *, samples: PerStep | None,
                 tokens: PerStep | None) -> None:
        self.meter = meter
        self.seen = seen
        self._samples = samples
        self._tokens = tokens
        self._marker = STEP_MARKER if samples is not None or tokens is not None else None
        self.context: Any = None  # the open meter.step() context, or None
        # The open step's pacing call is done: it is closed when the loop goes on.
        self.ended = False
        # A training DataLoader goes through meter.loader: a step that ended is closed when
        # the loop goes on (the next fetch), and no forward opens one.
        self.loader_metered = False
        # The DataLoader whose latest batch was counted into the open step with no backward()
        # after it, and that batch (set and cleared by the patches, on the hot path): when a
        # new iterator of that loader starts, the batch was left untrained (a peek, as
        # `next(iter(loader))`) and its counts are taken back.
        self.untrained_from: Any = None
        self.untrained_batch: Any = None
        # The steps are one thread's: the first to open one. The hooks are process-wide, so a
        # second training thread (its own model and optimizer) would open and end steps in
        # this one's; its work is left alone, and the report names it.
        self._step_thread: int | None = None  # threading.get_ident() of that thread
        self._forward_handle: Any = None
        self._faults: set[str] = set()

    def elsewhere(self) -> bool:
        """Whether the calling thread is not the one whose steps are recorded (before the
        first step: none is). A thread that is not is remembered by name."""
        step_thread = self._step_thread
        if step_thread is None:
            return False
        ident = threading.get_ident()
        if ident == step_thread:
            return False
        if ident not in self.seen.other_threads:
            self.seen.other_threads[ident] = threading.current_thread().name
        return True

    def open(self) -> None:
        """Open a step (the first sign of training since the last one ended); a step that
        ended is closed first."""
        if self._step_thread is None:  # the first thread to train is the one measured
            self._step_thread = threading.get_ident()
            self.seen.step_thread_name = threading.current_thread().name
        if self.ended:
            self.close()
        if self._forward_handle is not None:
            self.disarm_forward()
        try:
            context = self.meter.step(self._marker)
            context.__enter__()
        except Exception as exc:  # noqa: BLE001 - monitoring never breaks training
            self.fault("starting a step", exc)
            return
        self.context = context
        self.seen.trained = True

    def done(self) -> None:
        """The step's pacing call (its optimizer step, or backward()) returned."""
        if self.loader_metered and self.context is not None:
            self.ended = True  # closed when the loop goes on (what follows is training)
        else:
            self.close()

    def close(self) -> None:
        self.ended = False
        # The step's batches are its own now, trained on or not (it made its optimizer step).
        self.untrained_from = self.untrained_batch = None
        context, self.context = self.context, None
        if context is not None:
            try:
                context.__exit__(None, None, None)
            except Exception as exc:  # noqa: BLE001 - monitoring never breaks training
                self.fault("ending a step", exc)
        if self._samples is not None:
            self._samples.counted = False
        if self._tokens is not None:
            self._tokens.counted = False
        if not self.loader_metered:
            self.arm_forward()

    def settle(self) -> None:
        """A checkpoint save begins: a step whose optimizer step is done is closed first (the
        save holds it; its time is the save's, not the step's)."""
        if self.ended and threading.get_ident() == self._step_thread:
            self.close()

    def end(self) -> None:
        """The patches are removed: a step that ended is closed; one left open (the script
        ended inside it) is closed as failed, so it is not counted."""
        self.untrained_from = self.untrained_batch = None
        if self.ended:  # its optimizer step was done: a whole step
            self.close()
        elif self.context is not None:
            context, self.context = self.context, None
            self.contained("ending the last step", context.__exit__, RuntimeError,
                           RuntimeError("the script ended inside a step"), None)
        self.disarm_forward()  # (after the close, which arms it without a metered DataLoader)

    # -- the batch not trained on yet ---------------------------------------------------------

    def new_iterator(self, loader: Any) -> None:
        """A new iterator of ``loader`` starts: the loop left the one before (a step that
        ended is closed), or peeked at a batch of it (that batch got no backward(): it was
        fetched and left, as ``next(iter(loader))`` to read the batch size, so its samples,
        tokens and micro-batch are taken back out of the open step; the wait for it stays in
        the step: the loop spent that time, only nobody trained on what it got)."""
        if self.ended:
            self.close()
        elif self.untrained_from is loader:
            batch, self.untrained_from, self.untrained_batch = self.untrained_batch, None, None
            if self.context is not None:
                self.contained("taking back an untrained batch", self.meter._take_back, batch)

    # -- before any DataLoader is metered, a forward opens a step -----------------------------

    def arm_forward(self) -> None:
        if self._forward_handle is None:
            self._forward_handle = _module.register_module_forward_pre_hook(self._forward_pre)

    def disarm_forward(self) -> None:
        if self._forward_handle is not None:
            self._forward_handle.remove()
            self._forward_handle = None

    def _forward_pre(self, module: torch.nn.Module, args: Any) -> None:
        if ((self.context is None or self.ended) and torch.is_grad_enabled()
                and not self.elsewhere()):
            self.open()

    # -- failures of ours ---------------------------------------------------------------------

    def contained(self, where: str, fn: Callable[..., Any], *args: Any) -> None:
        try:
            fn(*args)
        except Exception as exc:  # noqa: BLE001 - monitoring never breaks training
            self.fault(where, exc)

    def fault(self, where: str, exc: BaseException) -> None:
        if where in self._faults:
            return
        self._faults.add(where)
        logger.warning("trainpace: %s failed (%s: %s); the script goes on, the figures may "
                       "miss it", where, type(exc).__name__, exc)
