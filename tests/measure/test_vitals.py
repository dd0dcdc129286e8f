import logging
import sys
import time

import pytest
import torch

from trainpace.devices.specs import Peak, Peaks
from trainpace.errors import ConfigError
from trainpace.measure.vitals import DeviceVitals, default_interval_s
from trainpace.sampling.fake import FakeGpu, fake_pynvml
from trainpace.sampling.host import HOST_KEYS

GB = 10**9


class Clock:
    def __init__(self):
        self.now = 1000.0

    def __call__(self):
        return self.now


class ScriptedHost:
    def __init__(self, **values):
        self.values = dict.fromkeys(HOST_KEYS) | values

    def read(self):
        return dict(self.values)


class FakeDcgm:
    def __init__(self, values):
        self.values = values

    def GetLatestGpuValuesAsFieldIdDict(self):  # noqa: N802 - DCGM's name
        return self.values

    def Shutdown(self):  # noqa: N802 - DCGM's name
        pass


def _cpu_vitals(clock, host, **kwargs):
    vitals = DeviceVitals(device="cpu", clock=clock, t0=1000.0, host=host, **kwargs)
    vitals._sampler.stop(final_reading=False)  # no thread: the tests drive readings
    vitals.start()
    return vitals


def _tick(vitals, clock, seconds):
    clock.now += seconds
    return vitals.sample_once()


def test_cpu_util_is_the_process_cpu_against_torch_threads():
    clock = Clock()
    threads = torch.get_num_threads()
    host = ScriptedHost(main_cpu_pct=50.0 * threads, process_cpu_pct=80.0 * threads,
                        system_cpu_pct=40.0, rss_gb=2.0, available_gb=10.0,
                        memory_total_gb=16.0, memory_used_pct=37.5, workers=2)
    vitals = _cpu_vitals(clock, host)
    row = _tick(vitals, clock, 1.0)
    assert row["t_s"] == 1.0
    assert row["device_util_pct"] == 50.0
    assert row["memory_used_pct"] == 37.5
    assert row["temperature_c"] is None
    assert row["bandwidth_util_pct"] is None
    assert row["gpus"] == []
    assert row["host"]["workers"] == 2
    host.values["main_cpu_pct"] = 300.0 * threads  # more threads than torch's: capped
    assert _tick(vitals, clock, 1.0)["device_util_pct"] == 100.0
    device, bandwidth, flops, host_section = vitals.sections(
        t_start_s=0.0, t_end_s=2.0, step_s=None, samples_per_s=None)
    assert device.kind == "cpu"
    assert device.util_pct == 75.0  # 50% for 1 s, 100% for 1 s (sampling began at t_s 0)
    assert (device.util_pct_min, device.util_pct_max) == (50.0, 100.0)
    assert device.util_source == "process_cpu"
    assert device.memory_used_pct == 37.5
    assert device.memory_total_gb == 16.0
    assert device.samples == 2
    assert device.throttle_pct is None
    assert device.temperature_c is None
    assert host_section.cpu_threads == threads
    assert host_section.process_cpu_pct == 80.0 * threads
    assert host_section.system_cpu_pct == 40.0
    assert host_section.rss_gb == 2.0
    assert bandwidth.source is None
    assert flops.per_step is None
    assert [r["t_s"] for r in vitals.drain_rows()] == [1.0, 2.0]


def test_mps_has_no_utilization_figures_of_its_own():
    clock = Clock()
    vitals = DeviceVitals(device="mps", clock=clock, t0=1000.0,
                          host=ScriptedHost(main_cpu_pct=90.0, memory_used_pct=50.0))
    vitals._sampler.stop(final_reading=False)  # no thread: the tests drive readings
    vitals.start()
    row = _tick(vitals, clock, 1.0)
    assert row["device_util_pct"] is None
    assert row["memory_used_pct"] is None
    device, _, _, _ = vitals.sections(t_start_s=0, t_end_s=1, step_s=None, samples_per_s=None)
    assert (device.kind, device.util_pct, device.util_source) == ("mps", None, None)


