"""The sinks a Meter's keywords turn on, as a table: adding one is a line here (plus its
keyword in :class:`~trainpace.config.MeterConfig` and ``Meter``).

Each one is imported only when its keyword is set, so an extra that is not installed costs
nothing until it is asked for (then its sink raises ``MissingDependencyError``).

A sink whose class sets ``shows_job = True`` (the console line, every dashboard) shows the
job, not the process: under DDP rank 0 feeds it the job's merged windows and summary
(:class:`~trainpace.meter.distributed.JobRank`), and the other ranks build none of the
keyword sinks (one TensorBoard folder, one W&B and one MLflow run, one exporter per job).
A sink without it (``sinks=``) gets its own rank's records, on every rank.
"""

from __future__ import annotations

import importlib
import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, TextIO

from trainpace.config import MeterConfig
from trainpace.errors import ConfigError, TrainpaceError
from trainpace.sinks.base import Sink
from trainpace.sinks.console_line import ConsoleSink
from trainpace.sinks.options import sinks_from_options

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class KeywordSink:
    """A sink turned on by a Meter keyword: ``target(value_of_key, **options)``."""

    key: str  # the MeterConfig field (and Meter keyword); None or False: off
    target: str  # "module:Class", imported when the keyword is set
    options: Mapping[str, str] = field(default_factory=dict)  # constructor kw -> config field


KEYWORD_SINKS: tuple[KeywordSink, ...] = (
    KeywordSink("tensorboard", "trainpace.sinks.tensorboard:TensorBoardSink"),
)


def shows_job(sink: object) -> bool:
    """Whether ``sink`` shows the job's figures under DDP (see the module's docstring)."""
    return bool(getattr(sink, "shows_job", False))


def keyword_sinks(config: MeterConfig, stream: TextIO | None, run_id: str, *,
                  rank: int = 0) -> list[Sink]:
    """The sinks ``config`` asks for: the console line, the table's, then the dashboards;
    none on a rank other than 0 of a job (rank 0 shows the job's)."""
    if rank != 0:
        return []
    sinks: list[Sink] = [ConsoleSink(stream)] if config.console else []
    for entry in KEYWORD_SINKS:
        value = getattr(config, entry.key)
        if value is None or value is False:
            continue
        module, _, name = entry.target.partition(":")
        factory: Any = getattr(importlib.import_module(module), name)
        options = {kw: getattr(config, key) for kw, key in entry.options.items()}
        try:
            sinks.append(factory(value, **options))
        except TrainpaceError:
            raise  # a setting to fix (a missing extra): said before the training starts
        except Exception as exc:  # noqa: BLE001 - no dashboard is worth stopping the run
            # (an unwritable folder, a full disk): as the other dashboards, one warning
            logger.warning("trainpace: starting %s=%r failed (%s: %s); the run goes on "
                           "without it", entry.key, str(value), type(exc).__name__, exc)
    sinks.extend(sinks_from_options(wandb=config.wandb, mlflow=config.mlflow,
                                    prometheus=config.prometheus,
                                    prometheus_host=config.prometheus_host, run_id=run_id,
                                    sink_timeout_s=config.sink_timeout_s))
    return sinks


def checked_sinks(sinks: object) -> list[Sink]:
    """``sinks=`` as a list, each one checked to be a sink."""
    if sinks is None or isinstance(sinks, (str, bytes)) or not isinstance(sinks, Sequence):
        raise ConfigError("sinks", sinks, "must be a list of sinks (objects with log(record) "
                          "and close()); pass [] for none")
    for sink in sinks:
        if not callable(getattr(sink, "log", None)) or not callable(getattr(sink, "close", None)):
            raise ConfigError("sinks", sink, "must hold sinks: objects with log(record) and "
                              "close() methods")
    return list(sinks)
