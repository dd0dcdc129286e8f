"""The five vital signs as display rows, shared by the console and the HTML report.

A :class:`Sign` holds text, never numbers to recompute: its headline value, its details, and a
status from the diagnosis (the worst finding about it) — or ``not measured`` when every figure
behind it is null, with the source that was missing. A null is shown as ``—``, never as 0.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from trainpace.summary import SEVERITIES, Diagnosis, Finding, Summary
from trainpace.units import UNKNOWN, format_number, format_seconds

DASH = UNKNOWN
num = format_number  # a figure with its unit, or DASH

# The findings each sign answers for (ids from trainpace.diagnosis.rules).
SIGN_FINDINGS: dict[str, tuple[str, ...]] = {
    "throughput": ("launch_bound", "host_cpu", "communication", "straggler"),
    "training time": ("stalls", "periodic_stall", "drift", "slow_phase"),
    "device utilization": ("device_idle", "cpu_contention", "memory_full", "thermal",
                           "compute_bound", "device_busy"),
    "memory bandwidth": ("bandwidth_bound",),
    "data loading": ("data_wait", "h2d_copy"),
}
_ORDER = {"ok": 0, "info": 1, "warning": 2, "critical": 3}


@dataclass(frozen=True)
class Sign:
    """One vital sign, ready to show."""

    name: str
    status: str  # "ok" | "info" | "warning" | "critical" | "not measured"
    value: str
    details: tuple[str, ...]


def pct(value: float | None) -> str:
    """``12.5%``, or ``—``."""
    return DASH if value is None else f"{value:.1f}%" if value < 10 else f"{value:.0f}%"


secs = format_seconds  # a duration, or DASH


def _worst(summary: Summary, name: str) -> Finding | None:
    """The most severe finding about sign ``name`` (the first of equals), if any."""
    worst: Finding | None = None
    for finding in summary.diagnosis.findings:
        if finding.id in SIGN_FINDINGS[name] and (
                worst is None or _ORDER[finding.severity] > _ORDER[worst.severity]):
            worst = finding
    return worst


def _status(summary: Summary, name: str, measured: bool) -> str:
    if not measured:
        return "not measured"
    worst = _worst(summary, name)
    return worst.severity if worst is not None else "ok"


def _details(*pairs: tuple[str, Any]) -> tuple[str, ...]:
    return tuple(f"{label} {text}".strip() for label, text in pairs if text not in (None, DASH))


def signs(summary: Summary) -> list[Sign]:
    """The five signs of a summary, in the order of DESIGN.md."""
    s = summary
    tp, tm, d, b, f, data = s.throughput, s.time, s.device, s.bandwidth, s.flops, s.data
    tokens = None
    if tp.tokens_per_s is not None:
        tokens = num(tp.tokens_per_s, "tokens/s") + (
            f" ({tp.tokens_counted})" if tp.tokens_counted else ""
        )
    out = [
        Sign(
            "throughput",
            _status(s, "throughput", tp.samples_per_s is not None or tp.steps_per_s is not None),
            num(tp.samples_per_s, "samples/s") if tp.samples_per_s is not None
            else num(tp.steps_per_s, "steps/s"),
            _details(("", tokens), ("steps/s", num(tp.steps_per_s)),
                     ("achieved", num(f.achieved_tflops, "TFLOP/s")),
                     ("MFU", "not shown: the peak is wrong (see peak_wrong)" if f.error
                      else pct(f.mfu_pct)),
                     ("whole measured run:", f"{s.steps.measured} steps ({s.steps.warmup} "
                      "warm-up excluded)" if s.steps.total else None),
                     ("steady span:", _steady_text(s))),
        ),
        Sign(
            "training time",
            _status(s, "training time", tm.wall_s is not None or tm.step_s_median is not None),
            f"wall {secs(tm.wall_s)}",
            _details(("step median", secs(tm.step_s_median)), ("p90", secs(tm.step_s_p90)),
                     ("warm-up", _warmup_text(s)), ("outside the steps", _outside_text(s)),
                     ("to target", _target_text(s)), ("cost", cost_text(s)),
                     ("energy", energy_text(s))),
        ),
        Sign(
            "device utilization",
            _status(s, "device utilization", d.util_pct is not None
                    or d.memory_used_pct is not None or d.temperature_c is not None),
            f"busy {pct(d.util_pct)}",
            _details(("", " ".join(x for x in (d.kind, d.name and f"({d.name})") if x) or None),
                     ("memory", pct(d.memory_used_pct)),
                     ("temperature", num(d.temperature_c, "°C")),
                     ("throttled", pct(d.throttle_pct))),
        ),
        Sign(
            "memory bandwidth",
            _status(s, "memory bandwidth", b.util_pct is not None or b.achieved_gb_s is not None),
            f"{pct(b.util_pct)} of peak" if b.util_pct is not None
            else num(b.achieved_gb_s, "GB/s"),
            # an estimate above its peak is not used here either (peak_wrong says why)
            _details(("", "estimated above the peak, so no share of it (see peak_wrong)"
                      if b.error else
                      f"{num(b.achieved_gb_s, 'GB/s')} of {num(b.peak_gb_s, 'GB/s')}"
                      if b.achieved_gb_s is not None and b.peak_gb_s is not None else
                      "no peak known: share of peak not measured"
                      if b.achieved_gb_s is not None else None),
                     ("source", b.source), ("roofline", _roofline_text(s))),
        ),
        Sign(
            "data loading",
            _status(s, "data loading", data.wait_pct is not None),
            f"wait {pct(data.wait_pct)} of step",
            _details(("per step", secs(data.wait_s_per_step)),
                     ("host-to-device", secs(data.h2d_s_per_step)),
                     ("exposed", secs(data.exposed_wait_s_per_step)),
                     ("loader", _loader_text(data.loader))),
        ),
    ]
    shown = []
    for sign in out:
        if sign.status == "not measured":
            sign = Sign(sign.name, sign.status, DASH,
                        (f"not measured: {MISSING[sign.name]}", *sign.details))
        elif sign.status != "ok":  # a status always says why: the finding that set it
            why = _worst(s, sign.name)
            if why is not None:
                sign = Sign(sign.name, sign.status, sign.value, (f"why: {why.title}",
                                                                  *sign.details))
        shown.append(sign)
    return shown


MISSING: dict[str, str] = {
    "throughput": "no measured steps yet",
    "training time": "no steps recorded",
    "device utilization": "no sampler reading (NVML or psutil)",
    "memory bandwidth": "no bandwidth source (NVML/DCGM) and no byte count",
    "data loading": "no batch wait timed (a loop wraps its loader in meter.loader(...); "
                    "trainpace run times the torch DataLoaders a script iterates)",
}
"""Why a sign is not measured: the source that was missing."""


def _steady_text(s: Summary) -> str | None:
    """The throughput without the steps other processes slowed, when there were some."""
    slowed, tp = s.steps.slowed_by_others, s.throughput
    if not slowed:
        return None
    rate = (num(tp.steady_samples_per_s, "samples/s") if tp.steady_samples_per_s is not None
            else num(tp.steady_tokens_per_s, "tokens/s") if tp.steady_tokens_per_s is not None
            else None)
    return None if rate is None else (f"{rate} over {s.steps.measured - slowed} steps, "
                                      f"without the {slowed} steps other processes slowed")


def _warmup_text(s: Summary) -> str | None:
    warmup_s = s.time.warmup_s
    if not s.steps.warmup or warmup_s is None:
        return None
    return f"{secs(warmup_s)} ({s.steps.warmup} steps, excluded)"


def _outside_text(s: Summary) -> str | None:
    """Time outside the steps (evaluation, checkpoints), when the summary has the figure."""
    outside_s = getattr(s.time, "outside_steps_s", None)
    if not isinstance(outside_s, (int, float)) or not outside_s:
        return None
    share = getattr(s.time, "outside_steps_pct", None)
    return secs(outside_s) + (f" ({pct(share)} of wall)" if isinstance(share, (int, float))
                              else "")


def money(value: float | None) -> str:
    """Dollars at a precision that shows small per-run and per-million figures."""
    if value is None:
        return DASH
    return f"${value:,.2f}" if abs(value) >= 1 else f"${value:.3g}"


def cost_text(s: Summary) -> str | None:
    """The run's price, per million samples/tokens and to the target (a price was given)."""
    c = s.cost
    if c.price_per_hour is None:
        return None
    devices = f" × {c.devices}" if c.devices and c.devices > 1 else ""
    parts = [f"{money(c.usd_total)} at {money(c.price_per_hour)}/device-hour{devices}"]
    if c.usd_per_million_tokens is not None:
        parts.append(f"{money(c.usd_per_million_tokens)} per M tokens")
    elif c.usd_per_million_samples is not None:
        parts.append(f"{money(c.usd_per_million_samples)} per M samples")
    if c.usd_to_target is not None:
        parts.append(f"{money(c.usd_to_target)} to target")
    return ", ".join(parts)


