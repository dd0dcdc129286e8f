"""Analyze traces: one rank per trace file, then across ranks.

A library call starts no process of its own: the ranks are read one after the other, or in
an executor the caller passes (``trainpace analyze`` passes a pool of processes for several
large ranks, ``cli/_analyze.py``)."""

from __future__ import annotations

import functools
import os
from collections import Counter
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import msgspec
import numpy as np

from trainpace.errors import ConfigError
from trainpace.stats import median
from trainpace.trace import breakdown as bd
from trainpace.trace.evidence import build_summary
from trainpace.trace.findings import CrossRank, RankAnalysis, TraceAnalysis
from trainpace.trace.host_breakdown import host_breakdown
from trainpace.trace.idle import GAP_THRESHOLD_US, TOP_GAPS, idle_breakdown
from trainpace.trace.kernels import TOP_KERNELS, hta_steps, kernel_breakdown
from trainpace.trace.load import TraceColumns, read_trace, trace_files
from trainpace.trace.memory import available_memory, check_memory
from trainpace.trace.prepare import Prepared, prepare
from trainpace.trace.runmeta import find_run_meta

if TYPE_CHECKING:  # concurrent.futures imports logging (8 ms), which a trace's analysis never uses
    from concurrent.futures import Executor


def _declared_rank(meta: dict[str, Any]) -> int | None:
    info = meta.get("distributedInfo")
    rank = info.get("rank") if isinstance(info, dict) else None
    return rank if isinstance(rank, int) and not isinstance(rank, bool) else None


def _device_name(p: Prepared) -> str | None:
    props = p.cols.meta.get("deviceProperties")
    if not isinstance(props, list) or not props:
        return None
    used = p.cols.device[p.device & (p.cols.device >= 0)]
    wanted = int(np.bincount(used).argmax()) if len(used) else None
    for entry in props:
        if isinstance(entry, dict) and (wanted is None or entry.get("id") == wanted):
            name = entry.get("name")
            return name if isinstance(name, str) else None
    return None


def _notes(p: Prepared, t: bd.Temporal | None) -> list[str]:
    c, notes = p.cols, []
    if c.skipped:
        bad = {k: v for k, v in c.skipped.items() if k.startswith(("malformed", "not a JSON"))}
        if bad:
            notes.append("skipped events: " + ", ".join(f"{v} {k}" for k, v in bad.items()))
    if t is None:
        notes.append("no device events (kernels, copies): a CPU run, or recorded without "
                     "ProfilerActivity.CUDA; analyzed as a CPU trace (operators by self time, "
                     "data loading, Python between operators)")
    if not len(p.steps):
        notes.append("no ProfilerStep#N spans (call prof.step() once per step): no per-step "
                     "breakdown, step times or DataLoader share")
    elif not p.hta_filtered:
        notes.append("a single ProfilerStep: as in HTA, the device window is the whole trace")
    if c.rounded_to_us:
        notes.append("ns-resolution timestamps rounded to whole µs (start up, end down), as HTA")
    return notes


def analyze_columns(
    cols: TraceColumns,
    *,
    rank: int = 0,
    gap_threshold_us: float = GAP_THRESHOLD_US,
    top: int = TOP_KERNELS,
) -> RankAnalysis:
    """Analyze one loaded trace."""
    p = prepare(cols)
    t = bd.temporal(p)
    busy = t.busy if t is not None else (np.zeros(0), np.zeros(0))
    steps = bd.steps(p)
    figures: dict[str, Any] = {}
    if t is not None:
        idle_pct, compute_pct, non_compute_pct = bd.temporal_pcts(t)
        figures = {
            "window_us": t.window_us, "idle_us": t.idle_us, "compute_us": t.compute_us,
            "non_compute_us": t.non_compute_us, "idle_pct": idle_pct,
            "compute_pct": compute_pct, "non_compute_pct": non_compute_pct,
            "comm_comp_overlap_pct": t.overlap_pct,
            "communication_us": float((t.communication[1] - t.communication[0]).sum()),
            "exposed_communication_us": t.exposed_communication_us,
        }
    dropped = None
    if p.hta_filtered:
        dropped = p.steps.names[-1] if len(p.steps) else None
    info = cols.meta.get("distributedInfo")
    return RankAnalysis(
        rank=rank,
        path=cols.path,
        device_name=_device_name(p),
        device_listed=bool(cols.meta.get("deviceProperties")),
        events=cols.events_total,
        device_events=int(p.device.sum()),
        skipped=dict(cols.skipped),
        hta_dropped_step=dropped,
        window_steps=hta_steps(p),
        steps=steps,
        idle=idle_breakdown(p, busy, gap_threshold_us=gap_threshold_us, top=TOP_GAPS)
        if t is not None else None,
        kernels=kernel_breakdown(p, top=top),
        host=host_breakdown(p, top=top) if t is None else None,
        distributed=info if isinstance(info, dict) else None,
        notes=_notes(p, t),
        **figures,
    )


def _analyze_file(path: str, *, gap_threshold_us: float, top: int) -> RankAnalysis:
    """Analyze one rank's trace file (its memory checked already); its rank is the one it
    declares, else -1 (numbered by :func:`_combine_ranks`). A module-level function: an
    executor of processes pickles it by name."""
    cols = read_trace(path)
    rank = _declared_rank(cols.meta)
    return analyze_columns(cols, rank=-1 if rank is None else rank,
                           gap_threshold_us=gap_threshold_us, top=top)


