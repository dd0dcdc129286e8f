"""Trace figures as a ``trainpace.summary/1`` Summary, diagnosed by the live run's rules.

The same rules (``trainpace.diagnosis``) judge a live run and a trace, so a trace gives the same
findings (``data_wait``, ``launch_bound``, ``communication``, ``straggler``, ...) for the same
evidence. What a trace cannot tell (samples, tokens, FLOPs, temperature, bandwidth) stays
None, and the diagnosis says those checks did not run.

Across ranks, shares are the mean over ranks and step times the median of the ranks' medians;
the ``ranks`` list keeps each rank's own figures for the straggler rule.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from dataclasses import replace
from typing import Any

from trainpace.diagnosis import diagnose
from trainpace.stats import mean_known, median
from trainpace.summary import (
    Communication,
    Data,
    Device,
    Host,
    Kernels,
    RankEntry,
    Steps,
    Summary,
    Throughput,
    Time,
)
from trainpace.trace.findings import RankAnalysis

SOURCE = "trace"


def _s(us: float | None) -> float | None:
    return us / 1e6 if us is not None else None


def _wait_s(r: RankAnalysis) -> float | None:
    rows = r.steps.rows
    return sum(row.dataloader_span_us for row in rows) / len(rows) / 1e6 if rows else None


def _rank_util(r: RankAnalysis) -> float | None:
    return 100.0 - r.idle_pct if r.idle_pct is not None else None


def _comm_share(r: RankAnalysis) -> float | None:
    if r.communication_us is None or not r.window_us:
        return None
    return 100.0 * r.communication_us / r.window_us


def step_records(r: RankAnalysis) -> list[dict[str, Any]]:
    """A rank's steps as ``steps.jsonl``-like records, for the step-time rules."""
    return [
        {"step": i + 1, "step_s": row.duration_us / 1e6, "wait_s": row.dataloader_span_us / 1e6,
         "warmup": False}
        for i, row in enumerate(r.steps.rows)
    ]


def _device_kind(ranks: Sequence[RankAnalysis], meta: Mapping[str, Any]) -> str | None:
    """The run's device: meta.json's, else "cuda" with device events, else "cpu" when the
    trace lists no device (a GPU run recorded without CUDA activity lists its GPUs)."""
    device = meta.get("device")
    kind = device.get("kind") if isinstance(device, Mapping) else None
    if isinstance(kind, str) and kind:
        return kind
    if any(r.window_us is not None for r in ranks):
        return "cuda"
    return "cpu" if ranks and all(not r.device_listed for r in ranks) else None


def build_summary(ranks: Sequence[RankAnalysis],
                  meta: Mapping[str, Any] | None = None) -> Summary:
    """The Summary of a set of analyzed traces, with its diagnosis.

    ``meta``: the ``meta.json`` of the run that recorded them (``Meter(profile_steps=...)``),
    when there is one: its DataLoader settings, CPU count and device make the advice specific.
    """
    meta = meta or {}
    has_device = any(r.window_us is not None for r in ranks)
    rank_steps = [r.steps for r in ranks if r.steps.count]
    step_medians = [s.duration_us_median for s in rank_steps]
    measured = [sum(row.duration_us for row in s.rows) for s in rank_steps]
    count = min((s.count for s in rank_steps), default=0)
    total = max((s.count + len(s.dropped) for s in rank_steps), default=0)
    kernels = [r.kernels for r in ranks if r.kernels is not None]
    first = ranks[0] if ranks else None
    windows = [r.window_us if r.window_us is not None else r.host.window_us if r.host else None
               for r in ranks]
    wall = max((w for w in windows if w is not None), default=None)
    loader = meta.get("loader")
    device_meta = meta.get("device")
    meta_name = device_meta.get("name") if isinstance(device_meta, Mapping) else None
    summary = Summary(
        run_id=f"trace:{os.path.basename(first.path)}" if first else None,
        world_size=max(1, len(ranks)),
        steps=Steps(total=total, warmup=0, measured=count),
        throughput=Throughput(
            steps_per_s=(count / (mean_known(measured) or 0) * 1e6
                         if count and mean_known(measured) else None)
        ),
        time=Time(
            wall_s=_s(wall),
            measured_s=_s(mean_known(measured)),
            step_s_median=_s(median([m for m in step_medians if m is not None])),
            step_s_p90=_s(median([s.duration_us_p90 for s in rank_steps
                                  if s.duration_us_p90 is not None])),
            step_s_mean=_s(mean_known([s.duration_us_mean for s in rank_steps])),
            clock=SOURCE,
        ),
        data=Data(
            wait_s_per_step=mean_known([_wait_s(r) for r in ranks]),
            wait_pct=mean_known([r.steps.dataloader_span_pct for r in ranks]),
            exposed_wait_s_per_step=mean_known(
                [_s(r.steps.roles_us_mean.get("dataloader")) for r in ranks if r.steps.count]
            ) if has_device else None,
            loader=dict(loader) if isinstance(loader, Mapping) and loader else None,
        ),
        device=Device(
            kind=_device_kind(ranks, meta),
            name=next((r.device_name for r in ranks if r.device_name),
                      meta_name if isinstance(meta_name, str) else None),
            util_pct=mean_known([_rank_util(r) for r in ranks]),
        ),
        communication=Communication(
            share_pct=mean_known([_comm_share(r) for r in ranks]),
            overlap_pct=mean_known([r.comm_comp_overlap_pct for r in ranks]),
            source=SOURCE if has_device else None,
        ),
        host=Host(python_pct=None if has_device else mean_known(
            [r.host.python_pct for r in ranks if r.host is not None])),
        kernels=Kernels(
            per_step=mean_known([k.per_step for k in kernels]),
            median_us=median([k.median_us for k in kernels if k.median_us is not None]),
            short_pct=mean_known([k.short_pct for k in kernels]),
            launch_lag_us=median([k.launch_lag_us for k in kernels
                                  if k.launch_lag_us is not None]),
            source=SOURCE if kernels else None,
        ),
        ranks=[
            RankEntry(rank=r.rank, step_s_median=_s(r.steps.duration_us_median),
                      wait_pct=r.steps.dataloader_span_pct)
            for r in ranks
        ],
    )
    return _diagnosed(summary, step_records(first) if first else None, meta)


def _diagnosed(summary: Summary, steps: list[dict[str, Any]] | None,
               meta: Mapping[str, Any]) -> Summary:
    return replace(summary, diagnosis=diagnose(summary, steps=steps, meta=meta))


def with_trace_evidence(summary: Summary, trace: Summary) -> Summary:
    """A live run's Summary completed with what only its profile trace can tell.

    For ``Meter(profile_steps=...)``: the kernels section (the launch-bound signs) comes from
    the trace; communication too when the live run measured none. The live run's own figures
    are kept. Diagnose the result again (the rules then see both).
    """
    communication = summary.communication
    if communication.share_pct is None and trace.communication.share_pct is not None:
        communication = trace.communication
    return replace(summary, kernels=trace.kernels, communication=communication)