def test_counted_flops_give_mfu_and_the_estimated_bandwidth():
    clock = Clock()
    peaks = {"bandwidth_gb_s": 10.0, "tflops": {"float32": 0.001}}
    vitals = _cpu_vitals(clock, ScriptedHost(), peaks=peaks)
    n = 64
    a, b = torch.randn(n, n), torch.randn(n, n)
    with vitals.flop_counter(samples=8):
        a @ b
    with vitals.flop_counter():  # only the first step is counted
        a @ b @ b
    count = vitals.step_count
    assert count.flops == 2 * n**3
    assert count.samples == 8
    step_s = 2 * n**3 / 0.25e9  # a step that runs at 0.25 GFLOP/s: 25% of the peak
    _, bandwidth, flops, _ = vitals.sections(t_start_s=0.0, t_end_s=1.0, step_s=step_s,
                                             samples_per_s=None)
    assert flops.mfu_pct == pytest.approx(25.0)
    assert flops.peak_source == "override"
    assert flops.dtype == "float32"
    assert flops.source == "counted"
    assert bandwidth.source == "estimate"
    achieved = 3 * n * n * 4 / step_s / 1e9
    assert bandwidth.achieved_gb_s == pytest.approx(achieved)
    assert bandwidth.util_pct == pytest.approx(10 * achieved)
    assert bandwidth.estimate_util_pct == bandwidth.util_pct
    # samples_per_s wins over step_s when the counted step's samples are known
    _, _, flops, _ = vitals.sections(t_start_s=0.0, t_end_s=1.0, step_s=1.0,
                                     samples_per_s=8 / step_s)
    assert flops.mfu_pct == pytest.approx(25.0)


def test_a_failed_step_is_not_counted_and_the_next_one_is():
    vitals = _cpu_vitals(Clock(), ScriptedHost())
    x = torch.ones(4, 4)
    with pytest.raises(RuntimeError, match="oom"), vitals.flop_counter():
        x @ x
        raise RuntimeError("oom")
    assert vitals.step_count is None
    with vitals.flop_counter():
        x @ x
    assert vitals.step_count.flops == 2 * 4**3


def test_count_flops_false_and_user_flops():
    vitals = _cpu_vitals(Clock(), ScriptedHost(), count_flops=False, flops_per_step=1e9,
                         dtype="float32", peaks={"tflops": {"float32": 0.01}})
    with vitals.flop_counter():
        torch.ones(2) @ torch.ones(2)
    assert vitals.step_count is None
    _, _, flops, _ = vitals.sections(t_start_s=0, t_end_s=1, step_s=0.5, samples_per_s=None)
    assert flops.per_step == 1e9
    assert flops.source == "user"
    assert flops.mfu_pct == pytest.approx(20.0)


def _cuda_vitals(clock, gpu, **kwargs):
    fake = fake_pynvml([gpu], clock_us=lambda: int(clock.now * 1e6))
    vitals = DeviceVitals(device="cuda", clock=clock, t0=1000.0, nvml=fake.pynvml,
                          host=ScriptedHost(), **kwargs)
    vitals._sampler.stop(final_reading=False)  # no thread: the tests drive readings
    vitals.start()
    return fake, vitals


def test_cuda_readings_from_nvml_fill_the_device_section():
    clock = Clock()
    gpu = FakeGpu(name="NVIDIA H100 80GB HBM3", util_gpu=90, util_memory=30,
                  memory_total=80 * GB, memory_free=40 * GB, temperature_c=70, slowdown_c=87,
                  power_mw=600_000, power_limit_mw=700_000, sm_clock_mhz=1800,
                  sm_clock_max_mhz=1980)
    fake, vitals = _cuda_vitals(clock, gpu, dcgm=False)
    row = _tick(vitals, clock, 1.0)
    assert row["device_util_pct"] == 90.0
    assert row["memory_used_pct"] == 50.0
    assert row["temperature_c"] == 70.0
    assert row["bandwidth_util_pct"] == 30.0
    assert row["bandwidth_source"] == "nvml_memory_busy"
    assert row["gpus"][0]["power_w"] == 600.0
    gpu.util_gpu, gpu.temperature_c, gpu.clocks_event_reasons = 50, 80, 0x4 | 0x20
    _tick(vitals, clock, 1.0)
    gpu.clocks_event_reasons = 0
    _tick(vitals, clock, 2.0)
    device, bandwidth, _, _ = vitals.sections(t_start_s=0.0, t_end_s=4.0, step_s=None,
                                              samples_per_s=None)
    assert device.kind == "cuda"
    assert device.name == "NVIDIA H100 80GB HBM3"
    assert device.index == 0
    assert device.util_pct == pytest.approx((90 + 50 + 50 * 2) / 4)
    assert device.util_source == "nvml_utilization_gpu"
    assert device.temperature_c == pytest.approx((70 + 80 + 80 * 2) / 4)
    assert device.temperature_c_max == 80.0
    assert device.slowdown_temperature_c == 87.0
    assert device.throttle_pct == 25.0  # one second of four
    assert device.throttle_reasons == {"sw_power_cap": 25.0, "sw_thermal_slowdown": 25.0}
    assert device.power_w == 600.0
    assert device.power_limit_w == 700.0
    assert device.sm_clock_mhz == 1800.0
    assert device.sm_clock_max_mhz == 1980.0
    assert device.memory_used_gb == 40.0
    assert device.memory_total_gb == 80.0
    assert device.samples == 3
    assert device.activity_source is None
    assert bandwidth.source == "nvml_memory_busy"
    assert bandwidth.util_pct == 30.0
    assert bandwidth.memory_busy_pct == 30.0
    # the name resolves in the spec table
    assert bandwidth.peak_gb_s == 3350
    assert bandwidth.peak_source.startswith("specs: NVIDIA H100 SXM (")
    vitals.stop()
    assert fake.library.initialized == 0


