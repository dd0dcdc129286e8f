"""The Meter end to end on CPU loops with injected, known work."""

import json
import logging
import time

import pytest
import torch
from torch.utils.data import DataLoader, Dataset

import trainpace
from trainpace.errors import ConfigError
from trainpace.runlog import read_run


def quiet(tmp_path=None, **kwargs):
    out = tmp_path / "run" if tmp_path is not None else None
    return trainpace.Meter(out, console=False, report=False, count_flops=False, **kwargs)


def loop(meter, clock, *, batches, wait_s, compute_s, batch=None, losses=None):
    """A loop whose data delay and compute are injected on the manual clock."""
    batch = batch if batch is not None else torch.zeros(16, 4)
    waits = wait_s if isinstance(wait_s, list) else [wait_s] * batches
    computes = compute_s if isinstance(compute_s, list) else [compute_s] * batches

    def data():
        for w in waits:
            clock.advance(w)
            yield batch

    for i, b in enumerate(meter.loader(data())):
        with meter.step(b):
            clock.advance(computes[i])
            if losses is not None:
                meter.observe(loss=losses[i])


def test_exact_figures_from_injected_wait_and_compute(tmp_path, clock):
    meter = quiet(tmp_path, clock=clock, window=10)
    loop(meter, clock, batches=50, wait_s=0.004, compute_s=0.016)
    s = meter.finish()
    assert (s.steps.total, s.steps.warmup, s.steps.measured) == (50, 1, 49)
    assert s.time.step_s_median == pytest.approx(0.020)
    assert s.throughput.samples_per_s == pytest.approx(16 / 0.020)
    assert s.data.wait_pct == pytest.approx(20.0)
    assert s.data.wait_s_per_step == pytest.approx(0.004)
    assert s.time.wall_s == pytest.approx(50 * 0.020)
    assert s.device.kind == "cpu"
    assert s.time.clock == "host"


def test_auto_warmup_on_a_loop_with_slow_first_steps(tmp_path, clock):
    meter = quiet(tmp_path, clock=clock, window=20)
    loop(meter, clock, batches=60, wait_s=0.0, compute_s=[0.4, 0.2, 0.1, 0.05] + [0.01] * 56)
    s = meter.finish()
    assert s.steps.warmup == 4
    assert s.steps.warmup_mode == "auto"
    assert s.time.warmup_s == pytest.approx(0.75)
    assert s.throughput.steps_per_s == pytest.approx(100.0)


def test_fixed_warmup(tmp_path, clock):
    meter = quiet(tmp_path, clock=clock, warmup=10)
    loop(meter, clock, batches=30, wait_s=0.0, compute_s=0.01)
    assert meter.finish().steps.warmup == 10


def test_time_to_target_loss(tmp_path, clock):
    losses = [3.0 - 0.1 * i for i in range(30)]
    meter = quiet(tmp_path, clock=clock, target_loss=1.5, smoothing=0.0)
    loop(meter, clock, batches=30, wait_s=0.0, compute_s=0.1, losses=losses)
    s = meter.finish()
    # the raw loss is 1.5 or less from step 16 on (3.0 - 0.1*15 = 1.5)
    assert s.time.steps_to_target == 16
    assert s.time.time_to_target_s == pytest.approx(1.6)
    assert s.time.target.name == "loss"


def test_eta_while_not_yet_at_the_target(tmp_path, clock):
    losses = [3.0 - 0.01 * i for i in range(30)]  # 0.1 per second at 0.1 s per step
    meter = quiet(tmp_path, clock=clock, target_loss=1.0, smoothing=0.0)
    loop(meter, clock, batches=30, wait_s=0.0, compute_s=0.1, losses=losses)
    s = meter.finish()
    assert s.time.time_to_target_s is None
    assert s.time.eta_to_target_s == pytest.approx((2.71 - 1.0) / 0.1)


def test_metric_target_named_in_observe(tmp_path, clock):
    meter = quiet(tmp_path, clock=clock)
    for i, b in enumerate(meter.loader([torch.zeros(2)] * 10)):
        with meter.step(b):
            clock.advance(1.0)
        if i % 2 == 1:  # an eval every two steps, after the step
            meter.observe(metric=0.2 * i, target=1.0, higher_is_better=True)
    s = meter.finish()
    assert s.time.target.name == "metric"
    assert s.time.steps_to_target == 6  # metric 1.0 observed after step 6
    assert s.time.time_to_target_s == pytest.approx(6.0)


