"""A distributed run folder read back: its ``rank{r}/`` folders merged after the fact.

Ranks on other nodes write their folders locally (no shared filesystem is assumed); copied
into one run folder, :func:`read_distributed` merges them with the same :class:`Merger` the
live exchange uses, replaying each rank's ``steps.jsonl`` window by window. When fewer rank
folders were gathered than the live merge saw, the live merge (the run folder's own
``summary.json`` and ``meta.json``, written by rank 0) is the better account, and is used.
"""

from __future__ import annotations

import bisect
import datetime as _dt
import itertools
import math
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from trainpace.dist.job_summary import merged_meta, merged_summary
from trainpace.dist.merge import Merger, WindowRecord, window_record
from trainpace.dist.ranks import RankInfo, rank_folders
from trainpace.errors import RunFolderError
from trainpace.measure.cost import measured_span
from trainpace.measure.energy import EnergyReading, energy_between
from trainpace.measure.summarize import summary_for_run
from trainpace.runlog import RunData, read_run
from trainpace.series import StepSeries
from trainpace.summary import Summary


@dataclass(frozen=True)
class DistributedRun:
    """The merged view of a run folder with rank folders, and what the reader noticed."""

    path: Path
    summary: Summary
    meta: dict[str, Any]
    # the steps (as columns) and sampler rows of the rank whose steps stand for the job
    # (Merger.steps_rank; meta["dist"]["steps_rank"] names it): what the diagnosis reads
    series: StepSeries = field(default_factory=StepSeries)
    system: list[dict[str, Any]] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    ranks_read: list[int] = field(default_factory=list)
    merger: Merger | None = None  # the merge of the rank folders (None: rank 0's live one used)
    # the job's mean power over each rank's measured steps (see job_energy)
    energy: EnergyReading = field(default_factory=EnergyReading)


def _unix(text: Any) -> float | None:
    try:
        return _dt.datetime.fromisoformat(str(text)).timestamp()
    except ValueError:
        return None


def _warmup(run: RunData) -> int:
    if run.summary is not None:
        return run.summary.steps.warmup
    warmup = (run.meta.get("config") or {}).get("warmup")
    return warmup if isinstance(warmup, int) else 0


# A job whose windows are fewer than MIN_WINDOWS is replayed from its step records in
# REPLAY_WINDOWS windows: the straggler rule needs several (at least 3, and most of them:
# diagnosis.communication.STRAGGLER_WINDOWS), and a short job with the default window of 100
# steps has only one or two. Eight windows, not three: a rank must then be behind in five of
# them, which the noise of a loaded host alone rarely gives.
MIN_WINDOWS = 4
REPLAY_WINDOWS = 8


def _window_size(run: RunData) -> int:
    size = (run.meta.get("config") or {}).get("window")
    return size if isinstance(size, int) and size > 0 else 100


