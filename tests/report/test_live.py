"""The live view: what it shows for hand-made window and summary records (no script, no
threads; a manual clock). The real terminal is tested in tests/cli/test_run.py (tmux)."""

import io
import sys

from rich.console import Console

from trainpace.report.live import LiveView
from trainpace.runlog import Record
from trainpace.sinks.console_line import format_window
from trainpace.summary import Data, Device, Steps, Summary, Target, Throughput, Time

WINDOW = {"first_step": 101, "last_step": 200, "steps": 100, "measured_steps": 100,
          "warmup_steps": 3, "samples_per_s": 1234.0, "tokens_per_s": None,
          "step_s_median": 0.0081, "step_s_p90": 0.009, "wait_pct": 31.0, "loss": 2.31,
          "device_util_pct": 64.0, "device_kind": "cpu", "eta_to_target_s": 185.0,
          "time_to_target_s": None}
STEPS = [{"step": i, "t_s": i * 0.0081, "step_s": 0.0081, "wait_s": 0.0025, "samples": 10,
          "tokens": None, "loss": 2.3, "exposed_wait_s": None, "h2d_s": None,
          "micro_batches": 1, "warmup": i <= 3} for i in range(1, 201)]


def summary():
    return Summary(
        run_id="live",
        steps=Steps(total=200, warmup=3, measured=197),
        throughput=Throughput(samples_per_s=1234.0, steps_per_s=123.4),
        time=Time(measured_s=1.6, step_s_median=0.0081, step_s_p90=0.009,
                  target=Target(name="loss", value=1.0, higher_is_better=False)),
        data=Data(wait_pct=31.0, wait_s_per_step=0.0025),
        device=Device(kind="cpu", name="test cpu", util_pct=64.0),
    )


class Clock:
    now = 100.0

    def __call__(self):
        return self.now


def text(view, width=140):
    out = io.StringIO()
    Console(file=out, width=width, color_system=None).print(view.renderable())
    return out.getvalue()


def window_record(figures=None):
    return Record("window", {"window": dict(figures or WINDOW), "steps": STEPS}, 200)


def test_not_a_terminal_one_line_per_window():
    out = io.StringIO()
    view = LiveView(out, terminal=False)
    view.log(Record("summary", summary().to_dict(), 200))  # not for a line
    view.log(window_record())
    view.log(Record("system", {"rows": []}, 200))
    assert out.getvalue() == format_window(WINDOW) + "\n"
    assert out.getvalue().startswith("step 200 | 1,234 samples/s | step 8.1 ms (p90 9 ms) | "
                                     "data wait 31.0% | cpu busy 64% | loss 2.31")


def test_the_panel_shows_the_signs_so_far_the_window_the_bottleneck_and_the_eta():
    clock = Clock()
    view = LiveView(io.StringIO(), terminal=True, title="train.py", clock=clock)
    assert "waiting for the first window of steps" in text(view)
    assert "not diagnosed yet" in text(view)
    clock.now += 42.0
    view.log(window_record())
    view.log(Record("summary", summary().to_dict(), 200))
    shown = text(view)
    assert "trainpace run · train.py · step 200 · 42 s" in shown
    for sign in ("throughput", "training time", "device utilization", "memory bandwidth",
                 "data loading"):
        assert sign in shown
    assert "1,234 samples/s" in shown and "wait 31% of step" in shown
    assert "this window  " + format_window(WINDOW)[:40] in shown
    # 31% of the step waiting for data: the diagnosis of the summary so far says so.
    assert "bottleneck so far  data loading — The step waits for data 31% of the time" in shown
    assert "target  ETA ~3m05s at the recent trend" in shown


def test_target_reached_and_no_target():
    view = LiveView(io.StringIO(), terminal=True)
    view.log(window_record({**WINDOW, "time_to_target_s": 12.5}))
    assert "target  reached at 12.5 s" in text(view)
    view = LiveView(io.StringIO(), terminal=True)
    view.log(window_record({**WINDOW, "eta_to_target_s": None}))
    assert "target  none set (--target-loss X gives an ETA)" in text(view)


def test_counts_not_measured_are_unknown_not_zero():
    out = io.StringIO()
    view = LiveView(out, terminal=False, counts_known=lambda: False)
    view.log(window_record({**WINDOW, "samples_per_s": 0.0, "wait_pct": 0.0}))
    line = out.getvalue()
    assert "samples/s" not in line and "data wait" not in line
    assert line.startswith("step 200 | step 8.1 ms")
    panel = LiveView(io.StringIO(), terminal=True, counts_known=lambda: False)
    panel.log(Record("summary", summary().to_dict(), 200))
    panel.log(window_record())
    shown = text(panel)
    assert "1,234 samples/s" not in shown
    assert "123 steps/s" in shown  # throughput falls back to steps per second
    assert "data loading" in shown and "not measured" in shown


def test_started_on_a_terminal_the_scripts_stderr_goes_above_the_panel():
    out = io.StringIO()
    view = LiveView(out, terminal=True, title="t.py")
    saved = sys.stderr
    view.start()
    try:
        assert sys.stderr is not saved  # routed through the live display
        print("a line of the script", file=sys.stderr)
        view.log(window_record())
    finally:
        view.close()
    assert sys.stderr is saved
    drawn = out.getvalue()
    assert "a line of the script" in drawn
    assert "trainpace run · t.py · step 200" in drawn
    view.close()  # idempotent