def energy_text(s: Summary) -> str | None:
    """Energy of the measured steps with its source, or which source was missing."""
    c = s.cost
    if c.energy_j is None:
        return f"not measured ({c.energy_missing})" if c.energy_missing else None
    label = "estimate from the rated power" if c.energy_is_estimate else c.energy_source
    parts = [f"{c.kwh:.3g} kWh" if c.kwh is not None else num(c.energy_j, "J"),
             f"{num(c.power_w_mean, 'W')} mean"]
    if c.energy_j_per_sample is not None:
        parts.append(f"{c.energy_j_per_sample:.3g} J/sample")
    if c.co2_kg is not None:
        parts.append(f"{c.co2_kg:.3g} kg CO2 at {c.grid_g_per_kwh:g} g/kWh")
    return ", ".join(parts) + f" ({label})"


def _target_text(s: Summary) -> str | None:
    tm = s.time
    target = tm.target
    if tm.time_to_target_s is not None:
        steps = f" (step {tm.steps_to_target})" if tm.steps_to_target is not None else ""
        return f"{secs(tm.time_to_target_s)}{steps}"
    if target is None:
        return None
    eta = f", ETA {secs(tm.eta_to_target_s)}" if tm.eta_to_target_s is not None else ""
    return f"{target.name} {target.value:g} not reached{eta}"


