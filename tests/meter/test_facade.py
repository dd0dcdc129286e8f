"""The Meter's wiring: settings written once, probes always closed, the loop's edges."""

import dataclasses
import inspect
import io
import time

import pytest
import torch
from torch.utils._python_dispatch import _get_current_dispatch_mode

import trainpace
from trainpace.config import MeterConfig
from trainpace.runlog import read_run


def test_the_meter_keywords_are_the_config_fields_with_the_same_defaults():
    params = inspect.signature(trainpace.Meter).parameters
    wiring = {"sinks", "stream", "clock", "made_by"}
    keywords = {name: p.default for name, p in params.items() if name not in wiring}
    fields = {f.name: f.default for f in dataclasses.fields(MeterConfig)}
    assert keywords == fields


def test_a_setting_the_meter_does_not_know_is_named_with_the_fix(tmp_path):
    with pytest.raises(trainpace.ConfigError, match=r"windwo is not a Meter setting; the "
                       r"settings are .*window"):
        trainpace.Meter(tmp_path / "run", windwo=3)
    with pytest.raises(trainpace.ConfigError, match="window must be an integer >= 1"):
        trainpace.Meter(tmp_path / "run", window=0)  # checked by MeterConfig, once
    assert not (tmp_path / "run").exists()


def test_the_meters_docstring_lists_every_setting_with_its_default():
    for field in dataclasses.fields(MeterConfig):
        if field.name != "out":
            assert f"        {field.name}={field.default!r}\n" in trainpace.Meter.__doc__


def test_meta_config_is_made_from_every_setting(tmp_path, clock):
    meter = trainpace.Meter(tmp_path / "run", clock=clock, console=False, report=False,
                            window=7, samples=len, profile_steps=[3, 5])
    meter.finish()
    config = read_run(meter.path).meta["config"]
    assert set(config) == {f.name for f in dataclasses.fields(MeterConfig)}
    assert config["window"] == 7 and config["profile_steps"] == [3, 5]
    assert config["samples"] == "builtins.len" and config["out"] == str(tmp_path / "run")


@pytest.mark.parametrize(("env", "expected"), [
    ({}, (1, 0, 0)),
    ({"RANK": "3", "WORLD_SIZE": "8", "LOCAL_RANK": "1"}, (8, 3, 1)),
    ({"RANK": "2", "WORLD_SIZE": "4"}, (4, 2, 2)),  # one node: the local rank is the rank
])
def test_meta_says_the_rank_from_the_launcher(tmp_path, clock, monkeypatch, env, expected):
    for name in ("RANK", "WORLD_SIZE", "LOCAL_RANK"):
        monkeypatch.delenv(name, raising=False)
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    meter = trainpace.Meter(tmp_path / "run", clock=clock, console=False, report=False)
    meter.finish()
    meta = read_run(meter.path).meta
    assert (meta["world_size"], meta["rank"], meta["local_rank"]) == expected


def test_the_flop_counter_is_closed_when_counting_the_batch_raises(tmp_path):
    def broken(batch):
        raise ValueError("cannot count")

    model = torch.nn.Linear(8, 8)
    meter = trainpace.Meter(tmp_path / "run", console=False, report=False, samples=broken)
    for _ in range(3):  # FLOP counting is on (the default): it wraps the first step
        with meter.step(torch.zeros(4, 8)):
            model(torch.zeros(4, 8)).sum().backward()
        assert _get_current_dispatch_mode() is None  # nothing left running after the step
    summary = meter.finish()
    assert summary.steps.total == 3
    assert summary.flops.per_step is not None and summary.flops.per_step > 0


def test_finish_closes_a_flop_counter_left_open(tmp_path):
    meter = trainpace.Meter(tmp_path / "run", console=False, report=False)
    context = meter.step(torch.zeros(2, 2))
    context.__enter__()  # a hand-driven step that never exits (a framework hook missed)
    assert _get_current_dispatch_mode() is not None
    meter.finish()
    assert _get_current_dispatch_mode() is None


