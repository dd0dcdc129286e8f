"""The Meter's cost section: money from the price given, energy only from a measured source."""

import pytest
import torch

import trainpace


def test_the_meter_prices_its_steady_throughput_and_names_the_missing_energy_source(tmp_path):
    seen = []

    class Windows:
        def log(self, record):
            if record.kind == "window":
                seen.append(record.data["window"])

        def close(self):
            pass

    meter = trainpace.Meter(tmp_path / "run", window=10, warmup=2, price_per_hour=4.0,
                            count_flops=False, console=False, report=False, sinks=[Windows()])
    for x in meter.loader([torch.ones(16, 4) for _ in range(30)]):
        with meter.step(x):
            x.sum()
    summary = meter.finish()
    cost = summary.cost
    assert cost.price_per_hour == 4.0 and cost.devices == 1
    assert cost.usd_per_million_samples == pytest.approx(
        4.0 / 3600 / summary.throughput.samples_per_s * 1e6)
    assert cost.usd_total == pytest.approx(4.0 / 3600 * summary.time.wall_s)
    assert cost.usd_per_million_tokens is None and cost.co2_kg is None
    # a machine without an energy counter (this one): null, and which sources were looked for
    if cost.energy_source is None:
        assert cost.energy_j is None and cost.kwh is None
        assert "NVML" in cost.energy_missing and "RAPL" in cost.energy_missing
    window = seen[-1]
    assert window["usd_per_million_samples"] == pytest.approx(
        4.0 / 3600 / window["samples_per_s"] * 1e6)


@pytest.mark.parametrize("key", ["price_per_hour", "grid_g_per_kwh", "rated_power_w"])
def test_a_bad_price_is_refused_when_the_meter_is_made(key):
    with pytest.raises(trainpace.ConfigError, match=key):
        trainpace.Meter(**{key: -3.0})
