"""The console line's writing: on a line of its own beside a progress bar."""

import io
import re

import pytest

from trainpace.runlog import Record
from trainpace.sinks.console_line import ConsoleSink

FIGURES = {"last_step": 100, "measured_steps": 100, "samples_per_s": 2468.0, "ranks": 2,
           "world_size": 2}
LINE = "job, 2 ranks | step 100 | 2,468 samples/s"


def test_without_a_progress_bar_one_plain_line():
    stream = io.StringIO()
    ConsoleSink(stream).log(Record("window", {"window": FIGURES, "steps": []}, 100))
    assert stream.getvalue() == LINE + "\n"


def test_beside_a_tqdm_bar_the_line_starts_on_its_own_and_the_bar_is_redrawn():
    tqdm = pytest.importorskip("tqdm")
    stream = io.StringIO()
    bar = tqdm.tqdm(total=120, file=stream, ascii=True, mininterval=0, desc="train")
    try:
        bar.update(100)  # HF's bar: "train: 83%|...| 100/120" with no newline after it
        ConsoleSink(stream).log(Record("window", {"window": FIGURES, "steps": []}, 100))
        bar.update(1)
    finally:
        bar.close()
    out = stream.getvalue()
    # the bar's line was cleared (\r, blanks, \r) before the window line, which ends with \n
    lines = re.split(r"[\r\n]", out)
    assert LINE in lines
    before = out[:out.index(LINE)]
    assert before.endswith("\r") and before.rstrip("\r").split("\r")[-1].strip() == ""
    assert "101/120" in out[out.index(LINE):]  # the bar goes on below it
