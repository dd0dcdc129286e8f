"""Time outside the steps (an evaluation between epochs) is its own figure, never a stall."""


import pytest
import torch

import trainpace
from trainpace.runlog import read_run


def quiet(out, **kwargs):
    return trainpace.Meter(out, console=False, report=False, count_flops=False, **kwargs)


def test_an_evaluation_between_epochs_is_outside_the_steps(tmp_path, clock):
    meter = quiet(tmp_path / "run", clock=clock, window=10, warmup=0)
    for epoch in range(2):
        for b in meter.loader([torch.zeros(4, 2)] * 20):
            with meter.step(b):
                clock.advance(0.01)
        clock.advance(1.0)  # evaluation after the epoch
        if epoch == 0:
            meter.observe(metric=0.5)
    s = meter.finish()
    steps = read_run(meter.path).steps
    assert [r["step"] for r in steps if r["outside_s"]] == [21]  # the first step of epoch 2
    assert steps[20]["outside_s"] == pytest.approx(1.0)
    assert steps[20]["step_s"] == pytest.approx(0.01)  # the step itself is not slower
    assert s.time.wall_s == pytest.approx(2.4)
    assert s.time.outside_steps_s == pytest.approx(2.0)  # the last one: after the last step
    assert s.time.outside_steps_pct == pytest.approx(100 * 2.0 / 2.4)
    assert s.throughput.samples_per_s == pytest.approx(400.0)
    assert s.time.step_s_p90 == pytest.approx(0.01)


def test_between_steps_in_one_epoch_too_and_a_plain_loop_has_none(tmp_path, clock):
    meter = quiet(tmp_path / "run", clock=clock, window=5, warmup=0)
    for i, b in enumerate(meter.loader([torch.zeros(2)] * 10)):
        with meter.step(b):
            clock.advance(0.02)
        if i == 4:
            clock.advance(0.3)  # a checkpoint
    meter.finish()
    outside = [r["outside_s"] for r in read_run(meter.path).steps]
    assert outside == pytest.approx([0.0] * 5 + [0.3] + [0.0] * 4)


def test_unknown_when_the_loop_does_not_use_the_metered_loader(tmp_path, clock):
    # its own data loading happens between the steps: that is the step's, not outside
    meter = quiet(tmp_path / "run", clock=clock, window=5, warmup=0)
    for _ in range(5):
        clock.advance(0.004)  # the loop's own loader
        with meter.step(torch.zeros(2)):
            clock.advance(0.006)
    s = meter.finish()
    assert [r["outside_s"] for r in read_run(meter.path).steps] == [None] * 5
    assert s.time.outside_steps_s is None
    assert s.time.step_s_median == pytest.approx(0.01)
