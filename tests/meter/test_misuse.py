"""Misuse and odd input: a clear word, correct figures, nothing silently wrong."""

import logging
import math
import threading
import tracemalloc

import pytest
import torch

import trainpace
from trainpace.errors import ConfigError, DeviceError
from trainpace.runlog import read_run


def quiet(out=None, **kwargs):
    return trainpace.Meter(out, console=False, report=False, count_flops=False, **kwargs)


def test_a_nested_step_warns_once_and_counts_the_outer_step_once(tmp_path, clock, caplog):
    meter = quiet(tmp_path / "run", clock=clock, window=10)
    with caplog.at_level(logging.WARNING, logger="trainpace"):
        for b in meter.loader([torch.zeros(4, 2)] * 100):
            with meter.step(b), meter.step(b):
                clock.advance(0.01)
    s = meter.finish()
    assert s.steps.total == 100
    assert s.throughput.samples_per_s == pytest.approx(400.0)
    assert sum("steps do not nest" in r.getMessage() for r in caplog.records) == 1


def test_two_meters_with_one_out_write_two_folders(tmp_path, clock):
    a, b = quiet(tmp_path / "run", clock=clock), quiet(tmp_path / "run", clock=clock)
    assert (a.path.name, b.path.name) == ("run", "run-2")
    for meter, n in ((a, 30), (b, 50)):
        for batch in meter.loader([torch.zeros(2)] * n):
            with meter.step(batch):
                clock.advance(0.01)
    a.finish()
    b.finish()
    assert len(read_run(a.path).steps) == 30 and len(read_run(b.path).steps) == 50


def test_steps_after_finish_warn_once_and_keep_nothing(tmp_path, clock, caplog):
    meter = quiet(tmp_path / "run", clock=clock)
    with meter.step():
        clock.advance(0.01)
    summary = meter.finish()
    with caplog.at_level(logging.WARNING, logger="trainpace"):
        for _ in range(2_000):  # warm up the allocator before measuring
            with meter.step(torch.zeros(1)):
                meter.observe(loss=1.0)
        tracemalloc.start()
        before = tracemalloc.get_traced_memory()[0]
        for batch in meter.loader(range(20_000)):
            with meter.step(batch):
                meter.observe(loss=1.0)
        grown = tracemalloc.get_traced_memory()[0] - before
        tracemalloc.stop()
    # Nothing kept per step. The smallest thing a step could keep, a float in a list, is 32
    # bytes: 640 kB over these steps. The bound leaves room for what other threads of the
    # process allocate meanwhile (tracemalloc counts them too; 71 kB once on a loaded CI).
    assert grown < 320_000
    assert meter.finish() is summary and summary.steps.total == 1
    assert sum("after meter.finish()" in r.getMessage() for r in caplog.records) == 1


def test_a_nonfinite_loss_is_recorded_as_such(tmp_path, clock):
    meter = quiet(tmp_path / "run", clock=clock, window=5)
    losses = [2.0, 1.5, float("nan"), float("inf"), 1.0]
    for b, loss in zip(meter.loader([torch.zeros(2)] * 5), losses, strict=True):
        with meter.step(b):
            clock.advance(0.01)
            meter.observe(loss=torch.tensor(loss))
    meter.finish()
    steps = read_run(meter.path).steps
    assert [r["loss_nonfinite"] for r in steps] == [False, False, True, True, False]
    assert [r["loss"] for r in steps] == [2.0, 1.5, None, None, 1.0]
    no_loss = quiet(clock=clock)
    with no_loss.step():
        clock.advance(0.01)
    no_loss.finish()
    assert no_loss._state.series.column("loss_nonfinite")[0] != no_loss._state.series.column(
        "loss_nonfinite")[0]  # NaN: unknown, no loss was observed
    assert math.isnan(no_loss._state.series.column("loss")[0])


@pytest.mark.parametrize(("kwargs", "message"), [
    ({"profile_steps": 5}, "profile_steps must be (start, stop)"),
    ({"sinks": None}, "sinks must be a list of sinks"),
    ({"sinks": [object()]}, "sinks must hold sinks"),
    ({"sink_timeout_s": -1}, "sink_timeout_s must be a number >= 0"),
    ({"tensorboard": 3}, "tensorboard must be a folder path"),
    ({"unknown": 1}, "unknown is not a Meter setting"),
])
def test_bad_settings_are_config_errors_naming_key_and_value(kwargs, message):
    with pytest.raises(ConfigError, match=message.replace("(", r"\(").replace(")", r"\)")):
        quiet(**kwargs)