def test_gradient_accumulation_with_accumulate(tmp_path, clock):
    meter = quiet(tmp_path, clock=clock)
    for b in meter.loader([torch.zeros(8, 2)] * 40):
        with meter.step(b, accumulate=4):
            clock.advance(0.01)
    s = meter.finish()
    assert s.steps.total == 10
    run = read_run(meter.path)
    assert {r["samples"] for r in run.steps} == {32}
    assert {r["micro_batches"] for r in run.steps} == {4}
    assert s.time.step_s_median == pytest.approx(0.04)


def test_padded_variable_length_batches_count_real_tokens(tmp_path, clock):
    lengths = [[5, 3, 8], [2, 2, 2], [7, 7, 1]] * 5

    def batches():
        for lens in lengths:
            width = max(lens)
            mask = torch.tensor([[1] * n + [0] * (width - n) for n in lens])
            yield {"input_ids": torch.zeros(len(lens), width, dtype=torch.long), "attention_mask": mask}

    meter = quiet(tmp_path, clock=clock, warmup=0)
    for b in meter.loader(batches()):
        with meter.step(b):
            clock.advance(0.5)
    s = meter.finish()
    real = sum(sum(lens) for lens in lengths)
    assert s.throughput.tokens_counted == "non_padding"
    assert s.throughput.tokens_per_s == pytest.approx(real / (0.5 * len(lengths)))
    assert s.throughput.samples_per_s == pytest.approx(3 / 0.5)


def test_run_folder_holds_the_contract(tmp_path, clock):
    meter = quiet(tmp_path, clock=clock, window=10)
    loop(meter, clock, batches=25, wait_s=0.001, compute_s=0.01)
    meter.finish()
    run = read_run(meter.path)
    assert [r["step"] for r in run.steps] == list(range(1, 26))
    assert run.summary is not None and run.summary.steps.total == 25
    assert run.meta["schema"] == "trainpace.meta/1"
    assert run.meta["finished_at"] is not None
    assert run.meta["device"]["kind"] == "cpu"
    summary = json.loads((meter.path / "summary.json").read_text())
    assert summary["schema"] == "trainpace.summary/1"


def test_an_existing_run_is_never_overwritten(tmp_path, clock):
    first = quiet(tmp_path, clock=clock)
    loop(first, clock, batches=3, wait_s=0, compute_s=0.01)
    first.finish()
    second = quiet(tmp_path, clock=clock)
    second.finish()
    assert first.path.name == "run" and second.path.name == "run-2"


def test_dataloader_settings_are_recorded(tmp_path):
    class Squares(Dataset):
        def __len__(self):
            return 8

        def __getitem__(self, i):
            return torch.tensor([float(i)])

    dl = DataLoader(Squares(), batch_size=4, num_workers=0, pin_memory=False)
    meter = quiet(tmp_path)
    for b in meter.loader(dl):
        with meter.step(b):
            pass
    s = meter.finish()
    settings = read_run(meter.path).meta["loader"]
    assert settings["num_workers"] == 0
    assert settings["batch_size"] == 4
    assert settings["prefetch_factor"] is None
    assert settings["pin_memory"] is False
    assert settings["persistent_workers"] is False
    assert s.data.loader == settings


def test_loader_wraps_any_iterable_and_moves_to_a_device(tmp_path):
    meter = quiet(tmp_path)
    seen = []
    for b in meter.loader(iter([(torch.zeros(3), torch.ones(3))] * 4), device="cpu"):
        with meter.step(b):
            seen.append(b)
    s = meter.finish()
    assert len(seen) == 4 and s.steps.total == 4
    assert s.data.h2d_s_per_step is not None and s.data.h2d_s_per_step >= 0


def test_console_line_per_window(tmp_path, clock, capsys):
    import io

    stream = io.StringIO()
    meter = trainpace.Meter(tmp_path / "r", clock=clock, window=10, stream=stream, report=False,
                            count_flops=False)
    loop(meter, clock, batches=20, wait_s=0.001, compute_s=0.009, losses=[2.5] * 20)
    meter.finish()
    lines = stream.getvalue().splitlines()
    assert lines[0] == "step 10 | 1,600 samples/s | step 10 ms (p90 10 ms) | data wait 10.0% | loss 2.5"
    assert lines[1].startswith("step 20 | 1,600 samples/s")
    assert capsys.readouterr().out == ""  # nothing on stdout


# -- monitoring never breaks the training -------------------------------------------------
# (real-time figures against an independent timer: benchmarks/steptruth.py)


class BrokenSink:
    def log(self, record):
        raise OSError("disk full")

    def close(self):
        raise OSError("still full")


