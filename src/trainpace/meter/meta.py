"""``meta.json``: the run's settings (from :class:`MeterConfig`), its machine and its place
in a distributed job."""

from __future__ import annotations

import dataclasses
import datetime as dt
import os
import platform
import socket
from collections.abc import Mapping
from typing import Any

import torch

from trainpace._version import __version__
from trainpace.config import MeterConfig
from trainpace.dist.ranks import rank_info
from trainpace.measure.summarize import Goal
from trainpace.runlog import META_SCHEMA


def process_ranks(env: Mapping[str, str] | None = None) -> dict[str, int | None]:
    """``world_size``, ``rank``, ``local_rank`` and ``node`` of this process (see
    :func:`trainpace.dist.ranks.rank_info`: torchrun's variables, else torch.distributed, else
    a single process)."""
    info = rank_info(env)
    return {"world_size": info.world_size, "rank": info.rank, "local_rank": info.local_rank,
            "node": info.node}


# Which front-end made the Meter (meta.json's ``made_by``): the diagnosis names that front-end's
# way to change a setting (a `trainpace run` flag, a callback's keyword, a Meter keyword).
MADE_BY = ("meter", "run", "demo", "lightning", "hf")


def run_meta(*, config: MeterConfig, made_by: str, run_id: str, started_at: dt.datetime,
             argv: list[str], finished: bool,
             device: torch.device, device_name: str | None, clock: str,
             goal: Goal | None, loader: dict[str, Any] | None, tokens_counted: str | None,
             vitals: dict[str, Any] | None, profile: dict[str, Any] | None,
             sinks: dict[str, Any] | None) -> dict[str, Any]:
    """The run's meta record (written again whenever something in it changes)."""
    return {
        "schema": META_SCHEMA,
        "run_id": run_id,
        "made_by": made_by,
        "started_at": started_at.isoformat(),
        "finished_at": dt.datetime.now(dt.timezone.utc).isoformat() if finished else None,
        "host": socket.gethostname(),
        "pid": os.getpid(),
        "argv": argv,
        "versions": {
            "python": platform.python_version(),
            "torch": torch.__version__,
            "trainpace": __version__,
        },
        "device": {"kind": device.type, "index": device.index, "name": device_name},
        "clock": clock,
        **process_ranks(),
        "cpu_count": usable_cpus(),
        "config": config.meta(),
        "target": dataclasses.asdict(goal) if goal is not None else None,
        "loader": loader,
        "tokens_counted": tokens_counted,
        "vitals": vitals,
        "profile": profile,
        "sinks": sinks,
    }


def usable_cpus() -> int | None:
    """CPUs this process may run on (its affinity), which bounds useful DataLoader workers."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not on Linux
        return os.cpu_count()
