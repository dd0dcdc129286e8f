"""MLflow: the window figures as metrics of the active run (or one it starts), the setup from
meta.json as params, the final figures as the metrics' last values and summary.json as an
artifact.

The sink talks to MLflow through ``MlflowClient`` and the run's id, never through the fluent
API's active run: that one belongs to the thread that started it, and the sink writes from the
Meter's writer thread.
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterator, Mapping
from typing import Any

from trainpace.errors import MissingDependencyError
from trainpace.runlog import Record
from trainpace.sinks._dropping import DroppingSink
from trainpace.sinks.names import (
    BOTTLENECK_TAG,
    bottleneck,
    summary_scalars,
    window_scalars,
    window_step,
)

PARAM_SECTIONS = ("config", "device", "versions", "loader")
MAX_PARAM_CHARS = 6000  # MLflow's limit on a param value
SUMMARY_ARTIFACT = "trainpace/summary.json"


class MlflowSink(DroppingSink):
    """``True``: logs into the active MLflow run, else a run it starts (in MLflow's own
    tracking URI setting). A tracking URI: logs into a run it starts there."""

    label = "MLflow"

    def __init__(self, tracking_uri: str | bool | None = True, *,
                 run_id: str | None = None) -> None:
        super().__init__()
        try:
            import mlflow
            from mlflow.tracking import MlflowClient
        except ImportError as exc:
            raise MissingDependencyError("MLflow logging", "mlflow") from exc
        self._mlflow: Any = mlflow
        self._name = run_id
        self._params: dict[str, str] = {}
        self._summary: Mapping[str, Any] | None = None
        self._last_step = 0
        self.run_id: str | None = None
        self._owned = False
        try:
            given = tracking_uri if isinstance(tracking_uri, str) else None
            active = mlflow.active_run() if given is None else None
            uri = given if given is not None else mlflow.get_tracking_uri()
            self.client: Any = MlflowClient(tracking_uri=uri)
            if active is not None:
                self.run_id = active.info.run_id
        except Exception as exc:  # noqa: BLE001 - no dashboard is worth stopping the run
            self._drop("opening MLflow", exc)

    def _run(self) -> str:
        """The run's id; a run is started on first use (on the writer thread, not the loop's)."""
        if self.run_id is None:
            run = self.client.create_run(self._experiment_id(), run_name=self._name)
            self.run_id = run.info.run_id
            self._owned = True
        return self.run_id

    def _experiment_id(self) -> str:
        """The experiment MLflow's own settings name (as ``mlflow.start_run()`` would)."""
        if os.environ.get("MLFLOW_EXPERIMENT_ID"):
            return os.environ["MLFLOW_EXPERIMENT_ID"]
        name = os.environ.get("MLFLOW_EXPERIMENT_NAME")
        if not name:
            return "0"  # MLflow's "Default" experiment
        found = self.client.get_experiment_by_name(name)
        return str(found.experiment_id if found is not None
                   else self.client.create_experiment(name))

    def _log(self, record: Record) -> None:
        if record.kind == "window":
            figures = record.data["window"]
            scalars = window_scalars(figures)
            if scalars:
                self._last_step = window_step(figures, record.step)
                self._metrics(scalars, self._last_step)
        elif record.kind == "meta":
            fresh = {key: value for key, value in _params(record.data)
                     if key not in self._params}  # MLflow params cannot change once logged
            if fresh:
                from mlflow.entities import Param

                self.client.log_batch(self._run(), params=[Param(k, v) for k, v in fresh.items()])
                self._params.update(fresh)
        elif record.kind == "summary":
            self._summary = record.data  # the last one is the run's: written at close

    def _close(self) -> None:
        if self._summary is not None:
            run_id = self._run()
            total = (self._summary.get("steps") or {}).get("total")
            self._metrics(summary_scalars(self._summary), int(total or self._last_step))
            found = bottleneck(self._summary)
            if found is not None:
                self.client.set_tag(run_id, BOTTLENECK_TAG, found)
            self.client.log_dict(run_id, dict(self._summary), SUMMARY_ARTIFACT)
        if self._owned and self.run_id is not None:
            self.client.set_terminated(self.run_id)

    def _metrics(self, scalars: Mapping[str, float], step: int) -> None:
        if not scalars:
            return
        from mlflow.entities import Metric

        now_ms = int(time.time() * 1000)
        self.client.log_batch(self._run(), metrics=[Metric(tag, value, now_ms, step)
                                                    for tag, value in scalars.items()])


def _params(meta: Mapping[str, Any]) -> Iterator[tuple[str, str]]:
    """``section.key`` -> value of the setup parts of meta.json (None is no param)."""
    for key in ("run_id", "world_size", "host"):
        if meta.get(key) is not None:
            yield key, str(meta[key])[:MAX_PARAM_CHARS]
    for section in PARAM_SECTIONS:
        values = meta.get(section)
        if isinstance(values, Mapping):
            for key, value in values.items():
                if value is not None:
                    yield f"{section}.{key}", str(value)[:MAX_PARAM_CHARS]
