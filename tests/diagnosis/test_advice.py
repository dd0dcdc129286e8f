import pytest

from trainpace.diagnosis.advice import (
    duration,
    gain_if_removed,
    gain_text,
    loader_advice,
    loading_cpu,
    workers_needed,
)


@pytest.mark.parametrize(
    ("seconds", "text"),
    [(0.00085, "850 µs"), (0.0123, "12.3 ms"), (0.5, "500 ms"), (1.2, "1.2 s"), (300.0, "5m00s")],
)
def test_duration(seconds, text):
    assert duration(seconds) == text


def test_gain_is_the_inverse_of_the_time_left():
    assert gain_if_removed(38.0) == pytest.approx(1 / 0.62)
    assert gain_text(38.0) == "expected gain up to 1.6×"
    assert gain_text(0.4) == "expected gain up to 0%"
    assert gain_text(5.0) == "expected gain up to 5%"  # 1/0.95 = 1.053, never "up to 1×"
    assert gain_text(9.0) == "expected gain up to 10%"
    assert gain_if_removed(0.0) == 1.0
    assert gain_if_removed(100.0) == pytest.approx(100.0)  # capped, never a division by zero


def test_workers_needed_with_headroom_and_the_core_cap():
    # each worker makes a batch in 1 s, the step needs one every 0.25 s: 4 × 1.2 = 4.8 → 5
    assert workers_needed(batch_load_s=1.0, compute_s=0.25, headroom=1.2, cpu_count=None) == (5, False)
    assert workers_needed(batch_load_s=1.0, compute_s=0.25, headroom=1.2, cpu_count=4) == (3, True)
    assert workers_needed(batch_load_s=0.1, compute_s=1.0, headroom=1.2, cpu_count=8) == (2, False)


def test_advice_for_a_loader_without_workers_on_cuda():
    advice = loader_advice(
        wait_pct=38.0, wait_s=0.38, step_s=1.0,
        loader={"num_workers": 0, "pin_memory": False, "persistent_workers": False, "prefetch_factor": None},
        device_kind="cuda", cpu_count=8, bursty=False, headroom=1.2,
    ).advice
    # a batch takes the loop 0.38 s; it must arrive every 0.62 s: ceil(1.2 × 0.38 / 0.62) = 1 → at least 2
    assert advice[0] == (
        "data wait is 38% of the step with `num_workers=0`; try "
        "`DataLoader(num_workers=2, pin_memory=True, persistent_workers=True)` — expected gain up to 1.6×"
    )
    assert advice[-1] == "with pin_memory=True, copy with `.to(device, non_blocking=True)`"


def test_advice_when_workers_cannot_keep_up_on_the_cores_there_are():
    advice = loader_advice(
        wait_pct=50.0, wait_s=0.5, step_s=1.0,
        loader={"num_workers": 2, "pin_memory": True, "persistent_workers": True, "prefetch_factor": 2},
        device_kind="cuda", cpu_count=4, bursty=True, headroom=1.2,
    ).advice
    # loader-bound with 2 workers: each makes a batch in 2 × 1.0 s; needed ceil(1.2 × 2 / 0.5) = 5 > 3 cores left
    assert advice[0] == (
        "data wait is 50% of the step with `num_workers=2`; try "
        "`DataLoader(num_workers=3, prefetch_factor=4)` — expected gain up to 2×"
    )
    assert advice[1].startswith("workers alone cannot hide it on 4 CPU cores: one batch takes ~2 s")
    assert "tune-loader" in advice[2]  # the CPU use of loading was not measured
    assert "bursts" in advice[3]


def test_advice_on_cpu_does_not_pin_and_warns_about_cores():
    advice = loader_advice(
        wait_pct=60.0, wait_s=0.6, step_s=1.0, loader={"num_workers": 0},
        device_kind="cpu", cpu_count=None, bursty=False, headroom=1.2,
    ).advice
    # ceil(1.2 × 0.6 / 0.4) = 2
    assert advice[0] == (
        "data wait is 60% of the step with `num_workers=0`; try "
        "`DataLoader(num_workers=2, persistent_workers=True)` — expected gain up to 2.5×"
    )
    assert advice[-1].startswith("on a CPU-only run, workers take cores")


def test_advice_without_loader_settings_says_so():
    advice = loader_advice(
        wait_pct=25.0, wait_s=0.25, step_s=1.0, loader=None,
        device_kind="cuda", cpu_count=None, bursty=False, headroom=1.2,
    ).advice
    assert "is not a torch DataLoader, so its settings are unknown" in advice[0]
    assert "wrap it with" not in advice[0]  # it was wrapped: the wait was measured
    assert "trainpace tune-loader MODULE:FACTORY --run RUN" in advice[0]
    assert advice[1] == (
        "the loader must deliver a batch every 750 ms (the step's time outside the loader); "
        "each worker makes one batch at a time"
    )


def test_io_bound_loading_may_run_more_workers_than_cores():
    # 2 cores; a worker's core is busy 5% of the time it loads: the CPU can run 1/0.05 = 20
    assert workers_needed(batch_load_s=1.0, compute_s=0.1, headroom=1.2, cpu_count=2,
                          cpu_fraction=0.05) == (12, False)
    # CPU-bound: one core left for workers
    assert workers_needed(batch_load_s=1.0, compute_s=0.1, headroom=1.2, cpu_count=2,
                          cpu_fraction=1.0) == (1, True)
    # half CPU: 2 spare cores / 0.5 = 4
    assert workers_needed(batch_load_s=1.0, compute_s=0.1, headroom=1.2, cpu_count=3,
                          cpu_fraction=0.5) == (4, True)


