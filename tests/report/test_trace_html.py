"""The ``trainpace analyze --html`` page: a CPU trace shows the host split, no device figures."""

from __future__ import annotations

from pathlib import Path

from trainpace.report.trace_html import trace_page
from trainpace.trace import analyze_traces

TRACES = Path(__file__).resolve().parent.parent / "data" / "traces"


def test_cpu_trace_page_has_the_host_view_and_no_device_figures() -> None:
    html = trace_page(analyze_traces([TRACES / "handmade_cpu.json"]))
    for device_word in ("GPU util", "on device", "device idle", "device window",
                        "Holistic Trace Analysis"):
        assert device_word not in html
    assert "<td>Python between operators</td>" not in html  # a header, not a row
    assert "<th>Python between operators</th>" in html
    assert ("<tr><td>0</td><td class=\"num\">2</td><td class=\"num\">0.10 ms</td>"
            "<td class=\"num\">0.20 ms</td><td class=\"num\">40.0%</td>"
            "<td class=\"num\">28.5%</td><td class=\"num\">31.5%</td></tr>") in html
    assert ("<tr><td>ProfilerStep#1</td><td class=\"num\">0.10 ms</td>"
            "<td class=\"num\">0.03 ms</td><td class=\"num\">0.04 ms</td>"
            "<td class=\"num\">0.03 ms</td></tr>") in html
    assert "aten::pin_memory" in html and "<svg" in html


def test_device_trace_page_keeps_its_device_figures() -> None:
    html = trace_page(analyze_traces([TRACES / "handmade_steps.json"]))
    assert "GPU util" in html and "device idle" in html and "<th>operators</th>" not in html
