"""The job's figures over one window, from every rank's record of it: what the dashboards,
the console line and the framework loggers show under DDP (at rank 0, once the window's
ranks are merged).

The rules are the merge's (:mod:`trainpace.dist.merge`): the job's throughput is the sum over
ranks of their samples over the wall time of the slowest rank (the most measured seconds),
its step time is the slowest rank's, its data wait the worst rank's (the rank the others
wait for), its temperature the hottest device's, its device use the mean over the ranks.
The loss, the target and the warm-up are rank 0's own (no rank sends them). Each rank's own
figures are kept under ``rank_figures`` for the dashboards that show them by rank.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from trainpace.dist.merge import WindowRecord
from trainpace.stats import share_pct

OWN_FIGURES = ("loss", "warmup_steps", "device_kind", "time_to_target_s", "eta_to_target_s")
"""Rank 0's own window figures the job's window takes as they are (the exchange carries no
loss: rank 0's is the one a single-process run would show)."""


def rank_figures(record: WindowRecord) -> dict[str, float | None]:
    """One rank's own figures over its window, in the window figures' keys."""
    measured_s = record["measured_s"]
    tokens = record["tokens"]
    return {
        "samples_per_s": record["samples"] / measured_s if measured_s > 0 else None,
        "tokens_per_s": tokens / measured_s if tokens is not None and measured_s > 0 else None,
        "steps_per_s": record["steps"] / measured_s if measured_s > 0 else None,
        "step_s_median": record["step_s_median"],
        "wait_pct": share_pct(record["wait_s"], measured_s),
        "device_util_pct": record["util_pct"],
        "temperature_c": record["temperature_c"],
    }


def job_window(records: Mapping[int, WindowRecord], *, world_size: int,
               own: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """The job's window figures from ``records`` (rank -> its record of the window; a rank
    late or gone is simply absent: ``ranks`` says how many there were).

    ``own``: rank 0's own figures of the window (for :data:`OWN_FIGURES`)."""
    measured = [r for r in records.values() if r["steps"] > 0 and r["measured_s"] > 0]
    per_rank = {rank: rank_figures(record) for rank, record in sorted(records.items())}
    figures: dict[str, Any] = {
        "first_step": min((r["first_step"] for r in records.values()), default=None),
        "last_step": max((r["last_step"] for r in records.values()), default=None),
        "ranks": len(records),
        "world_size": world_size,
        "samples_per_s": None, "tokens_per_s": None, "steps_per_s": None,
        "step_s_median": None, "measured_steps": 0, "slowest_rank": None,
    }
    if measured:
        slowest = max(measured, key=lambda r: (r["measured_s"], -r["rank"]))  # ties: lowest
        seconds = slowest["measured_s"]
        tokens = [r["tokens"] for r in measured]
        figures.update(
            samples_per_s=sum(r["samples"] for r in measured) / seconds,
            tokens_per_s=(sum(t for t in tokens if t is not None) / seconds
                          if all(t is not None for t in tokens) else None),
            steps_per_s=slowest["steps"] / seconds,
            step_s_median=slowest["step_s_median"],
            measured_steps=slowest["steps"],
            slowest_rank=slowest["rank"],
        )
    waits = [(f["wait_pct"], rank) for rank, f in per_rank.items() if f["wait_pct"] is not None]
    figures["wait_pct"], figures["waiting_rank"] = max(waits, default=(None, None),
                                                       key=lambda w: (w[0], -w[1]))
    utils = [f["device_util_pct"] for f in per_rank.values() if f["device_util_pct"] is not None]
    figures["device_util_pct"] = sum(utils) / len(utils) if utils else None
    temperatures = [f["temperature_c"] for f in per_rank.values()
                    if f["temperature_c"] is not None]
    figures["temperature_c"] = max(temperatures, default=None)
    for key in OWN_FIGURES:
        if own is not None and key in own:
            figures[key] = own[key]
    figures["rank_figures"] = per_rank
    return figures
