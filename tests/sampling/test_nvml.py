"""The real NVML adapter (and the real nvidia-ml-py binding) against a fake NVML library."""

import logging
import sys

import pytest
import torch

from trainpace.errors import DeviceError, MissingDependencyError
from trainpace.sampling.fake import UNKNOWN, FakeGpu, fake_pynvml
from trainpace.sampling.nvml import (
    THROTTLE_NAMES,
    Nvml,
    decode_throttle_reasons,
    import_pynvml,
    target_for,
)

GB = 10**9


class Clock:
    def __init__(self):
        self.now = 10.0

    def __call__(self):
        return self.now


def _open(*gpus, missing=(), clock=None):
    fake = fake_pynvml(list(gpus) or [FakeGpu()], missing=missing)
    nvml = Nvml(fake.pynvml, clock=clock or Clock())
    nvml.open([0])
    return fake, nvml


def test_a_full_reading_is_decoded_through_the_real_binding():
    gpu = FakeGpu(name="NVIDIA H100 80GB HBM3", uuid="GPU-1234", memory_total=80 * GB,
                  memory_free=20 * GB, memory_reserved=1 * GB, util_gpu=97, util_memory=41,
                  temperature_c=71, slowdown_c=88, power_mw=512_345, power_limit_mw=700_000,
                  sm_clock_mhz=1755, sm_clock_max_mhz=1980, clocks_event_reasons=0x4)
    fake, nvml = _open(gpu)
    info = nvml.gpus[0]
    assert (info.index, info.uuid, info.name) == (0, "GPU-1234", "NVIDIA H100 80GB HBM3")
    assert info.memory_total_gb == 80.0
    assert info.slowdown_temperature_c == 88.0
    assert info.sm_clock_max_mhz == 1980.0
    assert info.gpm is False
    (row,) = nvml.read()
    assert row["index"] == 0
    assert row["util_pct"] == 97.0
    assert row["memory_busy_pct"] == 41.0
    assert row["memory_used_gb"] == 60.0  # total - free: reserved memory is not free either
    assert row["memory_total_gb"] == 80.0
    assert row["memory_used_pct"] == 75.0
    assert row["temperature_c"] == 71.0
    assert row["power_w"] == pytest.approx(512.345)
    assert row["power_limit_w"] == 700.0
    assert row["sm_clock_mhz"] == 1755.0
    assert row["throttle_reasons"] == ["sw_power_cap"]
    assert row["throttled"] is True
    assert row["lost"] is False
    assert "nvmlDeviceGetMemoryInfo_v2" in fake.library.calls


@pytest.mark.parametrize(
    ("mask", "names", "throttled"),
    [
        (0x0, [], False),
        (0x1, ["gpu_idle"], False),
        (0x2, ["applications_clocks_setting"], False),
        (0x4 | 0x1, ["gpu_idle", "sw_power_cap"], True),
        (0x8, ["hw_slowdown"], True),
        (0x10, ["sync_boost"], True),
        (0x20 | 0x40, ["sw_thermal_slowdown", "hw_thermal_slowdown"], True),
        (0x80, ["hw_power_brake_slowdown"], True),
        (0x100, ["display_clock_setting"], True),
        (0x200, ["board_limit"], True),
        (0x400, ["reliability"], True),
        (0x800, ["bit_0x800"], False),
        (0x1 | 0x1000, ["gpu_idle", "bit_0x1000"], False),
    ],
)
def test_throttle_bits_are_decoded_by_name(mask, names, throttled):
    assert decode_throttle_reasons(mask) == (names, throttled)


def test_every_throttle_bit_through_the_binding():
    fake, nvml = _open(FakeGpu())
    for bit, name in zip([1 << i for i in range(11)], THROTTLE_NAMES, strict=True):
        fake.gpus[0].clocks_event_reasons = bit
        assert nvml.read()[0]["throttle_reasons"] == [name]


def test_an_older_driver_falls_back_to_the_deprecated_functions():
    fake, nvml = _open(
        FakeGpu(memory_total=16 * GB, memory_free=4 * GB, clocks_event_reasons=0x20),
        missing={"nvmlDeviceGetCurrentClocksEventReasons", "nvmlDeviceGetMemoryInfo_v2"},
    )
    row = nvml.read()[0]
    assert row["throttle_reasons"] == ["sw_thermal_slowdown"]
    assert row["memory_used_pct"] == 75.0
    nvml.read()
    calls = fake.library.calls
    assert "nvmlDeviceGetCurrentClocksThrottleReasons" in calls
    assert "nvmlDeviceGetMemoryInfo" in calls
    # the missing functions were looked up once, not on every reading
    assert calls.count("nvmlDeviceGetCurrentClocksEventReasons") == 0


