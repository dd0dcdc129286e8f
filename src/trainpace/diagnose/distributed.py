"""Distributed runs: time spent communicating, and ranks slower than the others.

They read the ``communication`` section (from a profiler trace) and the ``ranks`` list; a
single-process run says there is nothing to exchange.
"""

from __future__ import annotations

from trainpace.diagnose import advice as adv
from trainpace.diagnose._context import Context, Outcome, banded, verdict
from trainpace.stats import median


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
    severity = banded(c.share_pct, t.communication_warning_pct, t.communication_critical_pct)
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
    """A rank slower than the others holds every synchronous step back."""
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
        banded(skew_pct, t.straggler_warning_pct, t.straggler_critical_pct),
        f"Rank {slow.rank} is {skew_pct:.0f}% slower than the median rank",
        {"slowest_rank": slow.rank, "host": slow.host, "step_s_median": slow.step_s_median,
         "ranks_step_s_median": typical, "skew_pct": skew_pct, "wait_pct": slow.wait_pct,
         "ranks_wait_pct_median": wait_typical, "ranks": len(entries)},
        [f"{cause} — {adv.gain_text(100.0 * (1 - typical / slow.step_s_median))}"],
        bottleneck="straggler",
        lost_pct=skew_pct,
    )