def test_gpm_dram_utilization_is_the_preferred_bandwidth_source():
    clock = Clock()
    gpu = FakeGpu(util_memory=30, gpm={2: 60.0, 3: 20.0, 5: 40.0, 10: 55.0})
    _, vitals = _cuda_vitals(clock, gpu)
    _tick(vitals, clock, 0.5)  # first GPM sample: no metrics yet
    _tick(vitals, clock, 0.5)
    device, bandwidth, _, _ = vitals.sections(t_start_s=0.5, t_end_s=1.0, step_s=None,
                                              samples_per_s=None)
    assert bandwidth.source == "nvml_gpm_dram_bw_util"
    assert bandwidth.util_pct == 55.0
    assert bandwidth.memory_busy_pct == 30.0
    assert device.activity_source == "nvml_gpm"
    assert (device.sm_active_pct, device.sm_occupancy_pct, device.tensor_active_pct) == (
        60.0, 20.0, 40.0)


def test_dcgm_fields_fill_in_where_gpm_is_absent():
    clock = Clock()
    reader = FakeDcgm({0: {1002: 0.7, 1003: 0.3, 1004: 0.1, 1005: 0.45}})
    _, vitals = _cuda_vitals(clock, FakeGpu(util_memory=30), dcgm=reader)
    row = _tick(vitals, clock, 1.0)
    assert row["bandwidth_source"] == "dcgm_dram_active"
    assert row["gpus"][0]["dcgm_dram_active_pct"] == 45.0
    device, bandwidth, _, _ = vitals.sections(t_start_s=0, t_end_s=1, step_s=None,
                                              samples_per_s=None)
    assert bandwidth.source == "dcgm_dram_active"
    assert bandwidth.util_pct == 45.0
    assert device.activity_source == "dcgm"
    assert device.sm_active_pct == 70.0
    assert device.sm_occupancy_pct == 30.0
    assert device.tensor_active_pct == pytest.approx(10.0)


def test_a_gpu_lost_mid_run_leaves_its_figures_null_afterwards():
    clock = Clock()
    fake, vitals = _cuda_vitals(clock, FakeGpu(util_gpu=80), dcgm=False)
    _tick(vitals, clock, 1.0)
    fake.gpus[0].lost = True
    row = _tick(vitals, clock, 1.0)
    assert row["gpus"][0]["lost"] is True
    assert row["device_util_pct"] is None
    device, _, _, _ = vitals.sections(t_start_s=0, t_end_s=2, step_s=None, samples_per_s=None)
    assert device.util_pct == 80.0  # the second second is unknown, not zero
    late, _, _, _ = vitals.sections(t_start_s=1.5, t_end_s=2, step_s=None, samples_per_s=None)
    assert late.util_pct is None