def test_trainpaces_own_time_is_in_the_figures(tmp_path, clock, monkeypatch):
    """What the loop achieved, trainpace's time included: its work at the window boundaries
    (the hand-over, on the training thread) and the profiler's shutdown advance the clock,
    and the step times add up to the wall time of the loop."""
    from trainpace.meter.handover import WriterHandOver
    from trainpace.trace.capture import ProfileWindow

    real_hand_over, real_finish = WriterHandOver.hand_over, ProfileWindow._finish

    def slow_hand_over(self, final, flush, ends_window):
        clock.advance(0.5)  # the boundary's work, made long
        return real_hand_over(self, final, flush, ends_window)

    def slow_finish(self):
        clock.advance(0.3)  # the profiler's shutdown, made long
        real_finish(self)

    monkeypatch.setattr(WriterHandOver, "hand_over", slow_hand_over)
    monkeypatch.setattr(ProfileWindow, "_finish", slow_finish)
    meter = trainpace.Meter(tmp_path / "run", clock=clock, window=5, warmup=0,
                            profile_steps=(3, 6), console=False, report=False, count_flops=False)
    started = clock()
    for b in meter.loader([torch.zeros(4)] * 20):
        with meter.step(b):
            clock.advance(0.1)
    loop_s = clock() - started
    summary = meter.finish()
    steps = read_run(meter.path).steps
    step_s = [r["step_s"] for r in steps]
    # hand-overs halfway through each window and at its end: before steps 3, 6, 8, 11, 13,
    # 16 and 18 (the one after step 20 comes with the loader's end)
    handed = [2, 5, 7, 10, 12, 15, 17]
    assert [step_s[i] for i in handed] == pytest.approx([0.6] * 7)
    assert sum(step_s) == pytest.approx(20 * 0.1 + 7 * 0.5)
    # the profiler stopped after step 5, between two steps: outside them, in the wall time
    outside = [r["outside_s"] for r in steps]
    assert outside[5] == pytest.approx(0.3) and sum(outside) == pytest.approx(0.3)
    # the steps, the time outside them and the last boundary: the loop's wall time
    assert sum(step_s) + sum(outside) + 0.5 == pytest.approx(loop_s)
    assert summary.time.outside_steps_s == pytest.approx(0.3 + 0.5)
    assert summary.throughput.samples_per_s == pytest.approx(80 / sum(step_s))


def test_a_loader_that_runs_out_past_half_a_window_ends_it_and_waits_for_nothing(
        tmp_path, clock, monkeypatch):
    # window 100, an epoch of 60 steps: the window ends at the loader's end, its line comes
    # at the writer's next look, before finish(), and the loop never waited for it
    from trainpace.sinks.background import Writer

    waited: list[tuple[int, bool]] = []
    real = Writer.wait_for

    def spying(self, step, timeout_s, *, sent=False):
        waited.append((step, sent))
        return real(self, step, timeout_s, sent=sent)

    monkeypatch.setattr(Writer, "wait_for", spying)
    stream = io.StringIO()
    meter = trainpace.Meter(tmp_path / "run", clock=clock, window=100, stream=stream,
                            report=False, count_flops=False)
    for b in meter.loader([torch.zeros(2)] * 60):
        with meter.step(b):
            clock.advance(0.01)
    assert not [w for w in waited if w[1]]  # nothing waited for a window record
    deadline = time.monotonic() + 10
    while "step 60 |" not in stream.getvalue() and time.monotonic() < deadline:
        time.sleep(0.01)
    assert stream.getvalue().splitlines()[-1].startswith("step 60 |")  # before finish()
    summary = meter.finish()
    assert summary.steps.window_ends == [60]


def test_hand_driven_steps_like_the_framework_callbacks(tmp_path, clock):
    meter = trainpace.Meter(tmp_path / "run", clock=clock, window=4, console=False,
                            report=False, count_flops=False)
    for b in meter.loader([torch.zeros(3)] * 12):
        context = meter.step(b)
        context.__enter__()
        clock.advance(0.01)
        context.__exit__(None, None, None)
    summary = meter.finish()
    assert summary.steps.total == 12
    assert summary.throughput.samples_per_s == pytest.approx(300.0)
