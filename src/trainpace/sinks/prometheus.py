"""Prometheus: a scrape endpoint with one gauge per tag of :mod:`trainpace.sinks.names`,
``trainpace_<tag, / -> _>{rank="0"}``, set at each window.

The exporter is ``prometheus_client``'s own HTTP server on a daemon thread, with a registry of
its own (nothing of the process' default registry is exposed). It listens on 127.0.0.1 unless
told otherwise: a training host is no public web server. A port already taken is one warning,
and the training goes on without the exporter.
"""

from __future__ import annotations

import contextlib
import logging
import os
from typing import Any

from trainpace.errors import MissingDependencyError
from trainpace.runlog import Record
from trainpace.sinks._dropping import DroppingSink
from trainpace.sinks.names import (
    STEP_TAG,
    WINDOW_TAGS,
    prometheus_name,
    window_scalars,
    window_step,
)

logger = logging.getLogger(__name__)

DEFAULT_HOST = "127.0.0.1"


class PrometheusSink(DroppingSink):
    """Serves the last window's figures at ``http://host:port/metrics``.

    Each rank of a job listens on ``port + LOCAL_RANK`` (so the ranks of one host do not
    collide) and labels its gauges with its ``rank`` (from meta.json, else ``RANK``).
    """

    label = "the Prometheus exporter"

    def __init__(self, port: int, host: str | None = DEFAULT_HOST) -> None:
        super().__init__()
        try:
            import prometheus_client
        except ImportError as exc:
            raise MissingDependencyError("the Prometheus exporter", "prometheus") from exc
        self.rank = os.environ.get("RANK", "0")
        self.port = port + int(os.environ.get("LOCAL_RANK", "0") or 0) if port else 0
        self.host = host = host or DEFAULT_HOST
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
        if record.kind == "meta" and record.data.get("rank") is not None:
            self.rank = str(record.data["rank"])
        if record.kind != "window":
            return
        figures = record.data["window"]
        values = window_scalars(figures)
        values[STEP_TAG] = float(window_step(figures, record.step))
        for tag, gauge in self._gauges.items():
            if tag in values:
                gauge.labels(rank=self.rank).set(values[tag])
            else:  # not measured in this window: no sample rather than a stale one
                with contextlib.suppress(KeyError):
                    gauge.remove(self.rank)

    def _close(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._thread.join(timeout=5.0)
            self._server = None