def _assign_ranks(ranks: list[RankAnalysis], notes: list[str]) -> list[RankAnalysis]:
    declared = [r.rank for r in ranks]
    if all(d >= 0 for d in declared) and len(set(declared)) == len(declared):
        return sorted(ranks, key=lambda r: r.rank)
    if len(ranks) > 1:
        dup = [d for d, n in Counter(declared).items() if n > 1 and d >= 0]
        why = f"rank {dup[0]} is declared by more than one trace" if dup else \
            "some traces have no distributedInfo.rank"
        notes.append(f"{why}: ranks numbered in the order the files were given")
    return [msgspec.structs.replace(r, rank=i) for i, r in enumerate(ranks)]


def cross_rank(ranks: Sequence[RankAnalysis]) -> CrossRank:
    """Ranks compared: step-time skew, communication per step, clock offsets."""
    if len(ranks) < 2:
        return CrossRank()
    medians = {r.rank: r.steps.duration_us_median for r in ranks}
    known = {k: v for k, v in medians.items() if v is not None}
    notes: list[str] = []
    skew = slowest = None
    typical = median(list(known.values()))
    if known and typical:
        slowest = max(known, key=known.__getitem__)
        skew = 100.0 * (known[slowest] / typical - 1.0)
    comm = {}
    for r in ranks:
        n = r.window_steps
        comm[r.rank] = r.communication_us / n if r.communication_us is not None and n else None
    offsets: dict[int, float] = {}
    first = ranks[0]
    names = {row.name: row for row in first.steps.rows}
    for r in ranks:
        common = [row for row in r.steps.rows if row.name in names]
        if not common:
            notes.append(f"rank {r.rank} shares no ProfilerStep with rank {first.rank}: "
                         "clocks not compared")
            continue
        offsets[r.rank] = _offset(first, r, common[0].name)
    if offsets and typical and max(abs(v) for v in offsets.values()) > typical:
        notes.append("the ranks' clocks disagree by more than a step (the same ProfilerStep "
                     "starts far apart): cross-rank timelines are not aligned; per-rank figures "
                     "and step times are unaffected")
    return CrossRank(
        ranks=[{"rank": r.rank, "step_us_median": medians[r.rank],
                "communication_us_per_step": comm[r.rank],
                "clock_offset_us": offsets.get(r.rank)} for r in ranks],
        step_skew_pct=skew, slowest_rank=slowest, notes=notes,
    )


def _offset(a: RankAnalysis, b: RankAnalysis, step: str) -> float:
    """How much later ``step`` starts on b's clock than on a's."""
    ra = next(row for row in a.steps.rows if row.name == step)
    rb = next(row for row in b.steps.rows if row.name == step)
    return ((b.steps.origin_us or 0.0) + rb.start_us) - ((a.steps.origin_us or 0.0) + ra.start_us)


def check_options(gap_threshold_us: float, top: int) -> None:
    """The options of an analysis, checked before any file is read."""
    if gap_threshold_us <= 0:
        raise ConfigError("gap_threshold_us", gap_threshold_us, "must be > 0")
    if top < 1:
        raise ConfigError("top", top, "must be >= 1")


def analyze_traces(
    paths: Sequence[str | os.PathLike[str]],
    *,
    gap_threshold_us: float = GAP_THRESHOLD_US,
    top: int = TOP_KERNELS,
    executor: Executor | None = None,
) -> TraceAnalysis:
    """Analyze profiler traces (files, or folders of them), one per rank.

    The ranks are read one after the other in this process, or each in ``executor`` when
    given (a ``concurrent.futures.ProcessPoolExecutor`` spreads large ranks over the cores;
    the caller chooses its processes and their start method, and owns them). The figures are
    the same either way.

    A trace inside a trainpace run folder (``<run>/profile/``) is read with the run's
    ``meta.json``, so the findings know its DataLoader settings and CPU count.

    Raises:
        TraceFormatError: a file that cannot be read as a trace, or too large for the memory
            available (the message names it; every file is checked before any is read).
        ConfigError: a bad option.
    """
    check_options(gap_threshold_us, top)
    files = trace_files(list(paths))
    free = available_memory()
    for file in files:
        check_memory(file, free)
    read = functools.partial(_analyze_file, gap_threshold_us=gap_threshold_us, top=top)
    if executor is None or len(files) < 2:
        analyses = [read(file) for file in files]
    else:
        analyses = list(executor.map(read, files))
    return _combine_ranks(analyses, files)


def _combine_ranks(analyses: Sequence[RankAnalysis], files: Sequence[str]) -> TraceAnalysis:
    """The ranks of one job (one :func:`_analyze_file` per file of ``files``, in their order)
    numbered, compared, and summarized with the run's meta.json where there is one."""
    notes: list[str] = []
    ranks = _assign_ranks(list(analyses), notes)
    cross = cross_rank(ranks)
    meta_path, meta, problem = find_run_meta(files[0])
    if problem:
        notes.append(problem)
    elif meta_path:
        notes.append(f"the run's {meta_path} read: its DataLoader settings, CPU count and "
                     "device inform the advice")
    return TraceAnalysis(ranks=ranks, cross_rank=cross, summary=build_summary(ranks, meta),
                         notes=notes, run_meta=meta_path if not problem else None)


__all__ = ["analyze_columns", "analyze_traces", "cross_rank"]