def test_faults_inside_trainpace_are_contained_and_logged_once(tmp_path, clock, caplog):
    calls = {"n": 0}

    def bad_samples(batch):
        calls["n"] += 1
        raise ValueError("cannot count")

    meter = quiet(tmp_path, clock=clock, window=5, samples=bad_samples, sinks=[BrokenSink()])
    trained = 0
    with caplog.at_level(logging.WARNING):
        for b in meter.loader([torch.zeros(2)] * 20):
            with meter.step(b):
                clock.advance(0.01)
                meter.observe(loss="not a number")
                trained += 1
        s = meter.finish()
    assert trained == 20
    assert calls["n"] == 20  # tried every batch...
    assert s.steps.total == 20  # ...and the steps were still measured
    assert s.time.step_s_median == pytest.approx(0.01)
    messages = [r.getMessage() for r in caplog.records]
    assert sum("counting a batch" in m for m in messages) == 1
    assert sum("observe()" in m for m in messages) == 1
    assert sum("BrokenSink" in m for m in messages) == 1  # one sink, one message


def test_a_broken_clock_does_not_stop_training(tmp_path, caplog):
    state = {"n": 0}

    def clock():
        state["n"] += 1
        if state["n"] > 5:
            raise RuntimeError("clock gone")
        return float(state["n"])

    meter = quiet(tmp_path, clock=clock)
    done = 0
    with caplog.at_level(logging.WARNING):
        for b in meter.loader([torch.zeros(2)] * 10):
            with meter.step(b):
                done += 1
        meter.finish()
    assert done == 10


def test_user_exceptions_propagate_and_the_step_is_dropped(tmp_path, clock):
    meter = quiet(tmp_path, clock=clock)
    with pytest.raises(KeyError):
        for i, b in enumerate(meter.loader([torch.zeros(2)] * 5)):
            with meter.step(b):
                clock.advance(0.01)
                if i == 3:
                    raise KeyError("user bug")
    s = meter.finish()
    assert s.steps.total == 3


def test_a_loader_error_propagates(tmp_path):
    def broken():
        yield torch.zeros(1)
        raise OSError("corrupt shard")

    meter = quiet(tmp_path)
    with pytest.raises(OSError, match="corrupt shard"):
        for b in meter.loader(broken()):
            with meter.step(b):
                pass
    assert meter.finish().steps.total == 1


def test_finish_twice_returns_the_same_summary(tmp_path, clock):
    meter = quiet(tmp_path, clock=clock)
    loop(meter, clock, batches=3, wait_s=0, compute_s=0.01)
    assert meter.finish() is meter.finish()


def test_context_manager_finishes(tmp_path, clock):
    with quiet(tmp_path, clock=clock) as meter:
        loop(meter, clock, batches=3, wait_s=0, compute_s=0.01)
    assert read_run(meter.path).summary.steps.total == 3


# -- configuration errors name the key and the value --------------------------------------


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"window": 0}, "window must be an integer >= 1, got 0"),
        ({"warmup": -1}, "warmup must be \"auto\" or an integer >= 0, got -1"),
        ({"warmup": "soon"}, "warmup must be \"auto\" or an integer >= 0, got 'soon'"),
        ({"target_loss": float("nan")}, "target_loss must be a finite number, got nan"),
        ({"smoothing": 1.0}, r"smoothing must be in \[0, 1\), got 1.0"),
        ({"samples": 3}, "samples must be a callable taking a batch, or None, got 3"),
        ({"device": "tpu"}, "device must be \"cpu\", \"cuda\", \"cuda:N\" or \"mps\", got 'tpu'"),
        ({"sample_interval_s": 0}, "sample_interval_s must be > 0, got 0"),
        ({"profile_steps": (5, 2)}, r"profile_steps must be \(start, stop\) with 1 <= start < stop, got \(5, 2\)"),
    ],
)
def test_config_errors(kwargs, message):
    with pytest.raises(ConfigError, match=message) as info:
        trainpace.Meter(**kwargs)
    assert info.value.key == next(iter(kwargs))


def test_accumulate_must_be_positive():
    meter = trainpace.Meter(console=False, report=False)
    with pytest.raises(ConfigError, match="accumulate must be an integer >= 1, got 0"):
        meter.step(accumulate=0)


# -- device vitals through the Meter --------------------------------------------------------


