"""Hugging Face Trainer: ``Trainer(..., callbacks=[TrainpaceCallback(out="runs/exp1")])``.

The callback takes the keywords of :class:`trainpace.Meter` and meters ``Trainer.train()`` as
a hand-written loop is metered:

- the wait for each batch is timed in the Trainer's own train DataLoader (the one
  ``get_train_dataloader()`` made and Accelerate prepared): its iterations go through
  ``Meter.loader``;
- a step is an optimizer step and the whole training iteration: it holds all the
  micro-batches of ``gradient_accumulation_steps`` (tokens: the real ones, from
  ``attention_mask``, else ``labels`` != -100), and it ends when the next batch is fetched, so
  the Trainer's own work per step (its logging of the loss, ...) is inside it; the time outside
  ``on_step_begin``..``on_step_end`` and the loader is measured as the framework's own work
  per step (the ``framework_work`` finding when it is large);
- evaluation and checkpoint saving end the step early: they are outside the steps, kept out
  of the throughput, in the training time;
- each window's figures go into the Trainer's ``state.log_history`` at the window's last
  step (the last window too), under the names of :mod:`trainpace.sinks.names`; the training
  loss HF logs is observed.

HF's own reporters (W&B, TensorBoard, MLflow) rename every key they get to ``train/...``, so
trainpace's figures reach those dashboards through trainpace's own sinks, under
``trainpace/...``: with ``report_to`` naming ``wandb`` the W&B sink logs into HF's run
(``wandb=False`` turns it off); ``tensorboard=`` / ``mlflow=True`` as for the Meter.

Checkpoint saves, the loads of the checkpoint training resumes from
(``resume_from_checkpoint=``) and evaluations go into the job's ledger (``job.jsonl``), timed
exactly, when :class:`TrainpaceTrainer` is mixed into the Trainer class (``class
Trainer(TrainpaceTrainer, transformers.Trainer): pass``). The callback alone gets no hook when
a save begins, only ``on_save`` when it has ended: HF's ``_maybe_log_save_evaluate`` calls, after
``on_step_end`` (or ``on_epoch_end``), ``on_log`` when it logs, ``on_evaluate`` when it
evaluates, then ``Trainer._save_checkpoint``, then ``on_save``. A save is timed as the span
since the end of the last of those hooks: an upper bound (what ran between, the other callbacks'
work in that hook included), said so in its ledger event (``timing``). The checkpoint training
resumes from is loaded before any hook: the callback writes that load (which save it was, for
the lost progress) with ``duration_s`` null and the reason. Evaluations are timed only with the
mixin.
"""

from __future__ import annotations

import logging
import os
import time
from pathlib import Path
from typing import Any

from trainpace.errors import MissingDependencyError
from trainpace.integrations._common import (
    Iterations,
    WindowRelay,
    check_meter_options,
    framework_note,
    meter_loader,
    unmeter_loader,
    warmup_steps,
)
from trainpace.integrations._jobevents import FrameworkEvents

try:
    from transformers import TrainerCallback
except ImportError as exc:
    raise MissingDependencyError("trainpace.integrations.huggingface", "huggingface") from exc

logger = logging.getLogger(__name__)

__all__ = ["TrainpaceCallback", "TrainpaceTrainer"]


