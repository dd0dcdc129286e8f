"""Distributed runs: time spent communicating, ranks that hold the others back, ranks gone.

They read the ``communication`` section (a profiler trace or the DDP communication hook), the
merge's per-rank state (``meta["dist"]``, see :mod:`trainpace.dist.merge`: each rank's
relative and individual scores per window, and its own signs), else the ``ranks`` list; a
single-process run says there is nothing to exchange.

A straggler is named only when it is behind in most of its recent windows, at least
:data:`STRAGGLER_WINDOWS` of them: a rank that lost one window to a hiccup is no straggler.
"""

from __future__ import annotations

import dataclasses
import datetime as _dt
from collections.abc import Mapping, Sequence
from typing import Any

from trainpace.diagnosis import advice as adv
from trainpace.diagnosis._context import Context, Outcome, Verdict, severity_for, verdict
from trainpace.diagnosis.thresholds import Thresholds
from trainpace.stats import median
from trainpace.summary import Diagnosis

STRAGGLER_WINDOWS = 3  # "persistently": behind in at least this many windows, and in most
HOT_DELTA_C = 10.0  # a device this much hotter than the others' median is "hot"
BUSY_HOST_DELTA_PCT = 20.0  # a host whose CPU is this much busier than the others' is "busy"


def communication(ctx: Context) -> Outcome:
    """Time in collectives, and how much of it overlaps compute."""
    s, t = ctx.summary, ctx.t
    c = s.communication
    if c.share_pct is None:
        if s.world_size <= 1:
            return Outcome(checked="one process, nothing to exchange")
        return Outcome(skipped="no communication time measured (needs a profiler trace)")
    if c.share_pct < t.communication_warning_pct:
        return Outcome(checked=f"communication {c.share_pct:.1f}% of the step")
    severity = severity_for(c.share_pct, t.communication_warning_pct, t.communication_critical_pct)
    overlap = c.overlap_pct
    advice = []
    if overlap is not None and overlap < 50:
        advice.append(
            f"only {overlap:.0f}% of it overlaps compute: let DDP start earlier "
            "(smaller bucket_cap_mb, gradient_as_bucket_view=True) or FSDP prefetch "
            "(forward_prefetch, backward_prefetch)"
        )
    advice.append(
        "accumulate gradients over more micro-batches (DDP no_sync()) to exchange less often; "
        f"check the interconnect (NCCL_DEBUG=INFO shows NVLink or PCIe) — "
        f"{adv.gain_text(c.share_pct * (1 - (overlap or 0) / 100))}"
    )
    return verdict(
        "communication",
        severity,
        f"Communication takes {c.share_pct:.0f}% of the step"
        + (f", {overlap:.0f}% of it overlapped" if overlap is not None else ""),
        {"share_pct": c.share_pct, "overlap_pct": overlap, "source": c.source,
         "world_size": s.world_size},
        advice,
        bottleneck="communication",
        lost_pct=c.share_pct,
    )


def ranks(ctx: Context) -> Outcome:
    """A rank slower than the others holds every synchronous step back; a rank gone."""
    dist = ctx.meta.get("dist")
    if not isinstance(dist, Mapping) or not dist.get("ranks"):
        return _step_skew(ctx)
    found = _stragglers(ctx, dist)
    missing = _missing(dist)
    if missing is None:
        return found
    return Outcome(verdicts=(*found.verdicts, missing), checked=found.checked,
                   skipped=found.skipped)


def _lost_pct(score: float) -> float:
    return 100.0 * (1.0 - score)


def _others(entries: Sequence[Mapping[str, Any]], rank: int, key: str) -> float | None:
    values = [e.get(key) for e in entries if e.get("rank") != rank]
    return median([float(v) for v in values if isinstance(v, (int, float))])


