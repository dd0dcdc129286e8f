import pytest

from trainpace.diagnose.advice import (
    duration,
    gain_if_removed,
    gain_text,
    loader_advice,
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
    )
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
    )
    # loader-bound with 2 workers: each makes a batch in 2 × 1.0 s; needed ceil(1.2 × 2 / 0.5) = 5 > 3 cores left
    assert advice[0] == (
        "data wait is 50% of the step with `num_workers=2`; try "
        "`DataLoader(num_workers=3, prefetch_factor=4)` — expected gain up to 2×"
    )
    assert advice[1].startswith("workers alone cannot hide it on 4 CPU cores: one batch takes ~2 s")
    assert "bursts" in advice[2]


def test_advice_on_cpu_does_not_pin_and_warns_about_cores():
    advice = loader_advice(
        wait_pct=60.0, wait_s=0.6, step_s=1.0, loader={"num_workers": 0},
        device_kind="cpu", cpu_count=None, bursty=False, headroom=1.2,
    )
    # ceil(1.2 × 0.6 / 0.4) = 2
    assert advice[0] == (
        "data wait is 60% of the step with `num_workers=0`; try "
        "`DataLoader(num_workers=2, persistent_workers=True)` — expected gain up to 2.5×"
    )
    assert advice[1].startswith("on a CPU-only run, workers take cores")


def test_advice_without_loader_settings_says_so():
    advice = loader_advice(
        wait_pct=25.0, wait_s=0.25, step_s=1.0, loader=None,
        device_kind="cuda", cpu_count=None, bursty=False, headroom=1.2,
    )
    assert "settings were not recorded" in advice[0]
    assert advice[1] == (
        "the loader must deliver a batch every 750 ms (the step's time outside the loader); "
        "each worker makes one batch at a time"
    )
