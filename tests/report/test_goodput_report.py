"""The job's goodput in the reports: the console block, the HTML table and timeline (also in a
real headless Chromium), and two jobs compared."""

from __future__ import annotations

import io
from pathlib import Path

import pytest

from job.goodput_jobs import killed_and_restarted
from trainpace.comparison import compare_goodput
from trainpace.job.goodput import goodput
from trainpace.job.ledger import read_job
from trainpace.report.compare import goodput_table
from trainpace.report.console import print_report
from trainpace.report.goodput import COLORS, goodput_html, headline, rows, timeline
from trainpace.report.html import write_page
from trainpace.report.run_html import run_page
from trainpace.summary import Goodput, Summary


@pytest.fixture
def job_goodput(tmp_path: Path) -> Goodput:
    return goodput(read_job(killed_and_restarted(tmp_path / "job")))


def test_the_rows_name_every_category_its_share_and_source(job_goodput: Goodput) -> None:
    assert headline(job_goodput) == "goodput 29.0% of 62 s (2 runs: 1 killed, 1 finished)"
    table = {label: (seconds, share) for label, seconds, share, _ in rows(job_goodput)}
    assert table == {
        "training (kept steps)": ("18 s", "29.0%"), "startup": ("14.5 s", "23.4%"),
        "warm-up excess": ("3.2 s", "5.2%"), "data wait": ("1.8 s", "2.9%"),
        "evaluation": ("3 s", "4.8%"), "checkpoint save": ("2 s", "3.2%"),
        "checkpoint load": ("1.5 s", "2.4%"), "lost progress (10 steps)": ("10 s", "16.1%"),
        "restart gap": ("6 s", "9.7%"), "teardown": ("1.5 s", "2.4%"),
        "other": ("500 ms", "0.8%")}
    sources = {label: source for label, _, _, source in rows(job_goodput)}
    assert sources["checkpoint save"] == "job.jsonl checkpoint_save events"
    assert sources["other"].startswith("time outside the steps that no event names")


def test_an_unmeasured_category_says_why(tmp_path: Path) -> None:
    from job.goodput_jobs import T0, contiguous, steps, write_run

    g = goodput(read_job(write_run(tmp_path / "run", "run", T0,
                                   steps(contiguous(1.0, [(1.0, 0.0)] * 3)))))
    sources = {label: (seconds, source) for label, seconds, _, source in rows(g)}
    seconds, source = sources["checkpoint save"]
    assert seconds == "—"
    assert source.startswith("not measured: no job.jsonl in the folder")


def test_the_console_shows_the_goodput_block_only_for_a_job(job_goodput: Goodput) -> None:
    out = io.StringIO()
    print_report(Summary(run_id="job.2", goodput=job_goodput), file=out, width=120)
    text = out.getvalue()
    assert "goodput 29.0% of 62 s (2 runs: 1 killed, 1 finished)" in text
    assert "lost progress (10 steps)" in text
    plain = io.StringIO()
    print_report(Summary(run_id="run"), file=plain, width=120)
    assert "goodput" not in plain.getvalue()


def test_the_timeline_draws_each_run_as_a_lane_of_bands(job_goodput: Goodput) -> None:
    svg = timeline(job_goodput)
    assert svg.count('class="lane-band"') == 10  # 4 bands in run 1, 6 in run 2
    assert ">run 1 · killed<" in svg and ">run 2 · finished<" in svg
    assert "<title>lost progress: 24–34 (10 s)</title>" in svg
    assert "<title>checkpoint save: 22–24 (2 s)</title>" in svg
    # the save is drawn after (over) the training it interrupted
    assert svg.index("<title>training (kept steps): 10–24") < svg.index("<title>checkpoint save")
    assert f'fill="{COLORS["lost_progress"]}"' in svg


def test_the_page_has_the_job_section(job_goodput: Goodput) -> None:
    page = run_page(Summary(run_id="job.2", goodput=job_goodput))
    assert "The job: goodput" in page and "The job over time" in page
    assert "The job: goodput" not in run_page(Summary(run_id="run"))
    assert goodput_html(job_goodput) in page


def test_two_jobs_compared_by_goodput_and_categories(job_goodput: Goodput) -> None:
    c = job_goodput.categories
    better = Goodput(pct=60.0, wall_s=40.0, productive_s=24.0, categories=c,
                     shares_pct={**job_goodput.shares_pct, "lost_progress": 0.0})
    compared = compare_goodput(job_goodput, better)
    assert compared["pct"] == [pytest.approx(100 * 18 / 62), 60.0]
    assert compared["better"] == "B"
    assert compared["categories"]["lost_progress"]["pct"] == [pytest.approx(100 * 10 / 62), 0.0]
    assert compared["text"] == ("goodput: A 29.0% of 62 s, B 60.0% of 40 s; the largest "
                                "difference is lost progress: 16.1% of A's wall time against "
                                "0.0% of B's")
    assert compare_goodput(job_goodput, Goodput())["text"] == "goodput is unknown for B"
    out = io.StringIO()
    from rich.console import Console

    Console(file=out, width=120).print(goodput_table(compared))
    assert "+31.0 pts" in out.getvalue()


@pytest.mark.browser
@pytest.mark.slow
def test_the_job_page_renders_in_chromium(job_goodput: Goodput, tmp_path: Path) -> None:
    from report.test_browser import CHROMIUM, near, pixels, render

    if CHROMIUM is None:
        pytest.skip("headless Chromium not installed (apt-get install chromium)")
    page = write_page(tmp_path / "job.html", run_page(Summary(run_id="job.2",
                                                              goodput=job_goodput)))
    png, console = render(page, tmp_path)
    assert console == []
    rgb = pixels(png)
    # the lanes' bands are on screen: lost progress (red), training (green), startup (purple)
    assert near(rgb, COLORS["lost_progress"], 6) > 2000
    assert near(rgb, COLORS["training"], 6) > 2000
    assert near(rgb, COLORS["startup"], 6) > 1000