def test_start_never_raises_when_nvml_cannot_start(caplog):
    fake = fake_pynvml([FakeGpu()])
    fake.library.errors["nvmlInitWithFlags"] = [9]
    clock = Clock()
    vitals = DeviceVitals(device="cuda", clock=clock, t0=1000.0, nvml=fake.pynvml,
                          host=ScriptedHost(rss_gb=1.0))
    vitals._sampler.stop(final_reading=False)  # no thread: the tests drive readings
    vitals.start()
    row = _tick(vitals, clock, 1.0)
    assert row["gpus"] == []
    assert row["device_util_pct"] is None
    assert row["host"]["rss_gb"] == 1.0
    device, _, _, host = vitals.sections(t_start_s=0, t_end_s=1, step_s=None,
                                         samples_per_s=None)
    assert device.kind == "cuda"
    assert device.util_pct is None
    assert host.rss_gb == 1.0
    assert any("opening NVML failed (DeviceError: NVML cannot start" in r.getMessage()
               for r in caplog.records)


def test_a_missing_nvml_binding_names_the_extra(monkeypatch, caplog):
    monkeypatch.setitem(sys.modules, "pynvml", None)
    vitals = DeviceVitals(device="cuda", t0=0.0, host=False)
    vitals.start()
    vitals.stop()
    assert any("pip install 'trainpace[nvml]'" in r.getMessage() for r in caplog.records)


def test_unknown_peaks_are_named_in_meta(tmp_path, monkeypatch, caplog):
    caplog.set_level(logging.INFO, logger="trainpace.measure")
    monkeypatch.setenv("TRAINPACE_CACHE_DIR", str(tmp_path))  # no cached ceilings
    vitals = _cpu_vitals(Clock(), ScriptedHost())
    meta = vitals.meta()
    assert meta["peaks"]["tflops"] == {}
    assert "run `trainpace ceilings` once on this machine" in meta["peaks"]["note"]
    assert meta["sampler"]["sources"] == {"host": True, "nvml": False, "gpm": False,
                                          "dcgm": False}
    assert meta["gpu"] is None


def test_cached_ceilings_are_the_cpu_peaks(tmp_path, monkeypatch):
    from trainpace.devices.ceilings import Ceilings, device_identity, save_ceilings

    monkeypatch.setenv("TRAINPACE_CACHE_DIR", str(tmp_path))
    kind, name, threads = device_identity("cpu")
    save_ceilings(Ceilings(kind=kind, name=name, threads=threads, bandwidth_gb_s=20.0,
                           matmul_tflops={"float32": 0.5}, measured_at="2026-02-03T00:00:00",
                           method={"quiet": True}))
    vitals = _cpu_vitals(Clock(), ScriptedHost())
    assert vitals.meta()["peaks"]["tflops"]["float32"]["value"] == 0.5
    assert vitals.meta()["peaks"]["note"] is None
    # a user override replaces one figure and keeps the rest
    vitals = _cpu_vitals(Clock(), ScriptedHost(), peaks=Peaks(tflops={"float32": Peak(1.0, "me")}))
    assert vitals.meta()["peaks"]["tflops"]["float32"] == {"value": 1.0, "source": "me"}
    assert vitals.meta()["peaks"]["bandwidth_gb_s"]["value"] == 20.0


def test_the_real_thread_with_real_sources():
    vitals = DeviceVitals(device="cpu", interval_s=0.02)
    vitals.start(t0=time.perf_counter() - 5.0)  # the run began 5 s before sampling
    rows = []
    deadline = time.monotonic() + 60  # three readings: waited for, however slow the machine
    while len(rows) < 3 and time.monotonic() < deadline:
        time.sleep(0.02)
        rows += vitals.drain_rows()
    vitals.stop()
    rows += vitals.drain_rows()
    assert len(rows) >= 3
    assert rows[0]["t_s"] >= 5.0
    assert all(r["gpus"] == [] for r in rows)
    assert rows[-1]["host"]["rss_gb"] > 0
    device, _, _, host = vitals.sections(t_start_s=5.0, t_end_s=rows[-1]["t_s"], step_s=None,
                                         samples_per_s=None)
    assert device.util_pct is not None
    assert 0.0 <= device.util_pct <= 100.0
    assert host.rss_gb > 0


