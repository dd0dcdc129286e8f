"""Money and energy arithmetic against given prices and measured power."""

import dataclasses

import pytest

from trainpace.errors import ConfigError
from trainpace.measure.cost import cost_of, savings
from trainpace.measure.energy import EnergyReading
from trainpace.summary import Summary, Throughput, Time


def _summary(*, samples_per_s=1000.0, tokens_per_s=500_000.0, wall_s=7200.0, measured_s=7000.0,
             time_to_target_s=3600.0, world_size=1):
    return Summary(world_size=world_size,
                   throughput=Throughput(samples_per_s=samples_per_s, tokens_per_s=tokens_per_s),
                   time=Time(wall_s=wall_s, measured_s=measured_s,
                             time_to_target_s=time_to_target_s))


def test_money_follows_the_price_per_device_hour():
    cost = cost_of(_summary(world_size=8), price_per_hour=3.0)
    assert cost.devices == 8
    assert cost.usd_total == pytest.approx(3.0 * 8 * 2)  # two hours on 8 devices
    assert cost.usd_to_target == pytest.approx(3.0 * 8)  # one hour
    # $24/h over 500k tok/s: 24 / 3600 / 5e5 * 1e6
    assert cost.usd_per_million_tokens == pytest.approx(24 / 3600 / 5e5 * 1e6)
    assert cost.usd_per_million_samples == pytest.approx(24 / 3600 / 1000 * 1e6)


def test_energy_and_co2_come_from_the_measured_power_and_the_given_grid():
    energy = EnergyReading(power_w_mean=400.0, source="nvml_total_energy", span_s=7000.0)
    cost = cost_of(_summary(), energy=energy, grid_g_per_kwh=250.0)
    assert cost.energy_source == "nvml_total_energy"
    assert cost.energy_j == 400.0 * 7000.0
    assert cost.kwh == pytest.approx(400.0 * 7000.0 / 3.6e6)
    assert cost.co2_kg == pytest.approx(cost.kwh * 0.25)
    assert cost.energy_j_per_sample == pytest.approx(0.4)
    assert cost.energy_j_per_million_tokens == pytest.approx(400.0 / 5e5 * 1e6)
    assert not cost.energy_is_estimate


def test_nothing_is_invented_without_a_price_a_source_or_a_grid():
    cost = cost_of(_summary(), energy=EnergyReading(missing="no energy source: ..."))
    values = dataclasses.asdict(cost)
    for key in ("price_per_hour", "usd_total", "usd_per_million_tokens", "usd_to_target",
                "energy_j", "energy_j_per_sample", "power_w_mean", "energy_source", "kwh",
                "co2_kg", "grid_g_per_kwh"):
        assert values[key] is None, key
    assert cost.energy_missing == "no energy source: ..."


def test_a_rated_power_is_used_only_when_asked_and_labelled_an_estimate():
    cost = cost_of(_summary(world_size=2), rated_power_w=300.0,
                   energy=EnergyReading(missing="none"))
    assert cost.energy_source == "rated_power"
    assert cost.energy_is_estimate
    assert cost.power_w_mean == 600.0


def test_a_measured_source_wins_over_a_rated_power():
    cost = cost_of(_summary(), rated_power_w=300.0,
                   energy=EnergyReading(power_w_mean=123.0, source="rapl"))
    assert cost.energy_source == "rapl" and cost.power_w_mean == 123.0


@pytest.mark.parametrize("value", [-1.0, float("nan"), float("inf"), "3", True])
def test_a_bad_price_is_a_config_error_naming_it(value):
    with pytest.raises(ConfigError, match="price_per_hour"):
        cost_of(_summary(), price_per_hour=value)


def test_the_faster_run_saves_money_per_run_and_per_token():
    a = _summary(time_to_target_s=3600.0, tokens_per_s=400_000.0)
    b = _summary(time_to_target_s=2952.0, tokens_per_s=500_000.0)  # 18% sooner
    power = EnergyReading(power_w_mean=300.0, source="nvml_total_energy")
    a = dataclasses.replace(a, cost=cost_of(a, price_per_hour=3.0, energy=power))
    b = dataclasses.replace(b, cost=cost_of(b, price_per_hour=3.0, energy=power))
    saved = savings(b, a)
    assert saved.sooner_pct == pytest.approx(18.0)
    assert saved.usd_per_run == pytest.approx(3.0 * (3600 - 2952) / 3600)
    assert saved.usd_per_million_tokens == pytest.approx(
        3.0 / 3600 / 4e5 * 1e6 - 3.0 / 3600 / 5e5 * 1e6)
    assert saved.kwh_per_run == pytest.approx(300.0 * (3600 - 2952) / 3.6e6)


def test_a_cpu_job_is_priced_per_host_and_a_gpu_job_per_device():
    from trainpace.summary import Device, RankEntry

    # 4 DDP processes on one CPU host: one host's price and power, not four
    ranks = [RankEntry(rank=r, host="node-a") for r in range(4)]
    cpu = dataclasses.replace(_summary(), world_size=4, ranks=ranks, device=Device(kind="cpu"))
    cost = cost_of(cpu, price_per_hour=3.6, rated_power_w=200.0)
    assert cost.devices == 1
    assert cost.power_w_mean == 200.0
    assert cost.usd_per_million_samples == pytest.approx(3.6 / 3600 / 1000 * 1e6)
    two_hosts = dataclasses.replace(cpu, ranks=[*ranks[:2], *(RankEntry(rank=r, host="node-b")
                                                             for r in (2, 3))])
    assert cost_of(two_hosts, price_per_hour=3.6).devices == 2
    gpu = dataclasses.replace(cpu, device=Device(kind="cuda"))
    assert cost_of(gpu, price_per_hour=3.6, rated_power_w=200.0).devices == 4
    assert cost_of(gpu, price_per_hour=3.6, rated_power_w=200.0).power_w_mean == 800.0