def test_flops_of_the_first_step_and_the_cpu_sampler(tmp_path):
    model = torch.nn.Linear(16, 4)
    meter = trainpace.Meter(tmp_path / "run", console=False, report=False, window=5,
                            sample_interval_s=0.01)
    for x in meter.loader([torch.randn(32, 16)] * 12):
        with meter.step(x):
            model(x).sum().backward()
            time.sleep(0.01)
    s = meter.finish()
    # forward 2·B·in·out, backward the weight gradient only (x needs no gradient): the same
    assert s.flops.per_step == 2 * (2 * 32 * 16 * 4)
    assert s.device.kind == "cpu"
    assert s.device.util_source == "process_cpu"
    assert s.device.util_pct is not None
    assert 0.0 <= s.device.util_pct <= 100.0
    assert s.device.temperature_c is None  # no CPU temperature source: null, not zero
    assert s.host.cpu_threads == torch.get_num_threads()
    rows = read_run(meter.path).system
    assert rows
    assert all(row["t_s"] >= 0 for row in rows)
    assert read_run(meter.path).meta["vitals"]["sampler"]["sources"]["host"] is True


def test_no_flop_count_with_warmup_zero(tmp_path):
    model = torch.nn.Linear(4, 4)
    meter = trainpace.Meter(tmp_path / "run", console=False, report=False, warmup=0)
    for x in meter.loader([torch.randn(2, 4)] * 3):
        with meter.step(x):
            model(x).sum().backward()
    assert meter.finish().flops.per_step is None


def test_flops_per_step_given_by_the_user(tmp_path, clock):
    meter = trainpace.Meter(tmp_path / "run", console=False, report=False, clock=clock,
                            flops_per_step=1e9)
    for x in meter.loader([torch.zeros(2)] * 10):
        with meter.step(x):
            clock.advance(0.5)
    s = meter.finish()
    assert s.flops.per_step == 1e9
    assert s.flops.achieved_tflops == pytest.approx(1e9 / 0.5 / 1e12)


def test_user_peaks_give_mfu(tmp_path, clock):
    meter = trainpace.Meter(tmp_path / "run", console=False, report=False, clock=clock,
                            flops_per_step=2e9, peaks={"tflops": {"fp32": 0.04}}, dtype="fp32")
    for x in meter.loader([torch.zeros(2)] * 10):
        with meter.step(x):
            clock.advance(0.1)
    s = meter.finish()
    assert s.flops.achieved_tflops == pytest.approx(0.02)
    assert s.flops.mfu_pct == pytest.approx(50.0)
    assert read_run(meter.path).meta["cpu_count"] >= 1


def test_bad_peaks_fail_before_training():
    with pytest.raises(ConfigError, match="peaks"):
        trainpace.Meter(peaks={"tflops": {"fp32": -1}}, console=False)


@pytest.mark.slow
def test_profile_steps_capture_and_analyze_a_trace(tmp_path):
    import gzip

    from torch.utils.data import TensorDataset

    dl = DataLoader(TensorDataset(torch.randn(320, 32)), batch_size=16)
    model = torch.nn.Linear(32, 32)
    meter = trainpace.Meter(tmp_path / "run", window=5, profile_steps=(8, 12), console=False,
                            report=False)
    for (x,) in meter.loader(dl):
        with meter.step(x):
            model(x).square().mean().backward()
    meter.finish()
    run = read_run(meter.path)
    trace = run.meta["profile"]["trace"]
    assert trace.endswith("profile_rank0.pt.trace.json.gz")
    with gzip.open(trace) as handle:
        events = json.loads(handle.read())["traceEvents"]
    steps = {e["name"] for e in events if e.get("name", "").startswith("ProfilerStep#")}
    assert steps == {f"ProfilerStep#{n}" for n in range(8, 12)}  # the Meter's own step numbers
    # the batch fetch is inside the step it feeds
    assert any("DataLoader" in e.get("name", "") for e in events)
    analysis = json.loads((meter.path / "profile_analysis.json").read_text())
    assert analysis["ranks"][0]["rank"] == 0


def test_the_windows_a_loader_ended_are_in_the_summary(tmp_path, clock):
    # window 10, epochs of 7 batches: the loop's boundaries are 5 (halfway), 7 (the loader ran
    # out: the window ends there), 12, 14, 19, 21; the ends at a loader's end are kept, so the
    # diagnosis places trainpace's later boundaries from them
    meter = quiet(tmp_path, clock=clock, window=10)
    for _epoch in range(3):
        for b in meter.loader([torch.zeros(2)] * 7):
            with meter.step(b):
                clock.advance(0.01)
    s = meter.finish()
    assert s.steps.window_ends == [7, 14, 21]
    written = json.loads((tmp_path / "run" / "summary.json").read_text())
    assert written["steps"]["window_ends"] == [7, 14, 21]
    assert read_run(tmp_path / "run").summary.steps.window_ends == [7, 14, 21]
