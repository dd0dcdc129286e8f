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
    starts)."""

    label = "W&B"

    def __init__(self, run: Any = True, *, run_id: str | None = None) -> None:
        super().__init__()
        try:
            import wandb
        except ImportError as exc:
            raise MissingDependencyError("W&B logging", "wandb") from exc
        self._summary: Mapping[str, Any] | None = None
        self._owned = False
        self.run: Any = None
        try:
            if run is True or run is None:
                run = wandb.run
            if run is None:
                # No run yet: start one, as the user's own wandb.init() would (WANDB_* settings).
                run = wandb.init(project=os.environ.get("WANDB_PROJECT") or DEFAULT_PROJECT,
                                 name=run_id, reinit="create_new")
                self._owned = True
            self.run = run
            run.define_metric(STEP_TAG)
            for group in sorted({tag.split("/")[0] for tag, _ in WINDOW_TAGS.values()}):
                run.define_metric(f"{group}/*", step_metric=STEP_TAG)
        except Exception as exc:  # noqa: BLE001 - no dashboard is worth stopping the run
            self._drop("starting the W&B run", exc)

    def _log(self, record: Record) -> None:
        if record.kind == "window":
            figures = record.data["window"]
            row: dict[str, Any] = window_scalars(figures)
            if row:
                row[STEP_TAG] = window_step(figures, record.step)
                self.run.log(row)
        elif record.kind == "summary":
            self._summary = record.data  # the last one is the run's: written at close
        elif record.kind == "meta":
            self.run.config.update({"trainpace": _meta_config(record.data)},
                                   allow_val_change=True)

    def _close(self) -> None:
        if self._summary is not None:
            final: dict[str, Any] = summary_scalars(self._summary)
            found = bottleneck(self._summary)
            if found is not None:
                final[BOTTLENECK_TAG] = found
            self.run.summary.update(final)
        if self._owned:
            self.run.finish()


def _meta_config(meta: Mapping[str, Any]) -> dict[str, Any]:
    """The parts of meta.json that describe the run's setup (what a config panel shows)."""
    keys = ("run_id", "host", "world_size", "rank", "device", "versions", "config", "loader",
            "tokens_counted")
    return {key: meta.get(key) for key in keys if key in meta}
