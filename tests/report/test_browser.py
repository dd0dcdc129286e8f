"""The HTML report in a real headless Chromium: it renders (not blank) and logs nothing.

The page has no script, so any console line at all is a fault; the checker itself is tested
on a page that does log, so a Chromium that stopped reporting console lines cannot pass.
"""

from __future__ import annotations

import dataclasses
import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest

from report.conftest import make_run
from trainpace.report.html import write_page
from trainpace.report.run_html import run_page

CHROMIUM = next((shutil.which(n) for n in ("chromium", "chromium-browser", "google-chrome")
                 if shutil.which(n)), None)
pytestmark = [
    pytest.mark.browser,
    pytest.mark.slow,
    pytest.mark.skipif(CHROMIUM is None, reason="headless Chromium not installed (apt-get install chromium)"),
]


def render(page: Path, tmp_path: Path) -> tuple[Path, list[str]]:
    """Screenshot ``page``; returns (png, the console lines Chromium logged)."""
    png = tmp_path / "shot.png"
    assert CHROMIUM is not None
    proc = subprocess.run(
        [CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync",
         f"--user-data-dir={tmp_path / 'profile'}", "--enable-logging=stderr", "--v=0",
         "--hide-scrollbars", "--window-size=1100,2600", f"--screenshot={png}", page.as_uri()],
        capture_output=True, text=True, timeout=120, check=False,
    )
    assert png.exists(), proc.stderr[-2000:]
    return png, [line for line in proc.stderr.splitlines() if ":CONSOLE" in line]


def pixels(png: Path) -> np.ndarray:
    image = pytest.importorskip("PIL.Image")
    with image.open(png) as im:
        return np.asarray(im.convert("RGB"), dtype=np.int16)


def near(rgb: np.ndarray, hex_color: str, tolerance: int = 12) -> int:
    target = np.array([int(hex_color[i:i + 2], 16) for i in (1, 3, 5)], dtype=np.int16)
    return int((np.abs(rgb - target).max(axis=2) <= tolerance).sum())


def test_the_run_report_renders_and_logs_nothing(tmp_path):
    run = make_run(name="<b>not bold</b>")
    page = write_page(tmp_path / "report.html",
                      run_page(run.summary, series=run.steps, system=run.system, meta=run.meta))
    png, console = render(page, tmp_path)
    assert console == []
    rgb = pixels(png)
    assert rgb.std() > 10  # not a blank page
    assert len(np.unique(rgb.reshape(-1, 3), axis=0)) > 50
    # our own drawing is on screen: the compute band (blue), the data-wait band (orange),
    # the critical badge (red)
    assert near(rgb, "#3b6fd4") > 2000
    assert near(rgb, "#e08a1e") > 200
    assert near(rgb, "#c8423b") > 100


def test_the_checker_sees_console_errors(tmp_path):
    page = tmp_path / "bad.html"
    page.write_text("<!DOCTYPE html><html><body><p>x</p><script>console.error('boom');"
                    "missing_function();</script></body></html>", encoding="utf-8")
    _, console = render(page, tmp_path)
    assert any("boom" in line for line in console)
    assert any("Uncaught ReferenceError" in line for line in console)


def test_a_long_run_with_a_stall_and_a_slow_phase_renders(tmp_path):
    from report.test_run_html import stalled_series, summary_with_phases

    series = stalled_series(n=50_000, stall_at=30_000)
    system = [{"t_s": float(t), "device_util_pct": 50.0, "bandwidth_util_pct": 20.0} for t in range(0, 1500, 5)]
    page = write_page(tmp_path / "long.html", run_page(summary_with_phases(), series=series, system=system))
    png, console = render(page, tmp_path)
    assert console == []
    rgb = pixels(png)
    # the data-wait band keeps its height under the stall (38% of a 45 ms scale, not of 2 s),
    # the bandwidth line is drawn, and the stall's marker and the warm-up/phase bands are on screen
    assert near(rgb, "#e08a1e") > 5000
    assert near(rgb, "#c8423b") > 20


# Measures, in the page as Chromium lays it out, the boxes of each chart's note and of what
# is drawn in the chart (lines, legend, labels); prints them into the page for --dump-dom.
_MEASURE_BOXES = """<script>
const out = [];
for (const svg of document.querySelectorAll("svg")) {
  const note = svg.querySelector("text.note");
  if (!note) continue;
  const n = note.getBBox();
  const others = [...svg.querySelectorAll("polyline, circle, line, rect, text")]
    .filter(e => e !== note).map(e => e.getBBox());
  out.push({note: [n.x, n.y, n.width, n.height], height: svg.viewBox.baseVal.height,
            overlaps: others.filter(b => b.x < n.x + n.width && n.x < b.x + b.width &&
                                         b.y < n.y + n.height && n.y < b.y + b.height).length});
}
document.body.insertAdjacentHTML("beforeend", "<pre id=boxes>" + JSON.stringify(out) + "</pre>");
</script>"""


def measured_boxes(page: Path, tmp_path: Path) -> list[dict]:
    import html
    import json
    import re

    probe = page.with_name("measured.html")
    probe.write_text(page.read_text(encoding="utf-8").replace("</body>", _MEASURE_BOXES
                                                              + "</body>"), encoding="utf-8")
    assert CHROMIUM is not None
    proc = subprocess.run(
        [CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--no-first-run",
         f"--user-data-dir={tmp_path / 'profile'}", "--dump-dom", probe.as_uri()],
        capture_output=True, text=True, timeout=120, check=False)
    found = re.search(r"<pre id=\"boxes\">(.*?)</pre>", proc.stdout, re.S)
    assert found is not None, proc.stderr[-2000:]
    return json.loads(html.unescape(found.group(1)))


def test_the_no_bandwidth_note_overlaps_nothing_and_steady_readings_draw_flat(tmp_path):
    """A CPU run at 95-100% busy (its line along the top of the plot) whose peak bandwidth is
    known but no byte count: the note says so on a line of its own, crossing no line, legend
    or label; the busy line is the mean per window (one level for a steady loop)."""
    from trainpace.summary import Bandwidth

    run = make_run(name="steady")
    system = [{"t_s": float(t), "device_util_pct": 95.0 if t % 2 else 100.0}
              for t in range(120)]
    summary = dataclasses.replace(run.summary, bandwidth=Bandwidth(peak_gb_s=23.0))
    page = write_page(tmp_path / "report.html",
                      run_page(summary, series=run.steps, system=system, meta=run.meta))
    [chart] = measured_boxes(page, tmp_path)
    assert chart["overlaps"] == 0
    _, y, width, height = chart["note"]
    assert y + height <= chart["height"] and width > 100  # inside the chart's own box, drawn
    assert "set against the 23 GB/s peak" in page.read_text(encoding="utf-8")
    _, console = render(page, tmp_path)
    assert console == []
