"""Lightning: ``Trainer(callbacks=[TrainpaceCallback(out="runs/exp1")])``.

The callback takes the keywords of :class:`trainpace.Meter` and meters the fit loop as a
hand-written loop is metered:

- the wait for each batch is timed in the train DataLoader itself (its iterations go through
  ``Meter.loader``), not guessed from the gaps between hooks;
- a step is an optimizer step and the whole training iteration: it opens at the first batch
  of an accumulation (``accumulate_grad_batches``), its optimizer steps when
  ``trainer.global_step`` moves, and it ends when the next batch is fetched, so Lightning's
  own work per batch (its logging, the SIGTERM flag it broadcasts before each batch under
  DDP) is inside it; the time outside the user's hooks and the loader is measured as the
  framework's own work per step (the ``framework_work`` finding when it is large);
- validation and checkpoint saving end the step early: they are outside the steps, kept out
  of the throughput and reported in training time;
- checkpoint saves (``trainer.save_checkpoint``, which ModelCheckpoint calls), the load a
  fit resumes from (``ckpt_path=``) and validation loops go into the job's ledger
  (``job.jsonl``), timed on this trainer's own methods and hooks;
- each window's figures also go to ``trainer.loggers`` (``log_metrics``), with the names of
  :mod:`trainpace.sinks.names`, at the step Lightning's own rows carry for the window's last
  batch;
- under DDP each rank meters itself into ``out/rank{r}``, rank 0 merges them (console and
  report on rank 0).

Lightning prefetches one batch ahead when the train loader has no length: each step's wait
is then that of the batch after it, and so are its samples (the same in a steady run).
"""

from __future__ import annotations

import logging
import time
from pathlib import Path
from typing import Any

from trainpace.errors import MissingDependencyError
from trainpace.integrations._common import (
    Iterations,
    WindowRelay,
    check_meter_options,
    framework_note,
    leaves,
    meter_loader,
    unmeter_loader,
    warmup_steps,
)
from trainpace.integrations._jobevents import FrameworkEvents, argument

try:
    from lightning.pytorch import Callback
except ImportError:
    try:
        from pytorch_lightning import Callback  # type: ignore[assignment]
    except ImportError as exc:
        raise MissingDependencyError("trainpace.integrations.lightning", "lightning") from exc

logger = logging.getLogger(__name__)

__all__ = ["TrainpaceCallback"]


