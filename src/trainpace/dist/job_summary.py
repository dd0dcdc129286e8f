"""The merged run: a ``trainpace.summary/1`` of all ranks, and the run folder's meta.

The figures that add up across ranks are merged (throughput, data wait); the job's step
times are those of the rank whose steps stand for the job (``Merger.steps_rank``: the slowest,
the one that holds the job's time as in global throughput), from that rank's own steps: its
step median, p90 and mean, never a median of window medians or of other ranks' medians; its
host section goes with them (the diagnosis reads that rank's steps and sampler rows). The
figures no merge defines (the steady span's rates) are ``None``, never rank 0's; the rest are
rank 0's (device kind and name, FLOPs per step). The cost is the job's: its throughput, priced
per accelerator or, on the CPU, per host. Each ``ranks[]`` entry carries the contract's keys
(its ``step_s_median`` from its own steps where they were read, else ``None``) and, as
extensions, the rank's place (local rank, node), its device and host signs, the median of its
recent windows' step medians (``window_step_s_median``, what the window records carry), its
scores and whether it ran to the end. The top-level ``dist`` key (an extension) says how the
merge was made and which ranks are missing.
"""

from __future__ import annotations

import dataclasses
import datetime as _dt
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, Protocol

from trainpace.dist.ranks import RankInfo, rank_folder
from trainpace.measure.cost import cost_of
from trainpace.measure.energy import EnergyReading
from trainpace.runlog import META_SCHEMA
from trainpace.summary import Communication, Cost, RankEntry, Summary, Time

RANK_EXTRAS = ("local_rank", "node", "window_step_s_median", "cpu_count", "windows",
               "last_step", "final", "pre_collective_pct",
               "communication_pct", "util_pct", "temperature_c", "throttle_pct",
               "process_cpu_pct", "system_cpu_pct")


class Merged(Protocol):
    """What the summary needs of a merge: the flat :class:`~trainpace.dist.merge.Merger`
    of every rank, or rank 0's :class:`~trainpace.dist.tree.TreeMerger` of node records."""

    world_size: int
    scored_windows: int
    source: str | None

    def rank_dicts(self) -> list[dict[str, Any]]: ...

    def slowest_rank(self) -> int | None: ...

    def steps_rank(self) -> int | None: ...

    def throughput(self) -> dict[str, float | None]: ...

    def wait_pct(self) -> float | None: ...

    def wait_s_per_step(self) -> float | None: ...

    def ranks_reporting(self) -> int: ...

    def missing(self, *, done: bool) -> list[dict[str, Any]]: ...

    def state(self, *, done: bool) -> dict[str, Any]: ...


def merged_summary(merger: Merged, base: Summary, *, done: bool,
                   rank_summaries: Mapping[int, Summary] | None = None) -> Summary:
    """``base`` (rank 0's own summary) with the figures of every rank merged in.

    ``rank_summaries``: ranks' own summaries (from their steps), by rank; the one of the rank
    whose steps stand for the job gives the job's step times and host section (``None`` when
    it is not among them), and each one present gives its ``ranks[]`` entry's step median.
    """
    own = rank_summaries or {}
    steps_rank = merger.steps_rank()
    shown = own.get(steps_rank) if steps_rank is not None else None
    states = merger.rank_dicts()
    rates = merger.throughput()
    wait_s_per_step = merger.wait_s_per_step()
    comm = [s["communication_pct"] for s in states]
    communication = base.communication
    if comm and all(c is not None for c in comm):
        # The rank that waits least in the exchange shows its own cost; the others' extra
        # time in it is waiting for a slower rank (the straggler rule's business).
        communication = Communication(share_pct=min(comm), overlap_pct=None,
                                      source="ddp_comm_hook (least-waiting rank)")
    job_time = shown.time if shown is not None else Time()

    def rank_median(state: Mapping[str, Any]) -> float | None:
        summary = own.get(state["rank"])
        return summary.time.step_s_median if summary is not None else None

    merged = dataclasses.replace(
        base,
        world_size=merger.world_size,
        # the steady span is a rank's (its steps without those slowed by other processes):
        # the job has none of its own to show
        steps=dataclasses.replace(base.steps, slowed_by_others=None),
        throughput=dataclasses.replace(base.throughput, samples_per_s=rates["samples_per_s"],
                                       tokens_per_s=rates["tokens_per_s"],
                                       steps_per_s=rates["steps_per_s"],
                                       steady_samples_per_s=None, steady_tokens_per_s=None),
        time=dataclasses.replace(base.time, measured_s=job_time.measured_s,
                                 step_s_median=job_time.step_s_median,
                                 step_s_p90=job_time.step_s_p90,
                                 step_s_mean=job_time.step_s_mean),
        data=dataclasses.replace(base.data, wait_pct=merger.wait_pct(),
                                 wait_s_per_step=wait_s_per_step),
        host=shown.host if shown is not None else base.host,
        ranks=[RankEntry(rank=s["rank"], host=s["host"], samples_per_s=s["samples_per_s"],
                         step_s_median=rank_median(s), wait_pct=s["wait_pct"])
               for s in states],
        communication=communication,
    )
    return dataclasses.replace(merged, cost=job_cost(merged, base.cost, own, states))


