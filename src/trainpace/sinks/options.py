"""The dashboard sinks from the keywords of ``Meter`` (and the flags of ``trainpace run``):
``wandb=``, ``mlflow=``, ``prometheus=``, ``prometheus_host=``.

Each sink's package is an extra, imported when the sink is asked for; the error when it is
missing names the ``pip install`` that fixes it.
"""

from __future__ import annotations

from typing import Any

from trainpace.errors import ConfigError
from trainpace.sinks.base import Sink


def sinks_from_options(
    *,
    wandb: Any = None,
    mlflow: bool | str | None = None,
    prometheus: int | None = None,
    prometheus_host: str | None = None,
    run_id: str | None = None,
    sink_timeout_s: float = 5.0,
) -> list[Sink]:
    """The sinks these options ask for (none for ``None``/``False``).

    - ``wandb``: ``True`` (the active W&B run, else a new one) or a W&B run object;
    - ``mlflow``: ``True`` (the active MLflow run, else a new one) or a tracking URI;
    - ``prometheus``: a port for the exporter (``prometheus_host``: default 127.0.0.1).

    ``sink_timeout_s`` bounds the end of a W&B run the sink started (at the process's exit).
    """
    check_options(wandb=wandb, mlflow=mlflow, prometheus=prometheus,
                  prometheus_host=prometheus_host)
    sinks: list[Sink] = []
    if wandb is not None and wandb is not False:
        from trainpace.sinks.wandb import WandbSink

        sinks.append(WandbSink(wandb, run_id=run_id, finish_timeout_s=sink_timeout_s))
    if mlflow is not None and mlflow is not False:
        from trainpace.sinks.mlflow import MlflowSink

        sinks.append(MlflowSink(mlflow, run_id=run_id))
    if prometheus is not None:
        from trainpace.sinks.prometheus import PrometheusSink

        sinks.append(PrometheusSink(prometheus, prometheus_host))
    return sinks


def check_options(*, wandb: Any = None, mlflow: Any = None, prometheus: Any = None,
                  prometheus_host: Any = None) -> None:
    """Raise :class:`ConfigError` for a value none of the sinks takes."""
    if isinstance(wandb, (str, int, float)) and not isinstance(wandb, bool):
        raise ConfigError("wandb", wandb, "must be True or a W&B run object (wandb.init())")
    if mlflow is not None and not isinstance(mlflow, (bool, str)):
        raise ConfigError("mlflow", mlflow, "must be True or a tracking URI string")
    if mlflow == "":
        raise ConfigError("mlflow", mlflow, "must be True or a non-empty tracking URI")
    if prometheus is not None and (isinstance(prometheus, bool) or not isinstance(prometheus, int)
                                   or not 0 <= prometheus <= 65535):
        raise ConfigError("prometheus", prometheus, "must be a TCP port, 0 to 65535")
    if prometheus_host is not None:
        if prometheus is None:
            raise ConfigError("prometheus_host", prometheus_host,
                              "needs prometheus=PORT (the exporter it configures)")
        if not isinstance(prometheus_host, str) or not prometheus_host:
            raise ConfigError("prometheus_host", prometheus_host, "must be a host name or address")
