"""The Prometheus exporter, scraped over the loopback while the run goes on."""

import logging
import socket
import time
import urllib.error
import urllib.request

import pytest
import torch

import trainpace

pytest.importorskip("prometheus_client")
from prometheus_client.parser import text_string_to_metric_families


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def scrape(port: int) -> dict[tuple[str, str], float]:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as response:
        text = response.read().decode()
    return {(sample.name, sample.labels.get("rank", "")): sample.value
            for family in text_string_to_metric_families(text) for sample in family.samples}


def scrape_until(port: int, name: str, value: float, timeout_s: float = 60.0) -> dict:
    """The window is published by the Meter's writer thread: scrape until it is there."""
    deadline = time.monotonic() + timeout_s
    while True:
        found = scrape(port)
        if found.get((name, "job")) == value or time.monotonic() > deadline:
            return found
        time.sleep(0.02)


def test_gauges_are_scraped_during_the_run_and_the_exporter_stops_at_the_end(clock):
    port = free_port()
    meter = trainpace.Meter(prometheus=port, window=10, clock=clock, console=False,
                            report=False, count_flops=False, warmup=0)
    scraped = []
    for i, batch in enumerate(meter.loader([torch.zeros(8, 2)] * 25)):
        with meter.step(batch):
            clock.advance(0.02 if i < 10 else 0.04)
            meter.observe(loss=2.0)
        if i in (10, 20):  # the window just ended was handed over when this step began
            scraped.append(scrape_until(port, "trainpace_step", 10.0 * (len(scraped) + 1)))
    first, second = scraped  # a single process is a job of one: rank="job"
    assert first[("trainpace_step", "job")] == 10
    assert first[("trainpace_throughput_samples_per_s", "job")] == pytest.approx(400.0)
    assert first[("trainpace_time_step_median_ms", "job")] == pytest.approx(20.0)
    assert first[("trainpace_loss_window_mean", "job")] == pytest.approx(2.0)
    assert ("trainpace_throughput_tokens_per_s", "job") not in first  # not measured: no sample
    assert second[("trainpace_throughput_samples_per_s", "job")] == pytest.approx(200.0)
    meter.finish()
    with pytest.raises(urllib.error.URLError):
        scrape(port)


def test_a_port_in_use_is_one_warning_and_training_goes_on(clock, caplog):
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        with caplog.at_level(logging.WARNING, logger="trainpace"):
            meter = trainpace.Meter(prometheus=port, window=5, clock=clock, console=False,
                                    report=False, count_flops=False)
            for batch in meter.loader([torch.zeros(4, 2)] * 12):
                with meter.step(batch):
                    clock.advance(0.01)
            summary = meter.finish()
    assert summary.steps.total == 12
    warnings = [r.getMessage() for r in caplog.records if "Prometheus" in r.getMessage()]
    assert len(warnings) == 1 and f"127.0.0.1:{port}" in warnings[0]


@pytest.mark.parametrize(("options", "message"), [
    ({"prometheus": "9100"}, "prometheus must be a TCP port"),
    ({"prometheus": 70000}, "prometheus must be a TCP port"),
    ({"prometheus": True}, "prometheus must be a TCP port"),
    ({"prometheus_host": "0.0.0.0"}, "prometheus_host needs prometheus=PORT"),
])
def test_bad_options_are_config_errors(options, message):
    with pytest.raises(trainpace.ConfigError, match=message):
        trainpace.Meter(console=False, **options)


def test_a_job_window_serves_the_job_and_each_rank_under_its_rank_label():
    from trainpace.runlog import Record
    from trainpace.sinks.prometheus import PrometheusSink

    sink = PrometheusSink(0)
    job = {"last_step": 40, "ranks": 2, "world_size": 2, "samples_per_s": 300.0,
           "rank_figures": {0: {"samples_per_s": 160.0, "wait_pct": 5.0},
                            1: {"samples_per_s": 150.0, "wait_pct": 25.0}}}
    try:
        sink.log(Record("window", {"window": job, "steps": []}, 40))
        found = scrape(sink.port)
        assert found[("trainpace_throughput_samples_per_s", "job")] == 300.0
        assert found[("trainpace_throughput_samples_per_s", "0")] == 160.0
        assert found[("trainpace_throughput_samples_per_s", "1")] == 150.0
        assert found[("trainpace_data_wait_pct", "1")] == 25.0
        assert found[("trainpace_job_ranks_reporting", "job")] == 2.0
        assert found[("trainpace_step", "job")] == 40.0
        # rank 1 is gone from the next window: its series go, none stays stale
        job2 = {"last_step": 80, "ranks": 1, "world_size": 2, "samples_per_s": 170.0,
                "rank_figures": {0: {"samples_per_s": 170.0}}}
        sink.log(Record("window", {"window": job2, "steps": []}, 80))
        found = scrape(sink.port)
        assert found[("trainpace_throughput_samples_per_s", "job")] == 170.0
        assert ("trainpace_throughput_samples_per_s", "1") not in found
        assert ("trainpace_data_wait_pct", "0") not in found
    finally:
        sink.close()