def job_cost(merged: Summary, own_cost: Cost, rank_summaries: Mapping[int, Summary],
             states: Sequence[Mapping[str, Any]]) -> Cost:
    """The job's cost at rank 0's prices: the job's throughput, priced per accelerator or, on
    the CPU, per host (:func:`~trainpace.measure.cost.priced_units`). Its power is the ranks'
    measured power summed (one rank per host on the CPU: the host's package is read by each
    of its ranks), when every rank's own summary is at hand; else a rated power per unit."""
    price, grid = own_cost.price_per_hour, own_cost.grid_g_per_kwh
    rated_w = (own_cost.power_w_mean / own_cost.devices
               if own_cost.energy_is_estimate and own_cost.power_w_mean is not None
               and own_cost.devices else None)
    costs = {s["rank"]: rank_summaries[s["rank"]].cost for s in states
             if s["rank"] in rank_summaries}
    if states and len(costs) == len(states) and all(
            c.power_w_mean is not None and not c.energy_is_estimate for c in costs.values()):
        cpu = merged.device.kind == "cpu"
        per_unit = {s["host"] if cpu else s["rank"]: float(costs[s["rank"]].power_w_mean or 0.0)
                    for s in states}
        energy = EnergyReading(power_w_mean=sum(per_unit.values()),
                               source=costs[states[0]["rank"]].energy_source)
    elif own_cost.energy_source is None:  # rank 0 measured none: why, as it said
        energy = EnergyReading(missing=own_cost.energy_missing)
    else:
        energy = EnergyReading(missing="not every rank's measured power is at hand (another "
                                       "node's folder)")
    return cost_of(merged, price_per_hour=price, grid_g_per_kwh=grid, energy=energy,
                   rated_power_w=rated_w)


def summary_dict(summary: Summary, merger: Merged, *, done: bool) -> dict[str, Any]:
    """The merged summary's JSON: ``ranks[]`` entries with their extensions, and ``dist``."""
    # dataclasses.asdict() of thousands of entries costs rank 0 more than the merge itself:
    # the entries (flat scalars) are written out here directly
    data = dataclasses.replace(summary, ranks=[]).to_dict()
    states = {s["rank"]: s for s in merger.rank_dicts()}
    keys = [f.name for f in dataclasses.fields(RankEntry)]
    for rank_entry in summary.ranks:
        entry = {key: getattr(rank_entry, key) for key in keys}
        state = states.get(entry["rank"], {})
        scores = state.get("scores") or []
        entry.update({key: state.get(key) for key in RANK_EXTRAS})
        entry["relative_score"] = scores[-1][1] if scores else None
        entry["individual_score"] = scores[-1][2] if scores else None
        data["ranks"].append(entry)
    data["dist"] = {
        "merged_ranks": merger.ranks_reporting(),
        "windows_scored": merger.scored_windows,
        "score_source": merger.source,
        "missing": merger.missing(done=done),
    }
    return data


# What a rank's own meta.json says of the run's setup that the findings and the report read
# (the front-end that made it, its settings and loader, its vitals and ceilings, what a
# framework integration noted): the job's meta takes them from the rank whose steps it shows.
RANK_META_KEYS = ("made_by", "argv", "versions", "device", "clock", "config", "target", "loader",
                  "tokens_counted", "vitals", "ceilings", "framework")


def merged_meta(merger: Merged, *, info: RankInfo, run_id: str, started_unix: float,
                done: bool, exchange_error: str | None = None,
                rank_meta: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """The run folder's own ``meta.json``: the job, its ranks, its hosts, and the merge's state.

    ``rank_meta``: the meta.json of the rank whose steps stand for the job
    (``merger.steps_rank()``), for the setup a single rank's meta has (:data:`RANK_META_KEYS`).
    ``hosts`` lists each host with its ranks and CPUs; ``cpu_count`` is that rank's host's (the
    cores its DataLoader workers share with the other ranks there); ``dist.steps_rank`` names
    the rank."""
    def iso(t: float) -> str:
        return _dt.datetime.fromtimestamp(t, _dt.timezone.utc).isoformat()

    state = merger.state(done=done)
    state["exchange"] = "store"
    state["exchange_error"] = exchange_error
    steps_rank = merger.steps_rank()
    state["steps_rank"] = steps_rank
    hosts: dict[str | None, dict[str, Any]] = {}
    for entry in state["ranks"]:
        host = hosts.setdefault(entry.get("host"), {"host": entry.get("host"), "ranks": 0,
                                                     "cpu_count": None})
        host["ranks"] += 1
        host["cpu_count"] = host["cpu_count"] or entry.get("cpu_count")
    shown_host = next((e.get("host") for e in state["ranks"] if e.get("rank") == steps_rank),
                      info.host)
    own = rank_meta or {}
    return {
        "schema": META_SCHEMA,
        "run_id": run_id,
        "started_at": iso(started_unix),
        "finished_at": _dt.datetime.now(_dt.timezone.utc).isoformat() if done else None,
        "host": info.host,
        "world_size": info.world_size,
        "rank": None,  # the merged run: every rank
        "rank_folder": rank_folder(Path(), 0).name.replace("0", "{rank}"),  # rank{rank}/
        **{key: own[key] for key in RANK_META_KEYS if key in own},
        "cpu_count": (hosts.get(shown_host) or {}).get("cpu_count") or own.get("cpu_count"),
        "hosts": list(hosts.values()),
        "dist": state,
    }


def rank_summary(summary: Summary, info: RankInfo) -> Summary:
    """One rank's own summary (``rank{r}/summary.json``) in the job's terms: the job's world
    size, and its own rank in its ``ranks[]`` entry (the single-process summary says 1 and 0).
    Its figures stay its own; the merged run's are rank 0's top-level summary."""
    if not info.distributed:
        return summary
    ranks = [dataclasses.replace(e, rank=info.rank, host=e.host or info.host)
             for e in summary.ranks]
    return dataclasses.replace(summary, world_size=info.world_size, ranks=ranks)