class TrainpaceCallback(TrainerCallback):
    """Meters ``Trainer.train()``. ``summary`` holds the run's :class:`trainpace.Summary` after.

    Args:
        out: run folder (``None``: none written).
        **meter_options: any other keyword of :class:`trainpace.Meter` (``window=``,
            ``warmup=``, ``wandb=``, ...). ``device`` defaults to the Trainer's device.
    """

    def __init__(self, out: str | Path | None = None, **meter_options: Any) -> None:
        check_meter_options(meter_options)
        self.out = out
        self.meter_options = meter_options
        self.meter: Any = None
        self.summary: Any = None
        # Made at the start of training: a callback is pickled into the processes that
        # ddp_spawn starts, and neither a Meter nor a queue pickles.
        self._relay: WindowRelay | None = None
        self._iterations: Iterations | None = None
        self._loader: Any = None
        self._warned: set[str] = set()
        self.job_events = FrameworkEvents("hf")  # the mixin's saves, loads and evaluations
        # (hook, clock reading at its end): the last hook HF called on its way to a save
        self._last_hook: tuple[str, float] | None = None
        self._exact_saves_seen = 0

    # -- the Trainer's events -------------------------------------------------------------

    def on_train_begin(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        """Start the Meter; time the Trainer's train DataLoader from here on."""
        from trainpace.meter import Meter

        options = dict(self.meter_options)
        rank, world = int(args.process_index), int(args.world_size)
        # Under DDP the Meter finds its rank itself (torchrun's environment): it writes
        # out/rank{r}/ and rank 0 merges the job; only rank 0 prints.
        if world > 1 and rank != 0:
            options["console"] = False
            options["report"] = False
        # the CPU under DDP is "cpu:0" to the Trainer: one device kind to the Meter
        device = args.device
        options.setdefault("device", "cpu" if getattr(device, "type", None) == "cpu" else device)
        if "wandb" in (args.report_to or ()) and rank == 0:
            options.setdefault("wandb", True)  # HF's W&B run, under trainpace's names
        self._relay = WindowRelay()
        options["sinks"] = [*options.get("sinks", ()), self._relay]
        self.meter = Meter(self.out, made_by="hf", **options)
        self._iterations = Iterations(self.meter, options.get("clock", time.perf_counter),
                                      skip_steps=warmup_steps(self.meter))
        self.job_events.attach(self.meter)
        self._resumed(args, state)
        loader = kwargs.get("train_dataloader")
        try:
            if loader is not None and meter_loader(loader, self.meter, self._iterations):
                self._loader = loader
            else:
                self._note(f"the wait for batches of a {type(loader).__name__} train loader "
                           "is not timed (its class cannot be wrapped)")
        except Exception as exc:  # noqa: BLE001 - monitoring never breaks training
            self._note(f"timing the train DataLoader failed ({type(exc).__name__}: {exc})")

    def on_step_begin(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        """An optimizer step's work begins (its micro-batches were just fetched)."""
        if self._iterations is not None:
            self._iterations.user_begins()

    def on_step_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        """The optimizer stepped: the step ends at the next fetch, or here when an evaluation
        or a save follows without a log first."""
        iterations = self._iterations
        if iterations is None:
            return
        iterations.user_ends(stepped=True, framework_step=int(state.global_step))
        if not control.should_log:
            self._before_non_training_work(control)
        self._log_windows(state)
        self._hook_ends("on_step_end")

    def on_log(self, args: Any, state: Any, control: Any, logs: dict[str, Any] | None = None,
               **kwargs: Any) -> None:
        """Observe the logged training loss; an evaluation or a save after the log is outside
        the steps."""
        if self.meter is not None and logs is not None and isinstance(logs.get("loss"),
                                                                      (int, float)):
            self.meter.observe(loss=logs["loss"])
        self._before_non_training_work(control)
        self._hook_ends("on_log")

    def on_evaluate(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        """An evaluation ended; a save may follow."""
        self._hook_ends("on_evaluate")

    def on_save(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        """A checkpoint save ended: timed since the last hook before it, unless the mixin
        timed it exactly."""
        events = self.job_events
        if events.exact_saves != self._exact_saves_seen:
            self._exact_saves_seen = events.exact_saves
            return
        if self.meter is None or self._last_hook is None:
            return
        hook, start = self._last_hook
        self._last_hook = None  # one save per hook: a second on_save has no bound
        try:
            clock, unix = events.clock()
            events.save(unix(start), clock() - start, _checkpoint_folder(args, state),
                        timing=f"upper bound: since the end of HF's {hook} hook, the last "
                        "before Trainer._save_checkpoint; what ran between is included")
        except Exception as exc:  # noqa: BLE001 - monitoring never breaks training
            self._note(f"timing a checkpoint save failed ({type(exc).__name__}: {exc})")

    def on_epoch_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        """An evaluation or a save at the end of an epoch is outside the steps."""
        if not control.should_log:
            self._before_non_training_work(control)
        self._hook_ends("on_epoch_end")

    def on_train_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        """Finish the run (summary, report) and give the DataLoader its own class back."""
        iterations = self._iterations
        if self.meter is None or iterations is None:
            return
        iterations.abandon(RuntimeError("training ended inside a step"))
        self.meter.note("framework", framework_note("huggingface", iterations))
        self.summary = self.meter.finish()
        self._log_windows(state)  # the last window, at its own step
        self.job_events.detach()
        self.meter = self._iterations = None
        if self._loader is not None:
            unmeter_loader(self._loader)
            self._loader = None

    # -- inside ---------------------------------------------------------------------------

    def _hook_ends(self, hook: str) -> None:
        """A hook HF calls between a step and a save returns: a save after it began later."""
        if self.meter is not None:
            clock, _ = self.job_events.clock()
            self._last_hook = (hook, clock())

    def _resumed(self, args: Any, state: Any) -> None:
        """Training resumed from a checkpoint the mixin did not time: the load is written
        untimed (which save it was tells the job its lost progress)."""
        events = self.job_events
        if int(state.global_step) <= 0 or events.exact_loads:
            return
        try:
            folder = _checkpoint_folder(args, state)
            clock, unix = events.clock()
            events.load(unix(clock()), None,
                        folder if os.path.isdir(folder) else None,
                        timing="not timed: HF's Trainer loads the checkpoint it resumes from "
                        "before any callback hook; unix_s is on_train_begin's (the mixin "
                        "TrainpaceTrainer times it)")
        except Exception as exc:  # noqa: BLE001 - monitoring never breaks training
            self._note(f"writing the resuming load failed ({type(exc).__name__}: {exc})")

    def _before_non_training_work(self, control: Any) -> None:
        if self._iterations is not None and (control.should_evaluate or control.should_save):
            self._iterations.interrupt()

    def _log_windows(self, state: Any) -> None:
        """Each finished window into ``state.log_history``, at its last step (HF's own
        axis): one entry of trainpace's figures, never merged into an entry of HF's."""
        if self._relay is None or self._iterations is None:
            return
        for step, scalars in self._relay.take():
            state.log_history.append({**scalars, "step": self._iterations.framework_step(step)})

    def _note(self, message: str) -> None:
        if message not in self._warned:
            self._warned.add(message)
            logger.warning("trainpace: %s", message)


def _checkpoint_folder(args: Any, state: Any) -> str:
    """The folder HF saves the checkpoint of ``state.global_step`` in (and resumes from)."""
    from transformers.trainer_utils import PREFIX_CHECKPOINT_DIR

    return os.path.join(args.output_dir, f"{PREFIX_CHECKPOINT_DIR}-{state.global_step}")


class TrainpaceTrainer:
    """A mixin that times the Trainer's checkpoint saves, the loads it resumes from and its
    evaluations into the job's ledger (trainpace's figures go into ``log_history`` from the
    callback alone, and to the dashboards through trainpace's sinks)::

        class Trainer(TrainpaceTrainer, transformers.Trainer):
            pass
    """

    callback_handler: Any

    def _trainpace_events(self) -> FrameworkEvents | None:
        for callback in self.callback_handler.callbacks:
            if isinstance(callback, TrainpaceCallback):
                return callback.job_events
        return None

    def _save_checkpoint(self, model: Any, trial: Any) -> None:
        """HF's checkpoint save, timed into the job's ledger."""
        events = self._trainpace_events()
        save = super()._save_checkpoint  # type: ignore[misc]
        if events is None:
            return save(model, trial)  # type: ignore[no-any-return]
        from transformers.trainer_utils import PREFIX_CHECKPOINT_DIR

        folder = os.path.join(self._get_output_dir(trial=trial),  # type: ignore[attr-defined]
                              f"{PREFIX_CHECKPOINT_DIR}-{self.state.global_step}")  # type: ignore[attr-defined]
        return events.timed("save", save, folder, model, trial)  # type: ignore[no-any-return]

    def _load_from_checkpoint(self, resume_from_checkpoint: str, *args: Any,
                              **kwargs: Any) -> None:
        """The model's weights loaded from the checkpoint training resumes from, timed."""
        return self._timed_load(super()._load_from_checkpoint,  # type: ignore[misc]
                                resume_from_checkpoint, *args, **kwargs)

    def _load_optimizer_and_scheduler(self, checkpoint: str | None, *args: Any,
                                      **kwargs: Any) -> None:
        """The optimizer's and scheduler's state loaded from that checkpoint, timed."""
        return self._timed_load(super()._load_optimizer_and_scheduler,  # type: ignore[misc]
                                checkpoint, *args, **kwargs)

    def _timed_load(self, load: Any, checkpoint: str | None, *args: Any, **kwargs: Any) -> None:
        events = self._trainpace_events()
        if events is None or checkpoint is None:
            return load(checkpoint, *args, **kwargs)  # type: ignore[no-any-return]
        return events.timed("load", load, checkpoint, checkpoint, *args,  # type: ignore[no-any-return]
                            **kwargs)

    def evaluate(self, *args: Any, **kwargs: Any) -> Any:
        """HF's evaluation, timed into the job's ledger while training runs."""
        events = self._trainpace_events()
        evaluate = super().evaluate  # type: ignore[misc]
        if events is None:
            return evaluate(*args, **kwargs)
        clock, unix = events.clock()
        start = clock()
        result = evaluate(*args, **kwargs)
        events.evaluation(unix(start), clock() - start)
        return result
