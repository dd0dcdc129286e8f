"""Prometheus: a scrape endpoint with one gauge per tag of :mod:`trainpace.sinks.names`,
``trainpace_<tag, / -> _>{rank="job"}``, set at each window: the job's figures (a single
process is a job of one). Under DDP rank 0 serves them, from the merged window; with
``Meter(rank_figures=True)`` each rank's own figures are the same gauges with ``rank="1"``...

The exporter is ``prometheus_client``'s own HTTP server on a daemon thread, with a registry of
its own (nothing of the process' default registry is exposed). It listens on 127.0.0.1 unless
told otherwise: a training host is no public web server. A port already taken is one warning,
and the training goes on without the exporter.
"""

from __future__ import annotations

import contextlib
import logging
from typing import Any

from trainpace.errors import MissingDependencyError
from trainpace.runlog import Record
from trainpace.sinks._dropping import DroppingSink
from trainpace.sinks.names import (
    JOB_LABEL,
    STEP_TAG,
    WINDOW_TAGS,
    prometheus_name,
    split_rank,
    window_scalars,
    window_step,
)

logger = logging.getLogger(__name__)

DEFAULT_HOST = "127.0.0.1"


class PrometheusSink(DroppingSink):
    """Serves the last window's figures at ``http://host:port/metrics``: the job's under
    ``rank="job"``, each rank's own (when the window carries them) under its number."""

    label = "the Prometheus exporter"

    def __init__(self, port: int, host: str | None = DEFAULT_HOST) -> None:
        super().__init__()
        try:
            import prometheus_client
        except ImportError as exc:
            raise MissingDependencyError("the Prometheus exporter", "prometheus") from exc
        self.port = port
        self.host = host = host or DEFAULT_HOST
        self._shown: set[tuple[str, str]] = set()  # (tag, rank label) set by the last window
        self._server: Any = None
        self._thread: Any = None
        self.registry = prometheus_client.CollectorRegistry(auto_describe=True)
        self._gauges: dict[str, Any] = {
            tag: prometheus_client.Gauge(prometheus_name(tag), f"trainpace {tag}, per window",
                                         ["rank"], registry=self.registry)
            for tag in [*(tag for tag, _ in WINDOW_TAGS.values()), STEP_TAG]
        }
        try:
            self._server, self._thread = prometheus_client.start_http_server(
                self.port, addr=host, registry=self.registry)
        except OSError as exc:
            self._drop(f"listening on {host}:{self.port} for Prometheus", exc)
            return
        self.port = int(self._server.server_port)  # the port taken, when asked for port 0
        logger.info("trainpace: Prometheus metrics at http://%s:%d/metrics", host, self.port)

    def _log(self, record: Record) -> None:
        if record.kind != "window":
            return
        figures = record.data["window"]
        values = window_scalars(figures)
        values[STEP_TAG] = float(window_step(figures, record.step))
        shown: set[tuple[str, str]] = set()
        for tag, value in values.items():
            job_tag, rank = split_rank(tag)
            gauge = self._gauges.get(job_tag)
            if gauge is not None:
                label = JOB_LABEL if rank is None else str(rank)
                gauge.labels(rank=label).set(value)
                shown.add((job_tag, label))
        for tag, label in self._shown - shown:  # not measured now: no sample, not a stale one
            with contextlib.suppress(KeyError):
                self._gauges[tag].remove(label)
        self._shown = shown

    def _close(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._thread.join(timeout=5.0)
            self._server = None
