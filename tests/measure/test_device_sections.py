"""The device vitals' parts on their own: a window's sections, the peaks' resolution."""

import torch

from trainpace.devices.specs import Peaks, override_peaks
from trainpace.measure.device_peaks import peaks_meta, resolve_peaks
from trainpace.measure.device_sections import Facts, sections, window_figures
from trainpace.sampling.aggregates import Aggregate


def agg(mean, lo=None, hi=None, n=10):
    return Aggregate(mean=mean, min=mean if lo is None else lo, max=mean if hi is None else hi,
                     readings=n)


def facts(kind="cuda"):
    return Facts(kind=kind, name="test device", gpu=None, threads=4, count=None, peaks=Peaks(),
                 flops_per_step=None, dtype=None)


def test_window_figures_take_the_best_bandwidth_source_of_a_gpu():
    window = {"device_util_pct": agg(80.0), "gpu.dcgm_dram_active_pct": agg(40.0),
              "gpu.memory_busy_pct": agg(30.0)}
    assert window_figures(window, "cuda") == {"device_util_pct": 80.0, "memory_used_pct": None,
                                              "temperature_c": None, "bandwidth_util_pct": 40.0}
    assert window_figures(window, "cpu")["bandwidth_util_pct"] is None  # no GPU source


def test_sections_of_a_gpu_window():
    window = {"device_util_pct": agg(75.0, 50.0, 99.0), "sampler.reading": agg(1.0, n=12),
              "gpu.throttled": agg(25.0), "gpu.throttle.sw_power_cap": agg(25.0),
              "gpu.memory_busy_pct": agg(33.0), "host.process_cpu_pct": agg(110.0, 90.0, 130.0),
              "host.system_cpu_pct": agg(60.0)}
    device, bandwidth, flops, host = sections(window, facts(), step_s=0.1, samples_per_s=10.0)
    assert (device.util_pct, device.util_pct_min, device.util_pct_max) == (75.0, 50.0, 99.0)
    assert device.util_source == "nvml_utilization_gpu" and device.samples == 12
    assert device.throttle_pct == 25.0 and device.throttle_reasons == {"sw_power_cap": 25.0}
    assert (bandwidth.util_pct, bandwidth.source) == (33.0, "nvml_memory_busy")
    assert flops.achieved_tflops is None  # no step counted
    assert (host.process_cpu_pct, host.process_cpu_pct_max, host.cpu_threads) == (110.0, 130.0, 4)
    assert host.job_cpu_pct is None  # the only rank on its host: no job figure


def test_a_rank_among_siblings_has_its_jobs_cpu_in_the_host_section():
    window = {"host.process_cpu_pct": agg(95.0), "host.job_cpu_pct": agg(190.0, 180.0, 200.0)}
    _, _, _, host = sections(window, facts("cpu"), step_s=None, samples_per_s=None)
    assert (host.process_cpu_pct, host.job_cpu_pct) == (95.0, 190.0)


def test_a_cpu_window_has_no_gpu_figures():
    device, bandwidth, _, _ = sections({"device_util_pct": agg(50.0)}, facts("cpu"),
                                       step_s=None, samples_per_s=None)
    assert device.util_source == "process_cpu" and device.throttle_pct is None
    assert bandwidth.source is None and bandwidth.memory_busy_pct is None


def test_peaks_the_user_gives_win_and_no_peaks_are_named(tmp_path, monkeypatch):
    monkeypatch.setenv("TRAINPACE_CACHE_DIR", str(tmp_path))  # no cached ceilings
    peaks, note = resolve_peaks(torch.device("cpu"), "no such cpu", None, None)
    assert not peaks.tflops and peaks.bandwidth_gb_s is None
    assert note is not None and "run `trainpace ceilings` once on this machine" in note
    user = override_peaks({"bandwidth_gb_s": 100.0})
    peaks, note = resolve_peaks(torch.device("cpu"), "no such cpu", None, user)
    assert note is None
    assert peaks_meta(peaks, note)["bandwidth_gb_s"]["value"] == 100.0
