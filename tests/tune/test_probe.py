"""The dataset timed in the main process: cost per sample, where it goes, size, faults."""

from __future__ import annotations

import pytest
import torch

from trainpace.tune import DatasetError
from trainpace.tune.loader_source import as_source
from trainpace.tune.probe import probe, tensor_bytes
from tune.fakes import ManualHost, Timed
from tune.loaders import Huge, Sleepy


def _probe(dataset, batch=8, max_s=5.0, budget=1e12, collate_fn=None, clock=None):
    source = as_source(dataset, batch_size=batch, collate_fn=collate_fn)
    if clock is None:
        return probe(source, max_s=max_s, memory_budget_bytes=budget)
    return probe(source, max_s=max_s, memory_budget_bytes=budget, clock=clock)


def test_sleeping_samples_are_waiting_not_cpu():
    host = ManualHost()
    p = _probe(Timed(host, 0.004), clock=host.clock)
    assert p.samples == 8
    assert p.sample_s == pytest.approx(0.004)
    assert p.sample_cpu_s == 0.0
    assert p.sample_wait_s == pytest.approx(0.004)
    assert p.cpu_share == 0.0
    assert p.collate_s == 0.0  # collate takes no time on this clock
    assert p.batch_s == pytest.approx(8 * 0.004)
    assert p.sample_bytes == 8 * 4          # torch.full((8,), float): 8 float32
    assert p.batch_bytes == 8 * 8 * 4


def test_spinning_samples_are_cpu():
    host = ManualHost()
    p = _probe(Timed(host, 0.003, cpu_s=0.003), clock=host.clock)
    assert p.sample_cpu_s == pytest.approx(0.003)
    assert p.sample_wait_s == pytest.approx(0.0, abs=1e-12)
    assert p.cpu_share == pytest.approx(1.0)


def test_time_waiting_for_a_core_is_neither_cpu_nor_waiting():
    # 4 ms a sample: 1 ms on the CPU, 1 ms ready but without a core (a busy machine), 2 ms I/O
    host = ManualHost()
    p = _probe(Timed(host, 0.004, cpu_s=0.001, runq_s=0.001), clock=host.clock)
    assert p.sample_runq_s == pytest.approx(0.001)
    assert p.sample_wait_s == pytest.approx(0.002)
    assert p.cpu_share == pytest.approx(1 / 3)


def test_the_first_sample_is_left_out_once_there_are_others():
    host = ManualHost()

    class ColdStart(Timed):
        def __getitem__(self, index):
            if index == 0:
                host.sleep(1.0)  # opens its files
            return super().__getitem__(index)

    p = _probe(ColdStart(host, 0.002), clock=host.clock)
    assert p.samples == 8
    assert p.sample_s == pytest.approx(0.002)


def test_the_time_limit_stops_the_probe_after_one_sample_at_least():
    host = ManualHost()
    p = _probe(Timed(host, 0.05), batch=64, max_s=0.01, clock=host.clock)
    assert p.samples == 1
    # collate of one sample is scaled to the batch: the cost of one batch stays estimated
    assert p.batch_s == pytest.approx(64 * 0.05)
    assert p.batch_bytes == 64 * 32


def test_the_time_limit_stops_after_the_sample_that_passes_it():
    host = ManualHost()
    p = _probe(Timed(host, 0.03), batch=16, max_s=0.16, clock=host.clock)
    assert p.samples == 6  # 0.18 s > 0.16 s after the sixth
    assert p.batch_s == pytest.approx(16 * 0.03)


def test_real_samples_are_timed_on_the_host_clocks():
    # the real clocks, and only what holds at any load: a sleep lasts at least its time
    p = _probe(Sleepy(sample_s=0.004))
    assert p.samples == 8
    assert p.sample_s >= 0.004
    assert p.batch_s == pytest.approx(8 * p.sample_s + p.collate_s)


def test_tensor_bytes_looks_into_containers():
    sample = {"x": torch.zeros(10, dtype=torch.float64), "y": [torch.zeros(3, dtype=torch.int8),
                                                             (torch.zeros(2),)], "id": "a"}
    assert tensor_bytes(sample) == 80 + 3 + 8
    assert tensor_bytes(b"abcd") == 4
    assert tensor_bytes(7) == 0


def test_an_item_that_raises_is_named():
    class Broken(Sleepy):
        def __getitem__(self, index):
            if index == 3:
                raise KeyError("label")
            return super().__getitem__(index)

    with pytest.raises(DatasetError, match=r"Broken: item 3 raised KeyError: 'label'"):
        _probe(Broken(sample_s=0.0))


def test_a_sample_too_big_for_the_memory_budget_is_named():
    with pytest.raises(DatasetError) as caught:
        _probe(Huge(), batch=32, budget=1e9)
    text = str(caught.value)
    assert "tune.loaders.Huge: item 0 holds 0.07 GB of tensors" in text
    assert "a batch of 32 is 2.15 GB, over the memory budget of 1.00 GB" in text


def test_a_collate_that_raises_is_named():
    def collate(samples):
        raise TypeError("cannot stack")

    with pytest.raises(DatasetError, match="collate_fn raised TypeError on a batch of 8"):
        _probe(Sleepy(sample_s=0.0), collate_fn=collate)


def test_an_empty_dataset_is_an_error():
    with pytest.raises(DatasetError, match="empty"):
        _probe(Sleepy(n=0))


class _ThreadsSeen(torch.utils.data.Dataset):
    """Records torch's thread count as each sample is loaded."""

    def __init__(self) -> None:
        self.seen: list[int] = []

    def __len__(self) -> int:
        return 16

    def __getitem__(self, index: int) -> torch.Tensor:
        self.seen.append(torch.get_num_threads())
        return torch.zeros(2)


def test_the_probe_leaves_torchs_thread_count_alone():
    """A library call changes no process-wide setting: not even for the time of the probe
    (another thread of the caller's would feel it)."""
    threads = torch.get_num_threads()
    dataset = _ThreadsSeen()
    _probe(dataset, batch=4)
    assert dataset.seen == [threads] * 4
    assert torch.get_num_threads() == threads
