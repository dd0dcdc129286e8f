"""The ``trainpace analyze --html`` page: a trace analysis as one self-contained HTML file.

Built from the shared shell and plot helpers of :mod:`trainpace.report.html`; every name that
comes from a trace (kernels, ops, files) goes through their escaping. No script, no network.
"""

from __future__ import annotations

from trainpace.report.html import bar_chart, bullets, page, paragraph, section, table
from trainpace.report.run_html import diagnosis_html
from trainpace.trace.findings import ROLES, RankAnalysis, TraceAnalysis
from trainpace.units import UNKNOWN

MAX_STEP_ROWS = 30


def _num(value: float | None, digits: int = 1, unit: str = "") -> str:
    return UNKNOWN if value is None else f"{value:,.{digits}f}{unit}"


def _ms(us: float | None) -> str:
    return UNKNOWN if us is None else f"{us / 1e3:,.2f} ms"


def ranks_html(analysis: TraceAnalysis) -> str:
    """Per rank: the temporal breakdown (HTA's definitions) and step figures for traces with
    device work; the host split for CPU traces (no device or GPU figure for those)."""
    device = [r for r in analysis.ranks if r.host is None]
    host = [r for r in analysis.ranks if r.host is not None]
    parts = []
    if device:
        rows = [
            (r.rank, _ms(r.window_us), _num(r.idle_pct, 2, "%"), _num(r.compute_pct, 2, "%"),
             _num(r.non_compute_pct, 2, "%"), _num(r.comm_comp_overlap_pct, 2, "%"),
             r.steps.count, _ms(r.steps.duration_us_median),
             _num(r.steps.dataloader_pct, 2, "%"), _num(r.steps.gpu_util_pct, 2, "%"))
            for r in device
        ]
        headers = ("rank", "device window", "idle", "compute", "non-compute",
                   "comm hidden under compute", "steps", "step (median)", "DataLoader exposed",
                   "GPU util")
        parts += [table(headers, rows, numeric=range(1, 10)),
                  paragraph("Idle, compute and non-compute follow Holistic Trace Analysis 0.5 "
                            "(window: first to last device event, the last ProfilerStep left "
                            "out); the step, DataLoader and GPU-util columns follow "
                            "torch-tb-profiler's overview.", muted=True)]
    if host:
        host_rows = [(r.rank, r.steps.count, _ms(r.steps.duration_us_median),
                      _ms(r.host.window_us if r.host else None),
                      *(_num(getattr(r.host, key), 1, "%") for key in _HOST_SHARES))
                     for r in host]
        host_headers = ("rank", "steps", "step (median)", "host time", "data loading",
                        "operators", "Python between operators")
        parts += [table(host_headers, host_rows, numeric=range(1, 7)),
                  paragraph("No device events: a CPU trace. Each moment of the steps counts "
                            "once: inside the DataLoader's __next__, else inside an operator "
                            "(ATen op, autograd node), else Python between operators.",
                            muted=True)]
    return "".join(parts)


_HOST_SHARES = ("dataloader_pct", "operators_pct", "python_pct")


def _host_html(r: RankAnalysis) -> str:
    """A CPU trace's rank: the host split, per step, and the operators by self time."""
    h = r.host
    if h is None:  # pragma: no cover - only called for CPU ranks
        return ""
    chart = bar_chart(["data loading", "operators", "Python between operators"],
                      [h.dataloader_us / 1e3, h.operators_us / 1e3, h.python_us / 1e3],
                      title=f"Host time in {h.window} ({_ms(h.window_us)}), ms", unit=" ms")
    shown = h.rows[:MAX_STEP_ROWS]
    steps = table(("step", "duration", "data loading", "operators", "Python between operators"),
                  [(row.name, _ms(row.duration_us), _ms(row.dataloader_us),
                    _ms(row.operators_us), _ms(row.python_us)) for row in shown],
                  numeric=range(1, 5)) if shown else paragraph(
                      "No ProfilerStep spans: no per-step split.", muted=True)
    more = (paragraph(f"… and {len(h.rows) - len(shown)} more steps (--json has them all).",
                      muted=True) if len(h.rows) > len(shown) else "")
    top = table(("operator", "count", "self", "self share", "total", "self in data loading"),
                [(row.name, row.count, _ms(row.self_us), _num(row.self_pct, 1, "%"),
                  _ms(row.total_us), _ms(row.in_dataloader_us)) for row in h.top],
                numeric=range(1, 6))
    return (chart + steps + more
            + paragraph(f"Top {len(h.top)} operators by self time (their span less the spans "
                        f"nested in them), of {h.operator_events} operator events on "
                        f"{h.threads} thread(s):") + top)