def test_a_metric_no_function_provides_is_null_and_logged_once(caplog):
    caplog.set_level(logging.INFO, logger="trainpace.sampling.nvml")
    _, nvml = _open(FakeGpu(clocks_event_reasons=0x4), missing={
        "nvmlDeviceGetCurrentClocksEventReasons", "nvmlDeviceGetCurrentClocksThrottleReasons"})
    for _ in range(3):
        row = nvml.read()[0]
        assert row["throttle_reasons"] is None
        assert row["throttled"] is None
        assert row["util_pct"] == 0.0
    messages = [r.getMessage() for r in caplog.records if "throttle" in r.getMessage()]
    assert len(messages) == 1
    assert "no throttle in this driver or binding" in messages[0]


def test_not_supported_turns_the_metric_off_for_that_gpu(caplog):
    caplog.set_level(logging.INFO, logger="trainpace.sampling.nvml")
    fake, nvml = _open(FakeGpu(unsupported={"nvmlDeviceGetPowerUsage"}, temperature_c=50))
    for _ in range(3):
        row = nvml.read()[0]
        assert row["power_w"] is None
        assert row["temperature_c"] == 50.0
    assert fake.library.calls.count("nvmlDeviceGetPowerUsage") == 1
    assert sum("power" in r.getMessage() for r in caplog.records) == 1


def test_an_nvml_error_on_one_call_is_null_that_time_only(caplog):
    caplog.set_level(logging.INFO, logger="trainpace.sampling.nvml")
    fake, nvml = _open(FakeGpu(temperature_c=66))
    fake.library.errors["nvmlDeviceGetTemperature"] = [UNKNOWN, UNKNOWN]
    first, second, third = (nvml.read()[0] for _ in range(3))
    assert first["temperature_c"] is None
    assert second["temperature_c"] is None
    assert third["temperature_c"] == 66.0
    assert first["util_pct"] == 0.0  # the other metrics were read
    assert sum("temperature failed" in r.getMessage() for r in caplog.records) == 1


def test_a_gpu_lost_mid_run(caplog):
    fake, nvml = _open(FakeGpu(util_gpu=90))
    assert nvml.read()[0]["util_pct"] == 90.0
    fake.gpus[0].lost = True
    calls_before = len(fake.library.calls)
    lost = nvml.read()[0]
    assert lost["lost"] is True
    assert lost["util_pct"] is None
    assert lost["memory_used_pct"] is None
    after_first = len(fake.library.calls)
    assert after_first == calls_before + 1  # the first call found it lost; the rest were skipped
    fake.gpus[0].lost = False  # a lost GPU stays lost for this run
    assert nvml.read()[0]["util_pct"] is None
    assert len(fake.library.calls) == after_first
    warnings = [r for r in caplog.records if r.levelno == logging.WARNING]
    assert [r.getMessage() for r in warnings] == [
        "trainpace: NVML says GPU 0 is lost; its readings stop"]


def test_gpm_metrics_need_two_samples_100_ms_apart():
    clock = Clock()
    fake, nvml = _open(FakeGpu(gpm={2: 62.5, 3: 30.0, 5: 44.0, 10: 71.0}), clock=clock)
    assert nvml.gpus[0].gpm is True
    first = nvml.read()[0]
    assert first["sm_util_pct"] is None  # one sample: no interval yet
    clock.now += 0.05
    assert nvml.read()[0]["dram_bw_util_pct"] is None  # too soon: no new sample taken
    clock.now += 0.1
    row = nvml.read()[0]
    assert (row["sm_util_pct"], row["sm_occupancy_pct"], row["tensor_util_pct"],
            row["dram_bw_util_pct"]) == (62.5, 30.0, 44.0, 71.0)
    assert fake.library.calls.count("nvmlGpmSampleGet") == 2


def test_a_gpm_metric_the_device_lacks_is_null():
    clock = Clock()
    _, nvml = _open(FakeGpu(gpm={2: 50.0}), clock=clock)
    nvml.read()
    clock.now += 0.2
    row = nvml.read()[0]
    assert row["sm_util_pct"] == 50.0
    assert row["dram_bw_util_pct"] is None