def test_loading_cpu_from_the_workers_and_from_the_main_process():
    # 4 workers, the tree 60% of a core over the main's 20%: each worker 10% busy → I/O
    cpu = loading_cpu(workers=4, wait_s=0.05, step_s=0.1, main_cpu_pct=20.0,
                      process_cpu_pct=60.0, device_kind="cuda", threads=None)
    assert (cpu.fraction, cpu.source, cpu.bound) == (pytest.approx(0.1), "workers' CPU time", "io")
    # their demand (CPU time + time waiting for a core) says more on a crowded machine
    cpu = loading_cpu(workers=4, wait_s=0.05, step_s=0.1, main_cpu_pct=20.0,
                      process_cpu_pct=60.0, device_kind="cuda", threads=None,
                      workers_demand_pct=360.0)
    assert (cpu.fraction, cpu.source, cpu.bound) == (pytest.approx(0.9), "workers' CPU demand", "cpu")
    # no workers: the loop thread wanted a core 95% of the 0.1 s step, 0.04 s of it compute
    cpu = loading_cpu(workers=0, wait_s=0.06, step_s=0.1, main_cpu_pct=25.0,
                      process_cpu_pct=25.0, device_kind="cpu", threads=1, main_demand_pct=95.0)
    assert (cpu.fraction, cpu.source) == (pytest.approx(0.55 / 0.6), "loop thread's CPU demand")
    # no workers, CPU run on 1 thread: 0.1 s steps, 0.06 s waiting; the main process used
    # 0.1 s of CPU a step: at most 0.04 s went to compute, so 0.06 s to loading → CPU-bound
    cpu = loading_cpu(workers=0, wait_s=0.06, step_s=0.1, main_cpu_pct=100.0,
                      process_cpu_pct=100.0, device_kind="cpu", threads=1)
    assert (cpu.fraction, cpu.bound) == (pytest.approx(1.0), "cpu")
    # the same with only the compute's CPU used: the loop slept while it loaded → I/O
    cpu = loading_cpu(workers=0, wait_s=0.06, step_s=0.1, main_cpu_pct=40.0,
                      process_cpu_pct=40.0, device_kind="cpu", threads=1)
    assert (cpu.fraction, cpu.bound) == (0.0, "io")
    assert loading_cpu(workers=2, wait_s=0.06, step_s=0.1, main_cpu_pct=None,
                       process_cpu_pct=None, device_kind="cpu", threads=1).bound == "unknown"


def test_io_bound_advice_goes_past_the_cores_and_carries_the_settings():
    found = loader_advice(
        wait_pct=80.0, wait_s=0.08, step_s=0.1, loader={"num_workers": 0, "pin_memory": False},
        device_kind="cpu", cpu_count=2, bursty=False, headroom=1.2,
        main_cpu_pct=20.0, process_cpu_pct=20.0, threads=1,
    )
    # a batch takes 80 ms, one is needed every 20 ms; I/O gets twice the headroom:
    # ceil(2 × 4) = 8 workers on 2 cores
    assert found.recommended == {"num_workers": 8, "prefetch_factor": 2, "pin_memory": False,
                                 "persistent_workers": True}
    assert found.advice[0] == (
        "data wait is 80% of the step with `num_workers=0`; try "
        "`DataLoader(num_workers=8, persistent_workers=True)` — expected gain up to 5×")
    assert found.advice[1] == ("loading waits on I/O: it keeps a core 0% busy while it loads "
                               "(from the main process's CPU time) — more workers than cores can help")
    assert found.loading["bound"] == "io"


def test_cpu_bound_advice_stays_within_the_cores():
    found = loader_advice(
        wait_pct=60.0, wait_s=0.06, step_s=0.1,
        loader={"num_workers": 1, "pin_memory": True, "persistent_workers": True,
                "prefetch_factor": 2},
        device_kind="cuda", cpu_count=2, bursty=False, headroom=1.2,
        main_cpu_pct=30.0, process_cpu_pct=128.0, threads=None,
    )
    assert found.loading["cpu_fraction"] == pytest.approx(0.98)
    assert found.recommended["num_workers"] == 1
    assert found.advice[0].startswith("data wait is 60% of the step with `num_workers=1` — ")
    assert not any("(persistent_workers=True)" in line for line in found.advice)
    assert any(line.startswith("workers alone cannot hide it on 2 CPU cores") for line in found.advice)


def test_settings_name_the_cli_flag_when_the_run_came_from_the_cli():
    from trainpace.diagnosis.advice import setting

    assert setting(None, "warmup", 3) == "Meter(warmup=3)"
    assert setting("run", "warmup", 3) == "`trainpace run --warmup 3`"
    assert setting("run", "window", 200) == "`trainpace run --window 200`"
    assert setting("demo", "num_workers", 2) == "`trainpace demo --workers 2`"
    assert setting("demo", "warmup", 3) == "Meter(warmup=3)"  # the demo has no such flag
    assert setting("lightning", "warmup", 3) == "TrainpaceCallback(warmup=3)"
    assert setting("hf", "window", 50) == "TrainpaceCallback(window=50)"
