"""A distributed run folder read back: its ``rank{r}/`` folders merged after the fact.

Ranks on other nodes write their folders locally (no shared filesystem is assumed); copied
into one run folder, :func:`read_distributed` merges them with the same :class:`Merger` the
live exchange uses, replaying each rank's ``steps.jsonl`` window by window. When fewer rank
folders were gathered than the live merge saw, the live merge (the run folder's own
``summary.json`` and ``meta.json``, written by rank 0) is the better account, and is used.
"""

from __future__ import annotations

import datetime as _dt
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from trainpace.dist.merge import Merger, WindowRecord, window_record
from trainpace.dist.ranks import RankInfo, rank_folders
from trainpace.dist.job_summary import merged_meta, merged_summary
from trainpace.errors import RunFolderError
from trainpace.runlog import RunData, read_run
from trainpace.summary import Summary


@dataclass(frozen=True)
class DistributedRun:
    """The merged view of a run folder with rank folders, and what the reader noticed."""

    path: Path
    summary: Summary
    meta: dict[str, Any]
    steps: list[dict[str, Any]] = field(default_factory=list)  # the lowest rank's
    system: list[dict[str, Any]] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    ranks_read: list[int] = field(default_factory=list)


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


def _windows(run: RunData) -> list[list[dict[str, Any]]]:
    size = (run.meta.get("config") or {}).get("window")
    size = size if isinstance(size, int) and size > 0 else 100
    groups: dict[int, list[dict[str, Any]]] = {}
    for step in run.steps:
        if isinstance(step.get("step"), int) and isinstance(step.get("step_s"), (int, float)):
            groups.setdefault((step["step"] - 1) // size, []).append(step)
    return [groups[k] for k in sorted(groups)]


def _signs(system: Sequence[Mapping[str, Any]], t0: float, t1: float) -> dict[str, Any]:
    rows = [r for r in system if isinstance(r.get("t_s"), (int, float)) and t0 <= r["t_s"] <= t1]
    out: dict[str, Any] = {}
    for key, pick in (("util_pct", lambda r: r.get("device_util_pct")),
                      ("temperature_c", lambda r: r.get("temperature_c")),
                      ("system_cpu_pct", lambda r: (r.get("host") or {}).get("system_cpu_pct"))):
        values = [float(v) for v in map(pick, rows) if isinstance(v, (int, float))]
        out[key] = sum(values) / len(values) if values else None
    return out


def window_records(rank: int, run: RunData) -> list[WindowRecord]:
    """One rank's folder as the records it would have sent, one per window of its steps."""
    meta = run.meta
    started = _unix(meta.get("started_at"))
    finished = meta.get("finished_at") is not None
    windows = _windows(run)
    warmup = _warmup(run)
    out = []
    for index, steps in enumerate(windows, start=1):
        t_end = float(steps[-1].get("t_s") or 0.0)
        t_start = t_end - sum(float(s["step_s"]) for s in steps)
        out.append(window_record(
            rank=rank, local_rank=int(meta.get("local_rank") or 0),
            node=int(meta.get("node") or 0), host=meta.get("host"), window=index,
            steps=steps, warmup=warmup, t_unix=(started or 0.0) + t_end,
            figures=_signs(run.system, t_start, t_end),
            final=finished and index == len(windows)))
    if finished and not windows:
        out.append(window_record(rank=rank, host=meta.get("host"), window=1, steps=[],
                                 t_unix=started or 0.0, final=True))
    return out


def read_distributed(path: str | Path) -> DistributedRun | None:
    """The merged run of a folder holding ``rank{r}/`` folders; None when it holds none."""
    folder = Path(path)
    folders = rank_folders(folder)
    if not folders:
        return None
    notes: list[str] = []
    runs: dict[int, RunData] = {}
    for rank, sub in folders.items():
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
    sizes = [int(r.meta.get("world_size") or 1) for r in runs.values()] + [max(runs) + 1]
    if top is not None:
        sizes.append(int(top.meta.get("world_size") or 1))
    world = max(sizes)
    first = runs[min(runs)]
    absent = [r for r in range(world) if r not in runs]
    live_ranks = len((top.meta.get("dist") or {}).get("ranks") or ()) if top is not None else 0
    if absent:
        notes.append(f"rank folders of ranks {_span(absent)} are not in {folder} (other nodes "
                     "write theirs locally: copy them here to merge them)")
    if top is not None and top.summary is not None and live_ranks > len(runs):
        notes.append(f"using rank 0's live merge of {live_ranks} ranks (summary.json), not the "
                     f"{len(runs)} rank folders here")
        return DistributedRun(folder, top.summary, dict(top.meta), first.steps, first.system,
                              notes, sorted(runs))
    merger = Merger(world)
    records = [rec for rank, run in runs.items() for rec in window_records(rank, run)]
    for rec in sorted(records, key=lambda r: (r["window"], r["rank"])):  # as they came live
        merger.add(rec)
    merger.flush()
    base = first.summary or Summary(run_id=first.meta.get("run_id"))
    info = RankInfo(rank=0, world_size=world, host=runs[min(runs)].meta.get("host"))
    meta = merged_meta(merger, info=info, run_id=folder.name,
                       started_unix=_unix(first.meta.get("started_at")) or 0.0, done=True)
    meta["dist"]["exchange"] = "rank_folders"
    meta["finished_at"] = (top.meta.get("finished_at") if top is not None else None) or max(
        (str(r.meta.get("finished_at")) for r in runs.values() if r.meta.get("finished_at")),
        default=None)
    summary = merged_summary(merger, base, done=True)
    return DistributedRun(folder, summary, meta, first.steps, first.system, notes, sorted(runs))


def _read_top(folder: Path, notes: list[str]) -> RunData | None:
    try:
        return read_run(folder)
    except RunFolderError as exc:
        if (folder / "meta.json").exists() or (folder / "summary.json").exists():
            notes.append(f"{folder.name}: the live merge is unreadable ({exc})")
        return None


def _span(ranks: Sequence[int]) -> str:
    shown = ", ".join(str(r) for r in ranks[:8])
    return shown + (f" … ({len(ranks)} in all)" if len(ranks) > 8 else "")
