"""Weights & Biases: one history row per window in the active run (or one it starts), the
run's final figures in its summary.

Points are logged without W&B's own ``step=`` (a run shared with the Lightning or Hugging Face
logger has its own step counter, and a step behind it would be dropped); each row carries
``trainpace/step``, declared the x axis of trainpace's tags.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
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


class WandbSink(DroppingSink):
    """Logs into ``run`` (a ``wandb`` run object; ``True``: the active run, else a run it
    starts).

    A run it starts is started on first use, on the sink's own thread: ``wandb.init`` waits
    for the server (over a minute when it cannot be reached), and the training must not.
    """

    label = "W&B"

    def __init__(self, run: Any = True, *, run_id: str | None = None) -> None:
        super().__init__()
        try:
            import wandb
        except ImportError as exc:
            raise MissingDependencyError("W&B logging", "wandb") from exc
        self._wandb: Any = wandb
        self._name = run_id
        self._summary: Mapping[str, Any] | None = None
        self._owned = False
        self.run: Any = None
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
            self._use(self._wandb.init(
                project=os.environ.get("WANDB_PROJECT") or DEFAULT_PROJECT, name=self._name,
                reinit="create_new"))
        return self.run

    def _log(self, record: Record) -> None:
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
        if self._summary is not None:
            final: dict[str, Any] = summary_scalars(self._summary)
            found = bottleneck(self._summary)
            if found is not None:
                final[BOTTLENECK_TAG] = found
            self._started().summary.update(final)
        if self._owned and self.run is not None:
            self.run.finish()


def _meta_config(meta: Mapping[str, Any]) -> dict[str, Any]:
    """The parts of meta.json that describe the run's setup (what a config panel shows)."""
    keys = ("run_id", "host", "world_size", "rank", "device", "versions", "config", "loader",
            "tokens_counted")
    return {key: meta.get(key) for key in keys if key in meta}