def test_the_period_follows_what_is_read():
    # NVML's gauges at 10 Hz; the host's counters alone once a second; the user's, as given
    assert default_interval_s("cuda:1") == 0.1
    assert default_interval_s("cpu") == default_interval_s(torch.device("mps")) == 1.0
    assert DeviceVitals(device="cpu", t0=0.0, nvml=False).interval_s == 1.0
    cuda = DeviceVitals(device="cuda", t0=0.0, nvml=fake_pynvml([FakeGpu()]))
    assert cuda.interval_s == 0.1
    assert cuda.meta()["sampler"]["interval_s"] == 0.1
    assert DeviceVitals(device="cpu", t0=0.0, interval_s=0.02).interval_s == 0.02


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"flops_per_step": 0}, "flops_per_step must be a number > 0, got 0"),
        ({"flops_per_step": True}, "flops_per_step must be a number > 0"),
        ({"interval_s": 0}, "interval_s must be a number of seconds > 0"),
        ({"peaks": {"tflops": {"bf16": -1}}}, "peaks.tflops.bf16 must be a positive number"),
    ],
)
def test_bad_arguments_are_config_errors(kwargs, message):
    with pytest.raises(ConfigError, match=message):
        DeviceVitals(device="cpu", t0=0.0, **kwargs)


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_real_gpu_vitals():
    pytest.importorskip("pynvml")
    t0 = time.perf_counter()
    vitals = DeviceVitals(device="cuda", interval_s=0.05, t0=t0)
    vitals.start()
    x = torch.randn(4096, 4096, device="cuda", dtype=torch.bfloat16)
    with vitals.flop_counter():
        y = x @ x
    deadline = time.perf_counter() + 1.0
    while time.perf_counter() < deadline:
        y = x @ x
    torch.cuda.synchronize()
    vitals.stop()
    device, bandwidth, flops, _ = vitals.sections(
        t_start_s=0.0, t_end_s=time.perf_counter() - t0, step_s=None, samples_per_s=None)
    assert y.shape == x.shape
    assert device.name == torch.cuda.get_device_name()
    assert device.util_pct > 10
    assert device.memory_used_pct > 0
    assert bandwidth.source is not None
    assert flops.per_step == 2 * 4096**3
    assert flops.dtype == "bfloat16"


def test_window_figures_are_the_headline_means_of_the_window():
    import time as _time

    vitals = DeviceVitals(device="cpu", t0=_time.perf_counter(), count_flops=False)
    vitals.start()
    for _ in range(3):
        vitals.sample_once()
    figures = vitals.window_figures(0.0, 1e9)
    vitals.stop()
    assert set(figures) == {"device_util_pct", "memory_used_pct", "temperature_c",
                            "bandwidth_util_pct"}
    assert figures["memory_used_pct"] is not None
    assert figures["temperature_c"] is None  # no CPU temperature source
    assert figures["bandwidth_util_pct"] is None


@pytest.mark.parametrize("kind", ["cuda", "cpu"])
def test_a_windows_signs_are_the_sections_figures(kind):
    """What a rank sends the others of a window (dist's signs) is the sections' own figures
    over the same span, made without the sections."""
    clock = Clock()
    host = ScriptedHost(process_cpu_pct=150.0, system_cpu_pct=60.0, main_cpu_pct=90.0)
    if kind == "cuda":
        gpu = FakeGpu(util_gpu=90, temperature_c=70)
        fake = fake_pynvml([gpu], clock_us=lambda: int(clock.now * 1e6))
        vitals = DeviceVitals(device="cuda", clock=clock, t0=1000.0, nvml=fake.pynvml,
                              host=host, dcgm=False)
        vitals._sampler.stop(final_reading=False)  # no thread: the tests drive readings
        vitals.start()
    else:
        vitals = _cpu_vitals(clock, host)
    _tick(vitals, clock, 1.0)
    if kind == "cuda":
        gpu.util_gpu, gpu.temperature_c, gpu.clocks_event_reasons = 50, 80, 0x4
    host.values.update(process_cpu_pct=50.0, system_cpu_pct=90.0, main_cpu_pct=30.0)
    _tick(vitals, clock, 1.0)
    _tick(vitals, clock, 2.0)
    device, _, _, found = vitals.sections(t_start_s=0.5, t_end_s=4.0, step_s=None,
                                          samples_per_s=None)
    signs = vitals.window_signs(0.5, 4.0)
    assert signs == {"util_pct": device.util_pct, "temperature_c": device.temperature_c,
                     "throttle_pct": device.throttle_pct,
                     "process_cpu_pct": found.process_cpu_pct,
                     "system_cpu_pct": found.system_cpu_pct}
    assert signs["process_cpu_pct"] == pytest.approx((150 * 0.5 + 50 * 3) / 3.5)
    assert signs["throttle_pct"] == (None if kind == "cpu" else pytest.approx(3 / 3.5 * 100))
    vitals.stop()