def _loader_text(loader: dict[str, Any] | None) -> str | None:
    if not loader:
        return None
    keys: Sequence[str] = ("num_workers", "prefetch_factor", "pin_memory", "persistent_workers",
                           "batch_size")
    return ", ".join(f"{k}={loader[k]}" for k in keys if loader.get(k) is not None)


def evidence_text(evidence: dict[str, Any], limit: int = 8) -> list[str]:
    """``key=value`` strings for a finding's evidence, nulls and long values left out."""
    out: list[str] = []
    for key, value in evidence.items():
        if value is None or (isinstance(value, (dict, list)) and not value):
            continue
        if isinstance(value, bool):
            text = str(value).lower()
        elif isinstance(value, float):
            text = f"{value:.4g}"
        elif isinstance(value, list):
            if any(isinstance(v, (dict, list)) for v in value):
                text = f"[{len(value)}]"  # records (phases, ranks): the JSON holds them
            else:
                text = ", ".join(_short(v) for v in value[:6]) + (", …" if len(value) > 6 else "")
        elif isinstance(value, dict):
            text = ", ".join(f"{k}={_short(v)}" for k, v in list(value.items())[:5]
                             if not isinstance(v, (dict, list)))
        else:
            text = str(value)
        out.append(f"{key}={text}")
        if len(out) == limit:
            break
    return out


def _short(value: Any) -> str:
    return f"{value:.4g}" if isinstance(value, float) else str(value)


def headline(diagnosis: Diagnosis) -> tuple[Finding | None, list[Finding], Finding | None]:
    """(the finding behind the bottleneck, the findings worst first, the ``checks`` finding)."""
    checks = next((f for f in diagnosis.findings if f.id == "checks"), None)
    findings = sorted((f for f in diagnosis.findings if f.id != "checks"),
                      key=lambda f: -SEVERITIES.index(f.severity))
    key = checks.evidence.get("bottleneck_finding") if checks else None
    lead = next((f for f in findings if f.id == key), None)
    return lead, findings, checks


def _roofline_text(s: Summary) -> str | None:
    """The roofline as the diagnosis judged it: below the ridge is bandwidth-bound only when the
    diagnosis found it so (a real share of the peak moved); the table never says otherwise."""
    roofline = s.flops.roofline
    if roofline != "bandwidth_bound":
        return roofline
    if any(f.id == "bandwidth_bound" for f in s.diagnosis.findings):
        return roofline
    return "below the ridge, not bandwidth-bound"
