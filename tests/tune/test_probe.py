"""The dataset timed in the main process: cost per sample, where it goes, size, faults."""

from __future__ import annotations

import pytest
import torch

from trainpace.tune import DatasetError
from trainpace.tune.probe import probe, tensor_bytes
from trainpace.tune.source import as_source
from tune.loaders import Busy, Huge, Sleepy


def _probe(dataset, batch=8, max_s=5.0, budget=1e12, collate_fn=None):
    return probe(as_source(dataset, batch_size=batch, collate_fn=collate_fn), max_s=max_s,
                 memory_budget_bytes=budget)


def test_sleeping_samples_are_waiting_not_cpu():
    p = _probe(Sleepy(sample_s=0.004))
    assert p.samples == 8
    assert p.sample_s >= 0.004
    assert p.sample_wait_s >= 0.0035
    assert p.cpu_share < 0.5
    assert p.batch_s == pytest.approx(8 * p.sample_s + p.collate_s)
    assert p.sample_bytes == 8 * 4          # torch.full((8,), float): 8 float32
    assert p.batch_bytes == 8 * 8 * 4


def test_spinning_samples_are_cpu():
    p = _probe(Busy(sample_s=0.003))
    assert p.sample_cpu_s >= 0.0029
    assert p.cpu_share > 0.5


def test_the_time_limit_stops_the_probe_after_one_sample_at_least():
    p = _probe(Sleepy(sample_s=0.05), batch=64, max_s=0.01)
    assert p.samples == 1
    # collate of one sample is scaled to the batch: the cost of one batch stays estimated
    assert p.batch_s >= 64 * 0.05
    assert p.batch_bytes == 64 * 32


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
