"""Metering a script that knows nothing of trainpace (``trainpace run``).

:class:`AutoPatch` drives a :class:`~trainpace.Meter` through its public API from hooks that
PyTorch calls anyway, so the figures are the Meter's own:

- **batches**: ``torch.utils.data.DataLoader.__iter__`` is replaced while installed, and each
  DataLoader iterated with gradients enabled goes through ``meter.loader`` (the wait per batch,
  samples and tokens counted from what it yields). A wrapper the script puts around a
  DataLoader iterates it, so it is covered too. A DataLoader iterated under ``torch.no_grad()``
  or ``torch.inference_mode()`` is taken for evaluation and left alone. A batch fetched and
  left before any ``backward()`` followed it (``next(iter(loader))`` to read the batch size)
  is taken back out of the step's counts when a new iterator of the same loader starts; the
  wait for it stays in the step;
- **step boundaries**: the optimizer step hooks (``register_optimizer_step_pre_hook`` /
  ``post_hook``, global: every optimizer calls them). A step opens at the first sign of
  training after the previous optimizer step (a batch from a metered DataLoader; before any
  DataLoader was metered, a module's forward with gradients on; a ``backward()``; the
  optimizer's own step) and ends when the *pacer* finishes its ``step()``: the first optimizer
  that ever stepped, until another one steps twice without it (a second training loop with
  its own optimizer), which then paces. The batches pulled in between are the step's
  micro-batches, so gradient accumulation is inferred. With several optimizers stepping in
  turn (a GAN) the others step inside. A script that makes no ``torch.optim`` optimizer
  while installed (``Optimizer.__init__`` is patched to count them) and steps none is paced
  by ``backward()`` instead: each one ends a step (with a metered DataLoader, all the
  backward() calls on one batch are its step). Once an optimizer exists, backward() ends
  nothing, so several backward() calls per optimizer step (accumulation) stay one step.
  Either way a step ends, so what trainpace does on the first step only (the FLOP count)
  ends with it;
- **the end of a step**: what the loop does after ``optimizer.step()`` (``zero_grad()``, a
  print, a scheduler step) is part of training, so a step that ended is closed only when the
  loop goes on: right before the next ``next()`` on a metered iterator (the next batch, or the
  one that finds the loader exhausted), at the pacer's next ``step()`` (several steps on one
  batch), or when the loop leaves the training iterator (a DataLoader's ``iter()``: a new
  epoch, an evaluation loader; a ``break`` out of the loop, which finalizes the iterator).
  What follows the close until the next batch (an evaluation between epochs) is the Meter's
  time outside the steps. Without a metered DataLoader the Meter measures no time outside the
  steps, and a step is closed at its optimizer step;
- **the loss**: the scalar tensor passed to ``backward()`` (``torch.autograd.backward``, which
  ``Tensor.backward`` calls), handed to ``meter.observe(loss=...)``: kept on the device, read at
  the window boundary, never synchronized. Under a ``GradScaler`` that tensor is the scaled
  loss: ``GradScaler.scale`` is patched to remember which tensor it made from which, and the
  loss before scaling is the one kept.

Everything is undone by :meth:`AutoPatch.remove`. A failure of ours inside a hook is logged
once (logger ``trainpace``) and the script goes on.

Running the script itself is :mod:`trainpace.integrations._script` (no torch import there, so
a bad command line is answered at once).
"""

from __future__ import annotations

import logging
import threading
import weakref
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any

import torch
import torch.autograd
from torch.amp.grad_scaler import GradScaler
from torch.nn.modules import module as _module
from torch.optim import optimizer as _optimizer
from torch.utils.data import DataLoader

from trainpace.integrations.blind_spots import blind_spots
from trainpace.meter.checkpoints import CheckpointPatches
from trainpace.summary import Finding

if TYPE_CHECKING:
    from trainpace.meter import Meter

__all__ = ["STEP_MARKER", "AutoPatch", "PerStep"]

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


