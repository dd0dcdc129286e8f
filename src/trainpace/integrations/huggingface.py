"""Hugging Face Trainer: ``Trainer(..., callbacks=[TrainpaceCallback(out="runs/exp1")])``.

The callback takes the keywords of :class:`trainpace.Meter` and meters ``Trainer.train()`` as
a hand-written loop is metered:

- the wait for each batch is timed in the Trainer's own train DataLoader (the one
  ``get_train_dataloader()`` made and Accelerate prepared): its iterations go through
  ``Meter.loader``;
- a step is an optimizer step (``on_step_begin`` to ``on_step_end``), so under
  ``gradient_accumulation_steps`` its samples and tokens are those of all its micro-batches;
  tokens are the real ones (``attention_mask``, else ``labels`` != -100);
- evaluation, checkpointing and logging run after ``on_step_end`` and before the next batch is
  fetched: they are outside the steps, kept out of the throughput, in the training time;
- each window's figures are added to the next ``logs`` of the Trainer's ``on_log`` (the
  training loss logged there is observed too), under the names of :mod:`trainpace.sinks.names`.

HF calls its reporting callbacks (W&B, MLflow, TensorBoard) before the callbacks you pass, so
for them to get the figures in the same log event, mix :class:`TrainpaceTrainer` into your
Trainer class (``class Trainer(TrainpaceTrainer, transformers.Trainer): pass``); or pass
``wandb=True`` / ``mlflow=True`` / ``tensorboard=`` to the callback, which logs into the same
runs directly.

With the mixin, the Trainer's checkpoint saves, the loads of the checkpoint it resumes from
(``resume_from_checkpoint=``) and its evaluations are also timed into the job's ledger
(``job.jsonl``): the callback's events say when a save ends, never when it begins, so the
callback alone times none of them.
"""

from __future__ import annotations

import logging
import os
from pathlib import Path
from typing import Any

from trainpace.errors import MissingDependencyError
from trainpace.integrations._common import (
    WindowRelay,
    check_meter_options,
    meter_loader,
    unmeter_loader,
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
        self._pending: dict[str, float] = {}  # the last window's tags, until a log takes them
        self._step: Any = None
        self._loader: Any = None
        self._warned: set[str] = set()
        self.job_events = FrameworkEvents("hf")  # the mixin's saves, loads and evaluations

    # -- the Trainer's events -------------------------------------------------------------

    def on_train_begin(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        """Start the Meter; time the Trainer's train DataLoader from here on."""
        from trainpace.meter import Meter

        options = dict(self.meter_options)
        out = self.out
        rank, world = int(args.process_index), int(args.world_size)
        if world > 1:
            if out is not None:
                options.setdefault("run_id", Path(out).name)
                out = Path(out) / f"rank{rank}"
            if rank != 0:
                options["console"] = False
                options["report"] = False
        options.setdefault("device", args.device)
        self._relay = WindowRelay()
        options["sinks"] = [*options.get("sinks", ()), self._relay]
        self.meter = Meter(out, **options)
        self.job_events.attach(self.meter)
        loader = kwargs.get("train_dataloader")
        try:
            if loader is not None and meter_loader(loader, self.meter):
                self._loader = loader
            else:
                self._note(f"the wait for batches of a {type(loader).__name__} train loader "
                           "is not timed (its class cannot be wrapped)")
        except Exception as exc:  # noqa: BLE001 - monitoring never breaks training
            self._note(f"timing the train DataLoader failed ({type(exc).__name__}: {exc})")

    def on_step_begin(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        """An optimizer step begins (its micro-batches were just fetched)."""
        if self.meter is not None and self._step is None:
            self._step = self.meter.step()
            self._step.__enter__()

    def on_step_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        """The optimizer stepped: the step ends, before any logging, evaluation or saving."""
        if self._step is not None:
            step, self._step = self._step, None
            step.__exit__(None, None, None)

    def on_log(self, args: Any, state: Any, control: Any, logs: dict[str, Any] | None = None,
               **kwargs: Any) -> None:
        """Observe the logged training loss; add the last window's figures to ``logs``."""
        if logs is None:
            return
        if self.meter is not None and isinstance(logs.get("loss"), (int, float)):
            self.meter.observe(loss=logs["loss"])
        self.merge_into(logs)

    def on_train_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        """Finish the run (summary, report) and give the DataLoader its own class back."""
        if self.meter is None:
            return
        if self._step is not None:  # never reached its optimizer step: not a step
            step, self._step = self._step, None
            error = RuntimeError("training ended inside a step")
            step.__exit__(type(error), error, None)
        self.summary = self.meter.finish()
        self.job_events.detach()
        self.meter = None
        if self._loader is not None:
            unmeter_loader(self._loader)
            self._loader = None

    # -- for the Trainer mixin ------------------------------------------------------------

    def merge_into(self, logs: dict[str, Any]) -> None:
        """Add the figures of the windows finished since the last log to ``logs``."""
        for _step, scalars in self._relay.take() if self._relay is not None else []:
            self._pending = scalars  # the newest window wins: one log event, one point
        if self._pending:
            logs.update(self._pending)
            self._pending = {}

    def _note(self, message: str) -> None:
        if message not in self._warned:
            self._warned.add(message)
            logger.warning("trainpace: %s", message)


class TrainpaceTrainer:
    """Mix into a ``transformers.Trainer`` class so that every callback of ``on_log``, HF's
    W&B, MLflow and TensorBoard reporting included, gets the window figures::

        class Trainer(TrainpaceTrainer, transformers.Trainer):
            pass
    """

    callback_handler: Any

    def log(self, logs: dict[str, float], *args: Any, **kwargs: Any) -> None:
        """Add the figures of the Trainpace callbacks to ``logs``, then log as HF does."""
        for callback in self.callback_handler.callbacks:
            if isinstance(callback, TrainpaceCallback):
                callback.merge_into(logs)
        super().log(logs, *args, **kwargs)  # type: ignore[misc]

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