def test_pcie_counters_give_exact_rates_and_skip_a_wrap():
    clock = Clock()
    fake, nvml = _open(FakeGpu(pcie_tx_bytes=5 * GB, pcie_rx_bytes=1 * GB), clock=clock)
    assert nvml.read()[0]["pcie_tx_gb_s"] is None  # first reading: a baseline
    clock.now += 0.5
    fake.gpus[0].pcie_tx_bytes += 2 * GB
    fake.gpus[0].pcie_rx_bytes += GB // 2
    row = nvml.read()[0]
    assert row["pcie_tx_gb_s"] == pytest.approx(4.0)
    assert row["pcie_rx_gb_s"] == pytest.approx(1.0)
    clock.now += 0.5
    fake.gpus[0].pcie_tx_bytes = 10  # wrapped
    row = nvml.read()[0]
    assert row["pcie_tx_gb_s"] is None
    assert row["pcie_rx_gb_s"] == 0.0


def test_open_by_uuid_and_errors():
    fake = fake_pynvml([FakeGpu(uuid="GPU-a"), FakeGpu(uuid="GPU-b", util_gpu=12)])
    nvml = Nvml(fake.pynvml)
    (info,) = nvml.open(["GPU-b"])
    assert info.index == 1
    assert nvml.read()[0]["util_pct"] == 12.0
    nvml.close()
    with pytest.raises(DeviceError, match="NVML has no GPU 'GPU-zzz'"):
        Nvml(fake.pynvml).open(["GPU-zzz"])
    assert fake.library.initialized == 0  # the failed open shut NVML down again


def test_no_driver_is_a_device_error():
    fake = fake_pynvml([FakeGpu()])
    fake.library.errors["nvmlInitWithFlags"] = [9]  # NVML_ERROR_DRIVER_NOT_LOADED
    with pytest.raises(DeviceError, match=r"NVML cannot start \(Driver Not Loaded\); is the NVIDIA driver loaded\?"):
        Nvml(fake.pynvml).open([0])


def test_close_shuts_down_once_and_later_reads_are_null():
    fake = fake_pynvml([FakeGpu(gpm={2: 1.0})])
    nvml = Nvml(fake.pynvml)
    nvml.open([0])
    assert fake.library.initialized == 1
    nvml.close()
    nvml.close()
    assert fake.library.initialized == 0
    assert nvml.read()[0]["util_pct"] is None


def test_target_for_maps_cuda_indices_to_nvml():
    assert target_for(0, uuid="abcd-ef") == "GPU-abcd-ef"
    assert target_for(0, uuid="GPU-abcd") == "GPU-abcd"
    assert target_for(1, env={}) == 1
    assert target_for(None, env={}) == 0
    assert target_for(1, env={"CUDA_VISIBLE_DEVICES": "2,3"}) == 3
    assert target_for(0, env={"CUDA_VISIBLE_DEVICES": "GPU-xyz,1"}) == "GPU-xyz"
    assert target_for(0, env={"CUDA_VISIBLE_DEVICES": "MIG-abc"}) is None
    assert target_for(2, env={"CUDA_VISIBLE_DEVICES": "0,1"}) is None


def test_missing_binding_names_the_extra(monkeypatch):
    monkeypatch.setitem(sys.modules, "pynvml", None)
    with pytest.raises(MissingDependencyError, match=r"pip install 'trainpace\[nvml\]'"):
        import_pynvml()


def test_the_fake_leaves_the_real_binding_alone():
    import pynvml

    before = pynvml.nvmlLib
    fake = fake_pynvml([FakeGpu()])
    assert fake.pynvml is not pynvml
    assert pynvml.nvmlLib is before
    assert fake.pynvml.NVMLError is not pynvml.NVMLError


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_real_nvml_reads_the_current_gpu():
    nvml = Nvml()
    (info,) = nvml.open([target_for(torch.cuda.current_device(),
                                    uuid=str(torch.cuda.get_device_properties(0).uuid))])
    try:
        assert info.name == torch.cuda.get_device_name(0)
        row = nvml.read()[0]
        assert 0 <= row["util_pct"] <= 100
        assert 0 < row["memory_used_pct"] <= 100
        assert row["temperature_c"] > 0
    finally:
        nvml.close()