class TrainpaceCallback(Callback):
    """Meters a Lightning fit. ``summary`` holds the run's :class:`trainpace.Summary` after it.

    Args:
        out: run folder (``None``: none written).
        **meter_options: any other keyword of :class:`trainpace.Meter` (``window=``,
            ``warmup=``, ``wandb=``, ...). ``device`` defaults to the module's device.
    """

    def __init__(self, out: str | Path | None = None, **meter_options: Any) -> None:
        super().__init__()
        check_meter_options(meter_options)
        self.out = out
        self.meter_options = meter_options
        self.meter: Any = None
        self.summary: Any = None
        # Made at the start of training: a callback is pickled into the processes that
        # ddp_spawn starts, and neither a Meter nor a queue pickles.
        self._relay: WindowRelay | None = None
        self._iterations: Iterations | None = None
        self._global_step_at_open = 0
        self._loaders: list[Any] = []
        self._warned: set[str] = set()
        self._events = FrameworkEvents("lightning")
        # (the clock, its Unix seconds, the validation's start on it)
        self._validation_started: tuple[Any, Any, float] | None = None

    # -- Lightning's hooks ----------------------------------------------------------------

    def setup(self, trainer: Any, pl_module: Any, stage: str) -> None:
        """Before a fit restores its checkpoint: time this trainer's saves and loads."""
        if stage != "fit":
            return
        self._contained("timing checkpoints", self._events.wrap, trainer, "save_checkpoint",
                        "save", argument(0, "filepath"))
        self._contained("timing checkpoints", self._events.wrap, trainer.strategy,
                        "load_checkpoint", "load", argument(0, "checkpoint_path"))

    def on_validation_start(self, trainer: Any, pl_module: Any) -> None:
        """Validation is outside the steps: a finished step ends here, and the validation
        loop is timed for the job's ledger."""
        if self._iterations is not None:
            self._iterations.interrupt()
        if self.meter is not None and not trainer.sanity_checking:
            clock, unix = self._events.clock()
            self._validation_started = (clock, unix, clock())

    def on_validation_end(self, trainer: Any, pl_module: Any) -> None:
        """A validation loop of the fit: an evaluation in the job's ledger."""
        started, self._validation_started = self._validation_started, None
        if started is not None:
            clock, unix, start = started
            self._events.evaluation(unix(start), clock() - start)

    def on_train_start(self, trainer: Any, pl_module: Any) -> None:
        """Start the Meter and time the train loaders from here on."""
        from trainpace.meter import Meter

        options = dict(self.meter_options)
        rank, world = int(trainer.global_rank), int(trainer.world_size)
        # Under DDP the Meter finds its rank itself (torch.distributed is up by now): it
        # writes out/rank{r}/ and rank 0 merges the job; only rank 0 prints.
        if world > 1 and rank != 0:
            options["console"] = False
            options["report"] = False
        options.setdefault("device", pl_module.device)
        self._relay = WindowRelay()
        options["sinks"] = [*options.get("sinks", ()), self._relay]
        self.meter = Meter(self.out, made_by="lightning", **options)
        self._iterations = Iterations(self.meter, options.get("clock", time.perf_counter),
                                      skip_steps=warmup_steps(self.meter))
        self._events.attach(self.meter)
        self._contained("timing the train DataLoader", self._meter_loaders, trainer)

    def on_train_epoch_start(self, trainer: Any, pl_module: Any) -> None:
        """Loaders reloaded for this epoch (``reload_dataloaders_every_n_epochs``) are timed too."""
        if self.meter is not None:
            self._contained("timing the train DataLoader", self._meter_new_loaders, trainer)

    def on_train_batch_start(self, trainer: Any, pl_module: Any, batch: Any,
                             batch_idx: int) -> None:
        """The user's work for a batch begins (the optimizer step opens at its first one)."""
        iterations = self._iterations
        if self.meter is None or iterations is None:
            return
        if not iterations.open:
            self._global_step_at_open = int(trainer.global_step)
        iterations.user_begins(batch)

    def on_train_batch_end(self, trainer: Any, pl_module: Any, outputs: Any, batch: Any,
                           batch_idx: int) -> None:
        """The user's work for a batch ended; the step ends at the next fetch once the
        optimizer stepped. Finished windows go to the loggers."""
        iterations = self._iterations
        if self.meter is None or iterations is None or not iterations.open:
            return
        loss = outputs.get("loss") if isinstance(outputs, dict) else outputs
        if loss is not None:
            self.meter.observe(loss=loss)
        iterations.user_ends(stepped=int(trainer.global_step) != self._global_step_at_open,
                             framework_step=_logging_step(trainer))
        self._log_windows(trainer)

    def on_save_checkpoint(self, trainer: Any, pl_module: Any,
                           checkpoint: dict[str, Any]) -> None:
        """A checkpoint save is outside the steps: a finished step ends here."""
        if self._iterations is not None:
            self._iterations.interrupt()

    def on_train_end(self, trainer: Any, pl_module: Any) -> None:
        """Finish the run (summary, report) and give the loaders back."""
        self._finish(trainer)

    def on_exception(self, trainer: Any, pl_module: Any, exception: BaseException) -> None:
        """A failed fit still leaves its run folder and summary."""
        self._finish(trainer, failed=exception)

    def teardown(self, trainer: Any, pl_module: Any, stage: str) -> None:
        """The loaders (and the checkpoint methods) are given back, whatever happened."""
        self._restore()
        self._events.unwrap()

    # -- inside ---------------------------------------------------------------------------

    def _finish(self, trainer: Any, failed: BaseException | None = None) -> None:
        if self.meter is None or self._iterations is None:
            return
        # A step that never reached its optimizer step is not a step.
        self._iterations.abandon(failed or RuntimeError("the fit ended inside an accumulation"))
        self.meter.note("framework", framework_note("lightning", self._iterations))
        self.summary = self.meter.finish()
        self._events.detach()
        self._log_windows(trainer)
        self.meter = self._iterations = None
        self._restore()

    def _meter_loaders(self, trainer: Any) -> None:
        self._meter_new_loaders(trainer)
        # This epoch's iterators were made before on_train_start (in the fit loop's
        # setup_data): time them in place, so the data order stays the run's own.
        combined = getattr(trainer.fit_loop, "_combined_loader", None)
        iterators = getattr(getattr(combined, "_iterator", None), "iterators", None)
        if isinstance(iterators, list) and self._iterations is not None:
            for i, live in enumerate(iterators):
                iterators[i] = self._iterations.fetches(self.meter.loader(live))
        else:
            self._note("this epoch's batches are not timed: Lightning's fit loop has no "
                       "iterators where trainpace looks for them; later epochs are")

    def _meter_new_loaders(self, trainer: Any) -> None:
        for loader in leaves(trainer.train_dataloader):
            if loader in self._loaders:
                continue
            if meter_loader(loader, self.meter, self._iterations):
                self._loaders.append(loader)
            else:
                self._note(f"the wait for batches of a {type(loader).__name__} train loader "
                           "is not timed (its class cannot be wrapped)")

    def _log_windows(self, trainer: Any) -> None:
        windows = self._relay.take() if self._relay is not None else []
        if not windows or self._iterations is None:
            return
        for step, scalars in windows:
            at = self._iterations.framework_step(step)
            for pl_logger in trainer.loggers:
                try:
                    pl_logger.log_metrics(scalars, step=at)
                except Exception as exc:  # noqa: BLE001 - a logger must never break training
                    self._note(f"{type(pl_logger).__name__}.log_metrics failed ({exc})")

    def _restore(self) -> None:
        for loader in self._loaders:
            unmeter_loader(loader)
        self._loaders = []

    def _contained(self, what: str, fn: Any, *args: Any) -> None:
        try:
            fn(*args)
        except Exception as exc:  # noqa: BLE001 - monitoring never breaks training
            self._note(f"{what} failed ({type(exc).__name__}: {exc}); training goes on")

    def _note(self, message: str) -> None:
        if message not in self._warned:
            self._warned.add(message)
            logger.warning("trainpace: %s", message)


def _logging_step(trainer: Any) -> int:
    """The step Lightning's loggers draw this batch's own rows at (``self.log`` values): the
    batches that stepped before it, which a resumed fit restores with its checkpoint."""
    stepped = getattr(getattr(trainer.fit_loop, "epoch_loop", None), "_batches_that_stepped", None)
    return int(stepped) if isinstance(stepped, int) else int(trainer.global_step) - 1