def replay_window(runs: Iterable[RunData]) -> int:
    """The window the ranks' steps are replayed in: the run's own, or one that gives
    REPLAY_WINDOWS windows when the run's own gives fewer than MIN_WINDOWS."""
    sizes, steps = [], 0
    for run in runs:
        sizes.append(_window_size(run))
        steps = max(steps, len(run.series))
    size = min(sizes, default=100)
    if steps // size >= MIN_WINDOWS:
        return size
    return max(1, min(size, steps // REPLAY_WINDOWS))


def _windows(run: RunData, size: int | None = None) -> Iterator[list[dict[str, Any]]]:
    """The rank's steps a window at a time, in step order (one window's records alive at a
    time: a long run is never a list of every step)."""
    size = size if size is not None else _window_size(run)
    steps = run.series.column("step")
    ordered: Iterable[dict[str, Any]] = run.series
    if steps.size > 1 and not bool((np.diff(steps) > 0).all()):  # a damaged file: sorted
        ordered = sorted(run.series, key=lambda record: record["step"])
    for _, window in itertools.groupby(ordered, key=lambda record: (record["step"] - 1) // size):
        yield list(window)


class _Signs:
    """The sampler rows' device and host signs, averaged over a time span (rows sorted once,
    each span found by bisection: O(rows) over all the windows, not O(rows) per window)."""

    def __init__(self, system: Sequence[Mapping[str, Any]]) -> None:
        rows = sorted((r for r in system if _number(r.get("t_s")) is not None),
                      key=lambda r: r["t_s"])
        self.t_s = [float(r["t_s"]) for r in rows]
        hosts: list[Mapping[str, Any]] = [h if isinstance(h := r.get("host"), dict) else {}
                                          for r in rows]
        self.values = {
            "util_pct": [_number(r.get("device_util_pct")) for r in rows],
            "temperature_c": [_number(r.get("temperature_c")) for r in rows],
            "system_cpu_pct": [_number(h.get("system_cpu_pct")) for h in hosts],
        }

    def over(self, t0: float, t1: float) -> dict[str, Any]:
        lo, hi = bisect.bisect_left(self.t_s, t0), bisect.bisect_right(self.t_s, t1)
        out: dict[str, Any] = {}
        for key, column in self.values.items():
            values = [v for v in column[lo:hi] if v is not None]
            out[key] = sum(values) / len(values) if values else None
        return out


def _cpu_count(meta: Mapping[str, Any]) -> int | None:
    value = meta.get("cpu_count")
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else None


def _number(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    return float(value) if math.isfinite(value) else None


def window_records(rank: int, run: RunData, size: int | None = None) -> list[WindowRecord]:
    """One rank's folder as the records it would have sent, one per window of its steps
    (windows of ``size`` steps; by default the run's own)."""
    meta = run.meta
    started = _unix(meta.get("started_at"))
    finished = meta.get("finished_at") is not None
    warmup = _warmup(run)
    signs = _Signs(run.system)
    out: list[WindowRecord] = []
    for index, steps in enumerate(_windows(run, size), start=1):
        t_end = float(steps[-1].get("t_s") or 0.0)
        t_start = t_end - sum(float(s["step_s"]) for s in steps)
        out.append(window_record(
            rank=rank, local_rank=int(meta.get("local_rank") or 0),
            node=int(meta.get("node") or 0), host=meta.get("host"), window=index,
            steps=steps, warmup=warmup, t_unix=(started or 0.0) + t_end,
            figures=signs.over(t_start, t_end), cpu_count=_cpu_count(meta), final=False))
    if finished and out:
        out[-1]["final"] = True  # its last window: the rank ran to its end
    elif finished:
        out.append(window_record(rank=rank, host=meta.get("host"), window=1, steps=[],
                                 t_unix=started or 0.0, final=True))
    return out


MAX_WORLD_SIZE = 1 << 20  # ranks: the largest jobs run ~1e5; a number beyond this is damage
MAX_LISTED_ABSENT = 4096  # absent ranks the merge lists one by one (beyond: counted in a note)


def read_distributed(path: str | Path) -> DistributedRun | None:
    """The merged run of a folder holding ``rank{r}/`` folders; None when it holds none.

    A rank whose ``summary.json`` is behind its steps (it died after writing it) is rebuilt
    from its steps; the job's step counts come from the rank that got furthest, its step
    times and the steps its diagnosis reads from the rank whose steps stand for the job
    (``Merger.steps_rank``), and a note names each rank that ended early and its last step.
    Rank numbers and world sizes beyond :data:`MAX_WORLD_SIZE` are damage, left out by name:
    the work is bounded by the folders on disk, never by a number written in one.
    """
    folder = Path(path)
    folders = rank_folders(folder)
    if not folders:
        return None
    notes: list[str] = []
    runs: dict[int, RunData] = {}
    for rank, sub in folders.items():
        if rank >= MAX_WORLD_SIZE:
            notes.append(f"{sub.name}: left out (a rank number beyond {MAX_WORLD_SIZE:,} is "
                         "not a real rank's)")
            continue
        try:
            runs[rank] = read_run(sub)
        except RunFolderError as exc:
            notes.append(f"{sub.name}: left out ({exc})")
            continue
        notes.extend(f"{sub.name}/{name}: the last line was cut off (a rank killed "
                     "mid-write); it is left out" for name in runs[rank].truncated)
    if not runs:
        raise RunFolderError(f"{folder}: no readable rank folder ({'; '.join(notes)})")
    top = _read_top(folder, notes)
    world = max(runs) + 1
    for where, meta in [*((f"rank{r}/meta.json", run.meta) for r, run in runs.items()),
                        *([("meta.json", top.meta)] if top is not None else [])]:
        size = meta.get("world_size")
        if isinstance(size, int) and not isinstance(size, bool) and 0 < size <= MAX_WORLD_SIZE:
            world = max(world, size)
        elif size is not None:
            notes.append(f"{where}: world_size {size!r} left out (not a number of ranks from "
                         f"1 to {MAX_WORLD_SIZE:,})")
    summaries = {rank: summary_for_run(run) for rank, run in runs.items()}
    furthest = max(runs, key=lambda r: (summaries[r].steps.total, -r))
    absent = _absent(sorted(runs), world)
    live_ranks = len((top.meta.get("dist") or {}).get("ranks") or ()) if top is not None else 0
    if absent:
        notes.append(f"rank folders of ranks {_ranges(absent)} are not in {folder} (other "
                     "nodes write theirs locally: copy them here to merge them)")
    if top is not None and top.summary is not None and live_ranks > len(runs):
        if top.summary.steps.total >= summaries[furthest].steps.total:
            notes.append(f"using rank 0's live merge of {live_ranks} ranks (summary.json), not "
                         f"the {len(runs)} rank folders here")
            meta = dict(top.meta)
            dist = meta.get("dist")
            dist = dist if isinstance(dist, dict) else {}
            shown = dist.get("steps_rank")
            shown = shown if isinstance(shown, int) and shown in runs else min(runs)
            meta["dist"] = {**dist, "steps_rank": shown}
            return DistributedRun(folder, top.summary, meta, runs[shown].series,
                                  runs[shown].system, notes, sorted(runs),
                                  energy=job_energy(runs, summaries, live_ranks,
                                                    cpu=top.summary.device.kind == "cpu"))
        notes.append(f"rank 0's live merge (summary.json, over {top.summary.steps.total} steps) "
                     f"is behind rank {furthest}'s {summaries[furthest].steps.total} steps: the "
                     f"{len(runs)} rank folders here are merged instead")
    absent_count = sum(b - a + 1 for a, b in absent)
    ids = range(world) if absent_count <= MAX_LISTED_ABSENT else sorted(runs)
    merger = Merger(world, ids=ids)
    size = replay_window(runs.values())
    records = [rec for rank, run in runs.items() for rec in window_records(rank, run, size)]
    for rec in sorted(records, key=lambda r: (r["window"], r["rank"])):  # as they came live
        merger.add(rec)
    merger.flush()
    notes.extend(_ended_early(merger, summaries[furthest].steps.total))
    first = runs[min(runs)]
    base = summaries[furthest]
    steps_rank = merger.steps_rank()
    shown = steps_rank if steps_rank is not None else furthest
    info = RankInfo(rank=0, world_size=world, host=first.meta.get("host"))
    meta = merged_meta(merger, info=info, run_id=folder.name,
                       started_unix=_unix(first.meta.get("started_at")) or 0.0, done=True,
                       rank_meta=runs[shown].meta)
    meta["dist"]["steps_rank"] = shown
    meta["dist"]["exchange"] = "rank_folders"
    meta["finished_at"] = (top.meta.get("finished_at") if top is not None else None) or max(
        (str(r.meta.get("finished_at")) for r in runs.values() if r.meta.get("finished_at")),
        default=None)
    summary = merged_summary(merger, base, done=True, rank_summaries=summaries)
    return DistributedRun(folder, summary, meta, runs[shown].series, runs[shown].system,
                          notes, sorted(runs), merger,
                          energy=job_energy(runs, summaries, world,
                                            cpu=summary.device.kind == "cpu"))


def job_energy(runs: Mapping[int, RunData], summaries: Mapping[int, Summary], world: int, *,
               cpu: bool) -> EnergyReading:
    """The job's mean power over the measured steps: each rank's own, from its sampler rows
    over its own measured span, summed once per accelerator (a rank) or, on the CPU, once per
    host (every rank of a host reads the same package). Unknown, with the reason, when a
    rank's folder is not here or a rank measured none."""
    if len(runs) < world:
        return EnergyReading(missing=f"{len(runs)} of {world} rank folders are here: the "
                                     "others' power is unknown")
    per_unit: dict[Any, float] = {}
    source = None
    for rank, run in sorted(runs.items()):
        start, end = measured_span(run.series.column("t_s"), summaries[rank].steps.warmup)
        reading = energy_between(run.system, start, end)
        if reading.power_w_mean is None:
            return EnergyReading(missing=f"rank {rank}: {reading.missing}")
        per_unit[run.meta.get("host") if cpu else rank] = reading.power_w_mean
        source = source or reading.source
    return EnergyReading(power_w_mean=sum(per_unit.values()), source=source,
                         devices=len(per_unit))


def _ended_early(merger: Merger, furthest_step: int) -> list[str]:
    """A note for each rank that stopped short of the furthest one without a final record,
    with its last step: a rank that died is named, never averaged in silently (ranks all at
    the same step are a job still running, or stopped as one: nothing to single out)."""
    return [f"rank {m['rank']} ended early at step {m['last_step']} (no final record; the "
            f"furthest rank reached step {furthest_step}): its figures cover its steps only"
            for m in merger.missing(done=True)
            if m["reason"].startswith("ended early") and m["last_step"] < furthest_step]


def _absent(present: Sequence[int], world: int) -> list[tuple[int, int]]:
    """The ranks below ``world`` with no folder, as ``(first, last)`` ranges (never a list
    of every rank)."""
    out, expected = [], 0
    for rank in [*present, world]:
        if rank > expected:
            out.append((expected, rank - 1))
        expected = rank + 1
    return out


def _read_top(folder: Path, notes: list[str]) -> RunData | None:
    try:
        return read_run(folder)
    except RunFolderError as exc:
        if (folder / "meta.json").exists() or (folder / "summary.json").exists():
            notes.append(f"{folder.name}: the live merge is unreadable ({exc})")
        return None


def _ranges(ranges: Sequence[tuple[int, int]]) -> str:
    parts = [f"{a}" if a == b else f"{a}-{b}" for a, b in ranges[:8]]
    more = f" and {len(ranges) - 8} more ranges" if len(ranges) > 8 else ""
    return ", ".join(parts) + more
