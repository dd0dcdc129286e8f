"""The console report of ``trainpace analyze``: the device view, and the CPU view for a trace
with no device events (no device or GPU figure in it)."""

from __future__ import annotations

import io
from pathlib import Path

from trainpace.report.trace_console import print_analysis, us_text
from trainpace.trace import analyze_traces

TRACES = Path(__file__).resolve().parent.parent / "data" / "traces"


def _render(path: Path, **options: object) -> str:
    out = io.StringIO()
    print_analysis(analyze_traces([path], **options), stream=out, width=130)  # type: ignore[arg-type]
    return " ".join(out.getvalue().split())


def test_cpu_trace_gets_the_host_view_and_no_device_figures() -> None:
    text = _render(TRACES / "handmade_cpu.json")
    assert "Where the host time went in the profiled steps" in text
    assert "│ 0 │ 2 │ 100 µs │ 200 µs │ 40.0% │ 28.5% │ 31.5% │" in text
    assert ("host time (the ProfilerStep spans, 200 µs): data loading 80 µs (40.0%) · operators "
            "57 µs (28.5%) · Python between operators 63 µs (31.5%)") in text
    assert "Top 6 operators by self time (of 10 operator events, 2 thread(s))" in text
    assert "│ aten::pin_memory │ 1 │ 40 µs │ 20.0% │ 40 µs │ — │" in text
    assert "│ aten::stack │ 2 │ 24 µs │ 12.0% │ 30 µs │ 24 µs │" in text
    for device_word in ("GPU", "device window", "idle causes", "Kernels by category",
                        "launch lag", "HTA"):
        assert device_word not in text.split("findings")[0].split("bottleneck")[0]
    assert "bottleneck: data loading" in text


def test_device_trace_keeps_the_device_view() -> None:
    text = _render(TRACES / "handmade_steps.json", gap_threshold_us=20)
    assert "Where the device time went (HTA's temporal breakdown)" in text
    assert "GPU util" in text and "Where the host time went" not in text
    assert "host wait 85 µs · kernel wait 10 µs · other 35 µs" in text


def test_time_units() -> None:
    assert [us_text(v) for v in (None, 12.4, 1500, 2.5e6)] == ["—", "12 µs", "1.5 ms", "2.5 s"]
