"""Self-contained HTML pages with inline SVG plots: a page shell and plot helpers.

No script, no stylesheet or font from the network: one file that opens anywhere. Every piece of
text goes through :func:`esc`; the helpers take plain strings and numbers and escape them
themselves, so names from a run or a trace (model, kernel, host names) cannot inject markup.
Both the run report (``report/run_html.py``) and the trace report (``report/trace_html.py``)
are built from :func:`page`, :func:`section`, :func:`table` and :func:`bar_chart`; the line and
stacked charts of long series are in :mod:`trainpace.report.plots`.
"""

from __future__ import annotations

import html
from collections.abc import Sequence
from pathlib import Path

from trainpace.errors import OutputError
from trainpace.units import format_compact

PALETTE = ("#3b6fd4", "#e08a1e", "#3a9b5c", "#c8423b", "#8a5cc2", "#5aa6b8", "#9c7a48")
SEVERITY_COLOR = {"ok": "#3a9b5c", "info": "#3b82c4", "warning": "#d68a00",
                  "critical": "#c8423b", "not measured": "#9aa0a6"}

_CSS = """
body{font:14px/1.45 -apple-system,BlinkMacSystemFont,"Segoe UI",Roboto,Helvetica,Arial,sans-serif;
margin:0;background:#f6f7f9;color:#1d2330}
main{max-width:1040px;margin:0 auto;padding:24px}
header h1{font-size:22px;margin:0 0 4px}header p{margin:0;color:#5f6775}
section{background:#fff;border:1px solid #e1e4ea;border-radius:8px;padding:16px 20px;margin:16px 0}
section h2{font-size:16px;margin:0 0 12px}
table{border-collapse:collapse;width:100%}th,td{text-align:left;padding:5px 8px;
border-bottom:1px solid #eef0f3;vertical-align:top}th{color:#5f6775;font-weight:600}
td.num{text-align:right;font-variant-numeric:tabular-nums;white-space:nowrap}
td:first-child{white-space:nowrap}
.badge{display:inline-block;padding:1px 8px;border-radius:10px;color:#fff;font-size:12px;
font-weight:600;text-transform:uppercase}
.dot{display:inline-block;width:10px;height:10px;border-radius:5px;margin-right:6px}
.finding{border-left:4px solid #ccc;padding:6px 12px;margin:10px 0}
.finding h3{font-size:15px;margin:0 0 6px}.evidence{color:#5f6775;font-size:13px}
.muted{color:#8a919e}ul{margin:6px 0;padding-left:20px}
svg{display:block;max-width:100%;height:auto}svg text{font-size:11px;fill:#5f6775}
.chart-title{font-size:13px;font-weight:600;fill:#1d2330}
.plot{margin:8px 0 20px}
"""


def esc(value: object) -> str:
    """Text made safe for HTML content and attributes."""
    return html.escape(str(value), quote=True)


def page(title: str, *sections: str, subtitle: str | None = None) -> str:
    """A complete HTML document: a header and the given (already built) sections."""
    sub = f"<p>{esc(subtitle)}</p>" if subtitle else ""
    body = "\n".join(sections)
    return (
        "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">"
        "<meta name=\"viewport\" content=\"width=device-width,initial-scale=1\">"
        f"<title>{esc(title)}</title><style>{_CSS}</style></head>"
        f"<body><main><header><h1>{esc(title)}</h1>{sub}</header>\n{body}\n</main></body></html>\n"
    )


def section(title: str, *parts: str) -> str:
    """A titled card holding already-built parts."""
    return f"<section><h2>{esc(title)}</h2>{''.join(parts)}</section>"


def paragraph(text: str, *, muted: bool = False) -> str:
    """An escaped paragraph."""
    attr = ' class="muted"' if muted else ""
    return f"<p{attr}>{esc(text)}</p>"


def bullets(items: Sequence[str]) -> str:
    """An escaped bullet list."""
    return "<ul>" + "".join(f"<li>{esc(item)}</li>" for item in items) + "</ul>"


def badge(text: str, color: str) -> str:
    """A coloured label (severity, status)."""
    return f'<span class="badge" style="background:{esc(color)}">{esc(text)}</span>'


def table(headers: Sequence[str], rows: Sequence[Sequence[object]],
          *, numeric: Sequence[int] = (), raw: Sequence[int] = ()) -> str:
    """A table; cells escaped except the columns listed in ``raw`` (already-built HTML)."""
    head = "".join(f"<th>{esc(h)}</th>" for h in headers)
    body = []
    for row in rows:
        cells = []
        for i, cell in enumerate(row):
            attr = ' class="num"' if i in numeric else ""
            cells.append(f"<td{attr}>{cell if i in raw else esc(cell)}</td>")
        body.append("<tr>" + "".join(cells) + "</tr>")
    return f"<table><thead><tr>{head}</tr></thead><tbody>{''.join(body)}</tbody></table>"


def tick_label(value: float) -> str:
    """A short axis label: ``0.25``, ``12``, ``3.4k``, ``1.2M``."""
    return format_compact(value)


def empty_chart(title: str, reason: str, *, width: int = 720, height: int = 120) -> str:
    """A placeholder that says why there is nothing to plot."""
    return (f'<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 {width} {height}" role="img" '
            f'aria-label="{esc(title)}"><text class="chart-title" x="58" y="16">{esc(title)}'
            f'</text><rect x="58" y="28" width="{width - 74}" height="{height - 44}" fill="none" '
            f'stroke="#e1e4ea" stroke-dasharray="4 4"/><text x="{width / 2:.0f}" '
            f'y="{height / 2 + 8:.0f}" text-anchor="middle">{esc(reason)}</text></svg>')


def bar_chart(labels: Sequence[str], values: Sequence[float], *, title: str, unit: str = "",
              width: int = 720, color: str = PALETTE[0]) -> str:
    """Horizontal bars, one per label, longest scale first as given; values ≥ 0."""
    if not labels:
        return empty_chart(title, "nothing to show")
    row, label_w = 22, min(260, 12 + 6.5 * max(len(label) for label in labels))
    height = 30 + row * len(labels) + 8
    top = max(max(values), 1e-12)
    usable = width - label_w - 90
    parts = [f'<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 {width} {height}" '
             f'role="img" aria-label="{esc(title)}">'
             f'<text class="chart-title" x="4" y="16">{esc(title)}</text>']
    for i, (label, value) in enumerate(zip(labels, values, strict=True)):
        y = 28 + i * row
        bar = max(0.0, value) / top * usable
        shown = label if len(label) <= 40 else label[:39] + "…"
        parts.append(f'<text x="{label_w - 6:.0f}" y="{y + 14}" text-anchor="end">'
                     f'<title>{esc(label)}</title>{esc(shown)}</text>'
                     f'<rect x="{label_w:.0f}" y="{y + 3}" width="{bar:.1f}" height="{row - 6}" '
                     f'fill="{esc(color)}"/><text x="{label_w + bar + 6:.1f}" y="{y + 14}">'
                     f'{esc(tick_label(value) + unit)}</text>')
    parts.append("</svg>")
    return "".join(parts)


def write_page(path: str | Path, document: str) -> Path:
    """Write a page as UTF-8; returns the path written."""
    target = Path(path)
    try:
        target.write_text(document, encoding="utf-8")
    except OSError as exc:
        raise OutputError(
            f"{target}: cannot write the page ({exc.strerror or exc}); pass a path in a "
            "folder that exists and is writable"
        ) from exc
    return target