def _stragglers(ctx: Context, dist: Mapping[str, Any]) -> Outcome:
    t = ctx.t
    entries: list[Mapping[str, Any]] = [e for e in dist["ranks"] if isinstance(e, Mapping)]
    if len(entries) < 2:
        return Outcome(checked="one rank reported")
    behind: list[tuple[float, Mapping[str, Any], list[Sequence[float]]]] = []
    lowest = 1.0
    for entry in entries:
        scores = [s for s in entry.get("scores") or () if len(s) == 3]
        if scores:
            lowest = min(lowest, min(float(s[1]) for s in scores))
        slow = [s for s in scores if _lost_pct(float(s[1])) >= t.straggler_warning_pct]
        if len(slow) >= STRAGGLER_WINDOWS and 2 * len(slow) > len(scores):
            lost = median([_lost_pct(float(s[1])) for s in slow]) or 0.0
            behind.append((lost, entry, slow))
    source = dist.get("score_source") or "unknown"
    if not behind:
        return Outcome(checked=f"no rank persistently behind ({len(entries)} ranks, lowest "
                               f"relative score {lowest:.2f}, from {source})")
    behind.sort(key=lambda item: -item[0])
    lost, entry, slow = behind[0]
    rank = int(entry["rank"])
    host = entry.get("host")
    scores = list(entry.get("scores") or ())
    relative = median([float(s[1]) for s in slow]) or 0.0
    individual = min(float(s[2]) for s in scores) if scores else None
    cause, because, fix = _cause(ctx, entries, entry)
    where = f"rank {rank}" + (f" on {host}" if host else "")
    evidence: dict[str, Any] = {
        "rank": rank, "host": host, "relative_score": relative,
        "individual_score": individual, "lost_pct": lost, "windows_behind": len(slow),
        "windows": len(scores), "score_source": source, "cause": cause,
        "wait_pct": entry.get("wait_pct"), "others_wait_pct": _others(entries, rank, "wait_pct"),
        "pre_collective_pct": entry.get("pre_collective_pct"),
        "temperature_c": entry.get("temperature_c"), "throttle_pct": entry.get("throttle_pct"),
        "system_cpu_pct": entry.get("system_cpu_pct"),
        "others_behind": [int(e["rank"]) for _, e, _ in behind[1:]],
        "ranks": len(entries),
    }
    return verdict(
        "straggler",
        severity_for(lost, t.straggler_warning_pct, t.straggler_critical_pct),
        f"Rank {rank}{' on ' + host if host else ''} holds the others back: {lost:.0f}% of "
        f"the step lost to it in {len(slow)} of {len(scores)} windows ({because})",
        evidence,
        [f"{where}: {fix} — {adv.gain_text(lost)}"],
        bottleneck="straggler",
        lost_pct=lost,
    )


def _cause(ctx: Context, entries: Sequence[Mapping[str, Any]],
           entry: Mapping[str, Any]) -> tuple[str, str, str]:
    """(cause, what its own signs show, what to do), from the rank's signs vs the others'."""
    rank = int(entry["rank"])

    def delta(key: str) -> float | None:
        own, others = entry.get(key), _others(entries, rank, key)
        if not isinstance(own, (int, float)) or others is None:
            return None
        return float(own) - others

    wait = delta("wait_pct")
    if wait is not None and wait >= ctx.t.data_wait_warning_pct:
        return ("data_wait",
                f"it waits for data {entry['wait_pct']:.0f}% of its step, the others "
                f"{entry['wait_pct'] - wait:.0f}%",
                "its input pipeline is the culprit (that host's disk or CPU, an uneven shard): "
                "more DataLoader workers there, pin_memory=True, or re-balance the shards")
    throttle = entry.get("throttle_pct")
    if isinstance(throttle, (int, float)) and throttle > 0 and (delta("throttle_pct") or 0) > 0:
        return ("device_throttled", f"its device is throttled {throttle:.0f}% of the time",
                "check that device's clocks, power cap and cooling (nvidia-smi -q -d "
                "PERFORMANCE)")
    hot = delta("temperature_c")
    if hot is not None and hot >= HOT_DELTA_C:
        return ("device_hot", f"its device runs {hot:.0f} °C hotter than the others",
                "check that device's cooling and airflow before it throttles")
    busy = delta("system_cpu_pct")
    if busy is not None and busy >= BUSY_HOST_DELTA_PCT:
        return ("host_contention",
                f"its host's CPU is {busy:.0f} points busier than the others' hosts",
                "another process shares its host: find it (top) or move it off")
    return ("compute", "its compute before the gradient exchange is slower",
            "check that device's clocks and temperature, other processes on it, and uneven "
            "work (variable sequence lengths: bucket or pack them)")


def _missing(dist: Mapping[str, Any]) -> Verdict | None:
    gone = [m for m in dist.get("missing") or () if isinstance(m, Mapping)]
    if not gone:
        return None

    def when(m: Mapping[str, Any]) -> str:
        seen = m.get("last_seen_unix")
        at = (_dt.datetime.fromtimestamp(float(seen), _dt.timezone.utc).strftime("%H:%M:%S UTC")
              if isinstance(seen, (int, float)) else "never")
        return f"rank {m.get('rank')}: {m.get('reason')}, last step {m.get('last_step')} ({at})"

    world = dist.get("world_size")
    outcome = verdict(
        "ranks_missing",
        "warning",
        f"{len(gone)} of {world} ranks did not report to the end: "
        + "; ".join(when(m) for m in gone[:4]) + (" …" if len(gone) > 4 else ""),
        {"missing": list(gone), "world_size": world},
        ["the merged figures cover the ranks that reported, up to their last window; look "
         "for the cause in that rank's own folder and in the launcher's log (torchrun "
         "prints the exit code of each worker)"],
    )
    return outcome.verdicts[0]