@pytest.mark.parametrize("key", ["out", "tensorboard"])
def test_a_folder_setting_pointing_at_a_file_is_a_config_error(tmp_path, key):
    file = tmp_path / "a-file"
    file.write_text("x")
    with pytest.raises(ConfigError, match=f"{key} must be a folder, but it is a file, got '{file}'"):
        quiet(**{key: file})


@pytest.mark.skipif(torch.cuda.is_available(), reason="this machine has CUDA")
def test_cuda_asked_for_on_a_machine_without_it_is_refused():
    with pytest.raises(DeviceError, match="CUDA is not available on this machine"):
        quiet(device="cuda")


def test_two_training_threads_the_first_ones_steps_and_the_other_named(tmp_path, clock, caplog):
    meter = quiet(tmp_path / "run", clock=clock, window=10)
    together = threading.Barrier(2, timeout=30)
    first_step_done = threading.Event()

    def train(first_alone):
        if first_alone:
            with meter.step(torch.zeros(4, 2)):
                clock.advance(0.01)
            first_step_done.set()
        for _ in range(30):
            with meter.step(torch.zeros(4, 2)):
                together.wait()  # both threads are inside a step block now
                clock.advance(0.01)

    a = threading.Thread(target=train, args=(True,), name="learner-a")
    b = threading.Thread(target=train, args=(False,), name="learner-b")
    with caplog.at_level(logging.WARNING, logger="trainpace"):
        a.start()
        first_step_done.wait(30)
        b.start()
        a.join()
        b.join()
    s = meter.finish()
    assert s.steps.total == 31  # learner-a's: its first step alone, then 30
    assert len(read_run(meter.path).steps) == 31
    said = [r.getMessage() for r in caplog.records]
    assert sum("'learner-b'" in line and "'learner-a'" in line for line in said) == 1
    assert not any("steps do not nest" in line for line in said)


def test_another_threads_loader_and_observe_are_not_added_to_the_training_threads_steps(
        tmp_path, clock, caplog):
    """A second thread pulls batches from its own meter.loader() and calls observe() while the
    training thread is inside its steps: the steps keep the training thread's wait, samples
    and loss only; each misuse is said once, naming both threads."""
    meter = quiet(tmp_path / "run", clock=clock, window=10)
    go, done = threading.Event(), threading.Event()
    failures = []

    def slow(batches, wait_s):
        for batch in batches:
            clock.advance(wait_s)  # the time next() blocks, on the shared clock
            yield batch

    def helper():
        try:
            batches = None
            for _ in range(20):
                assert go.wait(30)
                go.clear()
                if batches is None:
                    batches = iter(meter.loader(slow([torch.zeros(8, 2)] * 20, 0.003)))
                next(batches)
                meter.observe(loss=99.0)
                done.set()
        except Exception as exc:  # noqa: BLE001 - said by the test below
            failures.append(exc)
            done.set()

    other = threading.Thread(target=helper, name="prefetcher")
    with caplog.at_level(logging.WARNING, logger="trainpace"):
        other.start()
        for batch in meter.loader(slow([torch.zeros(4, 2)] * 20, 0.002)):
            with meter.step(batch):
                go.set()  # the other thread fetches and observes now, inside this step
                assert done.wait(30)
                done.clear()
                meter.observe(loss=1.0)
                clock.advance(0.010)
        other.join(30)
    assert failures == []
    s = meter.finish()
    steps = read_run(meter.path).steps
    assert [r["wait_s"] for r in steps] == pytest.approx([0.002] * 20)
    assert [r["samples"] for r in steps] == [4] * 20
    assert [r["loss"] for r in steps] == [1.0] * 20
    assert [r["step_s"] for r in steps][1:] == pytest.approx([0.015] * 19)  # wall time passes
    assert s.data.wait_s_per_step == pytest.approx(0.002)
    said = [r.getMessage() for r in caplog.records]
    for call in ("meter.loader() iteration", "meter.observe()"):
        assert sum(line.startswith(f"trainpace: {call} in thread 'prefetcher'")
                   and "'MainThread'" in line for line in said) == 1, said
