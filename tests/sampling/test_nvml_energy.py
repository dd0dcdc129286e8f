"""NVML's total-energy counter through the real binding, against the fake library."""

from trainpace.measure.energy import NVML_COUNTER, NVML_POWER, energy_between
from trainpace.sampling.fake import FakeGpu, fake_pynvml
from trainpace.sampling.nvml import Nvml


def _rows(nvml, gpu, steps):
    rows = []
    for t_s, energy_mj, power_mw in steps:
        gpu.energy_mj, gpu.power_mw = energy_mj, power_mw
        rows.append({"t_s": t_s, "gpus": nvml.read()})
    return rows


def test_the_counter_is_read_in_millijoules_and_differenced():
    gpu = FakeGpu(energy_mj=5_000_000)
    fake = fake_pynvml([gpu])
    nvml = Nvml(fake.pynvml)
    nvml.open([0])
    # 300 W for 10 s: 3,000 J = 3,000,000 mJ, whatever the power readings say
    rows = _rows(nvml, gpu, [(0.0, 5_000_000, 250_000), (5.0, 6_500_000, 350_000),
                             (10.0, 8_000_000, 300_000)])
    assert rows[0]["gpus"][0]["energy_mj"] == 5_000_000
    reading = energy_between(rows, 0.0, 10.0)
    assert reading.source == NVML_COUNTER
    assert reading.power_w_mean == 300.0
    assert reading.energy_j(10.0) == 3000.0


def test_a_gpu_without_the_counter_falls_back_to_power_samples():
    gpu = FakeGpu(unsupported={"nvmlDeviceGetTotalEnergyConsumption"})
    fake = fake_pynvml([gpu])
    nvml = Nvml(fake.pynvml)
    nvml.open([0])
    rows = _rows(nvml, gpu, [(0.0, 0, 200_000), (2.0, 0, 400_000), (4.0, 0, 400_000)])
    assert rows[0]["gpus"][0]["energy_mj"] is None
    reading = energy_between(rows, 0.0, 4.0)
    assert reading.source == NVML_POWER
    # trapezoids: (200+400)/2*2 + 400*2 = 1400 J over 4 s
    assert reading.power_w_mean == 350.0