def _step_skew(ctx: Context) -> Outcome:
    """Without the merge's scores: the slowest rank's median step time vs the median rank."""
    t = ctx.t
    entries = [r for r in ctx.summary.ranks if r.step_s_median is not None]
    if len(entries) < 2:
        return Outcome(checked="one rank") if len(ctx.summary.ranks) <= 1 else Outcome(
            skipped="no per-rank step times")
    typical = median([r.step_s_median for r in entries if r.step_s_median is not None]) or 0.0
    slow = max(entries, key=lambda r: r.step_s_median or 0.0)
    if typical <= 0 or slow.step_s_median is None:
        return Outcome(skipped="per-rank step times are zero")
    skew_pct = 100.0 * (slow.step_s_median / typical - 1.0)
    if skew_pct < t.straggler_warning_pct:
        return Outcome(checked=f"slowest rank {skew_pct:.0f}% over the median")
    waits = [r.wait_pct for r in entries if r.wait_pct is not None]
    wait_typical = median(waits)
    where = f"rank {slow.rank}" + (f" on {slow.host}" if slow.host else "")
    if (slow.wait_pct is not None and wait_typical is not None
            and slow.wait_pct - wait_typical >= t.data_wait_warning_pct):
        cause = (f"{where} waits for data {slow.wait_pct:.0f}% of its step against "
                 f"{wait_typical:.0f}% on the others: its input pipeline is the culprit "
                 "(that host's disk or CPU, or an uneven shard)")
    else:
        cause = (f"{where} is slower in compute: check that device's clocks and temperature, "
                 "other processes on it, and uneven work (variable sequence lengths: bucket "
                 "or pack them)")
    return verdict(
        "straggler",
        severity_for(skew_pct, t.straggler_warning_pct, t.straggler_critical_pct),
        f"Rank {slow.rank} is {skew_pct:.0f}% slower than the median rank",
        {"slowest_rank": slow.rank, "host": slow.host, "step_s_median": slow.step_s_median,
         "ranks_step_s_median": typical, "skew_pct": skew_pct, "wait_pct": slow.wait_pct,
         "ranks_wait_pct_median": wait_typical, "ranks": len(entries)},
        [f"{cause} — {adv.gain_text(100.0 * (1 - typical / slow.step_s_median))}"],
        bottleneck="straggler",
        lost_pct=skew_pct,
    )


def attribute_rank_wait(diagnosis: Diagnosis, thresholds: Thresholds | None = None) -> Diagnosis:
    """A data wait that one straggler explains: the straggler is the bottleneck, and the
    ``data_wait`` finding says the wait is concentrated on that rank.

    The merged data wait is the mean over ranks: one rank that waits for its batch raises it
    past the threshold while the others barely wait, and the fix is that rank's input
    pipeline (the straggler's advice), not more workers everywhere. It applies when the
    straggler waits for data at least ``data_wait_warning_pct`` more than the others and the
    others alone stay under it.
    """
    t = thresholds or Thresholds()
    by_id = {f.id: f for f in diagnosis.findings}
    straggler, wait = by_id.get("straggler"), by_id.get("data_wait")
    if straggler is None or wait is None:
        return diagnosis
    e = straggler.evidence
    rank = e.get("rank", e.get("slowest_rank"))
    own = e.get("wait_pct")
    others = e.get("others_wait_pct", e.get("ranks_wait_pct_median"))
    if not isinstance(own, (int, float)) or not isinstance(others, (int, float)):
        return diagnosis
    if own - others < t.data_wait_warning_pct or others >= t.data_wait_warning_pct:
        return diagnosis
    host = e.get("host")
    where = f"rank {rank}" + (f" on {host}" if host else "")
    explained = dataclasses.replace(
        wait,
        title=f"{wait.title}, concentrated on {where} ({own:.0f}% against {others:.0f}% on "
              "the other ranks): see the straggler finding",
        evidence={**wait.evidence, "concentrated_on_rank": rank, "rank_wait_pct": own,
                  "others_wait_pct": others, "explained_by": "straggler"},
        advice=[f"{where}'s input pipeline, not the others' (see the straggler finding)",
                *wait.advice])
    findings = []
    for f in diagnosis.findings:
        if f is wait:
            f = explained
        elif f.id == "checks":
            f = dataclasses.replace(
                f, title="Bottleneck: straggler (straggler)", advice=[],
                evidence={**f.evidence, "bottleneck_finding": "straggler"})
        findings.append(f)
    return Diagnosis(bottleneck="straggler", findings=findings)