def _steps_html(r: RankAnalysis) -> str:
    s = r.steps
    if not s.rows:
        return paragraph("No ProfilerStep spans: no per-step breakdown.", muted=True)
    chart = bar_chart([role.replace("_", " ") for role in ROLES],
                      [s.roles_us_mean.get(role, 0.0) / 1e3 for role in ROLES],
                      title=f"The average step ({_ms(s.duration_us_mean)}) by role, ms",
                      unit=" ms")
    shown = s.rows[:MAX_STEP_ROWS]
    rows = [(row.name, _ms(row.duration_us), _ms(row.host_us),
             *(_ms(getattr(row, f"{role}_us")) for role in ROLES),
             _ms(row.duration_us - row.device_busy_us)) for row in shown]
    headers = ("step", "on device", "on host", *(r.replace("_", " ") for r in ROLES),
               "device idle")
    more = (paragraph(f"… and {len(s.rows) - len(shown)} more steps (--json has them all).",
                      muted=True) if len(s.rows) > len(shown) else "")
    dropped = (paragraph(f"Left out, their kernels cut off by the profiler's stop: "
                         f"{', '.join(s.dropped)}.", muted=True) if s.dropped else "")
    return chart + table(headers, rows, numeric=range(1, len(headers))) + more + dropped


def _idle_html(r: RankAnalysis) -> str:
    i = r.idle
    if i is None:
        return paragraph("No device events: idle time not computed.", muted=True)
    causes = table(("cause (per stream, HTA)", "time"),
                   [("host wait: the next kernel was not launched yet", _ms(i.host_wait_us)),
                    (f"kernel wait: launch gap under {i.kernel_wait_threshold_us:g} µs",
                     _ms(i.kernel_wait_us)),
                    ("other: launched, waiting on something else", _ms(i.other_us))],
                   numeric=(1,))
    by_cause = [(k, v / 1e3) for k, v in i.gaps_by_cause_us.items() if v > 0]
    chart = bar_chart([k.replace("_", " ") for k, _ in by_cause], [v for _, v in by_cause],
                      title=f"Device-idle gaps ≥ {i.gap_threshold_us:g} µs: what the host was "
                      "doing (ms)", unit=" ms")
    gaps = table(("at", "length", "step", "host was in", "top host ops"),
                 [(_ms(g.start_us), _ms(g.duration_us), g.step or UNKNOWN,
                   g.cause.replace("_", " "),
                   ", ".join(str(o["name"]) for o in g.top_ops)) for g in i.gaps],
                 numeric=(0, 1))
    return causes + chart + gaps


def _kernels_html(r: RankAnalysis) -> str:
    k = r.kernels
    if k is None:
        return paragraph("No device kernels in the window.", muted=True)
    signs = paragraph(
        f"{_num(k.per_step, 0)} kernels per step · median {_num(k.median_us, 1)} µs · "
        f"{_num(k.short_pct, 1)}% under {k.short_threshold_us:g} µs · launch lag median "
        f"{_num(k.launch_lag_us, 1)} µs (p90 {_num(k.launch_lag_p90_us, 1)} µs)")
    chart = bar_chart([c.category for c in k.categories], [c.pct or 0.0 for c in k.categories],
                      title="Kernel time by category (%)", unit="%")
    top = table(("kernel", "category", "count", "total", "mean", "share"),
                [(row.name, row.category, row.count, _ms(row.total_us),
                  _num(row.mean_us, 1, " µs"), _num(row.pct, 1, "%")) for row in k.top],
                numeric=(2, 3, 4, 5))
    return signs + chart + top


def trace_page(analysis: TraceAnalysis) -> str:
    """The whole page."""
    files = ", ".join(r.path for r in analysis.ranks)
    sections = [
        section("Findings", diagnosis_html(analysis.summary.diagnosis)),
        section("Ranks", ranks_html(analysis)),
    ]
    sections.extend(
        section(
            f"Rank {r.rank} — {r.path}",
            *((_host_html(r),) if r.host is not None
              else (_steps_html(r), _idle_html(r), _kernels_html(r))),
            bullets(r.notes) if r.notes else "",
        )
        for r in analysis.ranks
    )
    notes = [*analysis.notes, *analysis.cross_rank.notes]
    if notes:
        sections.append(section("Notes", bullets(notes)))
    return page("trainpace analyze", *sections, subtitle=files)