class AutoPatch:
    """Meters whatever training runs while installed (``with AutoPatch(meter):``).

    ``samples_per_step`` / ``tokens_per_step``: the counts of each optimizer step, for a
    script that pulls no batch from a DataLoader; the same objects must be given to the
    Meter as ``samples=`` / ``tokens=`` (:meth:`counters` makes them).
    """

    def __init__(self, meter: Meter, *, samples: PerStep | None = None,
                 tokens: PerStep | None = None) -> None:
        self.meter = meter
        self._samples = samples
        self._tokens = tokens
        self._marker = STEP_MARKER if samples is not None or tokens is not None else None
        self._context: Any = None  # the open meter.step() context, or None
        # The DataLoader whose latest batch was counted into the open step with no backward()
        # after it, and that batch: when a new iterator of that loader starts, the batch was
        # left untrained (a peek, as `next(iter(loader))`) and its counts are taken back.
        self._untrained_from: DataLoader[Any] | None = None
        self._untrained_batch: Any = None
        # The open step's optimizer step is done: it is closed when the loop goes on.
        self._ended = False
        # (the tensor GradScaler.scale made, the one it was made from): the loss to keep
        # when the former reaches backward().
        self._scaled: tuple[weakref.ref[torch.Tensor], torch.Tensor] | None = None
        self._original_scale: Callable[..., Any] | None = None
        self._pacer: int | None = None  # id() of the optimizer whose step() ends a step
        # The pacer itself, while installed (compared by identity on the hot path).
        self._pacer_optimizer: torch.optim.Optimizer | None = None
        self._handles: list[Any] = []
        self._forward_handle: Any = None
        self._original_iter: Callable[[Any], Iterator[Any]] | None = None
        self._original_backward: Callable[..., Any] | None = None
        self._original_optimizer_init: Callable[..., Any] | None = None
        self._faults: set[str] = set()
        self._entering = False
        # What was seen, for the report's "what trainpace run could not see".
        self.optimizer_steps = 0
        self.optimizers: dict[int, str] = {}  # id -> class name, in the order they stepped
        self.pacers: list[str] = []  # class names of the optimizers that paced, in turn
        # Steps of each other optimizer since the pacer's last one: two make it the pacer.
        self._steps_without_pacer: dict[int, int] = {}
        self.loaders_metered = 0
        self.loaders_skipped = 0  # iterated under no_grad: taken for evaluation
        self.backward_calls = 0
        self.optimizers_made = 0  # torch.optim optimizers constructed while installed
        self.trained = False  # a step was opened (the script got as far as training)
        # The steps are one thread's: the first to open one. The hooks are process-wide, so a
        # second training thread (its own model and optimizer) would open and end steps in
        # this one's; its work is left alone, and the report names it.
        self._step_thread: int | None = None  # threading.get_ident() of that thread
        self.step_thread_name: str | None = None
        self.other_threads: dict[int, str] = {}  # ident -> name, of threads left alone
        self._checkpoints: CheckpointPatches | None = None

    @staticmethod
    def counters(samples_per_step: int | None,
                 tokens_per_step: int | None) -> tuple[PerStep | None, PerStep | None]:
        """The ``samples=`` / ``tokens=`` overrides for per-step counts (None: counted)."""
        return (PerStep(samples_per_step) if samples_per_step is not None else None,
                PerStep(tokens_per_step) if tokens_per_step is not None else None)

    # -- install / remove -----------------------------------------------------------------

    def install(self) -> None:
        """Patch DataLoader iteration and backward(); register the optimizer step hooks."""
        original_iter = DataLoader.__iter__
        self._original_iter = original_iter
        patch = self

        def __iter__(loader: DataLoader[Any]) -> Iterator[Any]:  # noqa: N807 - the patched dunder
            return patch._iterate(loader)

        DataLoader.__iter__ = __iter__  # type: ignore[method-assign,assignment]
        self._original_backward = torch.autograd.backward
        torch.autograd.backward = self._backward
        original_scale = GradScaler.scale
        self._original_scale = original_scale

        def scale(scaler: GradScaler, outputs: Any) -> Any:
            scaled = original_scale(scaler, outputs)
            if scaled is not outputs and isinstance(scaled, torch.Tensor):
                patch._remember_scaled(scaled, outputs)
            return scaled

        GradScaler.scale = scale  # type: ignore[method-assign,assignment]
        original_init = _optimizer.Optimizer.__init__
        self._original_optimizer_init = original_init

        def __init__(optimizer: torch.optim.Optimizer, *args: Any, **kwargs: Any) -> None:  # noqa: N807 - the patched dunder
            patch.optimizers_made += 1
            original_init(optimizer, *args, **kwargs)

        _optimizer.Optimizer.__init__ = __init__  # type: ignore[method-assign,assignment]
        self._handles = [
            _optimizer.register_optimizer_step_pre_hook(self._pre_step),
            _optimizer.register_optimizer_step_post_hook(self._post_step),
        ]
        self._arm_forward()
        ledger = self.meter._ledger
        if ledger is not None:  # torch.save/load and DCP's, timed into the job's ledger
            self._checkpoints = CheckpointPatches(ledger, before_save=self._settle)
            self._checkpoints.install()

    def remove(self) -> None:
        """Undo everything; a step left open (the script ended inside one) is not counted."""
        if self._checkpoints is not None:
            self._checkpoints.remove()
            self._checkpoints = None
        if self._original_iter is not None:
            DataLoader.__iter__ = self._original_iter  # type: ignore[method-assign,assignment]
            self._original_iter = None
        if self._original_backward is not None:
            torch.autograd.backward = self._original_backward
            self._original_backward = None
        if self._original_scale is not None:
            GradScaler.scale = self._original_scale  # type: ignore[method-assign]
            self._original_scale = None
        if self._original_optimizer_init is not None:
            _optimizer.Optimizer.__init__ = self._original_optimizer_init  # type: ignore[method-assign]
            self._original_optimizer_init = None
        self._scaled = None
        self._untrained_from = self._untrained_batch = None
        for handle in self._handles:
            handle.remove()
        self._handles = []
        self._disarm_forward()
        self._pacer_optimizer = None
        if self._ended:  # its optimizer step was done: a whole step
            self._close()
        elif self._context is not None:
            context, self._context = self._context, None
            # An unfinished step: closed as failed, so it is not counted as a step.
            self._contained("ending the last step", context.__exit__, RuntimeError,
                            RuntimeError("the script ended inside a step"), None)

    def __enter__(self) -> AutoPatch:
        self.install()
        return self

    def __exit__(self, *exc: object) -> None:
        self.remove()

    # -- the hooks (hot path) -------------------------------------------------------------

    def _iterate(self, loader: DataLoader[Any]) -> Iterator[Any]:
        original = self._original_iter
        if original is None:  # removed while a reference to the patched method lived on
            return DataLoader.__iter__(loader)
        if self._entering or self._elsewhere():  # meter.loader's own iter(); another thread
            return original(loader)
        if self._ended:  # the loop left its iterator (a new epoch, an evaluation loader)
            self._close()
        elif self._untrained_from is loader:
            self._untrain()
        if not torch.is_grad_enabled():
            self.loaders_skipped += 1
            return original(loader)
        self.loaders_metered += 1
        try:
            metered = self.meter.loader(loader)  # its settings are read from the DataLoader
        except Exception as exc:  # noqa: BLE001 - monitoring never breaks training
            self._fault("wrapping a DataLoader", exc)
            return original(loader)
        # The wrapper's iter() calls DataLoader.__iter__ again (that is timed: workers start
        # there); this time it must reach the original.
        self._entering = True
        try:
            iterator = iter(metered)
        finally:
            self._entering = False
        # From now on a step opens at its first batch, as `with meter.step()` right after the
        # fetch would; the forward hook (registered and removed once per step, a module call on
        # torch's slow path) is no longer needed.
        self._disarm_forward()
        return self._opening(iterator, loader)

    def _opening(self, iterator: Iterator[Any], loader: DataLoader[Any]) -> Iterator[Any]:
        try:
            while True:
                if self._ended:  # the loop goes on: the step that ended is closed here
                    self._close()
                try:
                    batch = next(iterator)
                except StopIteration:
                    return
                if self._context is None:
                    self._open()
                self._untrained_from, self._untrained_batch = loader, batch
                yield batch
        finally:  # exhausted, or the loop broke out (the iterator is finalized)
            if self._ended:
                self._close()

    def _elsewhere(self) -> bool:
        """Whether the calling thread is not the one whose steps are recorded (before the
        first step: none is). A thread that is not is remembered by name."""
        step_thread = self._step_thread
        if step_thread is None:
            return False
        ident = threading.get_ident()
        if ident == step_thread:
            return False
        if ident not in self.other_threads:
            self.other_threads[ident] = threading.current_thread().name
        return True

    def _open(self) -> None:
        """Open a step (the first sign of training since the last optimizer step); a step
        that ended is closed first."""
        if self._step_thread is None:  # the first thread to train is the one measured
            self._step_thread = threading.get_ident()
            self.step_thread_name = threading.current_thread().name
        if self._ended:
            self._close()
        if self._forward_handle is not None:
            self._disarm_forward()
        try:
            context = self.meter.step(self._marker)
            context.__enter__()
        except Exception as exc:  # noqa: BLE001 - monitoring never breaks training
            self._fault("starting a step", exc)
            return
        self._context = context
        self.trained = True

    def _untrain(self) -> None:
        """A new iterator of the loader whose latest batch got no backward(): that batch was
        fetched and left (``next(iter(loader))`` to read the batch size), so its samples,
        tokens and micro-batch are taken back out of the open step. The wait for it stays in
        the step: the loop spent that time, only nobody trained on what it got."""
        batch, self._untrained_from, self._untrained_batch = self._untrained_batch, None, None
        if self._context is not None and not self.meter._loop.finished:
            self._contained("taking back an untrained batch", self.meter._recorder.uncount,
                            batch)

    def _close(self) -> None:
        self._ended = False
        # The step's batches are its own now, trained on or not (it made its optimizer step).
        self._untrained_from = self._untrained_batch = None
        context, self._context = self._context, None
        if context is not None:
            try:
                context.__exit__(None, None, None)
            except Exception as exc:  # noqa: BLE001 - monitoring never breaks training
                self._fault("ending a step", exc)
        if self._samples is not None:
            self._samples.counted = False
        if self._tokens is not None:
            self._tokens.counted = False
        if not self.loaders_metered:
            self._arm_forward()

    def _settle(self) -> None:
        """A checkpoint save begins: a step whose optimizer step is done is closed first (the
        save holds it; its time is the save's, not the step's)."""
        if self._ended and threading.get_ident() == self._step_thread:
            self._close()

    def _forward_pre(self, module: torch.nn.Module, args: Any) -> None:
        # Registered only while no step is open: one call per step, not one per module.
        if ((self._context is None or self._ended) and torch.is_grad_enabled()
                and not self._elsewhere()):
            self._open()

    def _backward(self, tensors: Any, *args: Any, **kwargs: Any) -> Any:
        original = self._original_backward
        if original is None:
            return torch.autograd.backward(tensors, *args, **kwargs)
        if self._elsewhere():
            return original(tensors, *args, **kwargs)
        self.backward_calls += 1
        self._untrained_from = self._untrained_batch = None  # its batches are trained on
        # After the step's optimizer step, a backward() is still its own (a GAN's second
        # network): the step is one whole iteration, as a `with meter.step()` body would be.
        if self._context is None:
            self._open()
        if type(tensors) is torch.Tensor or isinstance(tensors, torch.Tensor):
            try:
                if tensors.numel() == 1:  # a loss; a vector-Jacobian product is not one
                    loss = tensors
                    scaled = self._scaled
                    if scaled is not None and scaled[0]() is tensors:
                        loss = scaled[1]  # as it was before GradScaler.scale
                        self._scaled = None
                    self.meter.observe(loss=loss)
            except Exception as exc:  # noqa: BLE001 - monitoring never breaks training
                self._fault("keeping the loss", exc)
        done = original(tensors, *args, **kwargs)
        if not (self.optimizers_made or self.optimizers) and self._context is not None:
            self._step_done()  # no optimizer will end the step: its backward() does
        return done

    def _remember_scaled(self, scaled: torch.Tensor, outputs: Any) -> None:
        try:
            if isinstance(outputs, torch.Tensor):
                # Detached: nothing of the graph is kept should backward() never come.
                self._scaled = (weakref.ref(scaled), outputs.detach())
        except Exception as exc:  # noqa: BLE001 - monitoring never breaks training
            self._fault("keeping the loss before scaling", exc)

    def _pre_step(self, optimizer: torch.optim.Optimizer, args: Any, kwargs: Any) -> None:
        if self._elsewhere():
            return
        pacer = self._pacer_optimizer
        if optimizer is not pacer and id(optimizer) not in self.optimizers:
            self._first_step_of(optimizer)
            pacer = self._pacer_optimizer
        # A second step() of the pacer without a batch between is a new step; another
        # optimizer's step() after the pacer's is still this step's (a GAN's generator).
        if self._context is None or (self._ended and optimizer is pacer):
            self._open()

    def _first_step_of(self, optimizer: torch.optim.Optimizer) -> None:
        key = id(optimizer)
        self.optimizers[key] = type(optimizer).__name__
        if self._pacer is None:
            self._pace_with(optimizer)

    def _pace_with(self, optimizer: torch.optim.Optimizer) -> None:
        self._pacer, self._pacer_optimizer = id(optimizer), optimizer
        self.pacers.append(type(optimizer).__name__)
        self._steps_without_pacer.clear()

    def _post_step(self, optimizer: torch.optim.Optimizer, args: Any, kwargs: Any) -> None:
        if self._elsewhere():
            return
        if optimizer is not self._pacer_optimizer:
            key = id(optimizer)
            count = self._steps_without_pacer[key] = self._steps_without_pacer.get(key, 0) + 1
            if count < 2:
                return  # stepping inside the pacer's steps (a GAN's other network)
            # Twice without the pacer: the loop the pacer stepped in is over, this one paces.
            # The step open now holds its two iterations (or what came between the loops).
            self._pace_with(optimizer)
        if self._steps_without_pacer:  # (a GAN's other optimizer stepped): its count restarts
            self._steps_without_pacer.clear()
        self.optimizer_steps += 1
        self._step_done()

    def _step_done(self) -> None:
        """The step's pacing call (its optimizer step, or backward()) returned."""
        if self.loaders_metered and self._context is not None:
            self._ended = True  # closed when the loop goes on (what follows is training)
        else:
            self._close()

    def _arm_forward(self) -> None:
        if self._forward_handle is None:
            self._forward_handle = _module.register_module_forward_pre_hook(self._forward_pre)

    def _disarm_forward(self) -> None:
        if self._forward_handle is not None:
            self._forward_handle.remove()
            self._forward_handle = None

    def _contained(self, where: str, fn: Callable[..., Any], *args: Any) -> None:
        try:
            fn(*args)
        except Exception as exc:  # noqa: BLE001 - monitoring never breaks training
            self._fault(where, exc)

    def _fault(self, where: str, exc: BaseException) -> None:
        if where in self._faults:
            return
        self._faults.add(where)
        logger.warning("trainpace: %s failed (%s: %s); the script goes on, the figures may "
                       "miss it", where, type(exc).__name__, exc)

    # -- what was seen --------------------------------------------------------------------

    @property
    def pacer(self) -> str | None:
        """Class name of the optimizer whose ``step()`` marks the steps (None before one)."""
        return self.optimizers.get(self._pacer) if self._pacer is not None else None

    @property
    def samples_given(self) -> bool:
        """Whether the samples of a step were given (``--samples-per-step``)."""
        return self._samples is not None

    @property
    def tokens_given(self) -> bool:
        """Whether the tokens of a step were given (``--tokens-per-step``)."""
        return self._tokens is not None

    @property
    def saw_batches(self) -> bool:
        """Whether any training DataLoader was metered (or the counts were given)."""
        return self.loaders_metered > 0

    def blind_spots(self) -> list[Finding]:
        """What could not be seen, and why, as findings for the report (empty: all seen)."""
        return blind_spots(self)
