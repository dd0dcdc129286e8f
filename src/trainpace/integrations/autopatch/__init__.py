"""Metering a script that knows nothing of trainpace (``trainpace run``).

:class:`AutoPatch` drives a :class:`~trainpace.Meter` through its API from hooks that
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

The parts, one patched thing each, over the step state they share (:mod:`.steps`):
:mod:`.loaders` (``DataLoader.__iter__``), :mod:`.backward` (``torch.autograd.backward``),
:mod:`.scaler` (``GradScaler.scale``), :mod:`.optimizers` (``Optimizer.__init__`` and the step
hooks); the checkpoint saves and loads are the Meter's own patches
(:class:`~trainpace.meter.checkpoints.CheckpointPatches`). Running the script itself is
:mod:`trainpace.integrations._script` (no torch import there, so a bad command line is
answered at once).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from trainpace.integrations.autopatch.backward import BackwardPatch
from trainpace.integrations.autopatch.loaders import LoaderPatch
from trainpace.integrations.autopatch.optimizers import OptimizerPatch
from trainpace.integrations.autopatch.scaler import ScalerPatch
from trainpace.integrations.autopatch.steps import STEP_MARKER, PerStep, Steps
from trainpace.integrations.blind_spots import Seen, blind_spots
from trainpace.meter.checkpoints import CheckpointPatches
from trainpace.summary import Finding

if TYPE_CHECKING:
    from trainpace.meter import Meter

__all__ = ["STEP_MARKER", "AutoPatch", "PerStep"]


class AutoPatch:
    """Meters whatever training runs while installed (``with AutoPatch(meter):``).

    ``samples`` / ``tokens``: the counts of each optimizer step, for a script that pulls no
    batch from a DataLoader; the same objects must be given to the Meter as ``samples=`` /
    ``tokens=`` (:meth:`counters` makes them).
    """

    def __init__(self, meter: Meter, *, samples: PerStep | None = None,
                 tokens: PerStep | None = None) -> None:
        self.meter = meter
        # What was seen, for the report's "what trainpace run could not see".
        self.seen = Seen(samples_given=samples is not None, tokens_given=tokens is not None)
        self._steps = Steps(meter, self.seen, samples=samples, tokens=tokens)
        self._loaders = LoaderPatch(self._steps)
        self._scaler = ScalerPatch(self._steps)
        self._optimizers = OptimizerPatch(self._steps)
        self._backward = BackwardPatch(self._steps, self._scaler)
        self._checkpoints: CheckpointPatches | None = None

    @staticmethod
    def counters(samples_per_step: int | None,
                 tokens_per_step: int | None) -> tuple[PerStep | None, PerStep | None]:
        """The ``samples=`` / ``tokens=`` overrides for per-step counts (None: counted)."""
        return (PerStep(samples_per_step) if samples_per_step is not None else None,
                PerStep(tokens_per_step) if tokens_per_step is not None else None)

    def install(self) -> None:
        """Patch DataLoader iteration, backward(), GradScaler.scale and Optimizer.__init__;
        register the optimizer step hooks and, until a DataLoader is metered, the forward
        pre-hook; time checkpoints into the job's ledger."""
        self._loaders.install()
        self._backward.install()
        self._scaler.install()
        self._optimizers.install()
        self._steps.arm_forward()
        ledger = self.meter._job_ledger
        if ledger is not None:  # torch.save/load and DCP's, timed into the job's ledger
            self._checkpoints = CheckpointPatches(ledger, before_save=self._steps.settle)
            self._checkpoints.install()

    def remove(self) -> None:
        """Undo everything; a step left open (the script ended inside one) is not counted."""
        if self._checkpoints is not None:
            self._checkpoints.remove()
            self._checkpoints = None
        self._loaders.remove()
        self._backward.remove()
        self._scaler.remove()
        self._optimizers.remove()
        self._steps.end()

    def __enter__(self) -> AutoPatch:
        self.install()
        return self

    def __exit__(self, *exc: object) -> None:
        self.remove()

    # -- what was seen --------------------------------------------------------------------

    @property
    def trained(self) -> bool:
        """Whether a step was opened (the script got as far as training)."""
        return self.seen.trained

    @property
    def pacer(self) -> str | None:
        """Class name of the optimizer whose ``step()`` marks the steps (None before one)."""
        return self._optimizers.pacer

    @property
    def samples_given(self) -> bool:
        """Whether the samples of a step were given (``--samples-per-step``)."""
        return self.seen.samples_given

    @property
    def tokens_given(self) -> bool:
        """Whether the tokens of a step were given (``--tokens-per-step``)."""
        return self.seen.tokens_given

    @property
    def saw_batches(self) -> bool:
        """Whether any training DataLoader was metered (or the counts were given)."""
        return self.seen.loaders_metered > 0

    def blind_spots(self) -> list[Finding]:
        """What could not be seen, and why, as findings for the report (empty: all seen)."""
        return blind_spots(self.seen)
